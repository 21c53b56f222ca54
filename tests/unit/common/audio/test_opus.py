"""voicelane.common.audio.opus: 20 ms packets, decoding, codec delay, failures become silence."""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import opuslib
import pytest

from voicelane.common.audio.opus import (
    CODEC_DELAY_MS,
    FRAME_DURATION_MS,
    OPUS_SAMPLE_RATES_HZ,
    OpusStreamDecoder,
    OpusStreamEncoder,
    codec_delay_samples,
    packet_count,
)
from voicelane.common.audio.pcm import PcmF32, resample
from voicelane.common.encode_failures import encode_failures_total
from voicelane.common.errors import InvalidInputError, UnsupportedFormatError


def _sine(freq_hz: float, rate_hz: int, n: int, amp: float = 0.5) -> PcmF32:
    return (amp * np.sin(2 * np.pi * freq_hz * np.arange(n) / rate_hz)).astype(np.float32)


def _chirp(rate_hz: int, seconds: float) -> PcmF32:
    t = np.arange(round(rate_hz * seconds)) / rate_hz
    f0, f1 = 150.0, min(0.35 * rate_hz, 3500.0)
    return (0.4 * np.sin(2 * np.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t**2))).astype(
        np.float32
    )


def _corr(a: PcmF32, b: PcmF32) -> float:
    return float(np.corrcoef(a.astype(np.float64), b.astype(np.float64))[0, 1])


def _fail_on_calls(encoder: OpusStreamEncoder, failing: set[int], exc: Exception) -> None:
    """Make the encoder's underlying libopus encode raise on the given 1-based calls."""
    real = encoder._encoder.encode_float
    calls = 0

    def encode_float(pcm: bytes, frame_size: int) -> Any:
        nonlocal calls
        calls += 1
        if calls in failing:
            raise exc
        return real(pcm, frame_size)

    encoder._encoder.encode_float = encode_float  # type: ignore[method-assign]  # inject failures


# ---- packets -----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 479, 480, 481, 959, 960, 12345, 24000, 24001])
def test_packet_count_is_ceil_of_frames(n: int) -> None:
    enc = OpusStreamEncoder(24000)
    x = _sine(440, 24000, n)
    packets: list[bytes] = []
    for start in range(0, n, 1000):  # pieces that do not line up with frames
        packets += enc.encode(x[start : start + 1000])
    assert len(packets) == n // 480
    packets += enc.flush()
    assert len(packets) == math.ceil(n / 480) == packet_count(n, 24000)
    assert enc.packets_emitted == len(packets)
    assert enc.next_pts_ms == 20 * len(packets)
    assert enc.encode_failures == 0
    assert enc.flush() == []


def test_encode_buffers_partial_frames() -> None:
    enc = OpusStreamEncoder(24000)
    assert enc.samples_per_frame == 480
    assert enc.encode(np.zeros(100, dtype=np.float32)) == []
    assert enc.pending_samples == 100 and enc.next_pts_ms == 0
    assert len(enc.encode(np.zeros(400, dtype=np.float32))) == 1
    assert enc.pending_samples == 20 and enc.next_pts_ms == 20
    assert len(enc.encode(np.zeros(2000, dtype=np.float32))) == 4
    assert enc.pending_samples == 100
    assert len(enc.flush()) == 1 and enc.pending_samples == 0
    assert enc.samples_in == 2500 and enc.next_pts_ms == 120


