"""The Wyoming protocol server: ``voicelane wyoming`` (port 10200), for Home Assistant and any
other Wyoming client.

Each connection is a :class:`~voicelane.api.wyoming_session.WyomingSession` over one stream
gateway (:mod:`voicelane.api.streams`), built as the gRPC front builds its own: the engines
served, the tenants' lexicons and voices through the ledger. Wyoming has no authentication,
so every client acts as one tenant — the tenant of ``wyoming_api_key`` (:func:`wyoming_tenant`)
— with its quotas, voices and lexicons; whoever reaches the port speaks as that tenant
(docs/security.md, "Wyoming"). It stops gracefully on SIGTERM/SIGINT: no new connections,
syntheses under way get ``shutdown_grace_s`` to finish, then are cancelled.

Entry points: :func:`serve` (async, for tests and embedding) and :func:`run_wyoming`
(blocking).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from importlib import metadata

from wyoming.event import async_write_event

from voicelane.api.auth import DEV_KEYS, ApiKeys
from voicelane.api.engines import EngineCatalog
from voicelane.api.front_process import serve_front
from voicelane.api.streams import StreamGateway
from voicelane.api.text_options import TextOptionsResolver
from voicelane.api.voice_options import VoiceResolver
from voicelane.api.wyoming_events import error_event
from voicelane.api.wyoming_session import SessionConfig, WyomingSession
from voicelane.api.wyoming_wire import MAX_HEADER_BYTES
from voicelane.common.errors import AuthError, ConfigError, NoCapacityError
from voicelane.core import metrics
from voicelane.core.lane.front import RealtimeClient
from voicelane.core.ledger import Ledger
from voicelane.core.settings import WyomingSettings

log = logging.getLogger(__name__)

LEXICON_TIMEOUT_S = 3.0
"""Redis timeout of the lexicon and voice reads at submission."""
FULL_RETRY_S = 1.0


def wyoming_tenant(settings: WyomingSettings) -> str:
    """The tenant Wyoming clients act as: ``wyoming_api_key``'s, which must be one of the API
    keys; unset, the dev-mode tenant where dev mode runs without ``api_keys``. Otherwise
    ConfigError: the server does not start."""
    keys = ApiKeys.from_settings(settings.api_keys, dev_mode=settings.dev_mode)
    key = settings.wyoming_api_key
    if key is None and settings.dev_mode and not settings.api_keys:
        key = DEV_KEYS.partition(":")[2]
    if not key:
        raise ConfigError(
            "set VOICELANE_WYOMING_API_KEY: Wyoming has no authentication, so its clients act "
            "as the tenant of that API key (docs/security.md, Wyoming)"
        )
    try:
        return keys.tenant_for(key)
    except AuthError:
        raise ConfigError("VOICELANE_WYOMING_API_KEY is not one of VOICELANE_API_KEYS") from None


def _version() -> str | None:
    try:
        return metadata.version("voicelane")
    except metadata.PackageNotFoundError:
        return None


@dataclass
class WyomingFront:
    """A started server and what its shutdown needs."""

    server: asyncio.Server
    gateway: StreamGateway
    port: int
    tenant: str
    sessions: set[asyncio.Task[None]] = field(default_factory=set)


async def start_front(settings: WyomingSettings, lane: RealtimeClient) -> WyomingFront:
    tenant = wyoming_tenant(settings)
    ledger = Ledger.from_url(settings.redis_target(), socket_timeout_s=LEXICON_TIMEOUT_S)
    gateway = StreamGateway(
        settings,
        lane,
        EngineCatalog(lane, settings.served_engines()),
        text_options=TextOptionsResolver(ledger.lexicons.resolve),
        voices=VoiceResolver.over(ledger.voices),
    )
    config = SessionConfig(
        tenant=tenant,
        max_event_bytes=settings.wyoming_max_event_bytes,
        samples_per_chunk=settings.wyoming_samples_per_chunk,
        idle_timeout_s=settings.wyoming_idle_timeout_s,
        version=_version(),
    )
    sessions: set[asyncio.Task[None]] = set()

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(sessions) >= settings.wyoming_max_connections:
            refusal = NoCapacityError(
                f"over {settings.wyoming_max_connections} Wyoming connections; retry shortly",
                retry_after_s=FULL_RETRY_S,
            )
            with contextlib.suppress(Exception):
                await async_write_event(error_event(refusal), writer)
            writer.close()
            return
        session = WyomingSession(reader, writer, gateway, config)
        task = asyncio.current_task()
        assert task is not None
        sessions.add(task)
        try:
            await session.run()
        finally:
            sessions.discard(task)

    server = await asyncio.start_server(
        connected, settings.wyoming_host, settings.wyoming_port, limit=MAX_HEADER_BYTES
    )
    port = int(server.sockets[0].getsockname()[1])
    log.info("Wyoming server listening on %s:%d (tenant %s)", settings.wyoming_host, port, tenant)
    if settings.metrics_port:
        metrics.serve(settings.metrics_port, settings.metrics_host)
    return WyomingFront(server, gateway, port, tenant, sessions)


async def stop_front(front: WyomingFront, grace_s: float) -> None:
    """No new connections; ``grace_s`` for the syntheses under way, then they are cancelled
    (their streams closed)."""
    front.server.close()
    if front.sessions:
        _, pending = await asyncio.wait(set(front.sessions), timeout=grace_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    await front.server.wait_closed()
    await front.gateway.wait_background()
    await front.gateway.close()
    log.info("Wyoming server stopped")


async def serve(
    settings: WyomingSettings,
    *,
    lane: RealtimeClient | None = None,
    ready: asyncio.Event | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run the server until SIGTERM/SIGINT (or ``stop`` is set, or the task is cancelled)."""
    wyoming_tenant(settings)  # a refusal before anything is opened
    await serve_front(
        settings,
        lambda front_lane: start_front(settings, front_lane),
        stop_front,
        lane=lane,
        ready=ready,
        stop=stop,
    )


def run_wyoming(settings: WyomingSettings) -> None:
    """``voicelane wyoming``: serve until SIGTERM/SIGINT, then stop gracefully."""
    asyncio.run(serve(settings))
