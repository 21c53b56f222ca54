"""voicelane.common.audio.tempo: time-stretching in pieces with libavfilter's atempo."""

from __future__ import annotations

import numpy as np
import pytest

from voicelane.common.audio.pcm import PcmF32
from voicelane.common.audio.tempo import (
    ATEMPO_MAX,
    ATEMPO_MIN,
    TempoStretcher,
    atempo_factors,
    atempo_window,
    stretch,
)

RATE_HZ = 24000
TEMPOS = (0.25, 0.5, 2.0, 4.0)
TONE_HZ = 220.0
AMPLITUDE = 0.3


def _tone(seconds: float, rate_hz: int = RATE_HZ) -> PcmF32:
    t = np.arange(round(seconds * rate_hz)) / rate_hz
    return (AMPLITUDE * np.sin(2 * np.pi * TONE_HZ * t)).astype(np.float32)


def _bursts(starts_s: tuple[float, ...], length_s: float, total_s: float) -> PcmF32:
    """300 Hz bursts in silence: where the sound is can be measured."""
    pcm = np.zeros(round(total_s * RATE_HZ), dtype=np.float32)
    n = round(length_s * RATE_HZ)
    for start_s in starts_s:
        i = round(start_s * RATE_HZ)
        pcm[i : i + n] = 0.4 * np.sin(2 * np.pi * 300 * np.arange(n) / RATE_HZ)
    return pcm