@pytest.mark.parametrize("rate", OPUS_SAMPLE_RATES_HZ)
def test_every_rate_packets_decode_to_exactly_20_ms(rate: int) -> None:
    enc = OpusStreamEncoder(rate)
    assert enc.samples_per_frame == rate * FRAME_DURATION_MS // 1000
    packets = enc.encode(_sine(300, rate, rate // 2)) + enc.flush()
    assert len(packets) == 25
    assert all(0 < len(p) < 400 for p in packets)
    for decoder_rate in {rate, 48000}:
        dec = OpusStreamDecoder(decoder_rate)
        for p in packets:
            assert len(dec.decode(p)) == decoder_rate // 50
        assert dec.packets_decoded == 25 and dec.samples_decoded == 25 * decoder_rate // 50


@pytest.mark.parametrize("rate", OPUS_SAMPLE_RATES_HZ)
@pytest.mark.parametrize("application", ["audio", "voip"])
def test_codec_delay_constant_matches_libopus_lookahead(rate: int, application: str) -> None:
    enc = OpusStreamEncoder(rate, application=application)  # type: ignore[arg-type]
    assert enc._encoder.lookahead == codec_delay_samples(rate) == enc.codec_delay_samples
    assert codec_delay_samples(rate) == round(CODEC_DELAY_MS * rate / 1000)
    assert codec_delay_samples(24000) == 156 and codec_delay_samples(48000) == 312


def test_round_trip_sine_correlates_after_codec_delay() -> None:
    rate = 24000
    x = _sine(440, rate, rate)
    enc = OpusStreamEncoder(rate)
    y = OpusStreamDecoder(rate).decode_all(enc.encode(x) + enc.flush())
    assert len(y) == len(x)
    d = codec_delay_samples(rate)
    n = len(x) - d
    assert _corr(x[:n], y[d : d + n]) > 0.9


@pytest.mark.parametrize("rate", OPUS_SAMPLE_RATES_HZ)
@pytest.mark.parametrize("decoder_rate", [None, 48000])
def test_codec_delay_is_the_best_alignment(rate: int, decoder_rate: int | None) -> None:
    # A chirp correlates sharply; the best lag must be exactly the documented delay
    # (at the decoder's rate, whatever rate the encoder ran at).
    drate = decoder_rate or rate
    x = _chirp(rate, 1.0)
    enc = OpusStreamEncoder(rate)
    y = OpusStreamDecoder(drate).decode_all(enc.encode(x) + enc.flush())
    ref = resample(x, rate, drate)
    d = codec_delay_samples(drate)
    n = len(ref) - 3 * d
    scores = {lag: _corr(ref[:n], y[lag : lag + n]) for lag in range(2 * d + 1)}
    assert max(scores, key=scores.__getitem__) == d
    assert scores[d] > 0.95


def test_decoder_conceals_lost_packets_and_rejects_corrupt_ones() -> None:
    enc = OpusStreamEncoder(24000)
    dec = OpusStreamDecoder(24000)
    dec.decode_all(enc.encode(_sine(440, 24000, 4800)))
    assert len(dec.decode(b"")) == 480  # lost packet: 20 ms of concealment
    with pytest.raises(InvalidInputError, match="corrupt Opus packet"):
        dec.decode(b"\xff\xff\xff")
    assert len(OpusStreamDecoder().decode_all([])) == 0


def test_non_finite_input_is_encoded_not_fatal() -> None:
    enc = OpusStreamEncoder(24000)
    x = _sine(440, 24000, 960)
    x[10] = np.nan
    x[500] = np.inf
    packets = enc.encode(x)
    assert len(packets) == 2 and enc.encode_failures == 0
    assert np.isfinite(OpusStreamDecoder(24000).decode_all(packets)).all()


# ---- failures ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc", [opuslib.OpusError(-3), RuntimeError("boom")], ids=["OpusError", "RuntimeError"]
)
def test_a_failed_frame_becomes_silence_logged_and_counted(
    exc: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    rate = 24000
    x = _sine(440, rate, 10 * 480 + 100)
    enc = OpusStreamEncoder(rate)
    _fail_on_calls(enc, {3}, exc)
    before = encode_failures_total()
    with caplog.at_level(logging.WARNING, logger="voicelane.common.audio.opus"):
        packets = enc.encode(x[:1000]) + enc.encode(x[1000:]) + enc.flush()
    assert len(packets) == 11  # no gap in the timeline
    assert enc.packets_emitted == 11 and enc.next_pts_ms == 220
    assert enc.encode_failures == 1
    assert encode_failures_total() == before + 1
    assert packets[2] == enc.silence_packet
    assert all(p != enc.silence_packet for i, p in enumerate(packets) if i != 2)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "frame 2 " in warnings[0].getMessage()
    assert type(exc).__name__ in warnings[0].getMessage()
    # decoded: frame 2 is silent (past the overlap with frame 1), its neighbours are not
    y = OpusStreamDecoder(rate).decode_all(packets)
    assert len(y) == 11 * 480

    def rms(a: PcmF32) -> float:
        return float(np.sqrt(np.mean(a.astype(np.float64) ** 2)))

    assert rms(y[2 * 480 + 120 : 3 * 480]) < 0.01
    assert rms(y[1 * 480 : 2 * 480]) > 0.2 and rms(y[4 * 480 : 5 * 480]) > 0.2


def test_silence_packet_decodes_to_silence() -> None:
    enc = OpusStreamEncoder(24000)
    pcm = OpusStreamDecoder(24000).decode(enc.silence_packet)
    assert len(pcm) == 480 and np.max(np.abs(pcm)) < 1e-3


def test_every_frame_failing_still_gives_a_full_timeline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    enc = OpusStreamEncoder(16000)
    _fail_on_calls(enc, set(range(1, 100)), opuslib.OpusError(-3))
    before = encode_failures_total()
    with caplog.at_level(logging.WARNING, logger="voicelane.common.audio.opus"):
        packets = enc.encode(_sine(440, 16000, 16000)) + enc.flush()
    assert len(packets) == 50 and set(packets) == {enc.silence_packet}
    assert enc.encode_failures == 50 and encode_failures_total() == before + 50
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 50


def test_failures_in_the_flushed_frame_are_handled() -> None:
    enc = OpusStreamEncoder(24000)
    _fail_on_calls(enc, {2}, RuntimeError("flush frame"))
    packets = enc.encode(_sine(440, 24000, 700)) + enc.flush()
    assert len(packets) == 2 and packets[1] == enc.silence_packet
    assert enc.encode_failures == 1


# ---- validation --------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [0, 22050, 44100, 96000, 7999])
def test_unsupported_rates(rate: int) -> None:
    with pytest.raises(UnsupportedFormatError, match="8000, 12000, 16000, 24000, 48000"):
        OpusStreamEncoder(rate)
    with pytest.raises(UnsupportedFormatError):
        OpusStreamDecoder(rate)
    assert issubclass(UnsupportedFormatError, InvalidInputError)


def test_bad_parameters() -> None:
    with pytest.raises(InvalidInputError, match="application"):
        OpusStreamEncoder(24000, application="music")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="bitrate"):
        OpusStreamEncoder(24000, bitrate_bps=100)
    with pytest.raises(InvalidInputError, match="complexity"):
        OpusStreamEncoder(24000, complexity=11)
    with pytest.raises(InvalidInputError):
        OpusStreamEncoder(24000).encode(np.zeros((2, 480), dtype=np.float32))


def test_bitrate_is_applied() -> None:
    x = _chirp(24000, 2.0)
    sizes = {}
    for bitrate in (12000, 64000):
        enc = OpusStreamEncoder(24000, bitrate_bps=bitrate)
        sizes[bitrate] = sum(len(p) for p in enc.encode(x) + enc.flush())
    # 100 packets; CBR-ish VBR lands near bitrate / 8 * 2 s
    assert sizes[12000] < sizes[64000]
    assert sizes[64000] == pytest.approx(64000 / 8 * 2, rel=0.25)
