"""Redis restarts: the real-time lane admits streams again afterwards.

After Redis replays its append-only file, a consumer group's ``entries-read`` comes back as
of the last AOF rewrite, so its ``lag`` stays high on an empty stream. Admission that trusted
the lag refused every stream after such a restart, for ever (nothing was admitted, so nothing
moved it). Real processes: redis-server with AOF, a GPU worker (espeak), the gRPC front.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import redis

from tests.support.stack import ACME_KEY, Stack, wait_for
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.lane.keys import GROUP, requests_key
from voicelane.core.redis_server import RedisServer

ESPEAK_REQUESTS = requests_key("espeak")

pytestmark = [pytest.mark.integration, pytest.mark.slow]

METADATA = (("authorization", f"Bearer {ACME_KEY}"),)
FAST = {
    "VOICELANE_REALTIME__LOOKAHEAD_S": "1000",
    "VOICELANE_REALTIME__ENCODE_AHEAD_S": "1000",
    "VOICELANE_REALTIME__HEARTBEAT_TTL_S": "1",
    "VOICELANE_REALTIME__RECLAIM_IDLE_S": "1",
    "VOICELANE_REALTIME__UNAVAILABLE_AFTER_S": "3",
    "VOICELANE_REALTIME__CLAIM_TIMEOUT_S": "3",
    # One tenant drives every stream here: its own quotas are not what this test is about.
    "VOICELANE_TENANT_REQUESTS_PER_S": "1000",
    "VOICELANE_TENANT_REQUEST_BURST": "1000",
    "VOICELANE_TENANT_MAX_STREAMS": "64",
}
SLOTS = 32


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Stack, RedisServer]]:
    redis_server = RedisServer(tmp_path / "redis").start()
    stack = Stack(tmp_path / "stack", redis_server.url, env_overrides=FAST)
    try:
        stack.gpu_worker()
        stack.grpc()
        stack.wait_realtime_workers()
        yield stack, redis_server
    except BaseException:
        print(stack.logs())
        raise
    finally:
        stack.stop()
        redis_server.stop()


async def stream(target: str, text: str) -> grpc.StatusCode:
    """The status one stream ends with (OK once its final chunk arrived)."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.SpeechStub(channel)
        try:
            async for _ in stub.Synthesize(
                pb.SynthesizeRequest(text=text), metadata=METADATA, timeout=30
            ):
                pass
        except grpc.aio.AioRpcError as error:
            return error.code()
    return grpc.StatusCode.OK


async def streams(target: str, count: int, text: str = "One short sentence.") -> list[str]:
    results = await asyncio.gather(*(stream(target, text) for _ in range(count)))
    return [code.name for code in results]


def rewrite_aof(client: redis.Redis) -> None:
    client.bgrewriteaof()

    def done() -> bool:
        info = client.info("persistence")
        return not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"]

    wait_for(done, 30, "the AOF rewrite")


def test_streams_are_admitted_after_redis_restarts_from_a_rewritten_aof(
    stack: tuple[Stack, RedisServer],
) -> None:
    lane, redis_server = stack
    client = redis.Redis.from_url(redis_server.url)
    rewrite_aof(client)
    # More requests than the lane has slots go through after the rewrite (in rounds, so none
    # is refused for capacity): the group's entries-read moves past the rewritten value.
    done: list[str] = []
    for _ in range(3):
        done += asyncio.run(streams(lane.grpc_target, SLOTS // 2))
    assert done.count("OK") >= 46, done

    # Streams in flight while Redis restarts end cleanly (done, or UNAVAILABLE), never hang.
    async def restart_under_load() -> list[str]:
        running = asyncio.gather(
            *(stream(lane.grpc_target, "A longer sentence, spoken while Redis restarts. " * 4)
              for _ in range(8))
        )  # fmt: skip
        await asyncio.sleep(0.3)
        await asyncio.to_thread(redis_server.restart)
        return [code.name for code in await running]

    started = time.monotonic()
    in_flight = asyncio.run(restart_under_load())
    assert set(in_flight) <= {"OK", "UNAVAILABLE"}, in_flight
    assert time.monotonic() - started < 30

    client = redis.Redis.from_url(redis_server.url)
    lag = next(
        g["lag"] for g in client.xinfo_groups(ESPEAK_REQUESTS) if g["name"] == GROUP.encode()
    )
    assert lag is None or lag >= 0  # whatever Redis says, admission must not trust it
    lane.wait_realtime_workers()

    # After the restart: streams are admitted and spoken, as before it.
    def admitted() -> list[str] | None:
        codes = asyncio.run(streams(lane.grpc_target, 15))
        return codes if codes.count("OK") == 15 else None

    assert wait_for(admitted, 20, "15 streams admitted after the restart")
