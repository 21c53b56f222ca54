"""The thin gRPC front of the real-time lane: ``voicelane grpc`` (port 50051).

The server runs ``voicelane.v1.Speech`` (:class:`voicelane.api.grpc_service.SpeechService`, an
adapter over the stream gateway :mod:`voicelane.api.streams`) behind the API-key interceptor
(:mod:`voicelane.api.grpc_auth`) and the per-tenant call limits
(:mod:`voicelane.api.grpc_admission`), the ``grpc.health.v1`` health service (``SERVING``;
``NOT_SERVING`` while shutting down) and server reflection. It stops gracefully on SIGTERM/SIGINT:
health goes ``NOT_SERVING``, streams in flight get ``shutdown_grace_s`` to finish. ``docs/grpc.md``
is the contract in prose.

Entry points: :func:`serve` (async, for tests and embedding) and :func:`run_grpc` (blocking).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import grpc
import grpc.aio
from grpc_health.v1 import health as grpc_health
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from voicelane.api.auth import ApiKeys
from voicelane.api.engines import EngineCatalog
from voicelane.api.front_process import serve_front
from voicelane.api.grpc_admission import AdmissionInterceptor, CallLimits
from voicelane.api.grpc_auth import AuthInterceptor
from voicelane.api.grpc_decode import DecodeInterceptor
from voicelane.api.grpc_service import SERVICE_NAME, SpeechService
from voicelane.api.llm import LlmBridge
from voicelane.api.llm_warmup import Warmup
from voicelane.api.streams import StreamGateway
from voicelane.api.text_options import TextOptionsResolver
from voicelane.api.voice_options import VoiceResolver
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core import metrics
from voicelane.core.lane.front import RealtimeClient
from voicelane.core.ledger import Ledger
from voicelane.core.rules import MIN_USEFUL_DEADLINE_S
from voicelane.core.settings import GrpcSettings

__all__ = [
    "SERVICE_NAME",
    "Front",
    "SpeechService",
    "call_limits",
    "run_grpc",
    "serve",
    "server_options",
    "start_front",
    "stop_front",
]

log = logging.getLogger(__name__)

MIN_CLIENT_PING_INTERVAL_MS = 5000
LEXICON_TIMEOUT_S = 3.0
"""Redis timeout of the lexicon reads at submission."""
"""Clients may send keepalive pings this often; more often is answered with GOAWAY."""


def server_options(settings: GrpcSettings) -> list[tuple[str, int]]:
    keepalive_time_ms = round(settings.keepalive_time_s * 1000)
    return [
        ("grpc.max_send_message_length", settings.max_message_bytes),
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.keepalive_time_ms", keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", round(settings.keepalive_timeout_s * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.http2.min_ping_interval_without_data_ms", keepalive_time_ms),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", MIN_CLIENT_PING_INTERVAL_MS),
        ("grpc.so_reuseport", 0),
    ]


def call_limits(settings: GrpcSettings) -> CallLimits:
    """The front's limits on calls open at once (docs/grpc.md, Admission)."""
    return CallLimits(
        max_calls=settings.max_concurrent_rpcs,
        tenant_max_calls=settings.tenant_max_rpcs,
        max_public_calls=settings.max_public_rpcs,
    )


@dataclass
class Front:
    """A started server and what its shutdown needs."""

    server: grpc.aio.Server
    service: SpeechService
    health: grpc_health.aio.HealthServicer
    port: int
    limits: CallLimits
    warmup: Warmup | None = None


async def _set_serving(health: grpc_health.aio.HealthServicer) -> None:
    for name in ("", SERVICE_NAME):
        await health.set(name, health_pb2.HealthCheckResponse.SERVING)


async def start_front(
    settings: GrpcSettings, lane: RealtimeClient, *, min_deadline_s: float = MIN_USEFUL_DEADLINE_S
) -> Front:
    keys = ApiKeys.from_settings(settings.api_keys, dev_mode=settings.dev_mode)
    limits = call_limits(settings)
    # No grpcio ``maximum_concurrent_rpcs``: it counts every call, health checks and calls
    # without a key included, so one tenant's idle calls locked everyone out (issue 26
    # item 3). The admission interceptor counts per tenant, after the key.
    server = grpc.aio.server(
        interceptors=[AuthInterceptor(keys), AdmissionInterceptor(limits), DecodeInterceptor()],
        options=server_options(settings),
    )
    # The tenants' lexicons, read through the ledger (a short timeout: a paused Redis fails
    # the request fast instead of holding it).
    ledger = Ledger.from_url(settings.redis_target(), socket_timeout_s=LEXICON_TIMEOUT_S)
    gateway = StreamGateway(
        settings,
        lane,
        EngineCatalog(lane, settings.served_engines()),
        min_deadline_s=min_deadline_s,
        text_options=TextOptionsResolver(ledger.lexicons.resolve),
        voices=VoiceResolver.over(ledger.voices),
    )
    llm = LlmBridge(settings.llm)
    service = SpeechService(gateway, llm, start_timeout_s=settings.converse_start_timeout_s)
    pb_grpc.add_SpeechServicer_to_server(service, server)
    health = grpc_health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    warmup = Warmup(llm)
    serving = health_pb2.HealthCheckResponse.SERVING
    for name in ("", SERVICE_NAME):
        await health.set(
            name, serving if warmup.ready else health_pb2.HealthCheckResponse.NOT_SERVING
        )
    if not warmup.ready:  # readiness waits for the LLM's warm-up (settings.llm.preload)
        warmup.on_ready = lambda: _set_serving(health)
        warmup.start()
    reflection.enable_server_reflection(
        (SERVICE_NAME, grpc_health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    port = server.add_insecure_port(f"{settings.grpc_host}:{settings.grpc_port}")
    await server.start()
    log.info("gRPC front listening on %s:%d", settings.grpc_host, port)
    if settings.metrics_port:
        metrics.serve(settings.metrics_port, settings.metrics_host)
    return Front(server, service, health, port, limits, warmup)


async def stop_front(front: Front, grace_s: float) -> None:
    """NOT_SERVING, then ``grace_s`` for the streams in flight, then stop."""
    await front.health.enter_graceful_shutdown()
    front.service.gateway.draining = True
    await front.server.stop(grace_s)
    await front.service.gateway.wait_background()
    await front.service.gateway.close()
    front.service.refusals.flush()
    if front.warmup is not None:
        await front.warmup.stop()
    if front.service.llm is not None:
        await front.service.llm.close()
    log.info("gRPC front stopped")


async def serve(
    settings: GrpcSettings,
    *,
    lane: RealtimeClient | None = None,
    ready: asyncio.Event | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run the front until SIGTERM/SIGINT (or ``stop`` is set, or the task is cancelled)."""
    await serve_front(
        settings,
        lambda front_lane: start_front(settings, front_lane),
        stop_front,
        lane=lane,
        ready=ready,
        stop=stop,
    )


def run_grpc(settings: GrpcSettings) -> None:
    """``voicelane grpc``: serve until SIGTERM/SIGINT, then stop gracefully."""
    asyncio.run(serve(settings))
