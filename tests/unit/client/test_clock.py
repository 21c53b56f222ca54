"""The clock-offset estimator and the pts → local-time mapping (voicelane.client.clock), on
synthetic samples, then end to end against the front's real ``SpeechService.Clock`` on a loopback
gRPC server and through the SDK (see helpers.py for the rules every test here follows; the only
bound asserted on a real measurement is the estimator's own)."""

from __future__ import annotations

import asyncio
import random
from typing import cast

import grpc
import grpc.aio
import pytest

from tests.support.fake_speech_server import FakeSpeechServer, ServicerContext
from tests.unit.client.helpers import TEXT, async_test, new_client
from voicelane.api.grpc_service import SpeechService
from voicelane.api.streams import StreamGateway
from voicelane.client import ClockSync, measure_clock, measure_clock_sync, sync_clock
from voicelane.client.clock import (
    CLOCK_RESOLUTION_MS,
    WIRE_MS_RESOLUTION_MS,
    ClockEstimate,
    ClockSample,
    StreamTimeline,
    echo_sample,
    stream_epoch_ms,
    wall_ms,
)
from voicelane.client.stats import Meter, StreamStats
from voicelane.common.errors import InvalidInputError, RemoteError
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc

SAME_HOST_SLACK_MS = 0.5
"""One host, one clock: the true offset is 0; the estimate must be within its bound + this
(the server's µs truncation and float rounding are far smaller)."""


def clock_with(*samples: tuple[float, float, float], window: int = 8) -> ClockSync:
    clock = ClockSync(window)
    for sent, server, received in samples:
        assert clock.add_sample(sent, server, received)
    return clock


def chunk(*, server_ts_ms: int, pts_ms: int, client_ts_ms: int = 0) -> pb.AudioChunk:
    return pb.AudioChunk(
        request_id="r", server_ts_ms=server_ts_ms, pts_ms=pts_ms, client_ts_ms=client_ts_ms
    )


# ---- one sample ------------------------------------------------------------------------------


def test_a_sample_gives_the_middle_of_its_round_trip_and_half_of_it_as_bound() -> None:
    sample = ClockSample(sent_ms=1000.0, server_ms=1600.0, received_ms=1010.0)
    assert sample.round_trip_ms == 10.0
    assert sample.offset_ms == 595.0  # 1600 - (1000 + 1010) / 2
    assert sample.error_bound_ms == 5.0
    estimate = sample.as_estimate()
    assert (estimate.offset_ms, estimate.error_bound_ms, estimate.samples) == (595.0, 5.0, 1)


def test_a_truncated_server_time_moves_the_middle_and_widens_the_bound() -> None:
    sample = ClockSample(1000.0, 1600.0, 1010.0, resolution_ms=1.0)
    assert sample.offset_ms == 595.5  # true server time in [1600, 1601)
    assert sample.error_bound_ms == 5.5


def test_a_negative_round_trip_is_refused() -> None:
    clock = ClockSync()
    assert not clock.add_sample(1010.0, 5.0, 1000.0)  # the client's clock stepped back
    assert clock.estimate is None


# ---- choosing among samples ------------------------------------------------------------------


def test_the_shortest_round_trip_is_chosen() -> None:
    clock = clock_with((0, 110, 10), (20, 124, 24), (30, 140, 37))
    estimate = clock.estimate
    assert estimate is not None
    assert (estimate.round_trip_ms, estimate.offset_ms, estimate.error_bound_ms) == (4, 102, 2)
    assert (estimate.samples, estimate.measured_at_ms, estimate.source) == (3, 24, "clock")


def test_a_longer_round_trip_never_replaces_a_better_sample_within_the_window() -> None:
    clock = clock_with((0, 101, 2), window=4)
    for i in range(1, 4):
        clock.add_sample(10.0 * i, 10.0 * i + 100, 10.0 * i + 2 + i)  # longer each time
        estimate = clock.estimate
        assert estimate is not None and estimate.round_trip_ms == 2
        assert estimate.offset_ms == 100


def test_the_best_sample_leaves_with_the_window() -> None:
    clock = clock_with((0, 101, 2), window=2)
    clock.add_sample(10, 112, 14)
    clock.add_sample(20, 123, 26)  # the 2 ms sample is now 3 samples old
    estimate = clock.estimate
    assert estimate is not None and estimate.round_trip_ms == 4 and estimate.samples == 2


