"""The gRPC front of the real-time lane, end to end in one process.

The real front (``start_front`` / ``serve``: grpc.aio server, auth interceptor, health,
reflection) runs in the test's event loop against a real redis-server; a fake worker
(:mod:`tests.support.fake_rt_worker`) speaks the lane through the worker's own I/O layer
(``LaneIO``: the batched ``WorkerBatch`` rounds) with real Opus packets; the clients are the
generated grpc.aio stubs. Nothing sleeps to synchronise: tests wait on streams, or poll Redis
and the worker's records with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import grpc
import grpc.aio
import pytest
import redis
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from tests.support.fake_rt_worker import FakeRealtimeWorker, FakeWorkerKnobs
from voicelane.api.grpc_front import Front, serve, start_front, stop_front
from voicelane.common.audio import OpusStreamDecoder
from voicelane.common.error_wire import CODE_KEY, RETRY_AFTER_MS_KEY
from voicelane.common.errors import EngineOutOfMemoryError, JobStateError
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.lane.front import RealtimeClient
from voicelane.core.lane.keys import (
    cancel_key,
    capabilities_key,
    requests_key,
    tenant_key,
    tenant_streams_key,
)
from voicelane.core.lane.messages import StreamRequest, lane_request_id, now_ms
from voicelane.core.lane.worker import RealtimeWorkerClient
from voicelane.core.redis_server import free_port
from voicelane.core.rules import EngineCapabilities, VoiceInfo
from voicelane.core.settings import GrpcSettings, RealtimeSettings

ESPEAK_REQUESTS = requests_key("espeak")

if TYPE_CHECKING:
    from voicelane.common.wire.speech_pb2_grpc import SpeechAsyncStub

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

T = TypeVar("T")

API_KEYS = "acme:acme-key-0001,other:other-key-0002"
ACME = (("authorization", "Bearer acme-key-0001"),)
OTHER = (("authorization", "Bearer other-key-0002"),)
SERVICE = "voicelane.v1.Speech"
SENTENCES = ["Hello there.", "This is a test of the real-time lane!", "Does it work?", "It does."]
TEXT = " ".join(SENTENCES)
MAX_TEXT_CHARS = 2000
MAX_MESSAGE_BYTES = 64 * 1024
REALTIME = RealtimeSettings(
    heartbeat_ttl_s=1.0,
    reclaim_idle_s=1.0,
    worker_ttl_s=2.0,
    claim_timeout_s=1.5,
    unavailable_after_s=0.8,
    default_deadline_s=30.0,
)
FRAMES_PER_SENTENCE = FakeWorkerKnobs().frames_per_sentence
EVENTS_PER_SENTENCE = math.ceil(FRAMES_PER_SENTENCE / FakeWorkerKnobs().frames_per_event)
SLACK_S = 2.0
"""Allowance over a liveness bound for a busy test machine."""


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", autouse=True)
async def one_event_loop() -> AsyncIterator[None]:
    """One event loop for the module's tests (anyio keeps its runner while a module-scoped
    async fixture lives). grpc.aio hands a call's completion to the loop the call was made
    on; with a loop per test, a late one of the previous test's server or channel could
    reach a loop already closed and fail the next test's setup ("Event loop is closed": 1
    of ~27 runs of this module beside two CPU hogs, and once in a fresh-clone CI run)."""
    yield


@dataclass
class Harness:
    settings: GrpcSettings
    front: Front
    channel: grpc.aio.Channel
    stub: SpeechAsyncStub
    redis: redis.Redis
    redis_url: str
    workers: list[FakeRealtimeWorker] = field(default_factory=list)

    def worker(self, **knobs: Any) -> FakeRealtimeWorker:
        worker = FakeRealtimeWorker(
            self.redis_url,
            REALTIME,
            FakeWorkerKnobs(**knobs),
            name=f"fake-{len(self.workers)}",
        )
        self.workers.append(worker.start())
        return worker

    def capacity_without_worker(self, slots: int = 4) -> None:
        """A capacity report (and the consumer group) but nobody serving: for tests that
        must show that nothing is written although admission would have let it through."""
        lane = RealtimeWorkerClient.from_url(self.redis_url, "reporter", REALTIME)
        lane.ensure_group()
        lane.report_capacity(slots)
        lane.redis.close()

    def keys(self) -> set[bytes]:
        return set(cast(list[bytes], self.redis.keys("*")))

    def submitted_ids(self) -> list[str]:
        """Requests the front submitted (their ids are reserved under ``tenant_key``)."""
        keys = cast(list[bytes], self.redis.keys(tenant_key("*")))
        lane_ids = [k.decode().removeprefix(tenant_key("")) for k in keys]
        return [lane_id.partition(".")[2] for lane_id in lane_ids]  # the tenant's own ids

    def queued(self) -> list[StreamRequest]:
        entries = cast(list[tuple[bytes, dict[bytes, bytes]]], self.redis.xrange(ESPEAK_REQUESTS))
        return [StreamRequest.from_fields(fields) for _, fields in entries]


def grpc_settings(redis_url: str, **overrides: Any) -> GrpcSettings:
    fields: dict[str, Any] = {
        "redis_url": redis_url,
        "api_keys": API_KEYS,
        "engine": "espeak",
        "grpc_port": free_port(),
        "max_stream_text_chars": MAX_TEXT_CHARS,
        "max_message_bytes": MAX_MESSAGE_BYTES,
        "shutdown_grace_s": 0.5,
        "realtime": REALTIME,
    }
    fields.update(overrides)
    return GrpcSettings(**fields)


@pytest.fixture
async def harness(redis_url: str) -> AsyncIterator[Harness]:
    settings = grpc_settings(redis_url)
    lane = RealtimeClient.from_url(redis_url, REALTIME)
    front = await start_front(settings, lane)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{front.port}")
    client = redis.Redis.from_url(redis_url)
    state = Harness(settings, front, channel, pb_grpc.SpeechStub(channel), client, redis_url)
    try:
        yield state
    finally:
        await channel.close()
        await stop_front(front, 0)
        for worker in state.workers:
            worker.stop()
        await lane.close()
        client.close()


async def eventually(condition: Callable[[], T | None], what: str, timeout_s: float = 10.0) -> T:
    """Poll ``condition`` until it is truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.02)


