"""Tempo change without a pitch change (time-stretching), in pieces: libavfilter's ``atempo``.

A stream asked at a speed its engine cannot render (OpenAI's 0.25 to 4) is rendered at the
nearest speed the engine can and the rest is a tempo factor applied to its PCM here:
:class:`TempoStretcher` takes mono float32 PCM in pieces of any length and gives the stretched
audio as it is ready (``tempo`` 2: half as long, ``tempo`` 0.5: twice as long).

* **The DSP**: FFmpeg's ``atempo`` (WSOLA: overlap-added windows of ~43 ms, each placed where
  it best matches the last, so pitch and timbre stay) through PyAV's filter graphs, kept for the
  whole stream: its state carries across pieces, so pieces stretched one by one give exactly
  the samples the whole signal gives (no seam where a piece ends).
* **Range**: one ``atempo`` takes 0.5 to 100 (:data:`ATEMPO_MIN`, :data:`ATEMPO_MAX`, the
  bundled FFmpeg 8's); below 0.5 the factor is a chain (0.25 = 0.5 x 0.5,
  :func:`atempo_factors`), one graph per link.
* **Timing**: ``atempo`` drops half a window of its input at the start, which would put every
  sound ~11 ms (tempo 2) to ~100 ms (tempo 0.25) early; each link is primed with that much
  silence, so a sound at input time *t* is heard at *t / tempo* (within WSOLA's own jitter of
  about half a window). Its output length also misses *n / tempo* by up to ~2 % (measured:
  -0.3 % at 0.5, +1.2 % at 4 over 3 s); the stretcher delivers exactly ``round(n / tempo)``
  samples in all: what runs ahead of ``n / tempo`` is held back, the end is cut or padded with
  silence at :meth:`TempoStretcher.flush`. So the times of a stream (pts, word timings) are the
  unstretched ones divided by the tempo.
* **Latency**: a window and a half of input (~65 ms at most rates; more per link of a chain)
  before the first output.

Tempo 1 costs nothing: :class:`TempoStretcher` hands the pieces back as they are, with no graph.
Cost and intelligibility against an engine's own rate: ``bench/tempo.py`` (docs/benchmarks.md).
"""

from __future__ import annotations

import math
from fractions import Fraction

import av
import av.error
import numpy as np
from av.audio.frame import AudioFrame

from voicelane.common.audio.pcm import PcmF32, as_pcm_f32

ATEMPO_MIN = 0.5
ATEMPO_MAX = 100.0
"""The range of one ``atempo`` instance (FFmpeg >= 4.2)."""

_EMPTY = np.zeros(0, dtype=np.float32)


def atempo_factors(tempo: float) -> tuple[float, ...]:
    """The ``atempo`` links whose product is ``tempo``: one link from 0.5 to 100, else
    0.5 as often as needed and the rest (0.25 → (0.5, 0.5), 0.3 → (0.5, 0.6)); () for 1."""
    if not (math.isfinite(tempo) and tempo > 0):
        raise ValueError(f"tempo must be a positive number, got {tempo!r}")
    if tempo > ATEMPO_MAX:
        raise ValueError(f"tempo {tempo:g} is above {ATEMPO_MAX:g}")
    if tempo == 1.0:
        return ()
    factors: list[float] = []
    rest = tempo
    while rest < ATEMPO_MIN:
        factors.append(ATEMPO_MIN)
        rest /= ATEMPO_MIN
    factors.append(rest)
    return tuple(factors)


