"""Ogg/Opus on several cores: one long file encoded in pieces by parallel encoders, joined.

One Opus encoder is sequential: each frame depends on the encoder's state after the last, and
libopus is most of the CPU of a long render (``docs/benchmarks.md``, "Embedded render"). This
writer cuts the audio into pieces of about :data:`PIECE_S`, encodes each with its own
encoder on a thread pool (libopus through ctypes, as the live lane's
:class:`~voicelane.common.audio.opus.OpusStreamEncoder`: the GIL is released inside each
frame's encode, where PyAV's encode call scaled to only ~1.16x on two threads) and muxes the
packets with PyAV, in order, into one Ogg stream that decodes to exactly the samples written,
as :func:`voicelane.common.audio.files.open_writer`'s one-encoder Ogg does (whose header,
pre-skip included, this file carries: the same libopus look-ahead).

How a piece joins the one before it:

* **Same timeline.** Every encoder has the same settings, so the same delay (the Ogg
  pre-skip). A piece that starts at frame ``a`` is fed from frame ``a - WARM_FRAMES``; the
  first WARM_FRAMES packets are dropped and the rest are frames ``a`` up to the next piece's
  start, each stamped ``n x frame - delay`` as a single encoder's would be. It is also fed
  :data:`TAIL_FRAMES` past its end, so its last kept packets are encoded from the real
  signal, not from padding; the last piece is fed the look-ahead's worth of silence, and its
  last packet ends where the samples written end.
* **Warm state.** The :data:`WARM_FRAMES` frames before ``a`` bring the new encoder's state
  (band energies, prediction, rate control) close to the previous encoder's there. The decoder
  carries the previous piece's state across the join; what differs decays within a few frames.
  Measured (the test below): the frames at a join decode 1.0-1.33x as far from the input as
  the same encoder's without joins do there with the warm-up, up to 3.1-3.7x without it.
* **Quiet joins.** A piece ends at the quietest frame of its last :data:`SEEK_FRAMES` frames
  (between words or sentences, in speech), where what is left of a difference is least audible.

``tests/unit/common/audio/test_ogg_parallel.py`` checks that the file decodes to exactly the
samples written, that the joins stay within 1.6x of the joinless error and that the file is
no worse and no bigger than the one-encoder writer's (16-19% less error, size -6% to +0.3%).
The speed is ``bench/render.py``'s.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from fractions import Fraction

import av
import numpy as np
from av.audio.stream import AudioStream
from av.container import OutputContainer

from voicelane.common.audio.opus import (
    DEFAULT_COMPLEXITY,
    OpusStreamEncoder,
    codec_delay_samples,
    samples_per_frame,
)
from voicelane.common.audio.pcm import PcmF32
from voicelane.common.audio.writer import AudioFileWriter, AudioFormat

PIECE_S = 10.0
"""Audio per piece (the join is moved up to :data:`SEEK_FRAMES` earlier, to a quiet frame)."""
WARM_FRAMES = 10
"""Frames of the audio before a piece that its encoder is fed first, then dropped (200 ms at
20 ms frames)."""
TAIL_FRAMES = 2
"""Frames past a piece's end that its encoder is fed so that its last kept packets see real
signal in their look-ahead (more than the encoder's delay, 6.5 ms), not the flush's padding;
no difference was measurable in the test's signals, and it costs two frames a piece."""
SEEK_FRAMES = 50
"""How far back from a piece's nominal end the join may move, to the quietest frame."""


def encode_piece(
    pcm: PcmF32,
    *,
    sample_rate_hz: int,
    bitrate_bps: int,
    skip_frames: int,
    keep_frames: int | None,
) -> list[bytes]:
    """Encode ``pcm`` with a fresh encoder (libopus through ctypes, which releases the GIL
    for each frame); drop the first ``skip_frames`` packets (the warm-up), keep the next
    ``keep_frames`` (None: all the rest, the last partial frame padded)."""
    encoder = OpusStreamEncoder(sample_rate_hz, bitrate_bps, "audio", complexity=DEFAULT_COMPLEXITY)
    packets = encoder.encode(pcm)
    if keep_frames is None:
        return packets[skip_frames:] + encoder.flush()
    return packets[skip_frames : skip_frames + keep_frames]


class ParallelOggWriter(AudioFileWriter):
    """Ogg/Opus written by ``threads`` encoders at once (see the module's docstring); the same
    file contract as the one-encoder writer. Packets are muxed on the caller's thread, in
    order, as pieces finish; at most ``threads + 1`` pieces are in flight."""

    def __init__(
        self,
        container: OutputContainer,
        stream: AudioStream,
        sample_rate_hz: int,
        bitrate_bps: int,
        threads: int,
    ) -> None:
        """``container``: an Ogg container opened with its one libopus ``stream`` and its
        header written (what :func:`~voicelane.common.audio.files.open_writer` hands over);
        the writer muxes into it and closes it."""
        super().__init__(AudioFormat.OGG, sample_rate_hz)
        self._container = container
        self._stream = stream
        self._bitrate_bps = bitrate_bps
        self._time_base = Fraction(1, sample_rate_hz)
        self._frame = samples_per_frame(sample_rate_hz)
        self._delay = codec_delay_samples(sample_rate_hz)
        """The encoder's look-ahead: packet n starts at n x frame - delay (the pre-skip)."""
        self._muxed_frames = 0
        self._total: int | None = None
        """Samples in the file, once closing (the last packet is cut to end there)."""
        self._threads = max(1, threads)
        self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="ogg-encode")
        self._in_flight: deque[Future[list[bytes]]] = deque()
        self._buffer: list[PcmF32] = []
        self._buffer_start = 0
        """The sample (of the whole file) that the buffer's first sample is."""
        self._buffered = 0
        self._piece_start = 0
        """The first sample of the piece not yet handed to an encoder."""
        self._piece = int(PIECE_S * sample_rate_hz) // self._frame * self._frame
        self.joins: list[int] = []
        """Where one piece ends and the next begins (samples): for tests and diagnostics."""

    # ---- writing --------------------------------------------------------------------------

    def _write(self, pcm: PcmF32) -> None:
        self._buffer.append(pcm.copy())  # the caller may reuse its buffer
        self._buffered += len(pcm)
        tail = TAIL_FRAMES * self._frame
        while self._buffer_start + self._buffered >= self._piece_start + self._piece + tail:
            self._cut(self._piece_start + self._piece)

    def _audio(self) -> PcmF32:
        if len(self._buffer) > 1:
            self._buffer = [np.concatenate(self._buffer)]
        return self._buffer[0]

    def _quiet_end(self, audio: PcmF32, nominal_end: int) -> int:
        """The frame boundary, at most SEEK_FRAMES before ``nominal_end``, after the quietest
        frame (a sample of the whole file)."""
        frame = self._frame
        first = max(self._piece_start + frame, nominal_end - SEEK_FRAMES * frame)
        if first >= nominal_end:
            return nominal_end
        lo = first - frame - self._buffer_start
        hi = nominal_end - self._buffer_start
        energy = (audio[lo:hi].reshape(-1, frame).astype(np.float64) ** 2).sum(axis=1)
        # The last frame of the quietest ones, so the pieces stay long.
        quietest = len(energy) - 1 - int(np.argmin(energy[::-1]))
        return first + quietest * frame

    def _cut(self, nominal_end: int | None) -> None:
        """Hand the piece from ``_piece_start`` to an encoder: to a quiet end near
        ``nominal_end``, or (None) to the end of what was written."""
        audio = self._audio()
        frame = self._frame
        warm_from = max(0, self._piece_start - WARM_FRAMES * frame)
        end = None if nominal_end is None else self._quiet_end(audio, nominal_end)
        if end is None:  # the last piece: its encoder is fed the look-ahead's worth of silence
            piece = np.concatenate(
                [audio[warm_from - self._buffer_start :], np.zeros(self._delay, np.float32)]
            )
        else:
            fed_to = end + TAIL_FRAMES * frame - self._buffer_start
            piece = audio[warm_from - self._buffer_start : fed_to].copy()
        self._in_flight.append(
            self._pool.submit(
                encode_piece,
                piece,
                sample_rate_hz=self.sample_rate_hz,
                bitrate_bps=self._bitrate_bps,
                skip_frames=(self._piece_start - warm_from) // frame,
                keep_frames=None if end is None else (end - self._piece_start) // frame,
            )
        )
        if end is not None:
            self.joins.append(end)
            self._piece_start = end
            keep = max(0, end - WARM_FRAMES * frame) - self._buffer_start
            self._buffer = [audio[keep:]]
            self._buffer_start += keep
            self._buffered = len(audio) - keep
        self._mux_ready(wait=len(self._in_flight) > self._threads)

    def _mux_ready(self, *, wait: bool) -> None:
        """Mux the finished pieces at the head of the queue (waiting for the oldest first when
        ``wait``), in order."""
        while self._in_flight and (wait or self._in_flight[0].done()):
            wait = False
            self._mux(self._in_flight.popleft().result())

    def _mux(self, packets: Sequence[bytes]) -> None:
        """Packets of consecutive frames, on the file's timeline: frame n starts at
        ``n x frame - delay``; the last one ends where the samples written end."""
        frame = self._frame
        for data in packets:
            pts = self._muxed_frames * frame - self._delay
            if self._total is not None and pts >= self._total:
                return  # the padding's frame past the end
            packet = av.Packet(data)
            packet.pts = packet.dts = pts
            packet.duration = frame if self._total is None else min(frame, self._total - pts)
            packet.time_base = self._time_base
            packet.stream = self._stream
            self._container.mux(packet)
            self._muxed_frames += 1

    def _close(self) -> None:
        try:
            self._total = self.samples_written
            if self._total:
                self._cut(None)
            while self._in_flight:
                self._mux(self._in_flight.popleft().result())
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._container.close()