def test_an_equal_round_trip_prefers_the_newest() -> None:
    clock = clock_with((0, 101, 2), (10, 112, 12))
    estimate = clock.estimate
    assert estimate is not None and estimate.measured_at_ms == 12 and estimate.offset_ms == 101


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("resolution_ms", [0.0, CLOCK_RESOLUTION_MS, WIRE_MS_RESOLUTION_MS])
def test_the_bound_contains_the_true_offset_of_skewed_clocks(
    seed: int, resolution_ms: float
) -> None:
    """Server clock = client clock + θ; one-way delays drawn independently (asymmetric), the
    server's reading truncated to the resolution: every sample and the estimate hold θ."""
    rng = random.Random(seed)
    true_offset_ms = rng.uniform(-5000, 5000)
    clock = ClockSync(16)
    now = 1_700_000_000_000.0
    for _ in range(50):
        now += rng.uniform(0, 100)
        sent = now
        answered = sent + rng.expovariate(1 / 3) + rng.uniform(0, 0.2)  # up + handling
        received = answered + rng.expovariate(1 / 20)  # a much slower way back
        server = answered + true_offset_ms
        if resolution_ms:
            server = (server // resolution_ms) * resolution_ms
        sample = ClockSample(sent, server, received, resolution_ms)
        assert abs(sample.offset_ms - true_offset_ms) <= sample.error_bound_ms + 1e-9
        clock.add(sample)
        estimate = clock.estimate
        assert estimate is not None
        assert abs(estimate.offset_ms - true_offset_ms) <= estimate.error_bound_ms + 1e-9
        now = received


def test_drift_widens_the_bound_with_age_and_lets_a_fresher_sample_win() -> None:
    clock = ClockSync(drift_ppm=100)
    clock.add_sample(0, 101, 2)  # bound 1 ms
    old = clock.estimate_at(10_002.0)  # 10 s later: + 100e-6 x 10 000 ms = 1 ms
    assert old is not None and old.error_bound_ms == pytest.approx(2.0)
    clock.add_sample(10_000, 10_101.5, 10_003)  # bound 1.5 ms, fresh
    estimate = clock.estimate_at(10_003.0)
    assert estimate is not None and estimate.round_trip_ms == 3
    assert estimate.error_bound_ms == pytest.approx(1.5)


def test_drift_allowance_contains_drifting_clocks() -> None:
    """Server clock runs 80 ppm fast; with drift_ppm=100 the aged bound still holds it."""
    rate = 1 + 80e-6
    clock = ClockSync(drift_ppm=100)
    clock.add_sample(1000.0, 1000.0 * rate + 1.0, 1002.0)  # answered at 1001 (client time)
    for later in (1_000.0, 60_000.0, 600_000.0):
        estimate = clock.estimate_at(1002.0 + later)
        assert estimate is not None
        true_offset = (1002.0 + later) * rate - (1002.0 + later)
        assert abs(estimate.offset_ms - true_offset) <= estimate.error_bound_ms


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(InvalidInputError):
        ClockSync(0)
    with pytest.raises(InvalidInputError):
        ClockSync(drift_ppm=-1)
    with pytest.raises(InvalidInputError):
        ClockSync().to_local_ms(0.0)


def test_conversions_go_both_ways() -> None:
    clock = clock_with((0, 110, 10))  # server 105 ms ahead
    assert clock.to_local_ms(1105.0) == 1000.0
    assert clock.to_server_ms(1000.0) == 1105.0


# ---- echoes ----------------------------------------------------------------------------------


def test_an_echo_is_a_wide_sample_and_joins_only_when_better() -> None:
    first = chunk(client_ts_ms=1000, server_ts_ms=1250, pts_ms=0)
    sample = echo_sample(first, received_ms=1300.25)
    assert sample is not None and sample.source == "echo"
    assert sample.resolution_ms == WIRE_MS_RESOLUTION_MS
    assert sample.round_trip_ms == 300.25
    assert sample.offset_ms == pytest.approx(1250.5 - 1150.125)
    assert echo_sample(chunk(server_ts_ms=1250, pts_ms=0), 1300.0) is None  # no echo

    good = clock_with((900, 900.5, 901))
    assert not good.add_echo(first, 1300.25)
    estimate = good.estimate
    assert estimate is not None and estimate.source == "clock" and estimate.samples == 1

    empty = ClockSync()
    assert empty.add_echo(first, 1300.25)
    estimate = empty.estimate
    assert estimate is not None and estimate.source == "echo"


def test_a_truncated_client_ts_still_bounds_a_true_offset() -> None:
    """The client sent at 1000.9 (echoed as 1000); the server (true offset 0) stamped 1001.7
    as 1001; the chunk arrived at 1002.3."""
    sample = echo_sample(chunk(client_ts_ms=1000, server_ts_ms=1001, pts_ms=0), 1002.3)
    assert sample is not None
    assert abs(sample.offset_ms) <= sample.error_bound_ms


# ---- pts -> local time -----------------------------------------------------------------------


def test_pts_map_through_the_first_chunk_epoch_and_the_offset() -> None:
    clock = ClockEstimate(offset_ms=100.0, error_bound_ms=2.0, round_trip_ms=4.0, samples=8)
    first = chunk(server_ts_ms=10_000, pts_ms=40)
    assert stream_epoch_ms(first) == 9960.5  # middle of the truncated ms, minus pts
    timeline = StreamTimeline.from_first_chunk(first, clock)
    assert timeline.epoch_local_ms == 9860.5
    mapped = timeline.local_ms(1000, buffer_ms=60)
    assert mapped.local_ms == 9860.5 + 1000 + 60
    assert mapped.error_bound_ms == 2.5
    with pytest.raises(InvalidInputError):
        StreamTimeline.from_first_chunk(chunk(server_ts_ms=0, pts_ms=0), clock)


def test_the_mapping_bound_holds_for_a_synthetic_stream() -> None:
    """True offset 37.25 ms; the server produces pts 0 at client time 5000.3, chunks every
    100 ms of audio in real time; a clock sample of 3 ms round trip: every chunk's mapped
    production time holds its true one."""
    rng = random.Random(7)
    true_offset = 37.25
    sent = 4000.0
    answered = sent + 1.1
    clock = clock_with((sent, answered + true_offset, answered + 1.9))
    estimate = clock.estimate
    assert estimate is not None
    produced_local = 5000.3
    first = chunk(server_ts_ms=int(produced_local + true_offset), pts_ms=0)
    timeline = StreamTimeline.from_first_chunk(first, estimate)
    for pts in range(0, 5000, 100):
        true_local = produced_local + pts + rng.choice([0.0, 50.0])
        buffer = true_local - produced_local - pts
        mapped = timeline.local_ms(pts, buffer_ms=buffer)
        assert abs(mapped.local_ms - true_local) <= mapped.error_bound_ms


def test_stream_stats_record_the_clock_and_the_epoch() -> None:
    shared = ClockSync()
    now = wall_ms()
    shared.add_sample(now - 2.0, now - 1.0, now - 1.5)  # a 0.5 ms sample: beats any echo
    stats = StreamStats()
    meter = Meter(stats, shared)
    sent = int(now) - 50
    meter.chunk(chunk(client_ts_ms=sent, server_ts_ms=sent + 20, pts_ms=0))
    meter.chunk(chunk(client_ts_ms=sent, server_ts_ms=sent + 40, pts_ms=100))
    assert stats.clock == shared.estimate and stats.clock is not None
    assert stats.clock.source == "clock" and len(shared.samples) == 1  # the echo was worse
    assert stats.echo_clock is not None and stats.echo_clock.source == "echo"
    assert stats.echo_clock.round_trip_ms >= 50
    assert stats.epoch_server_ms == sent + 20.5
    mapped = stats.local_time_ms(100, buffer_ms=10)
    assert mapped is not None
    assert mapped.local_ms == pytest.approx(sent + 20.5 - stats.clock.offset_ms + 110)
    assert mapped.error_bound_ms == pytest.approx(stats.clock.error_bound_ms + 0.5)


def test_stream_stats_fall_back_to_the_echo() -> None:
    stats = StreamStats()
    assert stats.local_time_ms(0) is None
    meter = Meter(stats)
    sent = int(wall_ms()) - 30
    meter.chunk(chunk(client_ts_ms=sent, server_ts_ms=sent + 10, pts_ms=0))
    assert stats.clock is not None and stats.clock == stats.echo_clock
    assert stats.timeline is not None


# ---- against the real Clock handler ----------------------------------------------------------


class ClockServer:
    """The front's ``SpeechService`` (no gateway: Clock needs none) on a loopback port,
    without the API-key interceptor."""

    def __init__(self) -> None:
        self.server = grpc.aio.server()
        service = SpeechService(cast(StreamGateway, object()))
        pb_grpc.add_SpeechServicer_to_server(service, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def __aenter__(self) -> ClockServer:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop(grace=None)


class FakeServerWithClock(FakeSpeechServer):
    """The SDK's fake server answering Clock with the front's own handler (auth, call counts
    and ``fail_first_calls`` included)."""

    def __init__(self) -> None:
        super().__init__()
        self._service = SpeechService(cast(StreamGateway, object()))

    async def Clock(  # noqa: N802  (the generated interface)
        self, request: pb.ClockRequest, context: ServicerContext
    ) -> pb.ClockResponse:
        await self._admit("Clock", context)
        return await self._service.Clock(request, context)


def assert_same_host(estimate: ClockEstimate) -> None:
    assert estimate.round_trip_ms > 0
    assert abs(estimate.offset_ms) <= estimate.error_bound_ms + SAME_HOST_SLACK_MS


@async_test
async def test_measure_clock_against_the_real_handler() -> None:
    async with ClockServer() as server, grpc.aio.insecure_channel(server.target) as channel:
        estimate = await measure_clock(channel, 8)
        assert estimate.samples == 8 and estimate.source == "clock"
        assert_same_host(estimate)
        response = await pb_grpc.SpeechStub(channel).Clock(pb.ClockRequest(client_ts_ms=42))
        assert response.client_ts_ms == 42 and response.server_ts_us > 0


@async_test
async def test_measure_clock_sync_against_the_real_handler() -> None:
    async with ClockServer() as server:

        def measure() -> ClockEstimate:
            with grpc.insecure_channel(server.target) as channel:
                return measure_clock_sync(channel, 4)

        # in a thread: the server needs this loop running
        estimate = await asyncio.to_thread(measure)
        from_script = await asyncio.to_thread(sync_clock, server.target, "key", samples=3)
    assert estimate.samples == 4 and from_script.samples == 3
    assert_same_host(estimate)
    assert_same_host(from_script)


@async_test
async def test_the_client_syncs_its_clock_and_streams_carry_it() -> None:
    async with FakeServerWithClock() as server, new_client(server.target) as client:
        before = client.clock
        assert before is None
        server.fail_first_calls = 1  # UNAVAILABLE: retried
        estimate = await client.sync_clock(samples=6)
        assert server.calls["Clock"] == 7
        assert client.clock == estimate and estimate.samples == 6
        assert_same_host(estimate)
        async with client.synthesize(TEXT) as stream:
            chunks = [c async for c in stream]
        after = client.clock
    stats = stream.stats
    # The stream carries the client's estimate: the synced one, or its own echo if tighter.
    assert stats.clock is not None and stats.clock == after
    assert stats.clock.error_bound_ms <= estimate.error_bound_ms
    assert stats.echo_clock is not None and stats.echo_clock.source == "echo"
    assert abs(stats.echo_clock.offset_ms) <= stats.echo_clock.error_bound_ms + SAME_HOST_SLACK_MS
    first = chunks[0]
    assert stats.epoch_server_ms == first.server_ts_ms + 0.5 - first.pts_ms
    mapped = stats.local_time_ms(chunks[-1].pts_ms)
    assert mapped is not None and mapped.error_bound_ms == stats.clock.error_bound_ms + 0.5


@async_test
async def test_sync_clock_surfaces_a_server_without_clock() -> None:
    server = grpc.aio.server()  # serves nothing: every method is UNIMPLEMENTED
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with new_client(f"127.0.0.1:{port}") as client:
            with pytest.raises(RemoteError) as raised:
                await client.sync_clock()
            assert raised.value.status == "UNIMPLEMENTED"
            with pytest.raises(InvalidInputError):
                await client.sync_clock(samples=0)
    finally:
        await server.stop(grace=None)
