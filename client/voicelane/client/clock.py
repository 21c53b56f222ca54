"""Client/server clock alignment, NTP-style (:class:`ClockSync`), and the mapping of a stream's
``pts_ms`` to the client's wall clock (:class:`StreamTimeline`); ``docs/client.md`` has the
long form.

A sample is three wall-clock readings: the client's just before the request left (``t0``),
the server's when it answered (``ts``), the client's just after the answer arrived (``t3``).
The server answered somewhere inside the round trip, so on the server's clock
``t0 + θ <= ts <= t3 + θ`` for the offset ``θ`` (server minus client): ``θ`` lies in
``[ts - t3, ts - t0]``, whose middle ``ts - (t0 + t3) / 2`` is the estimate and whose half
width ``(t3 - t0) / 2`` the error bound — an interval that holds whatever the asymmetry of the
two directions, not a statistical spread. Of the last ``window`` samples the one with the
smallest bound (the shortest round trip) is kept.

Samples come from the ``Clock`` RPC (:func:`measure_clock`, :func:`measure_clock_sync`; the
server answers in µs) or from a stream's first ``AudioChunk`` (:meth:`ClockSync.add_echo`: the
echoed ``client_ts_ms`` → the worker's ``server_ts_ms`` → arrival), whose round trip is the
whole time to first audio: such a sample is only taken when it beats the current best.
Time stamps the wire truncates to whole milliseconds widen the bound by their resolution.

Caveats (the bound assumes them): neither clock is stepped during a round trip; the clocks
drift apart afterwards (``drift_ppm`` makes the bound grow with the estimate's age; re-sync
for long sessions); the ``Clock`` RPC reads the front's clock while ``server_ts_ms`` is the
worker's, so mapping pts through a ``Clock`` estimate also assumes the server hosts agree
(a LAN with NTP/PTP: well under a millisecond, but not part of the bound).
"""

from __future__ import annotations

import collections
import dataclasses
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeAlias

import grpc
import grpc.aio

from voicelane.common.errors import InvalidInputError
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from voicelane.common.wire.speech_pb2_grpc import SpeechAsyncStub, SpeechStub

DEFAULT_WINDOW = 8
"""Samples an estimate is chosen from (the newest ones)."""
DEFAULT_SAMPLES = 8
"""Clock calls one measurement makes, back to back."""
DEFAULT_DRIFT_PPM = 0.0
"""How fast the bound of an estimate grows with its age; 0: it does not (see :class:`ClockSync`)."""
CLOCK_RESOLUTION_MS = 0.001
"""``ClockResponse.server_ts_us``: whole microseconds."""
WIRE_MS_RESOLUTION_MS = 1.0
"""``server_ts_ms`` and ``client_ts_ms`` on the wire: whole (truncated) milliseconds."""

Source: TypeAlias = Literal["clock", "echo"]
Metadata: TypeAlias = tuple[tuple[str, str], ...]


def wall_ms() -> float:
    """The client's wall clock in milliseconds (ns resolution)."""
    return time.time_ns() / 1e6


@dataclass(frozen=True)
class ClockSample:
    """One exchange: ``sent_ms`` (client, at or before sending), ``server_ms`` (server, when it
    answered; the true time is in ``[server_ms, server_ms + resolution_ms)``), ``received_ms``
    (client, at or after the answer arrived)."""

    sent_ms: float
    server_ms: float
    received_ms: float
    resolution_ms: float = 0.0
    source: Source = "clock"

    @property
    def round_trip_ms(self) -> float:
        return self.received_ms - self.sent_ms

    @property
    def offset_ms(self) -> float:
        """Server minus client: the middle of the interval the true offset lies in."""
        return self.server_ms + self.resolution_ms / 2 - (self.sent_ms + self.received_ms) / 2

    @property
    def error_bound_ms(self) -> float:
        """Half the interval: ``|true offset - offset_ms| <= error_bound_ms``."""
        return (self.round_trip_ms + self.resolution_ms) / 2

    def as_estimate(self, samples: int = 1) -> ClockEstimate:
        """This sample alone as an estimate."""
        return ClockEstimate(
            offset_ms=self.offset_ms,
            error_bound_ms=self.error_bound_ms,
            round_trip_ms=self.round_trip_ms,
            samples=samples,
            measured_at_ms=self.received_ms,
            source=self.source,
        )


@dataclass(frozen=True)
class ClockEstimate:
    """The client/server clock offset (``offset_ms``: server minus client) with its bound.

    ``error_bound_ms`` includes the drift allowance up to when the estimate was made;
    ``round_trip_ms`` is the chosen sample's, ``samples`` how many it was chosen from,
    ``measured_at_ms`` (client wall clock) when its answer arrived, ``source`` its kind.
    """

    offset_ms: float
    error_bound_ms: float
    round_trip_ms: float
    samples: int
    measured_at_ms: float = 0.0
    source: Source = "clock"

    def to_local_ms(self, server_ms: float) -> float:
        """A server wall-clock time on the client's wall clock (``± error_bound_ms``)."""
        return server_ms - self.offset_ms

    def to_server_ms(self, local_ms: float) -> float:
        """A client wall-clock time on the server's wall clock (``± error_bound_ms``)."""
        return local_ms + self.offset_ms


