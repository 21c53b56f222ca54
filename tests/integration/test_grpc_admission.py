"""Issue 26 item 3: idle calls of one tenant must not lock the gRPC front for the others.

1,000 ``Converse`` calls that never sent ``start`` (one tenant, one HTTP/2 connection) filled
grpcio's ``maximum_concurrent_rpcs``: other tenants' Synthesize and ListVoices and the health
check got RESOURCE_EXHAUSTED "Concurrent RPC limit exceeded!". The front (in this process, real
redis-server, the harness of ``test_grpc_front``) runs here with its limits lowered so that a
flood of a few dozen calls shows the same thing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health_pb2

from tests.integration.test_grpc_front import (
    ACME,
    OTHER,
    REALTIME,
    TEXT,
    collect,
    eventually,
    grpc_settings,
    health_check,
    health_watch,
    rpc_error,
)
from tests.support.fake_rt_worker import FakeRealtimeWorker, FakeWorkerKnobs
from voicelane.api.grpc_front import Front, start_front, stop_front
from voicelane.common.error_wire import CODE_KEY, RETRY_AFTER_MS_KEY
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.lane.front import RealtimeClient

if TYPE_CHECKING:
    from voicelane.common.wire.speech_pb2_grpc import SpeechAsyncStub

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SERVING = health_pb2.HealthCheckResponse.SERVING
MAX_RPCS = 20
"""The front's concurrent-call limit in these tests (1,000 by default)."""
TENANT_MAX_RPCS = 8
FLOOD = MAX_RPCS + 10
"""Idle calls of the hostile tenant: more than the whole front's limit."""


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@contextlib.asynccontextmanager
async def running_front(redis_url: str, **overrides: Any) -> AsyncIterator[Front]:
    fields: dict[str, Any] = {
        "max_concurrent_rpcs": MAX_RPCS,
        "tenant_max_rpcs": TENANT_MAX_RPCS,
        "converse_start_timeout_s": 60.0,  # the flood stays for the whole test
    }
    fields.update(overrides)
    lane = RealtimeClient.from_url(redis_url, REALTIME)
    front = await start_front(grpc_settings(redis_url, **fields), lane)
    worker = FakeRealtimeWorker(redis_url, REALTIME, FakeWorkerKnobs())
    worker.start()
    try:
        yield front
    finally:
        worker.stop()
        await stop_front(front, 0)
        await lane.close()


@pytest.fixture
async def front(redis_url: str) -> AsyncIterator[Front]:
    async with running_front(redis_url) as started:
        yield started


class Flood:
    """``count`` calls that say nothing and wait, each read by its own task."""

    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls
        self.readers = [asyncio.ensure_future(_outcome(call)) for call in calls]

    def ended(self) -> list[grpc.aio.AioRpcError]:
        outcomes = [r.result() for r in self.readers if r.done()]
        return [error for error in outcomes if error is not None]

    async def stop(self) -> None:
        for call in self.calls:
            call.cancel()
        await asyncio.gather(*self.readers, return_exceptions=True)


async def _outcome(call: Any) -> grpc.aio.AioRpcError | None:
    try:
        await collect(call)
    except grpc.aio.AioRpcError as error:
        return error
    return None


def idle_converses(stub: SpeechAsyncStub, count: int, metadata: Any = ACME) -> Flood:
    return Flood([stub.Converse(metadata=metadata, timeout=60) for _ in range(count)])


async def others_are_served(stub: SpeechAsyncStub, channel: grpc.aio.Channel) -> None:
    """Another tenant's ListVoices and Synthesize, and the health check, all answer."""
    voices = await stub.ListVoices(pb.ListVoicesRequest(), metadata=OTHER, timeout=10)
    assert voices.engine == "espeak"
    chunks = await collect(
        stub.Synthesize(pb.SynthesizeRequest(text=TEXT), metadata=OTHER, timeout=20)
    )
    assert chunks[-1].final
    reply = await health_check(channel)(health_pb2.HealthCheckRequest(service=""), timeout=10)
    assert reply.status == SERVING


