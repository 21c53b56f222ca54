"""The fronts' output reader (:mod:`voicelane.api.output_reader`) against a real redis-server: many
streams through one XREAD per round (counted by Redis itself), order and completeness per
stream, the wake of a pending read, backpressure, errors (Redis stopped, paused) and recovery,
unsubscribe and shutdown. Output is written the way workers write it (XADD of
:meth:`OutputEvent.to_fields` to the request's output key)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import redis

from voicelane.api.failures import service_error
from voicelane.api.output_reader import OutputReader, Subscription
from voicelane.common.errors import ShuttingDownError, UnavailableError
from voicelane.core.lane.front import RealtimeClient
from voicelane.core.lane.keys import WAKE_TTL_S, output_key, wake_key
from voicelane.core.lane.messages import EventKind, OutputEvent
from voicelane.core.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def lane(redis_url: str) -> AsyncIterator[RealtimeClient]:
    client = RealtimeClient.from_url(redis_url)
    yield client
    await client.close()


ReaderFactory = Callable[..., OutputReader]


@pytest.fixture
async def readers() -> AsyncIterator[ReaderFactory]:
    """Make readers (``OutputReader(lane, **options)``); all closed after the test, whatever
    happened in it."""
    made: list[OutputReader] = []

    def make(lane: RealtimeClient, **options: Any) -> OutputReader:
        made.append(OutputReader(lane, **options))
        return made[-1]

    yield make
    for reader in made:
        await reader.close()


@pytest.fixture
def writer(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of the test's own, to stop and pause."""
    server = RedisServer(tmp_path / "redis").start()
    try:
        yield server
    finally:
        if server.pid is not None:
            os.kill(server.pid, signal.SIGCONT)
        server.stop()


def audio(seq: int) -> Any:
    event = OutputEvent(EventKind.AUDIO, seq=seq, data=(bytes([seq % 256]) * 3,), pts_ms=20 * seq)
    return event.to_fields()


def end(seq: int) -> Any:
    return OutputEvent(EventKind.END, seq=seq).to_fields()


def xread_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_xread", {}).get("calls", 0))


async def drain(
    subscription: Subscription, *, until_end: bool = True, timeout_s: float = 10.0
) -> list[OutputEvent]:
    """Everything the subscription delivers up to its END event."""
    events: list[OutputEvent] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        events += [event for _, event in await subscription.get(0.2)]
        if until_end and events and events[-1].kind is EventKind.END:
            return events
    raise AssertionError(f"{subscription.lane_id}: no end within {timeout_s} s ({len(events)})")


async def test_many_streams_are_read_with_one_xread_per_round(
    lane: RealtimeClient, writer: redis.Redis, readers: ReaderFactory
) -> None:
    streams, events_per_stream = 120, 12
    reader = readers(lane)
    ids = [f"acme.s{n}" for n in range(streams)]
    before = xread_calls(writer)
    subscriptions = [reader.subscribe(lane_id) for lane_id in ids]
    consumers = [asyncio.create_task(drain(s)) for s in subscriptions]

    async def write() -> None:
        for seq in range(events_per_stream):
            pipe = writer.pipeline(transaction=False)
            for lane_id in ids:
                pipe.xadd(output_key(lane_id), audio(seq))
            pipe.execute()
            await asyncio.sleep(0.01)
        pipe = writer.pipeline(transaction=False)
        for lane_id in ids:
            pipe.xadd(output_key(lane_id), end(events_per_stream))
        pipe.execute()

    await write()
    results = await asyncio.gather(*consumers)
    for lane_id, events in zip(ids, results, strict=True):
        assert [e.seq for e in events] == list(range(events_per_stream + 1)), lane_id
        assert [e.kind for e in events[:-1]] == [EventKind.AUDIO] * events_per_stream
        assert events[3].data == (bytes([3]) * 3,) and events[3].pts_ms == 60
    rounds = reader.rounds
    for subscription in subscriptions:
        subscription.close()
    await reader.close()
    # Every XREAD Redis ran was one of the reader's rounds, each for all the streams: far
    # fewer than one per stream and event.
    assert xread_calls(writer) - before == rounds
    assert rounds <= 4 * (events_per_stream + 1), rounds
    assert reader.streams == 0