async def collect(call: Any, into: list[Any] | None = None) -> list[Any]:
    """Every message of a response stream, read with ``read()`` (so a test may read some
    first); with ``into``, each message is appended there as it arrives."""
    items: list[Any] = [] if into is None else into
    while (item := await call.read()) is not grpc.aio.EOF:
        items.append(item)
    return items


async def rpc_error(call: Any, received: list[Any] | None = None) -> grpc.aio.AioRpcError:
    """The error that ends ``call`` (what arrived before it goes into ``received``)."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await collect(call, received)
    return info.value


def synthesize(h: Harness, metadata: Any = ACME, timeout_s: float = 20, **fields: Any) -> Any:
    return h.stub.Synthesize(pb.SynthesizeRequest(**fields), metadata=metadata, timeout=timeout_s)


def requests_added(h: Harness) -> int:
    """Requests ever added to espeak's request stream (trimming does not lower it)."""
    return int(h.redis.xinfo_stream(ESPEAK_REQUESTS)["entries-added"])


def start_message(**fields: Any) -> pb.ConverseRequest:
    return pb.ConverseRequest(start=pb.ConverseStart(**fields))


def delta(text: str) -> pb.ConverseRequest:
    return pb.ConverseRequest(text_delta=text)


FLUSH = pb.ConverseRequest(flush=pb.Flush())
END = pb.ConverseRequest(end=pb.End())


def without_server_ts(chunks: Sequence[pb.AudioChunk]) -> list[pb.AudioChunk]:
    copies = []
    for chunk in chunks:
        copy = pb.AudioChunk()
        copy.CopyFrom(chunk)
        copy.server_ts_ms = 0
        copies.append(copy)
    return copies