def atempo_window(sample_rate_hz: int) -> int:
    """``atempo``'s window in samples: ``rate / 24`` rounded up to a power of two (1024 at
    16 to 24 kHz, 2048 at 44.1 and 48 kHz)."""
    window = max(1, sample_rate_hz // 24)
    return 1 << (window - 1).bit_length()


class _Link:
    """One ``atempo`` instance in its own graph, primed with the half window it drops."""

    def __init__(self, sample_rate_hz: int, factor: float) -> None:
        self.rate_hz = sample_rate_hz
        graph = av.filter.Graph()
        source = graph.add_abuffer(
            sample_rate=sample_rate_hz,
            format="flt",
            layout="mono",
            time_base=Fraction(1, sample_rate_hz),
        )
        atempo = graph.add("atempo", repr(factor))
        sink = graph.add("abuffersink")
        source.link_to(atempo)
        atempo.link_to(sink)
        graph.configure()
        self._graph = graph
        self._pts = 0
        self._primed = False

    def process(self, pcm: PcmF32) -> PcmF32:
        if not self._primed:
            self._primed = True
            pcm = np.concatenate([np.zeros(atempo_window(self.rate_hz) // 2, np.float32), pcm])
        if not len(pcm):
            return _EMPTY
        frame = AudioFrame.from_ndarray(pcm.reshape(1, -1), format="flt", layout="mono")
        frame.sample_rate = self.rate_hz
        frame.pts = self._pts
        self._pts += len(pcm)
        self._graph.push(frame)
        return self._pull()

    def flush(self) -> PcmF32:
        """The rest, at the end of the stream; the link cannot be used after."""
        if not self._primed:
            return _EMPTY
        self._graph.push(None)
        return self._pull()

    def _pull(self) -> PcmF32:
        out: list[PcmF32] = []
        while True:
            try:
                frame = self._graph.pull()
            except (av.error.BlockingIOError, av.error.EOFError):
                break
            assert isinstance(frame, AudioFrame)
            out.append(frame.to_ndarray().reshape(-1).astype(np.float32, copy=False))
        if not out:
            return _EMPTY
        return np.concatenate(out) if len(out) > 1 else out[0]


class TempoStretcher:
    """Mono float32 PCM in pieces → the same audio ``tempo`` times faster, pitch kept.

    ``process`` returns what is ready (maybe nothing), ``flush`` the rest at the end of the
    stream; together exactly ``round(samples_in / tempo)`` samples (module docstring). At tempo
    1 both hand back what they get, with no filter. Not thread-safe; one per stream.
    """

    def __init__(self, sample_rate_hz: int, tempo: float) -> None:
        self.sample_rate_hz = sample_rate_hz
        self.tempo = float(tempo)
        self._links = [_Link(sample_rate_hz, f) for f in atempo_factors(self.tempo)]
        self.samples_in = 0
        self.samples_out = 0
        self._held: PcmF32 = _EMPTY
        """Output past ``samples_in / tempo``: given out once the input catches up (or cut at
        the end)."""
        self._flushed = False

    @property
    def stretches(self) -> bool:
        """Whether the tempo is not 1 (a filter runs)."""
        return bool(self._links)

    def process(self, pcm: PcmF32) -> PcmF32:
        if self._flushed:
            raise ValueError("process() after flush()")
        data = as_pcm_f32(pcm)
        self.samples_in += len(data)
        if not self._links:
            self.samples_out += len(data)
            return data
        for link in self._links:
            data = link.process(data)
        return self._give(data, limit=math.floor(self.samples_in / self.tempo))

    def flush(self) -> PcmF32:
        """The end of the stream: what the filter held, cut or padded to the exact length."""
        if self._flushed:
            return _EMPTY
        self._flushed = True
        if not self._links:
            return _EMPTY
        data: PcmF32 = _EMPTY
        for link in self._links:
            data = np.concatenate([link.process(data), link.flush()])
        total = round(self.samples_in / self.tempo)
        out = self._give(data, limit=total)
        short = total - self.samples_out
        if short > 0:
            out = np.concatenate([out, np.zeros(short, np.float32)])
            self.samples_out = total
        self._held = _EMPTY
        return out

    def _give(self, data: PcmF32, *, limit: int) -> PcmF32:
        """``data`` after what was held, up to ``limit`` samples given in all."""
        if len(self._held):
            data = np.concatenate([self._held, data])
        room = max(0, limit - self.samples_out)
        out, self._held = data[:room], data[room:]
        self.samples_out += len(out)
        return out


def stretch(pcm: PcmF32, sample_rate_hz: int, tempo: float) -> PcmF32:
    """A whole signal at ``tempo`` (:class:`TempoStretcher` in one piece)."""
    stretcher = TempoStretcher(sample_rate_hz, tempo)
    head = stretcher.process(pcm)
    return np.concatenate([head, stretcher.flush()])
