"""voicelane.common.audio.pcm: int16 conversion, resampling (whole and streaming), silence."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voicelane.common.audio.pcm import (
    PcmF32,
    StreamResampler,
    _filter_for,
    apply_gain_db,
    float_to_int16,
    int16_to_float,
    resample,
    resampled_length,
    silence,
    silence_edges,
)
from voicelane.common.errors import InvalidInputError

RATE_PAIRS = [
    (22050, 24000),
    (24000, 48000),
    (48000, 24000),
    (24000, 16000),
    (24000, 8000),
    (16000, 22050),
    (44100, 48000),
]


def _f32(values: list[float]) -> PcmF32:
    return np.array(values, dtype=np.float32)


def _sine(freq_hz: float, rate_hz: int, seconds: float, amp: float = 0.5) -> PcmF32:
    t = np.arange(round(rate_hz * seconds)) / rate_hz
    return (amp * np.sin(2 * np.pi * freq_hz * t)).astype(np.float32)


def _peak_hz(pcm: PcmF32, rate_hz: int) -> float:
    spectrum = np.abs(np.fft.rfft(pcm * np.hanning(len(pcm))))
    return float(np.fft.rfftfreq(len(pcm), 1 / rate_hz)[int(np.argmax(spectrum))])


# ---- int16 conversion --------------------------------------------------------------------


def test_float_to_int16_scales_by_32767_and_clips() -> None:
    out = float_to_int16(_f32([0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 1e9, -1e9]))
    assert out.dtype == np.int16
    assert out.tolist() == [0, 32767, -32767, 16384, -16384, 32767, -32767, 32767, -32767]


def test_float_to_int16_rounds_to_nearest() -> None:
    step = 1 / 32767
    # 0.4 and 0.6 of a step go to 0 and 1; 1.4/1.6 to 1/2; negative mirror.
    values = [0.4 * step, 0.6 * step, 1.4 * step, 1.6 * step, -0.4 * step, -0.6 * step]
    assert float_to_int16(_f32(values)).tolist() == [0, 1, 1, 2, 0, -1]
    # exact halves round half to even (np.rint), not truncation and not half-up
    halves = np.array([0.5, 1.5, 2.5, -0.5, -1.5], dtype=np.float64) / 32767
    assert float_to_int16(halves.astype(np.float32)).tolist() == [0, 2, 2, 0, -2]


def test_float_to_int16_maps_non_finite_safely() -> None:
    assert float_to_int16(_f32([np.nan, np.inf, -np.inf])).tolist() == [0, 32767, -32767]


def test_int16_to_float_divides_by_32767() -> None:
    pcm = np.array([0, 32767, -32767, -32768, 16384], dtype=np.int16)
    out = int16_to_float(pcm)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [0.0, 1.0, -1.0, -32768 / 32767, 16384 / 32767], rtol=1e-7)


def test_int16_round_trip_is_exact_over_the_whole_range() -> None:
    every = np.arange(-32767, 32768, dtype=np.int16)
    assert np.array_equal(float_to_int16(int16_to_float(every)), every)
    # -32768 is the one value outside +/-32767: it clips to -32767
    assert float_to_int16(int16_to_float(np.array([-32768], dtype=np.int16))).tolist() == [-32767]


@given(st.lists(st.floats(-1.0, 1.0, width=32), max_size=200))
def test_float_int16_round_trip_error_is_half_a_step(values: list[float]) -> None:
    pcm = _f32(values)
    back = int16_to_float(float_to_int16(pcm))
    assert np.all(np.abs(back - pcm) <= 0.5 / 32767 + 1e-7)


def test_conversions_reject_wrong_shapes_and_dtypes() -> None:
    with pytest.raises(InvalidInputError):
        float_to_int16(np.zeros((2, 10), dtype=np.float32))
    with pytest.raises(InvalidInputError):
        int16_to_float(np.zeros(10, dtype=np.float32))
    with pytest.raises(InvalidInputError):
        int16_to_float(np.zeros((1, 10), dtype=np.int16))


# ---- silence -----------------------------------------------------------------------------


def test_silence() -> None:
    s = silence(0.25, 24000)
    assert s.dtype == np.float32 and s.shape == (6000,) and not s.any()
    assert len(silence(0.0, 48000)) == 0
    assert len(silence(0.02, 22050)) == 441
    with pytest.raises(InvalidInputError):
        silence(-1.0, 24000)
    with pytest.raises(InvalidInputError):
        silence(1.0, 0)
    with pytest.raises(InvalidInputError):
        silence(float("nan"), 24000)


# ---- resample ----------------------------------------------------------------------------


def test_resample_identity_is_an_equal_copy() -> None:
    x = _sine(440, 24000, 0.1)
    y = resample(x, 24000, 24000)
    assert np.array_equal(x, y) and y is not x


@pytest.mark.parametrize(("src", "dst"), RATE_PAIRS)
@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 31, 100, 147, 1001, 24000, 24001])
def test_resample_length_is_ceil(src: int, dst: int, n: int) -> None:
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    y = resample(x, src, dst)
    assert y.dtype == np.float32
    assert len(y) == -(-n * dst // src) == resampled_length(n, src, dst)
    assert abs(len(y) - round(n * dst / src)) <= 1


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 3000),
    src=st.sampled_from([8000, 16000, 22050, 24000, 44100, 48000]),
    dst=st.sampled_from([8000, 16000, 22050, 24000, 44100, 48000]),
)
def test_resample_length_property(n: int, src: int, dst: int) -> None:
    assert len(resample(np.zeros(n, dtype=np.float32), src, dst)) == -(-n * dst // src)


@pytest.mark.parametrize(("src", "dst"), RATE_PAIRS)
def test_resample_keeps_a_1khz_sine_at_1khz_and_its_level(src: int, dst: int) -> None:
    y = resample(_sine(1000, src, 1.0), src, dst)
    assert abs(_peak_hz(y, dst) - 1000) <= 1.0  # 1 s of signal: 1 Hz bins
    middle = y[dst // 10 : -dst // 10]
    assert np.max(np.abs(middle)) == pytest.approx(0.5, rel=0.01)


@pytest.mark.parametrize(
    ("src", "dst", "tone"),
    [(48000, 24000, 13200), (48000, 24000, 15000), (24000, 16000, 9000), (24000, 8000, 6000)],
)
def test_downsampling_is_anti_aliased(src: int, dst: int, tone: int) -> None:
    # A tone at >= 1.1x the new Nyquist frequency must not fold back into the band.
    y = resample(_sine(tone, src, 1.0, amp=1.0), src, dst)
    middle = y[dst // 10 : -dst // 10]
    rms = float(np.sqrt(np.mean(middle.astype(np.float64) ** 2)))
    assert 20 * np.log10(rms * np.sqrt(2)) < -80.0


@pytest.mark.parametrize(("src", "dst"), [(48000, 24000), (24000, 48000), (22050, 24000)])
def test_passband_is_flat_to_three_quarters_of_nyquist(src: int, dst: int) -> None:
    nyquist = min(src, dst) / 2
    for fraction, low, high in [(0.5, 0.998, 1.002), (0.75, 0.995, 1.002), (0.9, 0.45, 0.55)]:
        y = resample(_sine(fraction * nyquist, src, 1.0, amp=1.0), src, dst)
        middle = y[dst // 10 : -dst // 10].astype(np.float64)
        gain = float(np.sqrt(2 * np.mean(middle**2)))
        assert low <= gain <= high, (fraction, gain)


@pytest.mark.parametrize(("src", "dst"), RATE_PAIRS)
def test_resample_has_unity_dc_gain_in_every_phase(src: int, dst: int) -> None:
    # Each polyphase branch is normalized: a constant stays constant (no phase ripple).
    y = resample(np.full(5000, 0.5, dtype=np.float32), src, dst)
    middle = y[len(y) // 5 : -len(y) // 5]
    assert np.max(np.abs(middle - 0.5)) < 1e-6


@pytest.mark.parametrize(("src", "dst"), RATE_PAIRS)
def test_resample_has_no_delay(src: int, dst: int) -> None:
    # A smooth pulse centred on input sample 1000 peaks at output 1000 * dst / src.
    n = np.arange(4000)
    x = np.exp(-0.5 * ((n - 1000) / 8.0) ** 2).astype(np.float32)
    y = resample(x, src, dst)
    assert abs(int(np.argmax(y)) - 1000 * dst / src) <= 1.0


def test_resample_rejects_bad_rates_and_shapes() -> None:
    x = np.zeros(10, dtype=np.float32)
    for src, dst in [(0, 24000), (24000, -1), (True, 24000)]:
        with pytest.raises(InvalidInputError):
            resample(x, src, dst)
    with pytest.raises(InvalidInputError):
        resample(np.zeros((2, 5), dtype=np.float32), 24000, 48000)


# ---- StreamResampler ---------------------------------------------------------------------


def _stream(x: PcmF32, src: int, dst: int, cuts: list[int]) -> PcmF32:
    r = StreamResampler(src, dst)
    bounds = [0, *sorted(c for c in cuts if 0 < c < len(x)), len(x)]
    parts = [r.process(x[a:b]) for a, b in itertools.pairwise(bounds)]
    parts.append(r.flush())
    return np.concatenate(parts)


@pytest.mark.parametrize(("src", "dst"), [*RATE_PAIRS, (24000, 24000), (11025, 16001)])
@pytest.mark.parametrize("chunk", [1, 37, 480, 4800])
def test_stream_equals_whole(src: int, dst: int, chunk: int) -> None:
    n = 3000 if chunk == 1 else src
    x = (np.random.default_rng(chunk).standard_normal(n) * 0.3).astype(np.float32)
    whole = resample(x, src, dst)
    streamed = _stream(x, src, dst, list(range(chunk, n, chunk)))
    assert len(streamed) == len(whole)
    np.testing.assert_allclose(streamed, whole, atol=1e-6, rtol=0)


def test_gather_fallback_is_exercised() -> None:
    # 11025 -> 16001 has 16001 phases: too many for the dense block matrix.
    assert _filter_for(11025, 16001).block is None
    assert _filter_for(22050, 24000).block is not None


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 5000),
    cuts=st.lists(st.integers(0, 5000), max_size=12),
    pair=st.sampled_from(RATE_PAIRS),
)
def test_stream_equals_whole_for_any_chunking(
    n: int, cuts: list[int], pair: tuple[int, int]
) -> None:
    src, dst = pair
    x = (np.random.default_rng(n).standard_normal(n) * 0.3).astype(np.float32)
    whole = resample(x, src, dst)
    streamed = _stream(x, src, dst, cuts)
    assert len(streamed) == len(whole)
    np.testing.assert_allclose(streamed, whole, atol=1e-6, rtol=0)


def test_stream_of_a_sine_has_no_clicks_at_chunk_boundaries() -> None:
    x = _sine(440, 22050, 1.0)
    y = _stream(x, 22050, 24000, list(range(441, len(x), 441)))  # 20 ms chunks
    # the second difference of a clean 440 Hz sine stays tiny; a click would not
    d2 = np.abs(np.diff(y[100:-100], 2))
    assert d2.max() < 0.5 * (2 * np.pi * 440 / 24000) ** 2 * 1.1


def test_stream_resampler_counts_resets_and_is_reusable() -> None:
    r = StreamResampler(24000, 48000)
    assert len(r.process(np.zeros(0, dtype=np.float32))) == 0
    first = r.process(np.ones(100, dtype=np.float32))
    assert len(first) < 200  # holds back its look-ahead
    tail = r.flush()
    assert len(first) + len(tail) == 200
    assert r.samples_in == 0 and r.samples_out == 0  # flush resets
    assert len(r.flush()) == 0
    again = np.concatenate([r.process(np.ones(100, dtype=np.float32)), r.flush()])
    np.testing.assert_allclose(again, np.concatenate([first, tail]), atol=1e-7)


def test_stream_resampler_identity() -> None:
    r = StreamResampler(16000, 16000)
    x = _sine(300, 16000, 0.01)
    assert np.array_equal(r.process(x), x)
    assert len(r.flush()) == 0


# ---- silence edges and gain (SSML breaks and prosody volume) ---------------------------------


def test_silence_edges_are_whole_5ms_frames_around_the_sound() -> None:
    rate = 1000  # 5 samples per frame
    pcm = np.zeros(100, dtype=np.float32)
    pcm[23:61] = 0.5
    lead, trail = silence_edges(pcm, rate)
    assert (lead, trail) == (20, 100 - 65)
    # Below -45 dBFS counts as silence; at it, as sound.
    quiet = np.full(50, 10 ** (-46 / 20), dtype=np.float32)
    assert silence_edges(quiet, rate) == (50, 0)
    assert silence_edges(np.zeros(0, dtype=np.float32), rate) == (0, 0)
    loud = np.full(50, 0.2, dtype=np.float32)
    assert silence_edges(loud, rate) == (0, 0)


def test_gain_in_decibels_scales_and_clips() -> None:
    pcm = np.array([0.1, -0.2, 0.6], dtype=np.float32)
    louder = apply_gain_db(pcm, 20 * np.log10(2))
    np.testing.assert_allclose(louder, [0.2, -0.4, 1.0], rtol=1e-5)
    np.testing.assert_allclose(apply_gain_db(pcm, -6.0206), pcm / 2, rtol=1e-4)
    assert not apply_gain_db(pcm, -120).any()
    np.testing.assert_array_equal(pcm, np.array([0.1, -0.2, 0.6], dtype=np.float32))  # untouched
    with pytest.raises(InvalidInputError, match="gain_db"):
        apply_gain_db(pcm, float("nan"))