def assert_well_formed(chunks: Sequence[pb.AudioChunk], sample_rate_hz: int) -> None:
    """seq contiguous from 0, one final chunk and it is last, pts following the packets."""
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert [c.final for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert len({c.request_id for c in chunks}) == 1 and chunks[0].request_id
    assert all(c.sample_rate_hz == sample_rate_hz for c in chunks)
    packets_before = 0
    for chunk in chunks[:-1]:
        assert chunk.opus_packets
        assert chunk.pts_ms == 20 * packets_before
        packets_before += len(chunk.opus_packets)


# ------------------------------------------------------------------------ Synthesize


@pytest.mark.parametrize("sample_rate_hz", [16000, 24000, 48000])
async def test_synthesize_streams_ordered_decodable_audio_with_captions(
    harness: Harness, sample_rate_hz: int
) -> None:
    worker = harness.worker()
    call = synthesize(harness, text=TEXT, sample_rate_hz=sample_rate_hz, client_ts_ms=123456)
    chunks: list[pb.AudioChunk] = await collect(call)

    assert_well_formed(chunks, sample_rate_hz)
    assert len(chunks) == len(SENTENCES) * EVENTS_PER_SENTENCE + 1
    assert all(c.client_ts_ms == 123456 and c.server_ts_ms > 0 for c in chunks)
    packets = [p for c in chunks for p in c.opus_packets]
    assert len(packets) == len(SENTENCES) * FRAMES_PER_SENTENCE
    pcm = OpusStreamDecoder(48000).decode_all(packets)
    assert len(pcm) == len(packets) * 960
    assert float((pcm[2000:] ** 2).mean() ** 0.5) > 0.1  # the tone, not silence

    captioned = [(c, cap) for c in chunks for cap in c.captions]
    assert [cap.text for _, cap in captioned] == SENTENCES
    for index, (chunk, caption) in enumerate(captioned):
        assert caption.sentence == index
        assert chunk.seq == index * EVENTS_PER_SENTENCE
        assert caption.pts_ms == chunk.pts_ms
        assert TEXT[caption.start : caption.end] == caption.text

    request_id = chunks[0].request_id
    lane_id = lane_request_id("acme", request_id)  # the tenant's id in its namespace
    claimed = worker.snapshot().claimed
    assert [r.request_id for r in claimed] == [lane_id]
    assert claimed[0].tenant == "acme" and claimed[0].voice == "auto"
    await eventually(lambda: lane_id in worker.snapshot().finished, "the worker to finish")
    assert not harness.redis.exists(cancel_key(lane_request_id("acme", request_id))), (
        "a finished stream is not cancelled"
    )


async def test_a_caption_just_before_end_rides_on_the_final_chunk(harness: Harness) -> None:
    harness.worker(trailing_caption="(applause)")
    chunks: list[pb.AudioChunk] = await collect(synthesize(harness, text="One sentence."))
    assert_well_formed(chunks, 24000)
    final = chunks[-1]
    assert [c.text for c in final.captions] == ["(applause)"]
    assert not final.opus_packets


async def test_word_timings_ride_with_their_sentence_and_slice_the_text(
    harness: Harness,
) -> None:
    harness.worker(words=True)
    chunks: list[pb.AudioChunk] = await collect(synthesize(harness, text=TEXT))
    assert_well_formed(chunks, 24000)
    words = [w for c in chunks for w in c.words]
    assert [w.text for w in words] == TEXT.split()
    assert all(TEXT[w.char_start : w.char_end] == w.text for w in words)
    starts = [w.start_ms for w in words]
    assert starts == sorted(starts) and all(w.end_ms > w.start_ms for w in words)
    for chunk in chunks:  # a sentence's words ride with its caption, on the captions' clock
        if chunk.words:
            (caption,) = chunk.captions
            assert chunk.words[0].start_ms == caption.pts_ms == chunk.pts_ms
            assert TEXT[caption.start : caption.end].split() == [w.text for w in chunk.words]


async def test_marks_after_the_last_word_ride_on_the_final_chunk(harness: Harness) -> None:
    harness.worker(words=True, trailing_marks=("done", "really-done"))
    chunks: list[pb.AudioChunk] = await collect(synthesize(harness, text="One sentence."))
    final = chunks[-1]
    assert [(m.name, m.time_ms) for m in final.marks] == [
        ("done", FRAMES_PER_SENTENCE * 20),
        ("really-done", FRAMES_PER_SENTENCE * 20),
    ]
    assert all(not c.marks for c in chunks[:-1])


async def test_a_resume_gets_the_words_of_the_chunks_it_gets(harness: Harness) -> None:
    harness.worker(words=True)
    full: list[pb.AudioChunk] = await collect(synthesize(harness, text=TEXT, request_id="w-1"))
    after_seq = EVENTS_PER_SENTENCE  # the second sentence's first chunk: its words are skipped
    resumed: list[pb.AudioChunk] = await collect(
        synthesize(harness, request_id="w-1", resume_after_seq=after_seq)
    )
    assert [w.text for c in resumed for w in c.words] == " ".join(SENTENCES[2:]).split()
    assert [list(c.words) for c in resumed] == [list(c.words) for c in full[after_seq + 1 :]]


BAD_REQUESTS = [
    pytest.param({"text": ""}, "no text", id="empty"),
    pytest.param({"text": " \n\t "}, "no text", id="whitespace"),
    pytest.param({"text": "abc\x00def"}, "binary", id="nul"),
    pytest.param({"text": "\x01\x02\x03 abc"}, "binary", id="controls"),
    pytest.param({"text": "x" * (MAX_TEXT_CHARS + 1)}, "limit", id="too-long"),
    pytest.param({"text": "... !!! ---"}, "nothing to speak", id="punctuation-only"),
    pytest.param({"text": "Hi.", "voice": "klingon"}, "voice 'klingon' is unknown", id="voice"),
    pytest.param({"text": "Hi.", "sample_rate_hz": 22050}, "sample_rate_hz", id="rate"),
    pytest.param({"text": "Hi.", "speed": 3.0}, "speed", id="too-fast"),
    pytest.param({"text": "Hi.", "speed": 0.2}, "speed", id="too-slow"),
    pytest.param({"text": "Hi.", "speed": float("nan")}, "speed", id="nan-speed"),
    pytest.param({"text": "Hi.", "request_id": "not valid!"}, "request_id", id="id-chars"),
    pytest.param({"text": "Hi.", "request_id": "a" * 65}, "request_id", id="id-length"),
    pytest.param({"text": "Hi.", "resume_after_seq": 3}, "request_id", id="resume-no-id"),
]


@pytest.mark.parametrize(("fields", "message"), BAD_REQUESTS)
async def test_bad_input_is_invalid_argument_and_leaves_redis_untouched(
    harness: Harness, fields: dict[str, Any], message: str
) -> None:
    harness.capacity_without_worker()
    keys_before = harness.keys()
    dbsize_before = harness.redis.dbsize()

    error = await rpc_error(synthesize(harness, **fields))

    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    details = error.details() or ""
    assert message in details and "\n" not in details
    assert harness.redis.dbsize() == dbsize_before
    assert harness.redis.xlen(ESPEAK_REQUESTS) == 0
    assert harness.keys() == keys_before


@pytest.mark.parametrize(
    "metadata",
    [
        pytest.param((), id="missing"),
        pytest.param((("authorization", "Bearer wrong-key-123"),), id="wrong"),
        pytest.param((("authorization", "Basic YWNtZTprZXk="),), id="scheme"),
        pytest.param((("authorization", "Bearer "),), id="empty"),
    ],
)
async def test_missing_or_wrong_key_is_unauthenticated(
    harness: Harness, metadata: tuple[tuple[str, str], ...]
) -> None:
    harness.capacity_without_worker()
    keys_before = harness.keys()

    errors = [await rpc_error(synthesize(harness, metadata=metadata, text=TEXT))]
    # Nothing written: the refusal needs none, and a grpc.aio client that writes after the
    # server ended the call may report INTERNAL instead of the status (grpc/grpc#36066).
    errors.append(await rpc_error(harness.stub.Converse(metadata=metadata)))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await harness.stub.ListVoices(pb.ListVoicesRequest(), metadata=metadata)
    errors.append(info.value)

    assert [e.code() for e in errors] == [grpc.StatusCode.UNAUTHENTICATED] * 3
    assert all(e.details() for e in errors)
    assert all(dict(e.trailing_metadata() or ()).get(CODE_KEY) == "unauthenticated" for e in errors)
    assert harness.keys() == keys_before


@pytest.mark.parametrize("registered", [False, True], ids=["no-worker", "full-worker"])
async def test_no_capacity_is_resource_exhausted_at_once(
    harness: Harness, registered: bool
) -> None:
    if registered:
        harness.worker(slots=0)
    started = time.monotonic()

    error = await rpc_error(synthesize(harness, text=TEXT))

    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "capacity" in (error.details() or "")
    assert time.monotonic() - started < REALTIME.claim_timeout_s  # refused, not timed out
    assert harness.redis.xlen(ESPEAK_REQUESTS) == 0


async def test_refusals_are_one_log_line_per_burst_not_one_per_call(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    # A retry storm is hundreds of refusals a second: the log gets the first in full and
    # the rest as a count (api/refusal_log.py), the metric counts each one.
    harness.worker(slots=0)
    with caplog.at_level(logging.INFO, logger="voicelane.api.grpc_service"):
        for _ in range(5):
            error = await rpc_error(synthesize(harness, text=TEXT))
            assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    lines = [r.getMessage() for r in caplog.records if r.name == "voicelane.api.grpc_service"]
    assert sum("ended: RESOURCE_EXHAUSTED" in line for line in lines) == 1, lines


async def test_a_burst_cannot_overshoot_capacity(harness: Harness) -> None:
    harness.worker(slots=2, claim=False)
    calls = [synthesize(harness, text=TEXT) for _ in range(6)]

    errors = await asyncio.gather(*(rpc_error(c) for c in calls))

    codes = sorted(e.code().name for e in errors)
    assert codes == ["RESOURCE_EXHAUSTED"] * 4 + ["UNAVAILABLE"] * 2
    assert harness.redis.xlen(ESPEAK_REQUESTS) == 2


async def test_a_full_lane_refuses_before_it_looks_at_the_request(harness: Harness) -> None:
    # Past capacity most calls are refused (clients retry): a refusal must cost the front
    # next to nothing, so it comes before the text, the voice and the options are checked
    # (bench/protocols.py: 0.61 -> 0.37 ms of front CPU per refusal). Empty text is an
    # INVALID_ARGUMENT on a lane with room; on a full one, whose capacity the front read in
    # the last 75 ms, RESOURCE_EXHAUSTED.
    harness.worker(slots=1, claim=False)
    admitted = synthesize(harness, text=TEXT, timeout_s=30)
    first = asyncio.ensure_future(collect(admitted))
    while harness.redis.xlen(ESPEAK_REQUESTS) < 1:  # the lane is full from here on
        await asyncio.sleep(0.005)
    codes = []
    for _ in range(20):
        # a valid call reads the capacity (refused), the empty one follows within its TTL
        refused = await rpc_error(synthesize(harness, text=TEXT))
        assert refused.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        codes.append((await rpc_error(synthesize(harness, text=""))).code())
        if grpc.StatusCode.RESOURCE_EXHAUSTED in codes:
            break
    assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes, codes
    assert set(codes) <= {grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INVALID_ARGUMENT}
    assert harness.redis.xlen(ESPEAK_REQUESTS) == 1  # only the admitted one
    admitted.cancel()
    with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
        await first


async def test_no_worker_picking_up_is_unavailable_after_the_claim_timeout(
    harness: Harness,
) -> None:
    harness.worker(slots=4, claim=False)
    started_ms = now_ms()
    started = time.monotonic()

    error = await rpc_error(synthesize(harness, text=TEXT, timeout_s=10))

    elapsed_s = time.monotonic() - started
    assert error.code() is grpc.StatusCode.UNAVAILABLE
    assert "picked up" in (error.details() or "")
    assert REALTIME.claim_timeout_s <= elapsed_s < REALTIME.claim_timeout_s + SLACK_S
    [queued] = harness.queued()
    assert started_ms + 9000 <= queued.deadline_ms <= now_ms() + 10000  # the client's deadline
    assert harness.redis.exists(cancel_key(queued.request_id))


async def test_an_expired_deadline_is_refused_without_touching_the_lane(
    harness: Harness,
) -> None:
    harness.capacity_without_worker()
    keys_before = harness.keys()
    # A front whose floor is above the client's deadline: the refusal is the server's,
    # decided before the client's own timer could fire.
    settings = grpc_settings(harness.redis_url)
    lane = RealtimeClient.from_url(harness.redis_url, REALTIME)
    front = await start_front(settings, lane, min_deadline_s=30.0)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{front.port}") as channel:
            stub: SpeechAsyncStub = pb_grpc.SpeechStub(channel)
            call = stub.Synthesize(pb.SynthesizeRequest(text=TEXT), metadata=ACME, timeout=10)
            error = await rpc_error(call)
            converse_error = await rpc_error(stub.Converse(metadata=ACME, timeout=10))
    finally:
        await stop_front(front, 0)
        await lane.close()

    for e in (error, converse_error):
        assert e.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert "deadline" in (e.details() or "")
    assert harness.keys() == keys_before
    assert harness.redis.xlen(ESPEAK_REQUESTS) == 0


async def test_a_client_that_leaves_mid_stream_gets_its_request_cancelled(
    harness: Harness,
) -> None:
    worker = harness.worker(hold_after_events=1)
    call = synthesize(harness, text=TEXT)
    first = await call.read()
    request_id = first.request_id

    call.cancel()

    await eventually(
        lambda: harness.redis.exists(cancel_key(lane_request_id("acme", request_id))),
        "the cancel mark",
    )
    lane_id = lane_request_id("acme", request_id)
    await eventually(lambda: lane_id in worker.snapshot().cancelled, "the worker to stop")


async def test_a_conversation_that_leaves_mid_stream_gets_cancelled(harness: Harness) -> None:
    worker = harness.worker(hold_after_events=1)
    call = harness.stub.Converse(metadata=ACME, timeout=20)
    await call.write(start_message())
    await call.write(delta("Hello there. How are you?"))
    first = await call.read()
    assert isinstance(first, pb.ConverseResponse)
    request_id = first.audio.request_id

    call.cancel()

    await eventually(
        lambda: harness.redis.exists(cancel_key(lane_request_id("acme", request_id))),
        "the cancel mark",
    )
    lane_id = lane_request_id("acme", request_id)
    await eventually(lambda: lane_id in worker.snapshot().cancelled, "the worker to stop")


async def test_a_dead_worker_ends_the_stream_with_unavailable(harness: Harness) -> None:
    worker = harness.worker(die_after_events=2)
    received: list[pb.AudioChunk] = []
    call = synthesize(harness, text=TEXT)

    error = await rpc_error(call, received)

    assert error.code() is grpc.StatusCode.UNAVAILABLE
    assert "heartbeat" in (error.details() or "")
    assert [c.seq for c in received] == [0, 1]
    assert worker.snapshot().died == [lane_request_id("acme", received[0].request_id)]
    assert harness.redis.exists(cancel_key(lane_request_id("acme", received[0].request_id)))


async def test_the_dead_worker_verdict_comes_within_the_liveness_bound(
    harness: Harness,
) -> None:
    harness.worker(die_after_events=1)
    call = synthesize(harness, text=TEXT)
    await call.read()
    died_at = time.monotonic()  # the worker died right after writing that chunk

    error = await rpc_error(call)

    bound_s = REALTIME.heartbeat_ttl_s + REALTIME.unavailable_after_s + SLACK_S
    assert error.code() is grpc.StatusCode.UNAVAILABLE
    assert time.monotonic() - died_at < bound_s


async def test_a_worker_error_event_ends_the_stream_with_its_status(harness: Harness) -> None:
    harness.worker(error_after_events=1, error=JobStateError("voice unloaded"))
    received: list[pb.AudioChunk] = []

    error = await rpc_error(synthesize(harness, text=TEXT), received)

    assert error.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert error.details() == "voice unloaded"
    assert len(received) == 1


async def test_a_worker_errors_retry_hint_reaches_the_client(harness: Harness) -> None:
    """The worker's error crosses the lane whole: its retry hint too, not only its status."""
    busy = EngineOutOfMemoryError("the device is out of memory", retry_after_s=2.5)
    harness.worker(error_after_events=1, error=busy)
    call = synthesize(harness, text=TEXT)

    error = await rpc_error(call)
    trailing = dict(await call.trailing_metadata() or ())

    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.details() == "the device is out of memory"
    assert trailing["retry-after-ms"] == "2500"


@pytest.mark.parametrize("after_seq", [0, 2, 3, 11])
async def test_resume_sends_exactly_the_later_chunks(harness: Harness, after_seq: int) -> None:
    harness.worker()
    request_id = f"resume-{after_seq}"
    full: list[pb.AudioChunk] = await collect(
        synthesize(harness, text=TEXT, request_id=request_id, client_ts_ms=5)
    )
    assert all(c.request_id == request_id for c in full)

    call = synthesize(harness, request_id=request_id, resume_after_seq=after_seq, client_ts_ms=5)
    resumed: list[pb.AudioChunk] = await collect(call)

    assert [c.seq for c in resumed] == [c.seq for c in full[after_seq + 1 :]]
    assert without_server_ts(resumed) == without_server_ts(full[after_seq + 1 :])
    assert resumed[-1].final


async def test_resume_of_an_unknown_or_foreign_stream_is_not_found(harness: Harness) -> None:
    harness.worker()
    await collect(synthesize(harness, text=TEXT, request_id="mine-1"))

    unknown = await rpc_error(synthesize(harness, request_id="never-was", resume_after_seq=0))
    foreign = await rpc_error(
        synthesize(harness, metadata=OTHER, request_id="mine-1", resume_after_seq=0)
    )

    assert unknown.code() is grpc.StatusCode.NOT_FOUND
    assert foreign.code() is grpc.StatusCode.NOT_FOUND


async def test_a_request_id_cannot_be_used_twice(harness: Harness) -> None:
    harness.worker()
    await collect(synthesize(harness, text=TEXT, request_id="once-only"))
    # Entries ever added, not the stream's length: the worker trims finished requests from
    # the stream (every TRIM_EVERY_S), which made the length drop under the test (CI).
    queued = requests_added(harness)

    error = await rpc_error(synthesize(harness, text=TEXT, request_id="once-only"))

    assert error.code() is grpc.StatusCode.ALREADY_EXISTS
    assert requests_added(harness) == queued


async def test_a_message_over_the_limit_is_resource_exhausted(harness: Harness) -> None:
    harness.capacity_without_worker()
    error = await rpc_error(synthesize(harness, text="y" * (MAX_MESSAGE_BYTES + 1)))
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    # and the front is fine afterwards
    reply = await harness.stub.ListVoices(pb.ListVoicesRequest(), metadata=ACME)
    assert reply.voices


async def test_an_unreachable_redis_is_unavailable_not_a_crash() -> None:
    dead_url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    settings = grpc_settings(dead_url)
    lane = RealtimeClient.from_url(dead_url, REALTIME)
    front = await start_front(settings, lane)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{front.port}") as channel:
            stub: SpeechAsyncStub = pb_grpc.SpeechStub(channel)
            error = await rpc_error(stub.Synthesize(pb.SynthesizeRequest(text=TEXT), metadata=ACME))
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ListVoices(pb.ListVoicesRequest(), metadata=ACME)
            reply = await health_check(channel)(health_pb2.HealthCheckRequest(service=""))
    finally:
        await stop_front(front, 0)
        await lane.close()
    assert error.code() is grpc.StatusCode.UNAVAILABLE
    assert info.value.code() is grpc.StatusCode.UNAVAILABLE
    assert reply.status == health_pb2.HealthCheckResponse.SERVING  # the front itself is up


# ------------------------------------------------------------------------ Converse


async def test_converse_speaks_the_text_as_it_arrives(harness: Harness) -> None:
    worker = harness.worker()
    call = harness.stub.Converse(metadata=ACME, timeout=20)
    await call.write(start_message(sample_rate_hz=16000, speed=1.25, client_ts_ms=77))
    for piece in ["Hel", "lo there. How", " are you"]:
        await call.write(delta(piece))
    await call.write(FLUSH)
    await call.write(delta(" Fine. Bye"))
    await call.write(END)
    await call.done_writing()

    responses: list[pb.ConverseResponse] = await collect(call)

    chunks = [r.audio for r in responses]
    assert_well_formed(chunks, 16000)
    assert all(c.client_ts_ms == 77 for c in chunks)
    captions = [cap.text for c in chunks for cap in c.captions]
    assert captions == ["Hello there.", "How are you", "Fine.", "Bye"]
    [request] = worker.snapshot().claimed
    assert request.mode.value == "converse" and request.speed == 1.25
    kinds = [kind for kind, _ in worker.snapshot().inputs[request.request_id]]
    assert kinds == ["text", "text", "text", "flush", "text", "end"]


async def test_converse_without_an_explicit_end_ends_when_the_client_stops_sending(
    harness: Harness,
) -> None:
    harness.worker()
    responses = await collect(
        harness.stub.Converse(iter([start_message(), delta("Just this.")]), metadata=ACME)
    )
    assert [cap.text for r in responses for cap in r.audio.captions] == ["Just this."]
    assert responses[-1].audio.final


MALFORMED = [
    pytest.param([delta("hi")], "first message", False, id="delta-before-start"),
    pytest.param([FLUSH], "first message", False, id="flush-before-start"),
    pytest.param([], "before its start", False, id="nothing"),
    pytest.param(
        [start_message(voice="klingon")], "voice 'klingon' is unknown", False, id="bad-voice"
    ),
    pytest.param([start_message(speed=9.0)], "speed", False, id="bad-speed"),
    pytest.param([start_message(), start_message()], "start", True, id="second-start"),
    pytest.param(
        [start_message(), delta("Hi there."), END, delta("more")],
        "follow end",
        True,
        id="after-end",
    ),
    pytest.param([start_message(), delta("ok\x00")], "binary", True, id="nul"),
    pytest.param([start_message(), delta("\x01" * 10)], "binary", True, id="controls"),
    pytest.param([start_message(), *[delta("z" * 500)] * 5], "limit", True, id="too-much-text"),
    pytest.param([start_message(), pb.ConverseRequest()], "must set", True, id="empty-message"),
]


@pytest.mark.parametrize(("messages", "message", "submitted"), MALFORMED)
async def test_malformed_conversations_are_invalid_argument(
    harness: Harness, messages: list[pb.ConverseRequest], message: str, submitted: bool
) -> None:
    worker = harness.worker(hold_after_events=1)  # a conversation never ends on its own here
    keys_before = harness.keys()

    call = harness.stub.Converse(metadata=ACME, timeout=20)
    for request in messages:  # the offending message comes last: nothing is written after
        await call.write(request)
    if not messages:
        await call.done_writing()
    error = await rpc_error(call)

    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert message in (error.details() or "")
    if not submitted:
        assert harness.redis.xlen(ESPEAK_REQUESTS) == 0
        assert harness.keys() == keys_before
        return
    [request_id] = harness.submitted_ids()
    assert harness.redis.exists(cancel_key(lane_request_id("acme", request_id))), (
        "set before the status went out"
    )
    worker.release()


async def test_bad_text_mid_conversation_ends_it_while_audio_is_flowing(
    harness: Harness,
) -> None:
    harness.worker(hold_after_events=1)  # the worker keeps the stream open, alive and quiet
    call = harness.stub.Converse(metadata=ACME, timeout=5)
    await call.write(start_message())
    await call.write(delta("Hello there. "))
    first = await call.read()
    assert isinstance(first, pb.ConverseResponse)

    await call.write(delta("oops\x00"))
    error = await rpc_error(call)

    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT  # not the 5 s deadline
    assert harness.redis.exists(cancel_key(lane_request_id("acme", first.audio.request_id)))


# ------------------------------------------------------------------------ ListVoices


async def test_list_voices_falls_back_to_espeak_before_any_worker_registered(
    harness: Harness,
) -> None:
    reply = await harness.stub.ListVoices(pb.ListVoicesRequest(), metadata=ACME)

    assert reply.engine == "espeak"
    by_id = {v.id: v for v in reply.voices}
    assert {"auto", "en-us"} <= by_id.keys()
    assert by_id["auto"].name and list(by_id["en-us"].languages) == ["en-us"]


async def test_list_voices_returns_the_registered_voices(harness: Harness) -> None:
    published = EngineCapabilities(
        "espeak", 22050, 0.5, 2.5, (VoiceInfo("auto"), VoiceInfo("custom-x"))
    )
    harness.redis.set(capabilities_key("espeak"), published.to_json())

    reply = await harness.stub.ListVoices(pb.ListVoicesRequest(), metadata=ACME)
    error = await rpc_error(synthesize(harness, text=TEXT, voice="en-us"))

    assert [v.id for v in reply.voices] == ["auto", "custom-x"]
    custom = reply.voices[1]
    assert custom.name == "" and not custom.languages
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT  # not registered: unknown


# ------------------------------------------------------------------------ server


def health_check(
    channel: grpc.aio.Channel,
) -> grpc.aio.UnaryUnaryMultiCallable[
    health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse
]:
    return channel.unary_unary(
        "/grpc.health.v1.Health/Check",
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )


def health_watch(
    channel: grpc.aio.Channel,
) -> grpc.aio.UnaryStreamMultiCallable[
    health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse
]:
    return channel.unary_stream(
        "/grpc.health.v1.Health/Watch",
        request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
        response_deserializer=health_pb2.HealthCheckResponse.FromString,
    )


async def test_health_is_serving_without_a_key(harness: Harness) -> None:
    for service in ("", "voicelane.v1.Speech"):
        request = health_pb2.HealthCheckRequest(service=service)
        reply = await health_check(harness.channel)(request)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_reflection_lists_and_describes_the_speech_service(harness: Harness) -> None:
    reflection = harness.channel.stream_stream(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="voicelane.v1.Speech"),
    ]
    replies: list[reflection_pb2.ServerReflectionResponse] = await collect(
        reflection(iter(requests))
    )

    names = {s.name for s in replies[0].list_services_response.service}
    assert {"voicelane.v1.Speech", "grpc.health.v1.Health"} <= names
    assert replies[1].file_descriptor_response.file_descriptor_proto


async def watch_status(watch: Any) -> int:
    reply = await watch.read()
    assert isinstance(reply, health_pb2.HealthCheckResponse)
    return reply.status


async def test_serve_stops_gracefully_and_leaves_cut_streams_resumable(redis_url: str) -> None:
    settings = grpc_settings(redis_url)
    lane = RealtimeClient.from_url(redis_url, REALTIME)
    worker = FakeRealtimeWorker(redis_url, REALTIME, FakeWorkerKnobs(hold_after_events=1))
    ready, stop = asyncio.Event(), asyncio.Event()
    server = asyncio.create_task(serve(settings, lane=lane, ready=ready, stop=stop))
    worker.start()
    client = redis.Redis.from_url(redis_url)
    try:
        await asyncio.wait_for(ready.wait(), 10)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{settings.grpc_port}") as channel:
            watch = health_watch(channel)(health_pb2.HealthCheckRequest(service=SERVICE))
            assert await watch_status(watch) == health_pb2.HealthCheckResponse.SERVING
            stream = pb_grpc.SpeechStub(channel).Synthesize(
                pb.SynthesizeRequest(text=TEXT), metadata=ACME, timeout=20
            )
            first = await stream.read()
            assert isinstance(first, pb.AudioChunk)
            request_id = first.request_id

            stop.set()

            assert await watch_status(watch) == health_pb2.HealthCheckResponse.NOT_SERVING
            await asyncio.wait_for(server, 10)
            error = await rpc_error(stream)
        assert error.code() in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE)
        assert not client.exists(cancel_key(lane_request_id("acme", request_id))), (
            "left running, to be resumed"
        )
    finally:
        stop.set()
        await asyncio.gather(server, return_exceptions=True)
        worker.stop()
        await lane.close()
        client.close()


