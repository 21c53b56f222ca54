"""Latency and progress figures of a stream (:class:`StreamStats`) and the :class:`Meter` that
fills them from send and arrival events."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from voicelane.client.clock import (
    ClockEstimate,
    ClockSync,
    MappedTime,
    StreamTimeline,
    echo_sample,
    stream_epoch_ms,
    wall_ms,
)
from voicelane.common.audio.opus import FRAME_DURATION_MS
from voicelane.common.wire import speech_pb2 as pb


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
      it) among them, ``backoff_s`` slept between them; ``elapsed_s`` first send → end;
    * ``clock`` — the client's clock estimate when the first chunk arrived (after
      ``SpeechClient.sync_clock``; else the first chunk's echo alone), ``echo_clock`` that
      echo alone, ``epoch_server_ms`` pts 0 on the server's clock; :meth:`local_time_ms`
      maps a ``pts_ms`` to the client's wall clock with its bound.
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
    clock: ClockEstimate | None = None
    echo_clock: ClockEstimate | None = None
    epoch_server_ms: float | None = None

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

    @property
    def timeline(self) -> StreamTimeline | None:
        """The stream's pts on the client's wall clock; None before the first chunk or
        without any clock estimate."""
        if self.clock is None or self.epoch_server_ms is None:
            return None
        return StreamTimeline(self.epoch_server_ms, self.clock)

    def local_time_ms(self, pts_ms: float, buffer_ms: float = 0.0) -> MappedTime | None:
        """When ``pts_ms`` plays on the client's wall clock for a player ``buffer_ms`` behind
        the server's production, ``± error_bound_ms`` (see :class:`StreamTimeline`)."""
        timeline = self.timeline
        return None if timeline is None else timeline.local_ms(pts_ms, buffer_ms)


class Meter:
    """Fills a :class:`StreamStats` from send and arrival events."""

    def __init__(self, stats: StreamStats, clock: ClockSync | None = None) -> None:
        self.stats = stats
        self._clock = clock  # the client's: the first chunk's echo joins it if it is better
        self._sent_at: float | None = None

    def sent(self) -> None:
        """The (first) request went out; later calls keep the first time."""
        if self._sent_at is None:
            self._sent_at = time.monotonic()

    def chunk(self, chunk: pb.AudioChunk) -> None:
        stats = self.stats
        now_wall_ms = wall_ms()
        if stats.chunks == 0:
            stats.request_id = chunk.request_id
            if chunk.client_ts_ms:
                stats.echo_round_trip_ms = now_wall_ms - chunk.client_ts_ms
            self._first_clock(chunk, now_wall_ms)
        if stats.epoch_server_ms is None and chunk.server_ts_ms:
            stats.epoch_server_ms = stream_epoch_ms(chunk)
        stats.chunks += 1
        stats.packets += len(chunk.opus_packets)
        if chunk.server_ts_ms:
            stats.server_delays_ms.append(now_wall_ms - chunk.server_ts_ms)
        if chunk.opus_packets and stats.time_to_first_audio_s is None and self._sent_at:
            stats.time_to_first_audio_s = time.monotonic() - self._sent_at

    def _first_clock(self, chunk: pb.AudioChunk, now_wall_ms: float) -> None:
        stats = self.stats
        sample = echo_sample(chunk, now_wall_ms)
        if sample is not None:
            stats.echo_clock = sample.as_estimate()
            if self._clock is not None:
                self._clock.add(sample, only_if_better=True)
        estimate = self._clock.estimate if self._clock is not None else None
        stats.clock = estimate or stats.echo_clock

    def finished(self) -> None:
        if self._sent_at is not None:
            self.stats.elapsed_s = time.monotonic() - self._sent_at