class ClockSync:
    """The offset estimate from the last ``window`` samples: the one with the smallest bound.

    ``drift_ppm`` (default 0) is how fast the two clocks may drift apart: a sample's bound
    then grows by ``drift_ppm × 1e-6 × its age``, so an old short-round-trip sample gives way to
    a fresher one once that is tighter. Two free-running crystals drift up to ~100 ppm apart
    (0.1 ms per second); NTP-disciplined hosts far less, but their offset wanders too: re-sync
    (or pass a ``drift_ppm``) for sessions that last minutes.
    """

    def __init__(
        self, window: int = DEFAULT_WINDOW, *, drift_ppm: float = DEFAULT_DRIFT_PPM
    ) -> None:
        if window < 1:
            raise InvalidInputError(f"window must be >= 1, got {window}")
        if drift_ppm < 0:
            raise InvalidInputError(f"drift_ppm must be >= 0, got {drift_ppm}")
        self.drift_ppm = drift_ppm
        self._samples: collections.deque[ClockSample] = collections.deque(maxlen=window)

    @property
    def samples(self) -> tuple[ClockSample, ...]:
        return tuple(self._samples)

    def add(self, sample: ClockSample, *, only_if_better: bool = False) -> bool:
        """Keep ``sample`` (False, and nothing kept, for a negative round trip: the client's
        clock was stepped back; or, with ``only_if_better``, when it would not be chosen)."""
        if sample.round_trip_ms < 0:
            return False
        if only_if_better:
            best = self.estimate_at(sample.received_ms)
            if best is not None and best.error_bound_ms <= sample.error_bound_ms:
                return False
        self._samples.append(sample)
        return True

    def add_sample(
        self,
        sent_ms: float,
        server_ms: float,
        received_ms: float,
        *,
        resolution_ms: float = 0.0,
        source: Source = "clock",
        only_if_better: bool = False,
    ) -> bool:
        """:meth:`add` of ``ClockSample(sent_ms, server_ms, received_ms, ...)``."""
        sample = ClockSample(sent_ms, server_ms, received_ms, resolution_ms, source)
        return self.add(sample, only_if_better=only_if_better)

    def add_response(self, sent_ms: float, response: pb.ClockResponse, received_ms: float) -> bool:
        """A ``Clock`` answer; ``sent_ms``/``received_ms`` read around the call."""
        server_ms = response.server_ts_us / 1000
        return self.add_sample(sent_ms, server_ms, received_ms, resolution_ms=CLOCK_RESOLUTION_MS)

    def add_echo(self, chunk: pb.AudioChunk, received_ms: float) -> bool:
        """An ``AudioChunk``'s echo (``client_ts_ms`` → ``server_ts_ms`` → arrival), taken only
        when it beats the current best; False when the chunk lacks either time stamp."""
        sample = echo_sample(chunk, received_ms)
        return sample is not None and self.add(sample, only_if_better=True)

    def bound_at(self, sample: ClockSample, now_ms: float) -> float:
        return sample.error_bound_ms + self.drift_ppm * 1e-6 * max(0.0, now_ms - sample.received_ms)

    def estimate_at(self, now_ms: float) -> ClockEstimate | None:
        """The estimate as of ``now_ms`` (client wall clock); None without samples."""
        if not self._samples:
            return None
        # min() keeps the first of equals: iterate newest first, so a tie goes to the newest.
        best = min(reversed(self._samples), key=lambda s: self.bound_at(s, now_ms))
        estimate = best.as_estimate(len(self._samples))
        return dataclasses.replace(estimate, error_bound_ms=self.bound_at(best, now_ms))

    @property
    def estimate(self) -> ClockEstimate | None:
        """The estimate now (with ``drift_ppm`` 0: the shortest-round-trip sample's)."""
        if self.drift_ppm == 0 and self._samples:
            return self.estimate_at(self._samples[-1].received_ms)
        return self.estimate_at(wall_ms())

    def _require(self) -> ClockEstimate:
        estimate = self.estimate
        if estimate is None:
            raise InvalidInputError("no clock sample yet: measure the clock first")
        return estimate

    def to_local_ms(self, server_ms: float) -> float:
        """A server wall-clock time on the client's clock (``± estimate.error_bound_ms``)."""
        return self._require().to_local_ms(server_ms)

    def to_server_ms(self, local_ms: float) -> float:
        """A client wall-clock time on the server's clock (``± estimate.error_bound_ms``)."""
        return self._require().to_server_ms(local_ms)