# ------------------------------------------------------------------------ tenants


async def test_each_tenant_has_its_own_request_ids(harness: Harness) -> None:
    worker = harness.worker()
    mine = await collect(synthesize(harness, text=TEXT, request_id="same-id"))
    theirs = await collect(synthesize(harness, metadata=OTHER, text=TEXT, request_id="same-id"))
    assert mine[-1].final and theirs[-1].final  # no ALREADY_EXISTS: no oracle across tenants
    assert {c.request_id for c in mine + theirs} == {"same-id"}
    claimed = worker.snapshot().claimed
    assert sorted((r.tenant, r.request_id) for r in claimed) == [
        ("acme", "acme.same-id"),
        ("other", "other.same-id"),
    ]
    again = await rpc_error(synthesize(harness, text=TEXT, request_id="same-id"))
    assert again.code() is grpc.StatusCode.ALREADY_EXISTS  # only within the tenant


async def test_a_tenant_holds_at_most_its_streams_and_gets_a_retry_hint(redis_url: str) -> None:
    settings = grpc_settings(redis_url, tenant_max_streams=2)
    lane = RealtimeClient.from_url(redis_url, REALTIME)
    front = await start_front(settings, lane)
    worker = FakeRealtimeWorker(redis_url, REALTIME, FakeWorkerKnobs(hold_after_events=1))
    worker.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{front.port}") as channel:
            stub: SpeechAsyncStub = pb_grpc.SpeechStub(channel)
            held = [
                stub.Synthesize(pb.SynthesizeRequest(text=TEXT), metadata=ACME, timeout=20)
                for _ in range(2)
            ]
            for call in held:
                await call.read()  # admitted and speaking (held by the worker)
            third = stub.Synthesize(pb.SynthesizeRequest(text=TEXT), metadata=ACME, timeout=20)
            refused = await rpc_error(third)
            trailing = dict(await third.trailing_metadata() or ())
            other = stub.Synthesize(pb.SynthesizeRequest(text=TEXT), metadata=OTHER, timeout=20)
            first_of_other = await other.read()
            held[0].cancel()
            await asyncio.sleep(0.2)

            async def admitted_again() -> object:
                call = stub.Synthesize(pb.SynthesizeRequest(text=TEXT), metadata=ACME, timeout=20)
                chunk = await call.read()
                call.cancel()
                return chunk

            after_close = await admitted_again()
            for call in (held[1], other):
                call.cancel()
    finally:
        worker.release()
        worker.stop()
        await stop_front(front, 0)
        await lane.close()
    assert refused.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "2 open streams" in (refused.details() or "")
    assert int(trailing[RETRY_AFTER_MS_KEY]) > 0
    assert trailing[CODE_KEY] == "quota_exceeded"
    assert isinstance(first_of_other, pb.AudioChunk)  # another tenant is not held up
    assert isinstance(after_close, pb.AudioChunk)  # a closed stream gave its slot back