async def test_a_new_stream_wakes_the_pending_read(
    lane: RealtimeClient, writer: redis.Redis, readers: ReaderFactory
) -> None:
    reader = readers(lane, block_ms=2000)
    quiet = reader.subscribe("acme.quiet")
    await asyncio.sleep(0.3)  # the reader now waits up to 2 s on the quiet stream alone
    writer.xadd(output_key("acme.new"), audio(0))
    started = time.monotonic()
    fresh = reader.subscribe("acme.new")
    entries = await fresh.get(3.0)
    took_s = time.monotonic() - started
    assert [event.seq for _, event in entries] == [0]
    assert took_s < 1.0, took_s  # woken, not at the end of the 2 s block
    assert writer.xlen(wake_key(reader._loops[0].reader_id)) == 1
    assert 0 < writer.ttl(wake_key(reader._loops[0].reader_id)) <= WAKE_TTL_S
    quiet.close()
    fresh.close()
    await reader.close()


async def test_wakes_keep_one_entry_and_read_outputs_moves_the_cursor(
    lane: RealtimeClient, writer: redis.Redis
) -> None:
    for _ in range(5):
        await lane.wake("r1")
    assert writer.xlen(wake_key("r1")) == 1
    writer.xadd(output_key("acme.a"), audio(0))
    found, cursor = await lane.read_outputs(
        {"acme.a": "0-0", "acme.b": "0-0"}, 100, wake=("r1", "0-0")
    )
    assert list(found) == ["acme.a"] and found["acme.a"][0][1].seq == 0
    assert cursor is not None and cursor != "0-0"
    started = time.monotonic()
    found, again = await lane.read_outputs({"acme.b": "0-0"}, 200, wake=("r1", cursor))
    assert found == {} and again == cursor and time.monotonic() - started >= 0.15


async def test_a_slow_subscriber_stays_bounded_and_others_keep_flowing(
    lane: RealtimeClient, writer: redis.Redis, readers: ReaderFactory
) -> None:
    bound, count, total = 16, 4, 200
    reader = readers(lane, max_buffered=bound, count=count, block_ms=50)
    slow = reader.subscribe("acme.slow")
    fast = reader.subscribe("acme.fast")
    for lane_id in ("acme.slow", "acme.fast"):
        pipe = writer.pipeline(transaction=False)
        for seq in range(total):
            pipe.xadd(output_key(lane_id), audio(seq))
        pipe.xadd(output_key(lane_id), end(total))
        pipe.execute()
    fast_events = await drain(fast)
    assert [e.seq for e in fast_events] == list(range(total + 1))
    await asyncio.sleep(0.3)  # rounds go on; the slow one is left out of them
    assert bound <= slow.buffered < bound + count
    # Once its consumer reads, the slow stream is read again, in order and complete.
    slow_events = await drain(slow)
    assert [e.seq for e in slow_events] == list(range(total + 1))
    slow.close()
    fast.close()
    await reader.close()


async def test_two_subscriptions_of_one_stream_each_get_their_part(
    lane: RealtimeClient, writer: redis.Redis, readers: ReaderFactory
) -> None:
    ids = [cast(bytes, writer.xadd(output_key("acme.x"), audio(seq))).decode() for seq in range(3)]
    reader = readers(lane)
    whole = reader.subscribe("acme.x")
    tail = reader.subscribe("acme.x", after_id=ids[1])
    writer.xadd(output_key("acme.x"), end(3))
    assert [e.seq for e in await drain(whole)] == [0, 1, 2, 3]
    assert [e.seq for e in await drain(tail)] == [2, 3]
    whole.close()
    tail.close()
    await reader.close()


async def test_past_max_keys_more_read_loops_share_the_streams(
    lane: RealtimeClient, writer: redis.Redis, readers: ReaderFactory
) -> None:
    reader = readers(lane, max_keys=10)
    ids = [f"acme.k{n}" for n in range(25)]
    subscriptions = [reader.subscribe(lane_id) for lane_id in ids]
    assert len(reader._loops) == 3
    pipe = writer.pipeline(transaction=False)
    for lane_id in ids:
        pipe.xadd(output_key(lane_id), audio(0))
        pipe.xadd(output_key(lane_id), end(1))
    pipe.execute()
    for subscription in subscriptions:
        assert [e.seq for e in await drain(subscription)] == [0, 1]
        subscription.close()
    await reader.close()