def _sounds_ms(pcm: PcmF32) -> list[tuple[int, int]]:
    """(start, end) in ms of each sound lasting 20 ms or more, in 5 ms frames above -26 dBFS
    (WSOLA's few-ms pre-echoes before an onset left out)."""
    frame = RATE_HZ // 200
    loud = (np.abs(pcm[: len(pcm) // frame * frame]) > 0.05).reshape(-1, frame).any(axis=1)
    edges = np.diff(np.concatenate([[0], loud.astype(int), [0]]))
    spans = zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True)
    return [(int(a) * 5, int(b) * 5) for a, b in spans if (b - a) * 5 >= 20]


def _chunked(pcm: PcmF32, tempo: float, sizes: tuple[int, ...]) -> tuple[PcmF32, list[PcmF32]]:
    stretcher = TempoStretcher(RATE_HZ, tempo)
    parts: list[PcmF32] = []
    position, k = 0, 0
    while position < len(pcm):
        size = sizes[k % len(sizes)]
        parts.append(stretcher.process(pcm[position : position + size]))
        position, k = position + size, k + 1
    parts.append(stretcher.flush())
    assert stretcher.samples_in == len(pcm)
    assert stretcher.samples_out == sum(len(p) for p in parts)
    return np.concatenate(parts), parts


def _dominant_hz(pcm: PcmF32) -> float:
    spectrum = np.abs(np.fft.rfft(pcm * np.hanning(len(pcm))))
    return float(np.fft.rfftfreq(len(pcm), 1 / RATE_HZ)[int(np.argmax(spectrum))])


def test_factors_chain_atempo_below_its_range() -> None:
    assert atempo_factors(1.0) == ()
    assert atempo_factors(2.0) == (2.0,)
    assert atempo_factors(4.0) == (4.0,)
    assert atempo_factors(0.5) == (0.5,)
    assert atempo_factors(0.25) == (0.5, 0.5)
    factors = atempo_factors(0.3)
    assert factors[0] == 0.5 and np.prod(factors) == pytest.approx(0.3)
    assert all(ATEMPO_MIN <= f <= ATEMPO_MAX for f in atempo_factors(0.1))
    for bad in (0.0, -1.0, float("nan"), float("inf"), 101.0):
        with pytest.raises(ValueError):
            atempo_factors(bad)


def test_window_is_atempos() -> None:
    assert atempo_window(24000) == 1024
    assert atempo_window(22050) == 1024
    assert atempo_window(48000) == 2048
    assert atempo_window(8000) == 512


@pytest.mark.parametrize("tempo", TEMPOS)
def test_the_sound_lasts_one_over_tempo_and_keeps_its_pitch(tempo: float) -> None:
    # The whole output is exactly len / tempo; the sound in it too, within 2 % and the one
    # window (43 ms) by which WSOLA's overlap smears its edges.
    source = _bursts((0.5,), 2.0, 3.0)
    out = stretch(source, RATE_HZ, tempo)
    assert len(out) == round(len(source) / tempo)
    [(start_ms, end_ms)] = _sounds_ms(out)
    window_ms = atempo_window(RATE_HZ) * 1000 / RATE_HZ
    assert abs((end_ms - start_ms) - 2000 / tempo) <= 0.02 * 2000 / tempo + window_ms
    assert start_ms == pytest.approx(500 / tempo, abs=30)  # heard at t / tempo
    middle = out[round((start_ms + 50) * RATE_HZ / 1000) : round((end_ms - 50) * RATE_HZ / 1000)]
    assert _dominant_hz(middle) == pytest.approx(300, abs=5)  # a tempo change, not a pitch one


@pytest.mark.parametrize("tempo", TEMPOS)
def test_sounds_stay_where_the_clock_puts_them(tempo: float) -> None:
    # Each burst starts at start / tempo (atempo's dropped half window is primed away), so a
    # stream's times divided by the tempo stay true to the audio.
    starts = (0.5, 1.5, 2.5)
    out = stretch(_bursts(starts, 0.3, 3.5), RATE_HZ, tempo)
    sounds = _sounds_ms(out)
    assert len(sounds) == len(starts)
    for (start_ms, _), start_s in zip(sounds, starts, strict=True):
        assert start_ms == pytest.approx(start_s * 1000 / tempo, abs=30)


@pytest.mark.parametrize("tempo", TEMPOS)
def test_chunked_is_the_whole_signal_and_has_no_seams(tempo: float) -> None:
    tone = _tone(2.0)
    whole = stretch(tone, RATE_HZ, tempo)
    chunked, parts = _chunked(tone, tempo, (480, 17, 2400, 960, 1))
    assert len(chunked) == len(whole) == round(len(tone) / tempo)
    np.testing.assert_allclose(chunked, whole, atol=1e-6)
    assert sum(1 for p in parts[:-1] if len(p)) > 10  # it streams: output before the end
    # No clicks: inside the output (its last sample, where the tone stops, aside) no step
    # between samples is larger than the tone's own largest (2 pi f / rate x amplitude),
    # with 10 % to spare: a seam where a piece ends would jump.
    steepest = 2 * np.pi * TONE_HZ / RATE_HZ * AMPLITUDE
    assert np.abs(np.diff(chunked[: len(chunked) - atempo_window(RATE_HZ)])).max() < (
        1.1 * steepest
    )


def test_output_never_runs_ahead_of_the_input() -> None:
    stretcher = TempoStretcher(RATE_HZ, 4.0)
    for piece in np.array_split(_tone(1.0), 50):
        stretcher.process(piece)
        assert stretcher.samples_out <= stretcher.samples_in / 4.0
    stretcher.flush()
    assert stretcher.samples_out == RATE_HZ // 4


def test_tempo_one_is_a_pass_through() -> None:
    stretcher = TempoStretcher(RATE_HZ, 1.0)
    tone = _tone(0.1)
    assert not stretcher.stretches
    assert stretcher.process(tone) is tone
    assert len(stretcher.flush()) == 0


def test_nothing_in_nothing_out_and_no_use_after_the_end() -> None:
    stretcher = TempoStretcher(RATE_HZ, 2.0)
    assert stretcher.stretches
    assert len(stretcher.flush()) == 0 and len(stretcher.flush()) == 0
    with pytest.raises(ValueError, match="after flush"):
        stretcher.process(_tone(0.1))


@pytest.mark.parametrize("rate_hz", [8000, 16000, 22050, 48000])
def test_other_rates(rate_hz: int) -> None:
    out = stretch(_tone(1.0, rate_hz), rate_hz, 2.0)
    assert len(out) == rate_hz // 2
    assert np.abs(out).max() == pytest.approx(AMPLITUDE, rel=0.1)