async def held_front(
    redis_url: str, **overrides: Any
) -> tuple[Front, RealtimeClient, FakeRealtimeWorker]:
    """A front with ``overrides`` and a worker that holds every stream after its first event."""
    lane = RealtimeClient.from_url(redis_url, REALTIME)
    front = await start_front(grpc_settings(redis_url, **overrides), lane)
    worker = FakeRealtimeWorker(redis_url, REALTIME, FakeWorkerKnobs(hold_after_events=1))
    worker.start()
    return front, lane, worker


async def test_a_resume_counts_as_an_open_stream_of_its_tenant(redis_url: str) -> None:
    """Issue 26 item 7: resumes went around the tenant's open-stream quota (300 concurrent
    resumes of one stream were all served). The stream holds one of acme's 2 slots, a first
    resume the other; a second resume is refused like a third stream would be."""
    front, lane, worker = await held_front(redis_url, tenant_max_streams=2)
    client = redis.Redis.from_url(redis_url)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{front.port}") as channel:
            stub: SpeechAsyncStub = pb_grpc.SpeechStub(channel)
            original = stub.Synthesize(
                pb.SynthesizeRequest(text=TEXT, request_id="r-1"), metadata=ACME, timeout=20
            )
            await original.read()  # admitted and speaking (held by the worker)

            def resume() -> Any:
                ask = pb.SynthesizeRequest(request_id="r-1", resume_after_seq=0)
                return stub.Synthesize(ask, metadata=ACME, timeout=10)

            first = resume()
            await eventually(
                lambda: client.zcard(tenant_streams_key("acme")) >= 2, "the resume's slot"
            )
            refused = await rpc_error(resume())
            other = stub.Synthesize(pb.SynthesizeRequest(text=TEXT), metadata=OTHER, timeout=20)
            first_of_other = await other.read()
            first.cancel()
            await eventually(
                lambda: client.zcard(tenant_streams_key("acme")) == 1, "the slot given back"
            )
            for call in (original, other):
                call.cancel()
    finally:
        worker.release()
        worker.stop()
        await stop_front(front, 0)
        await lane.close()
        client.close()
    assert refused.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, refused.details()
    assert "2 open streams" in (refused.details() or "")
    assert isinstance(first_of_other, pb.AudioChunk)  # another tenant is not held up