async def test_unsubscribe_stops_the_reads(
    lane: RealtimeClient, writer: redis.Redis, readers: ReaderFactory
) -> None:
    reader = readers(lane, block_ms=50)
    one, two = reader.subscribe("acme.one"), reader.subscribe("acme.two")
    one.close()
    one.close()  # idempotent
    assert reader.streams == 1
    with pytest.raises(RuntimeError):
        await one.get(0.1)
    writer.xadd(output_key("acme.two"), audio(0))
    assert [e.seq for _, e in await two.get(2.0)] == [0]
    two.close()
    await asyncio.sleep(0.2)  # the read in flight ends
    before = xread_calls(writer)
    await asyncio.sleep(0.5)
    assert xread_calls(writer) == before  # nothing subscribed: nothing read
    # A later subscription is read again.
    three = reader.subscribe("acme.three")
    writer.xadd(output_key("acme.three"), audio(7))
    assert [e.seq for _, e in await three.get(2.0)] == [7]
    three.close()
    await reader.close()


async def test_close_ends_open_subscriptions_and_a_later_subscribe_starts_again(
    lane: RealtimeClient, writer: redis.Redis, readers: ReaderFactory
) -> None:
    reader = readers(lane)
    left = reader.subscribe("acme.left")
    await asyncio.sleep(0.05)
    await reader.close()
    with pytest.raises(ShuttingDownError):
        await left.get(1.0)
    again = reader.subscribe("acme.again")
    writer.xadd(output_key("acme.again"), audio(0))
    assert [e.seq for _, e in await again.get(2.0)] == [0]
    again.close()
    await reader.close()


async def test_a_stopped_redis_fails_the_subscribers_and_the_reader_recovers(
    own_redis: RedisServer, readers: ReaderFactory
) -> None:
    lane = RealtimeClient.from_url(own_redis.url, socket_timeout_s=1.0)
    reader = readers(lane, block_ms=100)
    subscriptions = [reader.subscribe(f"acme.r{n}") for n in range(3)]
    await asyncio.sleep(0.2)
    await asyncio.to_thread(own_redis.stop)
    for subscription in subscriptions:
        with pytest.raises(redis.ConnectionError) as failed:
            for _ in range(30):
                await subscription.get(0.5)
        assert isinstance(service_error(failed.value), UnavailableError)  # 503 / UNAVAILABLE
        subscription.close()
    await asyncio.to_thread(own_redis.start)
    fresh = reader.subscribe("acme.after")
    writer = redis.Redis.from_url(own_redis.url)
    writer.xadd(output_key("acme.after"), audio(0))
    writer.xadd(output_key("acme.after"), end(1))
    assert [e.seq for e in await drain(fresh)] == [0, 1]
    fresh.close()
    await reader.close()
    await lane.close()
    writer.close()


async def test_a_paused_redis_times_the_subscribers_out_and_the_reader_recovers(
    own_redis: RedisServer, readers: ReaderFactory
) -> None:
    lane = RealtimeClient.from_url(own_redis.url, socket_timeout_s=0.5)
    reader = readers(lane, block_ms=100)
    paused = reader.subscribe("acme.p")
    await asyncio.sleep(0.2)
    assert own_redis.pid is not None
    os.kill(own_redis.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(redis.TimeoutError) as failed:
            for _ in range(20):
                await paused.get(0.5)
        assert time.monotonic() - started < 3.0
        assert isinstance(service_error(failed.value), UnavailableError)
    finally:
        os.kill(own_redis.pid, signal.SIGCONT)
    writer = redis.Redis.from_url(own_redis.url)
    writer.xadd(output_key("acme.p"), audio(0))
    writer.xadd(output_key("acme.p"), end(1))
    # The same subscription goes on after the error; so does a new one.
    assert [e.seq for e in await drain(paused)] == [0, 1]
    fresh = reader.subscribe("acme.q")
    writer.xadd(output_key("acme.q"), end(0))
    assert [e.seq for e in await drain(fresh)] == [0]
    paused.close()
    fresh.close()
    await reader.close()
    await lane.close()
    writer.close()
