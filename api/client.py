"""The Python client SDK of the real-time lane (gRPC ``voicelane.v1.Speech``), asyncio only.

::

    async with SpeechClient("localhost:50051", api_key) as client:
        async for chunk in client.synthesize("Hello there."):
            play(chunk.opus_packets)
        result = await client.synthesize_to_file("Hello there.", "hello.wav")

What it does, in short (the long form, with the reasons, is ``docs/client.md``):

* **Channel pool** — ``channels`` gRPC channels, each its own HTTP/2 connection
  (``grpc.use_local_subchannel_pool``), at most ``streams_per_channel`` streams each. A new
  stream takes the least-loaded channel; when all are full the caller waits for a slot (flow
  control, never an error). Unary calls (``ListVoices``) take the least-loaded channel
  without a slot.
* **Retry** — ``UNAVAILABLE`` before the first chunk: the call is made again (as a new
  request) with exponential backoff and jitter (:class:`RetryPolicy`).
* **Resume** — ``UNAVAILABLE`` (a dropped connection surfaces as that too) or a stream that
  ends without its final chunk, after the first chunk: ``Synthesize`` is called again with the
  stream's ``request_id`` and ``resume_after_seq`` = the last seq received; chunks at or
  below it are dropped, so no seq is ever yielded twice. ``NOT_FOUND`` (output expired) ends
  it. The attempt budget counts attempts in a row that brought no new chunk.
* **Converse** is never resumed (the wire has no resume for it and its input is not
  replayable); ``UNAVAILABLE`` before the first chunk is retried only while no text was sent.
* **Errors** — every gRPC failure that is not retried, or whose retries ran out, is a
  :class:`RemoteError` with the status name.
* **Figures** — :class:`StreamStats` on every stream.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import random
import statistics
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self, TypeAlias

import grpc
import grpc.aio
import numpy as np

from core.atomic import atomic_output
from core.audio.files import AudioFormat, format_from_path, open_writer, validate_sample_rate
from core.audio.opus import FRAME_DURATION_MS, OpusStreamDecoder
from core.audio.pcm import PcmF32
from core.errors import InvalidInputError, RemoteError
from core.wire import speech_pb2 as pb
from core.wire import speech_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from core.wire.speech_pb2_grpc import SpeechAsyncStub

__all__ = [
    "DEFAULT_SAMPLE_RATE_HZ",
    "ConverseSession",
    "RemoteError",
    "RetryPolicy",
    "SpeechClient",
    "StreamStats",
    "SynthesisResult",
    "SynthesisStream",
    "VoiceInfo",
    "say_to_file",
]

DEFAULT_SAMPLE_RATE_HZ = 24000
DEFAULT_KEEPALIVE_TIME_S = 30.0
"""Ping an idle-looking connection this often while a call is open (see ``docs/client.md``)."""
DEFAULT_KEEPALIVE_TIMEOUT_S = 10.0
"""...and call it dead when the ping is not answered within this."""
DEFAULT_MAX_RECEIVE_MESSAGE_BYTES = 8 * 1024 * 1024
MAX_CONCEALED_GAP_MS = 10_000
"""A pts jump larger than this is taken as a broken timestamp, not a gap to fill."""

ChannelOption: TypeAlias = tuple[str, int | str]
Metadata: TypeAlias = tuple[tuple[str, str], ...]

# What a write to a Converse call that already ended (or is ending) raises.
_WRITE_ERRORS = (grpc.aio.AioRpcError, asyncio.InvalidStateError)


# ---- errors --------------------------------------------------------------------------------


# ---- retry policy --------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """When and how often a failed call is made again.

    ``max_attempts`` counts attempts in a row that brought no new chunk (the first call
    included): a stream that resumes and makes progress starts a fresh budget. The wait
    before retry ``n`` (1-based) is ``min(max_backoff_s, initial_backoff_s *
    multiplier ** (n - 1))``, scaled by a random factor in ``[1 - jitter, 1 + jitter]``.
    ``UNAVAILABLE`` is retried; ``RESOURCE_EXHAUSTED`` (the front's load shedding) only when
    ``retry_resource_exhausted``; nothing else.
    """

    max_attempts: int = 5
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.2
    retry_resource_exhausted: bool = False

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise InvalidInputError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if not 0 <= self.initial_backoff_s <= self.max_backoff_s:
            raise InvalidInputError(
                f"backoff must satisfy 0 <= initial_backoff_s <= max_backoff_s, got "
                f"{self.initial_backoff_s} and {self.max_backoff_s}"
            )
        if self.multiplier < 1:
            raise InvalidInputError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter < 1:
            raise InvalidInputError(f"jitter must be in [0, 1), got {self.jitter}")

    def retryable(self, code: str) -> bool:
        return code == "UNAVAILABLE" or (
            code == "RESOURCE_EXHAUSTED" and self.retry_resource_exhausted
        )

    def backoff_s(self, retry: int, rng: random.Random | None = None) -> float:
        """The wait before retry number ``retry`` (1 for the first retry)."""
        base_s = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** (retry - 1))
        if not self.jitter:
            return base_s
        spread = (rng or random).uniform(-self.jitter, self.jitter)
        return base_s * (1.0 + spread)


# ---- figures -------------------------------------------------------------------------------


@dataclass
class StreamStats:
    """Latency and progress figures of one stream (see ``docs/client.md``).

    * ``slot_wait_s`` — time spent waiting for a pool slot (flow control), before sending;
    * ``time_to_first_audio_s`` — monotonic: first request sent (first attempt; for Converse
      the first text sent) → first chunk that carries packets; retries count in it;
    * ``echo_round_trip_ms`` — wall clock: the ``client_ts_ms`` the server echoes in the first
      chunk → its arrival; one clock, so no skew (for Converse it counts from the start
      message, so it includes the wait for text);
    * ``server_delays_ms`` — per chunk, the client's wall clock at arrival minus the chunk's
      ``server_ts_ms``: network + relay delay *plus the clock offset between the hosts*;
      only comparable to itself unless both clocks are NTP-synced;
    * ``attempts`` calls made, ``retries`` (before the first chunk) and ``resumes`` (after
      it) among them, ``backoff_s`` slept between them; ``elapsed_s`` first send → end.
    """

    request_id: str = ""
    slot_wait_s: float = 0.0
    time_to_first_audio_s: float | None = None
    echo_round_trip_ms: float | None = None
    server_delays_ms: list[float] = field(default_factory=list)
    chunks: int = 0
    packets: int = 0
    attempts: int = 0
    retries: int = 0
    resumes: int = 0
    backoff_s: float = 0.0
    elapsed_s: float | None = None

    @property
    def audio_s(self) -> float:
        """Audio received: packets x 20 ms."""
        return self.packets * FRAME_DURATION_MS / 1000

    @property
    def server_delay_p50_ms(self) -> float | None:
        return statistics.median(self.server_delays_ms) if self.server_delays_ms else None

    @property
    def server_delay_max_ms(self) -> float | None:
        return max(self.server_delays_ms) if self.server_delays_ms else None


def _wall_ms() -> float:
    return time.time_ns() / 1e6


class _Meter:
    """Fills a :class:`StreamStats` from send and arrival events."""

    def __init__(self, stats: StreamStats) -> None:
        self.stats = stats
        self._sent_at: float | None = None

    def sent(self) -> None:
        """The (first) request went out; later calls keep the first time."""
        if self._sent_at is None:
            self._sent_at = time.monotonic()

    def chunk(self, chunk: pb.AudioChunk) -> None:
        stats = self.stats
        now_wall_ms = _wall_ms()
        if stats.chunks == 0:
            stats.request_id = chunk.request_id
            if chunk.client_ts_ms:
                stats.echo_round_trip_ms = now_wall_ms - chunk.client_ts_ms
        stats.chunks += 1
        stats.packets += len(chunk.opus_packets)
        if chunk.server_ts_ms:
            stats.server_delays_ms.append(now_wall_ms - chunk.server_ts_ms)
        if chunk.opus_packets and stats.time_to_first_audio_s is None and self._sent_at:
            stats.time_to_first_audio_s = time.monotonic() - self._sent_at

    def finished(self) -> None:
        if self._sent_at is not None:
            self.stats.elapsed_s = time.monotonic() - self._sent_at


# ---- results -------------------------------------------------------------------------------


@dataclass(frozen=True)
class VoiceInfo:
    id: str
    name: str
    languages: tuple[str, ...]
    engine: str


@dataclass(frozen=True)
class SynthesisResult:
    """Decoded audio of one stream: mono float32 ``pcm`` at ``sample_rate_hz``.

    The codec delay (6.5 ms) is trimmed from the start, so sample ``i`` is the server's input
    sample ``i``; ``len(pcm) == packets * frame - delay`` plus any concealed gap. ``chunks``
    and ``packets`` count what arrived; ``concealed_ms`` is audio filled in where the
    presentation timestamps jumped (a worker takeover, see DESIGN.md).
    """

    pcm: PcmF32
    sample_rate_hz: int
    chunks: int
    packets: int
    captions: tuple[pb.Caption, ...]
    stats: StreamStats
    concealed_ms: int = 0

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / self.sample_rate_hz


class _PcmAssembler:
    """Decodes a stream's packets in order; fills pts gaps with packet-loss concealment."""

    def __init__(self, sample_rate_hz: int) -> None:
        self.sample_rate_hz = sample_rate_hz
        self._decoder = OpusStreamDecoder(sample_rate_hz)
        self._parts: list[PcmF32] = []
        self._next_pts_ms = 0
        self.chunks = 0
        self.packets = 0
        self.concealed_ms = 0
        self.captions: list[pb.Caption] = []

    def add(self, chunk: pb.AudioChunk) -> None:
        self.chunks += 1
        self.captions.extend(chunk.captions)
        if not chunk.opus_packets:
            return
        self._conceal_gap(chunk.pts_ms - self._next_pts_ms)
        for packet in chunk.opus_packets:
            self._parts.append(self._decoder.decode(packet))
            self._next_pts_ms += FRAME_DURATION_MS
            self.packets += 1

    def _conceal_gap(self, gap_ms: int) -> None:
        if gap_ms < FRAME_DURATION_MS or gap_ms > MAX_CONCEALED_GAP_MS:
            return
        for _ in range(gap_ms // FRAME_DURATION_MS):
            self._parts.append(self._decoder.decode(b""))
            self._next_pts_ms += FRAME_DURATION_MS
            self.concealed_ms += FRAME_DURATION_MS

    def pcm(self) -> PcmF32:
        """Everything decoded, minus the codec delay at the start."""
        if not self._parts:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(self._parts)[self._decoder.codec_delay_samples :]

    def result(self, stats: StreamStats) -> SynthesisResult:
        return SynthesisResult(
            pcm=self.pcm(),
            sample_rate_hz=self.sample_rate_hz,
            chunks=self.chunks,
            packets=self.packets,
            captions=tuple(self.captions),
            stats=stats,
            concealed_ms=self.concealed_ms,
        )


# ---- the channel pool ----------------------------------------------------------------------


@dataclass(eq=False)
class _Slot:
    index: int
    channel: grpc.aio.Channel
    stub: SpeechAsyncStub
    active: int = 0


@dataclass(eq=False)
class _Lease:
    """One stream's place in the pool; it may move to another channel between attempts."""

    slot: _Slot


class _ChannelPool:
    """``len(slots)`` channels with ``per_channel`` stream slots each; FIFO waiting."""

    def __init__(self, channels: Sequence[grpc.aio.Channel], per_channel: int) -> None:
        self.slots = [
            _Slot(i, channel, pb_grpc.SpeechStub(channel)) for i, channel in enumerate(channels)
        ]
        self.per_channel = per_channel
        self._waiters: collections.deque[asyncio.Future[_Slot]] = collections.deque()
        self.closed = False

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    def least_loaded(self) -> _Slot:
        return min(self.slots, key=lambda s: (s.active, s.index))

    def _take_free(self) -> _Slot | None:
        slot = self.least_loaded()
        if slot.active >= self.per_channel:
            return None
        slot.active += 1
        return slot

    async def acquire(self) -> _Lease:
        """A slot on the least-loaded channel; waits (FIFO) while every channel is full."""
        self._check_open()
        if not self._waiters and (slot := self._take_free()) is not None:
            return _Lease(slot)
        waiter: asyncio.Future[_Slot] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return _Lease(await waiter)
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self.release(_Lease(waiter.result()))  # granted just as we were cancelled
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    def release(self, lease: _Lease) -> None:
        lease.slot.active -= 1
        while self._waiters:
            waiter = self._waiters.popleft()
            if waiter.done():
                continue
            slot = self._take_free()
            if slot is None:  # pragma: no cover - a slot was just freed
                self._waiters.appendleft(waiter)
                return
            waiter.set_result(slot)
            return

    def move(self, lease: _Lease) -> None:
        """After a failure: switch to the least-loaded *other* channel that has room."""
        others = [s for s in self.slots if s is not lease.slot and s.active < self.per_channel]
        if not others:
            return
        target = min(others, key=lambda s: (s.active, s.index))
        lease.slot.active -= 1
        target.active += 1
        lease.slot = target

    def _check_open(self) -> None:
        if self.closed:
            raise RemoteError("CANCELLED", "the SpeechClient is closed")

    async def close(self) -> None:
        self.closed = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(RemoteError("CANCELLED", "the SpeechClient was closed"))
        await asyncio.gather(*(s.channel.close(grace=None) for s in self.slots))


def _cancelled_from_outside() -> bool:
    """In an ``except CancelledError``: was *this task* cancelled (not just its gRPC call)?

    grpc.aio raises CancelledError from a call cancelled elsewhere: by closing the client's
    channels, or by a cancelled ``write`` (which cancels the whole call).
    """
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


def _call_cancelled() -> RemoteError:
    return RemoteError("CANCELLED", "the call was cancelled on this side (client closed?)")


# ---- retry timing --------------------------------------------------------------------------


class _Retrier:
    """Deadline and backoff of one logical call, shared by its attempts."""

    def __init__(self, policy: RetryPolicy, timeout_s: float | None, stats: StreamStats) -> None:
        self.policy = policy
        self.stats = stats
        self._timeout_s = timeout_s
        self._deadline: float | None = None

    def start(self) -> None:
        """The deadline runs from here (the stream's first use), slot wait included."""
        if self._timeout_s is not None and self._deadline is None:
            self._deadline = time.monotonic() + self._timeout_s

    def remaining_s(self) -> float | None:
        """Seconds left for the next attempt; DEADLINE_EXCEEDED when none are."""
        self.start()
        if self._deadline is None:
            return None
        left_s = self._deadline - time.monotonic()
        if left_s <= 0:
            raise RemoteError("DEADLINE_EXCEEDED", "the call's deadline passed")
        return left_s

    async def pause(self, code: str, details: str, failures: int) -> None:
        """Sleep before the next attempt, or raise :class:`RemoteError` if there is none."""
        if not self.policy.retryable(code):
            raise RemoteError(code, details)
        if failures >= self.policy.max_attempts:
            raise RemoteError(code, f"{details} (gave up after {failures} attempts)")
        delay_s = self.policy.backoff_s(failures)
        left_s = self.remaining_s()
        if left_s is not None and delay_s >= left_s:
            raise RemoteError(code, f"{details} (the deadline leaves no time to retry)")
        self.stats.backoff_s += delay_s
        await asyncio.sleep(delay_s)

    async def acquire(self, pool: _ChannelPool) -> _Lease:
        """A pool slot, waiting no longer than the deadline allows."""
        waited_from = time.monotonic()
        try:
            async with asyncio.timeout(self.remaining_s()):
                lease = await pool.acquire()
        except TimeoutError:
            raise RemoteError(
                "DEADLINE_EXCEEDED", "the deadline passed while waiting for a free stream slot"
            ) from None
        self.stats.slot_wait_s = time.monotonic() - waited_from
        return lease


# ---- Synthesize ----------------------------------------------------------------------------


class SynthesisStream(AsyncIterator[pb.AudioChunk]):
    """The chunks of one ``Synthesize`` stream, seq strictly increasing, with its figures.

    Iterate it to the end, or close it (``async with``/``aclose()``) when leaving early: the
    pool slot is held until then.
    """

    def __init__(self, chunks: AsyncGenerator[pb.AudioChunk, None], stats: StreamStats) -> None:
        self._chunks = chunks
        self.stats = stats

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> pb.AudioChunk:
        return await self._chunks.__anext__()

    async def aclose(self) -> None:
        await self._chunks.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class _Synthesis:
    """One logical Synthesize call: attempts, retries before the first chunk, resumes after."""

    def __init__(
        self,
        pool: _ChannelPool,
        metadata: Metadata,
        request: pb.SynthesizeRequest,
        retrier: _Retrier,
    ) -> None:
        self._pool = pool
        self._metadata = metadata
        self._request = request
        self._retrier = retrier
        self.stats = retrier.stats
        self._meter = _Meter(self.stats)
        self._request_id = ""
        self._last_seq: int | None = None
        self._final_seen = False

    async def chunks(self) -> AsyncGenerator[pb.AudioChunk, None]:
        lease = await self._retrier.acquire(self._pool)
        try:
            failures = 0
            while True:
                call = self._start(lease.slot)
                error: grpc.aio.AioRpcError | None = None
                try:
                    async for chunk in call:
                        if self._accept(chunk):
                            failures = 0
                            yield chunk
                except grpc.aio.AioRpcError as exc:
                    error = exc
                except asyncio.CancelledError:
                    if _cancelled_from_outside():
                        raise
                    raise _call_cancelled() from None
                finally:
                    call.cancel()
                if self._final_seen:  # all audio is here; a trailing error changes nothing
                    return
                failures += 1
                await self._pause(error, failures)
                self._pool.move(lease)
        finally:
            self._meter.finished()
            self._pool.release(lease)

    def _start(self, slot: _Slot) -> grpc.aio.UnaryStreamCall[pb.SynthesizeRequest, pb.AudioChunk]:
        request = pb.SynthesizeRequest()
        request.CopyFrom(self._request)
        request.client_ts_ms = int(_wall_ms())
        if self._last_seq is not None:
            request.request_id = self._request_id
            request.resume_after_seq = self._last_seq
        timeout_s = self._retrier.remaining_s()
        call = slot.stub.Synthesize(request, timeout=timeout_s, metadata=self._metadata)
        self.stats.attempts += 1
        self._meter.sent()
        return call

    def _accept(self, chunk: pb.AudioChunk) -> bool:
        """Record a chunk; False for one at or below the last seq (a resume's overlap)."""
        if self._last_seq is not None and chunk.seq <= self._last_seq:
            return False
        if self._last_seq is None:
            self._request_id = chunk.request_id
        self._last_seq = chunk.seq
        self._final_seen = self._final_seen or chunk.final
        self._meter.chunk(chunk)
        return True

    async def _pause(self, error: grpc.aio.AioRpcError | None, failures: int) -> None:
        if error is None:
            code, details = "UNAVAILABLE", "the stream ended without its final chunk"
        else:
            code, details = error.code().name, error.details() or ""
        resuming = self._last_seq is not None
        if resuming and code == "NOT_FOUND":
            raise RemoteError(code, f"the stream cannot be resumed, its output expired: {details}")
        if resuming and not self._request_id and self._retrier.policy.retryable(code):
            raise RemoteError(code, f"{details} (cannot resume: the server sent no request_id)")
        await self._retrier.pause(code, details, failures)
        if resuming:
            self.stats.resumes += 1
        else:
            self.stats.retries += 1


# ---- Converse ------------------------------------------------------------------------------

_ConverseCall: TypeAlias = grpc.aio.StreamStreamCall[pb.ConverseRequest, pb.ConverseResponse]


class ConverseSession:
    """One ``Converse`` stream: ``send``/``flush``/``end`` text, iterate the audio chunks.

    The session opens on ``async with``, :meth:`open`, or the first send or iteration. A
    background task reads the responses (unbounded buffer: 32 kbps of Opus is small), so
    sending and reading never block each other; iterate from another task for real-time
    playback, or after :meth:`end` for a whole reply. Chunks carry their captions.

    Not resumed: the Converse wire has no request id or resume point, and the text already
    sent cannot be replayed without the server speaking it twice. ``UNAVAILABLE`` (or
    ``RESOURCE_EXHAUSTED`` when the policy allows) before the first chunk is retried only
    while no text has been sent (text counts as sent once its write started on a live call,
    whether or not the write then succeeded).
    """

    def __init__(
        self,
        pool: _ChannelPool,
        metadata: Metadata,
        start: pb.ConverseStart,
        retrier: _Retrier,
    ) -> None:
        self._pool = pool
        self._metadata = metadata
        self._start = start
        self._retrier = retrier
        self.stats = retrier.stats
        self._meter = _Meter(self.stats)
        self._lease: _Lease | None = None
        self._call: _ConverseCall | None = None
        self._reader: asyncio.Task[None] | None = None
        self._open_lock = asyncio.Lock()
        self._lock = asyncio.Lock()  # writes, and replacing the call
        self._replaced = asyncio.Event()  # set when the current call is replaced or failed
        self._queue: asyncio.Queue[pb.AudioChunk | RemoteError | None] = asyncio.Queue()
        self._write_error: RemoteError | None = None  # once set, writes raise it
        self._text_sent = False
        self._ended = False
        self._exhausted = False
        self._closed = False

    # -- lifecycle

    async def open(self) -> None:
        """Take a pool slot and start the call (idempotent)."""
        async with self._open_lock:
            if self._closed:
                raise RemoteError("CANCELLED", "the session is closed")
            if self._reader is not None:
                return
            self._lease = await self._retrier.acquire(self._pool)
            try:
                async with self._lock:
                    await self._start_call()
            except BaseException:
                self._release()
                raise
            self._reader = asyncio.create_task(self._read_all())

    async def close(self) -> None:
        """Cancel the call if it is still running and give the slot back (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._call is not None:
            self._call.cancel()
        self._release()
        closed = RemoteError("CANCELLED", "the session was closed")
        self._refuse_writes(closed)
        self._queue.put_nowait(closed)  # wakes a reader of the session; unseen after the end

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _release(self) -> None:
        if self._lease is not None:
            self._pool.release(self._lease)
            self._lease = None
            self._meter.finished()

    # -- sending

    async def send(self, text_delta: str) -> None:
        """More text. Raises :class:`RemoteError` once the session failed."""
        await self._write(pb.ConverseRequest(text_delta=text_delta), is_text=True)

    async def flush(self) -> None:
        """Speak what has arrived even if the sentence is not finished."""
        await self._write(pb.ConverseRequest(flush=pb.Flush()), is_text=False)

    async def end(self) -> None:
        """No more text; the audio ends once everything is spoken (idempotent)."""
        if not self._ended:
            await self._write(pb.ConverseRequest(end=pb.End()), is_text=False, last=True)

    async def _write(
        self, request: pb.ConverseRequest, *, is_text: bool, last: bool = False
    ) -> None:
        if self._ended:
            raise InvalidInputError("the conversation has ended; nothing more can be sent")
        await self.open()
        while True:
            async with self._lock:
                if self._write_error is not None:
                    raise self._write_error
                replaced = self._replaced
                assert self._call is not None
                if not self._call.done():
                    # Sent from the moment it may reach the server: a write that then fails
                    # may still have been read (and spoken), so it is never replayed.
                    if is_text and not self._text_sent:
                        self._text_sent = True
                        self._meter.sent()
                    if await self._try_write(request):
                        if last:  # under the same lock: a retried call replays the end
                            self._ended = True
                            await self._done_writing()
                        return
            await replaced.wait()  # the reader retries the call or records the failure

    async def _try_write(self, request: pb.ConverseRequest) -> bool:
        assert self._call is not None
        try:
            await self._call.write(request)
        except _WRITE_ERRORS:
            return False
        return True

    async def _done_writing(self) -> None:
        assert self._call is not None
        with contextlib.suppress(*_WRITE_ERRORS):  # the reader sees the call's status
            await self._call.done_writing()

    async def _start_call(self) -> None:
        """A new call with the start message (and End again if it was sent); under the lock."""
        assert self._lease is not None
        call = self._lease.slot.stub.Converse(
            timeout=self._retrier.remaining_s(), metadata=self._metadata
        )
        self._call = call
        self.stats.attempts += 1
        start = pb.ConverseStart()
        start.CopyFrom(self._start)
        start.client_ts_ms = int(_wall_ms())
        if await self._try_write(pb.ConverseRequest(start=start)) and self._ended:
            await self._try_write(pb.ConverseRequest(end=pb.End()))
            await self._done_writing()

    # -- reading

    async def _read_all(self) -> None:
        failures = 0
        try:
            while True:
                assert self._call is not None
                try:
                    async for response in self._call:
                        failures = 0
                        self._meter.chunk(response.audio)
                        self._queue.put_nowait(response.audio)
                except grpc.aio.AioRpcError as exc:
                    failures += 1
                    if await self._retry(exc, failures):
                        continue
                    return
                self._queue.put_nowait(None)
                self._refuse_writes(RemoteError("FAILED_PRECONDITION", "the conversation is over"))
                return
        except RemoteError as exc:  # the deadline passed between attempts
            self._fail(exc)
        except asyncio.CancelledError:
            if _cancelled_from_outside():
                raise
            self._fail(_call_cancelled())
        finally:
            self._release()

    async def _retry(self, error: grpc.aio.AioRpcError, failures: int) -> bool:
        """Start a new call if the failure allows it; else record it. True if retried."""
        code, details = error.code().name, error.details() or ""
        async with self._lock:  # a text write in progress marks the text sent first
            replayable = not self._text_sent and self.stats.chunks == 0
        if not replayable:
            self._fail(RemoteError(code, details))
            return False
        try:
            await self._retrier.pause(code, details, failures)
        except RemoteError as exc:
            self._fail(exc)
            return False
        async with self._lock:
            await self._start_call()
            self.stats.retries += 1
            self._replaced.set()
            self._replaced = asyncio.Event()
        return True

    def _fail(self, error: RemoteError) -> None:
        self._refuse_writes(error)
        self._queue.put_nowait(error)

    def _refuse_writes(self, error: RemoteError) -> None:
        if self._write_error is None:
            self._write_error = error
        self._replaced.set()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> pb.AudioChunk:
        if self._exhausted:
            raise StopAsyncIteration
        await self.open()
        item = await self._queue.get()
        if isinstance(item, pb.AudioChunk):
            return item
        self._exhausted = True
        if item is None:
            raise StopAsyncIteration
        raise item


# ---- the client ----------------------------------------------------------------------------


class SpeechClient:
    """Asyncio client of the Speech service with a channel pool; see the module docstring.

    Channels are created on first use inside the running event loop, so a client belongs to
    one loop. ``close()`` (or leaving ``async with``) cancels the streams still open.
    """

    def __init__(
        self,
        target: str,
        api_key: str,
        *,
        channels: int = 4,
        streams_per_channel: int = 8,
        secure: bool = False,
        root_certificates: bytes | None = None,
        retry: RetryPolicy = RetryPolicy(),
        default_timeout_s: float | None = 300,
        keepalive_time_s: float = DEFAULT_KEEPALIVE_TIME_S,
        keepalive_timeout_s: float = DEFAULT_KEEPALIVE_TIMEOUT_S,
        max_receive_message_bytes: int = DEFAULT_MAX_RECEIVE_MESSAGE_BYTES,
        channel_options: Sequence[ChannelOption] = (),
    ) -> None:
        if channels < 1 or streams_per_channel < 1:
            raise InvalidInputError(
                f"channels and streams_per_channel must be >= 1, got {channels} and "
                f"{streams_per_channel}"
            )
        if default_timeout_s is not None and default_timeout_s <= 0:
            raise InvalidInputError(f"default_timeout_s must be > 0, got {default_timeout_s}")
        self.target = target
        self.retry = retry
        self.default_timeout_s = default_timeout_s
        self._channels = channels
        self._streams_per_channel = streams_per_channel
        self._secure = secure
        self._root_certificates = root_certificates
        self._metadata: Metadata = (("authorization", f"Bearer {api_key}"),)
        self.channel_options: list[ChannelOption] = [
            ("grpc.use_local_subchannel_pool", 1),  # one connection per channel, not shared
            ("grpc.keepalive_time_ms", round(keepalive_time_s * 1000)),
            ("grpc.keepalive_timeout_ms", round(keepalive_timeout_s * 1000)),
            ("grpc.keepalive_permit_without_calls", 0),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.max_receive_message_length", max_receive_message_bytes),
            ("grpc.initial_reconnect_backoff_ms", max(1, round(retry.initial_backoff_s * 1000))),
            ("grpc.max_reconnect_backoff_ms", max(1, round(retry.max_backoff_s * 1000))),
            *channel_options,
        ]
        self._pool: _ChannelPool | None = None
        self._closed = False

    # -- pool

    def _new_channel(self) -> grpc.aio.Channel:
        if self._secure:
            credentials = grpc.ssl_channel_credentials(root_certificates=self._root_certificates)
            return grpc.aio.secure_channel(self.target, credentials, options=self.channel_options)
        return grpc.aio.insecure_channel(self.target, options=self.channel_options)

    def _require_pool(self) -> _ChannelPool:
        if self._closed:
            raise RemoteError("CANCELLED", "the SpeechClient is closed")
        if self._pool is None:
            channels = [self._new_channel() for _ in range(self._channels)]
            self._pool = _ChannelPool(channels, self._streams_per_channel)
        return self._pool

    def channel_loads(self) -> tuple[int, ...]:
        """Open streams per channel, in channel order."""
        if self._pool is None:
            return (0,) * self._channels
        return tuple(slot.active for slot in self._pool.slots)

    @property
    def waiting(self) -> int:
        """Streams waiting for a free slot."""
        return 0 if self._pool is None else self._pool.waiting

    async def __aenter__(self) -> Self:
        self._require_pool()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every channel (cancelling open streams) and fail the waiters (idempotent)."""
        self._closed = True
        if self._pool is not None and not self._pool.closed:
            await self._pool.close()

    def _retrier(self, timeout_s: float | None) -> _Retrier:
        return _Retrier(self.retry, timeout_s or self.default_timeout_s, StreamStats())

    # -- calls

    def synthesize(
        self,
        text: str,
        *,
        voice: str = "",
        sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ,
        speed: float = 1.0,
        timeout_s: float | None = None,
    ) -> SynthesisStream:
        """The raw chunks of one text, seq strictly increasing; retried and resumed.

        ``timeout_s`` (default: the client's ``default_timeout_s``) bounds the whole call,
        retries and resumes included.
        """
        request = pb.SynthesizeRequest(
            text=text, voice=voice, sample_rate_hz=sample_rate_hz, speed=speed
        )
        synthesis = _Synthesis(
            self._require_pool(), self._metadata, request, self._retrier(timeout_s)
        )
        return SynthesisStream(synthesis.chunks(), synthesis.stats)

    async def synthesize_pcm(
        self,
        text: str,
        *,
        voice: str = "",
        sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ,
        speed: float = 1.0,
        timeout_s: float | None = None,
    ) -> SynthesisResult:
        """The text's audio decoded to mono float32 PCM (codec delay trimmed at the start)."""
        sample_rate_hz = sample_rate_hz or DEFAULT_SAMPLE_RATE_HZ
        assembler = _PcmAssembler(sample_rate_hz)  # checks the rate before any call
        stream = self.synthesize(
            text, voice=voice, sample_rate_hz=sample_rate_hz, speed=speed, timeout_s=timeout_s
        )
        async with stream:
            async for chunk in stream:
                assembler.add(chunk)
        return assembler.result(stream.stats)

    async def synthesize_to_file(
        self,
        text: str,
        path: str | os.PathLike[str],
        *,
        voice: str = "",
        sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ,
        speed: float = 1.0,
        timeout_s: float | None = None,
        bitrate_bps: int | None = None,
    ) -> SynthesisResult:
        """Synthesize and write ``path`` (format from its extension) atomically.

        The audio is written to a hidden temporary file beside ``path`` and renamed over it
        once complete: ``path`` is either untouched or the whole new file, never partial.
        """
        sample_rate_hz = sample_rate_hz or DEFAULT_SAMPLE_RATE_HZ
        target = Path(path)
        fmt = format_from_path(target)
        validate_sample_rate(fmt, sample_rate_hz)  # fail before speaking, not after
        result = await self.synthesize_pcm(
            text, voice=voice, sample_rate_hz=sample_rate_hz, speed=speed, timeout_s=timeout_s
        )
        await asyncio.to_thread(
            _write_atomically, target, fmt, sample_rate_hz, result.pcm, bitrate_bps
        )
        return result

    def converse(
        self,
        *,
        voice: str = "",
        sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ,
        speed: float = 1.0,
        timeout_s: float | None = None,
    ) -> ConverseSession:
        """A conversation: text in pieces, audio back as sentences complete."""
        start = pb.ConverseStart(voice=voice, sample_rate_hz=sample_rate_hz, speed=speed)
        return ConverseSession(
            self._require_pool(), self._metadata, start, self._retrier(timeout_s)
        )

    async def list_voices(self, *, timeout_s: float | None = None) -> list[VoiceInfo]:
        """The voices of the workers' engine; ``UNAVAILABLE`` is retried (idempotent)."""
        pool = self._require_pool()
        retrier = self._retrier(timeout_s)
        failures = 0
        while True:
            stub = pool.least_loaded().stub
            try:
                response = await stub.ListVoices(
                    pb.ListVoicesRequest(),
                    timeout=retrier.remaining_s(),
                    metadata=self._metadata,
                )
            except grpc.aio.AioRpcError as exc:
                failures += 1
                await retrier.pause(exc.code().name, exc.details() or "", failures)
                continue
            return [
                VoiceInfo(v.id, v.name, tuple(v.languages), response.engine)
                for v in response.voices
            ]


# ---- files ---------------------------------------------------------------------------------


def _write_atomically(
    path: Path, fmt: AudioFormat, sample_rate_hz: int, pcm: PcmF32, bitrate_bps: int | None
) -> None:
    """Encode to a temporary file beside ``path``, fsync, rename; remove it on any failure."""
    with (
        atomic_output(path) as part,
        open_writer(part, fmt, sample_rate_hz, bitrate_bps=bitrate_bps) as writer,
    ):
        writer.write(pcm)


# ---- sync facade ---------------------------------------------------------------------------


def say_to_file(
    target: str,
    api_key: str,
    text: str,
    path: str | os.PathLike[str],
    *,
    voice: str = "",
    sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ,
    speed: float = 1.0,
    timeout_s: float | None = None,
    bitrate_bps: int | None = None,
    secure: bool = False,
    root_certificates: bytes | None = None,
    retry: RetryPolicy = RetryPolicy(),
) -> SynthesisResult:
    """Speak ``text`` on the server at ``target`` into ``path``; for scripts and the CLI.

    Runs its own event loop (``asyncio.run``), so it cannot be called from async code.
    """

    async def speak() -> SynthesisResult:
        async with SpeechClient(
            target,
            api_key,
            channels=1,
            streams_per_channel=1,
            secure=secure,
            root_certificates=root_certificates,
            retry=retry,
        ) as client:
            return await client.synthesize_to_file(
                text,
                path,
                voice=voice,
                sample_rate_hz=sample_rate_hz,
                speed=speed,
                timeout_s=timeout_s,
                bitrate_bps=bitrate_bps,
            )

    return asyncio.run(speak())