async def test_a_resume_takes_a_token_of_its_tenants_rate(redis_url: str) -> None:
    """Issue 26 item 7: resumes went around the tenant's request rate. A burst of 2 at a rate
    that refills nothing during the test: the stream takes one token, a resume the other, the
    next resume is refused with a retry hint."""
    front, lane, worker = await held_front(
        redis_url, tenant_requests_per_s=0.001, tenant_request_burst=2
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{front.port}") as channel:
            stub: SpeechAsyncStub = pb_grpc.SpeechStub(channel)
            original = stub.Synthesize(
                pb.SynthesizeRequest(text=TEXT, request_id="r-2"), metadata=ACME, timeout=20
            )
            await original.read()
            ask = pb.SynthesizeRequest(request_id="r-2", resume_after_seq=0)
            first = stub.Synthesize(ask, metadata=ACME, timeout=10)
            second = stub.Synthesize(ask, metadata=ACME, timeout=10)
            refused = await rpc_error(second)
            trailing = dict(await second.trailing_metadata() or ())
            for call in (original, first):
                call.cancel()
    finally:
        worker.release()
        worker.stop()
        await stop_front(front, 0)
        await lane.close()
    assert refused.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, refused.details()
    assert "rate" in (refused.details() or "")
    assert int(trailing[RETRY_AFTER_MS_KEY]) > 0


async def test_a_client_deadline_is_capped(harness: Harness) -> None:
    harness.capacity_without_worker()
    year_s = 365 * 24 * 3600.0
    call = synthesize(harness, text=TEXT, timeout_s=year_s)
    await eventually(harness.queued, "the request in the lane")
    call.cancel()
    (request,) = harness.queued()
    cap_ms = harness.settings.realtime.max_deadline_s * 1000
    assert request.deadline_ms <= time.time() * 1000 + cap_ms + 1000
    ttl_s = harness.redis.ttl(tenant_key(request.request_id))
    assert 0 < ttl_s <= harness.settings.realtime.max_deadline_s + 600


async def test_the_fronts_llm_settings_reach_its_bridge(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The front's one settings tree carries its LLM section to the bridge it builds (no
    settings of its own read elsewhere): ``VOICELANE_LLM__*`` and Ollama's own host."""
    monkeypatch.setenv("VOICELANE_LLM__MODEL", "llama3:8b")
    monkeypatch.setenv("VOICELANE_LLM__MAX_PARALLEL", "3")
    monkeypatch.setenv("OLLAMA_HOST", "http://ollama-box:11434")
    settings = grpc_settings(redis_url)
    lane = RealtimeClient.from_url(redis_url, REALTIME)
    front = await start_front(settings, lane)
    try:
        bridge = front.service.llm
        assert bridge is not None and bridge.settings is settings.llm
        assert (bridge.settings.model, bridge.settings.max_parallel) == ("llama3:8b", 3)
        assert bridge.host == "http://ollama-box:11434"
    finally:
        await stop_front(front, 0)
        await lane.close()
