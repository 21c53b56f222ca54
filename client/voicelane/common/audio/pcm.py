"""Mono PCM helpers: sample format conversion, resampling, silence, gain.

All PCM in voicelane is mono and 1-D. Float PCM (:data:`PcmF32`) is nominally in [-1, 1];
int16 PCM (:data:`PcmI16`) is full scale at +/-32767.

Resampling
----------
:func:`resample` and :class:`StreamResampler` are a windowed-sinc polyphase filter in numpy
(Kaiser window, 16 zero crossings each side at the lower of the two rates). Measured response,
relative to the lower Nyquist frequency: flat within 0.2 % up to 0.75 (9 kHz at 24 kHz),
-0.3 dB at 0.8, -6 dB at 0.9; when downsampling, tones at 1.02 / 1.05 / >= 1.1 of the new
Nyquist frequency come out at -37 / -56 / below -84 dB, so it is anti-aliased outside a narrow
transition band whose aliases land above 0.9 of the new Nyquist frequency. It was chosen
over PyAV's ``av.AudioResampler`` (libswresample) after measuring both (``bench/audio_codecs.py``):
fed 60 s in 200 ms pieces, both ran at 5,000-11,000x real time for 22050->24000 and
24000->48000 across runs on a shared 2-core machine, neither consistently ahead (numpy on a
whole signal: 15,000-20,000x), so speed did not decide. swr, however, returns nothing for
inputs shorter than ~30-50 samples and a length that is not a simple function of the input's,
whereas the numpy filter's output is exactly specified:

* Output sample ``n`` is the input signal evaluated at time ``n * src_hz / dst_hz`` (in input
  samples) — no delay, no shift. Outside the input the signal is taken to be zero.
* ``len(resample(x, src, dst)) == ceil(len(x) * dst / src)`` exactly (this is within
  ``round(len(x) * dst / src) +/- 1``).
* :class:`StreamResampler` gives the same samples (to float32 rounding, ~1e-7) whatever the
  chunking: the concatenation of all :meth:`StreamResampler.process` outputs and
  :meth:`StreamResampler.flush` equals :func:`resample` of the concatenated input, with the
  same total length. It holds back about 16 input samples (at the lower rate) of look-ahead
  until more input or ``flush()`` arrives.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from voicelane.common.errors import InvalidInputError

PcmF32 = npt.NDArray[np.float32]
"""Mono float32 PCM, 1-D, nominally in [-1, 1]."""

PcmI16 = npt.NDArray[np.int16]
"""Mono int16 PCM, 1-D."""

INT16_SCALE = 32767.0

# Filter design. Half-width in zero crossings of the lower rate's sinc; Kaiser beta ~8.6 gives
# ~-80 dB side lobes; the cut-off sits at 90 % of the lower Nyquist frequency.
_ZERO_CROSSINGS = 16
_KAISER_BETA = 8.6
_ROLLOFF = 0.90
# Use the dense block-matrix form while its matrix stays small (elements); otherwise gather.
_BLOCK_MATRIX_MAX_ELEMENTS = 1 << 20
# Outputs per block-matrix group at least (several periods of L phases when L is small).
_MIN_GROUP_OUTPUTS = 64
# Elements per temporary work array when computing outputs (bounds memory on long inputs).
_WORK_ELEMENTS = 1 << 18


def as_pcm_f32(pcm: npt.ArrayLike, *, name: str = "pcm") -> PcmF32:
    """``pcm`` as a 1-D float32 array (no copy when it already is one)."""
    arr = np.asarray(pcm, dtype=np.float32)
    if arr.ndim != 1:
        raise InvalidInputError(f"{name} must be mono 1-D PCM, got shape {arr.shape}")
    return arr


def float_to_int16(pcm: PcmF32) -> PcmI16:
    """Clip to [-1, 1], scale by 32767 and round to nearest (half to even); NaN gives 0."""
    arr = as_pcm_f32(pcm)
    if not np.isfinite(arr).all():
        arr = np.nan_to_num(arr, nan=0.0, posinf=1.0, neginf=-1.0)
    scaled = np.clip(arr, -1.0, 1.0) * np.float32(INT16_SCALE)
    out: PcmI16 = np.rint(scaled).astype(np.int16)
    return out


def int16_to_float(pcm: PcmI16) -> PcmF32:
    """Divide by 32767 (so -32768 maps to slightly below -1.0)."""
    arr = np.asarray(pcm)
    if arr.ndim != 1:
        raise InvalidInputError(f"pcm must be mono 1-D PCM, got shape {arr.shape}")
    if arr.dtype != np.int16:
        raise InvalidInputError(f"pcm must be int16, got {arr.dtype}")
    return arr.astype(np.float32) / np.float32(INT16_SCALE)


def silence(duration_s: float, sample_rate_hz: int) -> PcmF32:
    """``round(duration_s * sample_rate_hz)`` zero samples."""
    _check_rate(sample_rate_hz, "sample_rate_hz")
    if not math.isfinite(duration_s) or duration_s < 0:
        raise InvalidInputError(f"duration_s must be a finite number >= 0, got {duration_s}")
    return np.zeros(round(duration_s * sample_rate_hz), dtype=np.float32)


SILENCE_THRESHOLD = 10 ** (-45 / 20)
"""Amplitude below which audio counts as silence at its edges (-45 dBFS)."""
_EDGE_FRAME_S = 0.005


def silence_edges(
    pcm: PcmF32, sample_rate_hz: int, *, threshold: float = SILENCE_THRESHOLD
) -> tuple[int, int]:
    """Samples of silence ``(leading, trailing)`` at the edges of ``pcm``, in whole 5 ms
    frames: the leading silence ends at the start of the frame holding the first sample at or
    above ``threshold``, the trailing one starts at the end of the frame holding the last (so
    at most 5 ms of silence stays next to the sound). All silent: ``(len(pcm), 0)``.

    What cuts an engine's own pauses at an SSML break, so that the break's silence is exact.
    """
    _check_rate(sample_rate_hz, "sample_rate_hz")
    arr = as_pcm_f32(pcm)
    frame = max(1, round(sample_rate_hz * _EDGE_FRAME_S))
    loud = np.flatnonzero(np.abs(arr) >= threshold)
    if len(loud) == 0:
        return len(arr), 0
    lead = (int(loud[0]) // frame) * frame
    end = min(len(arr), -(-(int(loud[-1]) + 1) // frame) * frame)
    return lead, len(arr) - end


def apply_gain_db(pcm: PcmF32, gain_db: float) -> PcmF32:
    """``pcm`` louder or softer by ``gain_db`` (a new array, clipped to [-1, 1]); -96 dB and
    below: silence. SSML ``prosody volume``."""
    if not math.isfinite(gain_db):
        raise InvalidInputError(f"gain_db must be a finite number, got {gain_db}")
    arr = as_pcm_f32(pcm)
    if gain_db <= -96:
        return np.zeros_like(arr)
    out = arr * np.float32(10 ** (gain_db / 20))
    return np.clip(out, -1.0, 1.0, out=out)


def resampled_length(n_samples: int, src_hz: int, dst_hz: int) -> int:
    """Length of :func:`resample` output for ``n_samples`` input: ``ceil(n * dst / src)``."""
    return -(-n_samples * dst_hz // src_hz)


def resample(pcm: PcmF32, src_hz: int, dst_hz: int) -> PcmF32:
    """Resample a whole signal; length is exactly ``ceil(len(pcm) * dst_hz / src_hz)``.

    Identity (a copy) when the rates are equal. See the module docstring for the filter.
    """
    arr = as_pcm_f32(pcm)
    resampler = StreamResampler(src_hz, dst_hz)
    head = resampler.process(arr)
    tail = resampler.flush()
    return np.concatenate([head, tail]) if len(head) else tail


def _check_rate(rate: int, name: str) -> None:
    if isinstance(rate, bool) or not isinstance(rate, int | np.integer) or rate <= 0:
        raise InvalidInputError(f"{name} must be a positive integer, got {rate!r}")


class _PolyphaseFilter:
    """The filter bank for one (src, dst) pair; immutable, shared by every stream."""

    def __init__(self, src_hz: int, dst_hz: int) -> None:
        g = math.gcd(src_hz, dst_hz)
        self.up = dst_hz // g  # L
        self.down = src_hz // g  # M
        ratio = min(1.0, dst_hz / src_hz)
        self.half = math.ceil(_ZERO_CROSSINGS / ratio)  # half-width in input samples
        self.taps = 2 * self.half
        cutoff = 0.5 * _ROLLOFF * ratio  # cycles per input sample
        # bank[p, j] weighs input k = base - half + 1 + j for output phase p, where
        # base = floor(t), frac = p / L and t - k = frac + half - 1 - j.
        frac = np.arange(self.up, dtype=np.float64)[:, None] / self.up
        dist = frac + (self.half - 1) - np.arange(self.taps, dtype=np.float64)[None, :]
        window = np.kaiser(2 * 4096 + 1, _KAISER_BETA)  # sampled, then interpolated
        pos = (dist / self.half + 1.0) * 4096
        w = np.interp(pos, np.arange(window.size), window, left=0.0, right=0.0)
        bank = 2 * cutoff * np.sinc(2 * cutoff * dist) * w
        bank /= bank.sum(axis=1, keepdims=True)  # unity DC gain in every phase
        self.bank = bank.astype(np.float32)
        # Dense block form: a group of `group_out` consecutive outputs (r whole periods of
        # L phases, r chosen so the matrix is wide enough for BLAS to be efficient) reads a
        # window of `width` inputs starting at group * group_in - half + 1.
        reps = max(1, -(-_MIN_GROUP_OUTPUTS // self.up))
        self.group_out = reps * self.up
        self.group_in = reps * self.down
        self.width = ((self.group_out - 1) * self.down) // self.up + self.taps
        self.block: npt.NDArray[np.float32] | None = None
        if self.width * self.group_out <= _BLOCK_MATRIX_MAX_ELEMENTS:
            block = np.zeros((self.width, self.group_out), dtype=np.float32)
            for p in range(self.group_out):
                off = (p * self.down) // self.up
                block[off : off + self.taps, p] = self.bank[(p * self.down) % self.up]
            self.block = block

    def first_input(self, n: int) -> int:
        """Absolute index of the first input sample that output ``n`` (or its group) reads."""
        if self.block is not None:
            return (n // self.group_out) * self.group_in - self.half + 1
        return (n * self.down) // self.up - self.half + 1

    def compute(self, buf: PcmF32, buf_start: int, n0: int, n1: int) -> PcmF32:
        """Outputs ``[n0, n1)`` from ``buf`` (absolute input index of ``buf[0]`` is buf_start).

        Input the window needs beyond ``buf`` is read as zeros.
        """
        if n1 <= n0:
            return np.zeros(0, dtype=np.float32)
        if self.block is not None:
            return self._compute_block(buf, buf_start, n0, n1)
        return self._compute_gather(buf, buf_start, n0, n1)

    @staticmethod
    def _padded(buf: PcmF32, start: int, stop: int) -> PcmF32:
        """``buf[start:stop]`` with zeros where that range falls outside ``buf``."""
        if start >= 0 and stop <= len(buf):
            return buf[start:stop]
        out = np.zeros(stop - start, dtype=np.float32)
        lo, hi = max(start, 0), min(stop, len(buf))
        if hi > lo:
            out[lo - start : hi - start] = buf[lo:hi]
        return out

    def _compute_block(self, buf: PcmF32, buf_start: int, n0: int, n1: int) -> PcmF32:
        assert self.block is not None
        big_l, big_m = self.group_out, self.group_in
        g0, g1 = n0 // big_l, -(-n1 // big_l)
        step = max(1, _WORK_ELEMENTS // self.width)
        parts: list[PcmF32] = []
        for ga in range(g0, g1, step):
            gb = min(g1, ga + step)
            start = ga * big_m - self.half + 1 - buf_start
            stop = (gb - 1) * big_m - self.half + 1 - buf_start + self.width
            seg = np.ascontiguousarray(self._padded(buf, start, stop))
            # Every big_m-th window of `width` inputs, as a strided view (what
            # sliding_window_view(seg, width)[::big_m] is, without its per-call overhead).
            item = seg.strides[0]
            windows = as_strided(
                seg,
                shape=((len(seg) - self.width) // big_m + 1, self.width),
                strides=(item * big_m, item),
                writeable=False,
            )
            parts.append((windows @ self.block).reshape(-1))
        y = np.concatenate(parts) if len(parts) > 1 else parts[0]
        return y[n0 - g0 * big_l : n1 - g0 * big_l]

    def _compute_gather(self, buf: PcmF32, buf_start: int, n0: int, n1: int) -> PcmF32:
        step = max(1, _WORK_ELEMENTS // self.taps)
        parts: list[PcmF32] = []
        for na in range(n0, n1, step):
            nb = min(n1, na + step)
            t = np.arange(na, nb, dtype=np.int64) * self.down
            first = t // self.up - self.half + 1 - buf_start
            lo = int(first[0])
            seg = self._padded(buf, lo, int(first[-1]) + self.taps)
            windows = sliding_window_view(seg, self.taps)[first - lo]
            parts.append(np.einsum("ij,ij->i", windows, self.bank[t % self.up]))
        return np.concatenate(parts) if len(parts) > 1 else parts[0]


_FILTERS: dict[tuple[int, int], _PolyphaseFilter] = {}


def _filter_for(src_hz: int, dst_hz: int) -> _PolyphaseFilter:
    key = (src_hz, dst_hz)
    filt = _FILTERS.get(key)
    if filt is None:
        filt = _FILTERS[key] = _PolyphaseFilter(src_hz, dst_hz)
    return filt


class StreamResampler:
    """Stateful resampler: feed chunks to :meth:`process`, then call :meth:`flush` once.

    Chunk boundaries leave no trace: the concatenated outputs equal :func:`resample` of the
    concatenated input (to float32 rounding) and have exactly its length. After ``flush()`` the
    resampler is reset and may be reused for a new signal.
    """

    def __init__(self, src_hz: int, dst_hz: int) -> None:
        _check_rate(src_hz, "src_hz")
        _check_rate(dst_hz, "dst_hz")
        self.src_hz = int(src_hz)
        self.dst_hz = int(dst_hz)
        self._filter = None if src_hz == dst_hz else _filter_for(self.src_hz, self.dst_hz)
        self._reset()

    def _reset(self) -> None:
        self._buf: PcmF32 = np.zeros(0, dtype=np.float32)
        self._buf_start = 0  # absolute input index of _buf[0]
        self._n_in = 0
        self._n_out = 0

    @property
    def samples_in(self) -> int:
        return self._n_in

    @property
    def samples_out(self) -> int:
        return self._n_out

    def process(self, pcm: PcmF32) -> PcmF32:
        """Resample the next chunk; returns every output whose input is complete."""
        arr = as_pcm_f32(pcm)
        filt = self._filter
        if filt is None:
            self._n_in += len(arr)
            self._n_out += len(arr)
            return arr.copy()
        if len(arr):
            self._buf = np.concatenate([self._buf, arr]) if len(self._buf) else arr.copy()
            self._n_in += len(arr)
        # Output n needs inputs up to floor(n * M / L) + half, so it is ready when that
        # index is < n_in, i.e. n < (n_in - half) * L / M.
        ready = max(0, -(-(self._n_in - filt.half) * filt.up // filt.down))
        return self._emit(ready)

    def flush(self) -> PcmF32:
        """The remaining outputs (input after the end read as zeros); then reset."""
        if self._filter is None:
            self._reset()
            return np.zeros(0, dtype=np.float32)
        out = self._emit(resampled_length(self._n_in, self.src_hz, self.dst_hz))
        self._reset()
        return out

    def _emit(self, n_end: int) -> PcmF32:
        filt = self._filter
        assert filt is not None
        if n_end <= self._n_out:
            return np.zeros(0, dtype=np.float32)
        out = filt.compute(self._buf, self._buf_start, self._n_out, n_end)
        self._n_out = n_end
        keep_from = filt.first_input(self._n_out)
        drop = keep_from - self._buf_start
        if drop > 0:
            self._buf = self._buf[drop:]
            self._buf_start = keep_from
        return out
