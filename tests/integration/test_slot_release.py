"""A stream's tenant slot comes back when its end could not be written at once: with Redis
at its ``maxmemory`` (the cancel mark is refused, the release is not) and with Redis not
taking writes for a while (the release times out and is retried). Before, the slot stayed
held until the stream's deadline: a tenant at its stream quota was locked out meanwhile.
Real Redis (the test's own session server, its limits set and reset here), the gRPC front
in-process, a fake worker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.integration import test_grpc_front as grpc_front
from tests.integration.test_grpc_front import TEXT, Harness, eventually, synthesize
from voicelane.core.lane.keys import tenant_streams_key

harness = grpc_front.harness  # the gRPC front's fixtures, by name
anyio_backend = grpc_front.anyio_backend

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SLOTS = tenant_streams_key("acme")
PAUSE_MS = 7_000
"""Longer than two of the front's Redis socket timeouts (3 s): the cancel mark and the first
release both time out, so only a retry gives the slot back."""


@pytest.fixture
def limits(harness: Harness) -> Iterator[redis.Redis]:
    client = harness.redis
    try:
        yield client
    finally:
        client.client_unpause()
        client.config_set("maxmemory", 0)


async def open_stream(harness: Harness) -> object:
    harness.worker(hold_after_events=1)  # the stream stays open until it is cancelled
    call = synthesize(harness, text=TEXT, timeout_s=60)
    await call.read()
    assert harness.redis.zcard(SLOTS) == 1
    return call


async def test_the_slot_comes_back_when_redis_is_full(
    harness: Harness, limits: redis.Redis
) -> None:
    call = await open_stream(harness)
    used_bytes = int(limits.info("memory")["used_memory"])
    limits.config_set("maxmemory", max(1, used_bytes // 2))  # every write is refused now
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        limits.set("probe", "x")

    call.cancel()  # type: ignore[attr-defined]

    await eventually(lambda: limits.zcard(SLOTS) == 0, "the slot back")


async def test_a_release_that_timed_out_is_retried(harness: Harness, limits: redis.Redis) -> None:
    call = await open_stream(harness)
    limits.client_pause(PAUSE_MS, all=False)  # writes wait, reads go on

    call.cancel()  # type: ignore[attr-defined]

    await eventually(lambda: limits.zcard(SLOTS) == 0, "the slot back", timeout_s=30)