def echo_sample(chunk: pb.AudioChunk, received_ms: float) -> ClockSample | None:
    """The sample an ``AudioChunk`` carries, None without both time stamps. ``client_ts_ms``
    is truncated, so it is at or before the send: a valid (slightly wider) start."""
    if not chunk.client_ts_ms or not chunk.server_ts_ms:
        return None
    return ClockSample(
        sent_ms=float(chunk.client_ts_ms),
        server_ms=float(chunk.server_ts_ms),
        received_ms=received_ms,
        resolution_ms=WIRE_MS_RESOLUTION_MS,
        source="echo",
    )


# ---- pts -> local wall clock -------------------------------------------------------------


@dataclass(frozen=True)
class MappedTime:
    """A time on the client's wall clock (ms) and how far off it may be."""

    local_ms: float
    error_bound_ms: float


@dataclass(frozen=True)
class StreamTimeline:
    """Where a stream's ``pts_ms`` fall on the client's wall clock.

    ``epoch_server_ms`` is the server wall-clock time of pts 0: the first chunk's
    ``server_ts_ms - pts_ms``. That assumes ``server_ts_ms`` is stamped when the chunk is
    produced (the worker stamps it as it hands the encoded chunk on), so a player that starts
    ``buffer_ms`` after production keeps that lag for the whole stream. A chunk then plays at
    ``epoch_server_ms - offset_ms + pts_ms + buffer_ms`` local time, within the clock's bound
    plus half a millisecond (``server_ts_ms`` is truncated to whole ms).
    """

    epoch_server_ms: float
    clock: ClockEstimate
    epoch_error_ms: float = WIRE_MS_RESOLUTION_MS / 2

    @classmethod
    def from_first_chunk(cls, chunk: pb.AudioChunk, clock: ClockEstimate) -> StreamTimeline:
        if not chunk.server_ts_ms:
            raise InvalidInputError("the chunk carries no server_ts_ms")
        return cls(stream_epoch_ms(chunk), clock)

    @property
    def epoch_local_ms(self) -> float:
        """pts 0 on the client's wall clock."""
        return self.clock.to_local_ms(self.epoch_server_ms)

    @property
    def error_bound_ms(self) -> float:
        return self.clock.error_bound_ms + self.epoch_error_ms

    def local_ms(self, pts_ms: float, buffer_ms: float = 0.0) -> MappedTime:
        """Local wall-clock play time of ``pts_ms`` for a player ``buffer_ms`` behind."""
        return MappedTime(self.epoch_local_ms + pts_ms + buffer_ms, self.error_bound_ms)


def stream_epoch_ms(chunk: pb.AudioChunk) -> float:
    """pts 0 on the server's clock, from one chunk: the middle of ``server_ts_ms``'s
    millisecond minus ``pts_ms``."""
    return chunk.server_ts_ms + WIRE_MS_RESOLUTION_MS / 2 - chunk.pts_ms


# ---- measuring -------------------------------------------------------------------------------


async def measure_clock(
    stub_or_channel: SpeechAsyncStub | grpc.aio.Channel,
    samples: int = DEFAULT_SAMPLES,
    *,
    clock: ClockSync | None = None,
    metadata: Metadata = (),
    timeout_s: float | None = 5.0,
) -> ClockEstimate:
    """``samples`` ``Clock`` calls back to back (asyncio); the estimate of ``clock`` (a new
    :class:`ClockSync` holding ``samples`` when None) once they are added. gRPC errors
    propagate (``grpc.aio.AioRpcError``)."""
    _check_samples(samples)
    stub = _async_stub(stub_or_channel)
    clock = clock if clock is not None else ClockSync(samples)
    for _ in range(samples):
        sent_ms = wall_ms()
        response = await stub.Clock(
            pb.ClockRequest(client_ts_ms=int(sent_ms)), timeout=timeout_s, metadata=metadata
        )
        clock.add_response(sent_ms, response, wall_ms())
    return clock._require()


def measure_clock_sync(
    stub_or_channel: SpeechStub | grpc.Channel,
    samples: int = DEFAULT_SAMPLES,
    *,
    clock: ClockSync | None = None,
    metadata: Metadata = (),
    timeout_s: float | None = 5.0,
) -> ClockEstimate:
    """:func:`measure_clock` over a blocking channel (no event loop); ``grpc.RpcError``
    propagates."""
    _check_samples(samples)
    if isinstance(stub_or_channel, grpc.Channel):
        stub = pb_grpc.SpeechStub(stub_or_channel)
    else:
        stub = stub_or_channel
    clock = clock if clock is not None else ClockSync(samples)
    for _ in range(samples):
        sent_ms = wall_ms()
        response = stub.Clock(
            pb.ClockRequest(client_ts_ms=int(sent_ms)), timeout=timeout_s, metadata=metadata
        )
        clock.add_response(sent_ms, response, wall_ms())
    return clock._require()


def _check_samples(samples: int) -> None:
    if samples < 1:
        raise InvalidInputError(f"samples must be >= 1, got {samples}")


def _async_stub(value: SpeechAsyncStub | grpc.aio.Channel) -> SpeechAsyncStub:
    if isinstance(value, grpc.aio.Channel):
        return pb_grpc.SpeechStub(value)
    return value