async def test_idle_converse_calls_of_one_tenant_do_not_lock_the_others_out(
    front: Front,
) -> None:
    """The repro: more idle Converse calls than the front's limit, on one connection."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{front.port}") as channel:
        stub: SpeechAsyncStub = pb_grpc.SpeechStub(channel)
        flood = idle_converses(stub, FLOOD)
        try:
            # The server has seen the flood once it refused what is over its limit.
            await eventually(lambda: len(flood.ended()) >= FLOOD - MAX_RPCS, "refusals")
            await others_are_served(stub, channel)  # other connection or the same: one test
            refused = await eventually(
                lambda: e if len(e := flood.ended()) == FLOOD - TENANT_MAX_RPCS else None,
                "the tenant's excess calls refused",
            )
        finally:
            await flood.stop()
    assert {e.code() for e in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
    trailers = dict(refused[0].trailing_metadata() or ())
    assert trailers[CODE_KEY] == "quota_exceeded"
    assert int(trailers[RETRY_AFTER_MS_KEY]) > 0
    assert f"{TENANT_MAX_RPCS} concurrent calls" in (refused[0].details() or "")


async def test_a_converse_that_never_sends_start_ends_and_frees_its_place(
    redis_url: str,
) -> None:
    async with running_front(redis_url, converse_start_timeout_s=0.5) as front:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{front.port}") as channel:
            stub: SpeechAsyncStub = pb_grpc.SpeechStub(channel)
            call = stub.Converse(metadata=ACME, timeout=60)
            error = await rpc_error(call)
        assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED  # long before its 60 s
        assert "no start message within 0.5 s" in (error.details() or "")
        await eventually(lambda: front.limits.calls == 0, "the place given back")


async def test_health_check_answers_and_others_get_a_clear_refusal_when_the_front_is_full(
    redis_url: str,
) -> None:
    """Both tenants' idle calls fill ``max_concurrent_rpcs``: a new call is refused with
    ``no_capacity``, the health check still answers SERVING."""
    async with (
        running_front(redis_url, max_concurrent_rpcs=12) as front,
        grpc.aio.insecure_channel(f"127.0.0.1:{front.port}") as channel,
    ):
        stub: SpeechAsyncStub = pb_grpc.SpeechStub(channel)
        floods = [idle_converses(stub, TENANT_MAX_RPCS), idle_converses(stub, 4, OTHER)]
        try:
            await eventually(lambda: front.limits.calls == 12, "the front full")
            refused = await rpc_error(
                stub.Synthesize(pb.SynthesizeRequest(text=TEXT), metadata=OTHER, timeout=10)
            )
            reply = await health_check(channel)(health_pb2.HealthCheckRequest(), timeout=10)
        finally:
            for flood in floods:
                await flood.stop()
        await eventually(lambda: front.limits.calls == 0, "every place given back")
        await others_are_served(stub, channel)
    assert refused.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert dict(refused.trailing_metadata() or ())[CODE_KEY] == "no_capacity"
    assert reply.status == SERVING


async def test_calls_without_a_valid_key_are_refused_uncounted(front: Front) -> None:
    wrong = (("authorization", "Bearer not-a-key"),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{front.port}") as channel:
        stub: SpeechAsyncStub = pb_grpc.SpeechStub(channel)
        flood = idle_converses(stub, FLOOD, wrong)
        errors = await eventually(
            lambda: e if len(e := flood.ended()) == FLOOD else None, "every call refused"
        )
        assert {e.code() for e in errors} == {grpc.StatusCode.UNAUTHENTICATED}
        assert front.limits.calls == 0 and front.limits.public == 0
        await others_are_served(stub, channel)


async def test_keyless_watch_streams_have_their_own_limit(redis_url: str) -> None:
    """Health ``Watch`` streams (no key, open for good) fill ``max_public_rpcs`` only: the
    tenants and the health ``Check`` are served."""
    async with (
        running_front(redis_url, max_public_rpcs=5) as front,
        grpc.aio.insecure_channel(f"127.0.0.1:{front.port}") as channel,
    ):
        watch = health_watch(channel)
        flood = Flood([watch(health_pb2.HealthCheckRequest(), timeout=60) for _ in range(8)])
        try:
            refused = await eventually(
                lambda: e if len(e := flood.ended()) == 3 else None, "3 watches refused"
            )
            assert front.limits.public == 5
            stub: SpeechAsyncStub = pb_grpc.SpeechStub(channel)
            await others_are_served(stub, channel)
        finally:
            await flood.stop()
    assert {e.code() for e in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
