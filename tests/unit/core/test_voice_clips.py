"""Reference clips (voicelane.core.voice_clips): each accepted format in, Ogg Opus stored,
the same voice back at 24 kHz; and every refusal."""

from __future__ import annotations

import hashlib
import io

import av
import numpy as np
import pytest

from voicelane.common.audio import AudioFormat, PcmF32, open_writer, probe, resample
from voicelane.common.errors import InvalidInputError, TextTooLargeError
from voicelane.core.voice_clips import (
    CLIP_SAMPLE_RATE_HZ,
    StoredClip,
    decode_clip,
    prepare_clip,
)


def prepare(raw: bytes, *, max_bytes: int = 512 * 1024) -> StoredClip:
    return prepare_clip(raw, min_s=3.0, max_s=30.0, max_bytes=max_bytes)


def voice_like(duration_s: float, rate_hz: int) -> PcmF32:
    """A vowel-ish sound: a 150 Hz fundamental with harmonics, its loudness moving."""
    t = np.arange(int(duration_s * rate_hz)) / rate_hz
    tone = sum(np.sin(2 * np.pi * 150 * k * t) / k for k in range(1, 6))
    envelope = 0.5 + 0.4 * np.sin(2 * np.pi * 3 * t)
    return (0.25 * tone * envelope).astype(np.float32)


def encoded(pcm: PcmF32, rate_hz: int, fmt: AudioFormat) -> bytes:
    target = io.BytesIO()
    with open_writer(target, fmt, rate_hz) as writer:
        writer.write(pcm)
    return target.getvalue()


def stereo_wav(left: PcmF32, right: PcmF32, rate_hz: int) -> bytes:
    target = io.BytesIO()
    with av.open(target, mode="w", format="wav") as container:
        stream = container.add_stream("pcm_s16le", rate=rate_hz, layout="stereo")
        samples = (np.stack([left, right]).T.reshape(1, -1) * 32767).astype(np.int16)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="stereo")
        frame.sample_rate = rate_hz
        frame.pts = 0
        container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    return target.getvalue()


def similarity(a: PcmF32, b: PcmF32) -> float:
    """Correlation of two signals over their common length (1: the same sound)."""
    n = min(len(a), len(b))
    return float(np.corrcoef(a[:n], b[:n])[0, 1])


@pytest.mark.parametrize(
    ("fmt", "rate_hz"),
    [
        (AudioFormat.WAV, 44_100),
        (AudioFormat.FLAC, 16_000),
        (AudioFormat.MP3, 24_000),
        (AudioFormat.OGG, 48_000),
    ],
)
def test_a_clip_is_stored_as_ogg_opus_and_comes_back_at_24_khz(
    fmt: AudioFormat, rate_hz: int
) -> None:
    original = voice_like(5.0, rate_hz)
    stored = prepare(encoded(original, rate_hz, fmt))
    assert stored.source_format == fmt.value
    assert stored.sha256 == hashlib.sha256(stored.audio).hexdigest()
    info = probe(stored.audio)
    assert (info.format_name, info.codec, info.channels) == ("ogg", "opus", 1)
    assert info.sample_rate_hz == CLIP_SAMPLE_RATE_HZ
    assert len(stored.audio) < 48_000 * 5 / 8 * 1.2  # 48 kbps, give or take the container
    assert stored.duration_s == pytest.approx(5.0, abs=0.06)  # mp3's padding: < 2 ms

    back = decode_clip(stored.audio)
    assert back.dtype == np.float32 and back.ndim == 1
    assert len(back) == pytest.approx(5.0 * CLIP_SAMPLE_RATE_HZ, abs=0.06 * 24_000)
    expected = resample(original, rate_hz, CLIP_SAMPLE_RATE_HZ)
    if fmt is AudioFormat.MP3:
        expected = expected[: len(back)]
    assert similarity(back, expected) > 0.98
    assert float(np.sqrt(np.mean(back**2))) == pytest.approx(
        float(np.sqrt(np.mean(expected**2))), rel=0.1
    )


def test_stereo_is_averaged_to_mono() -> None:
    left = voice_like(4.0, 24_000)
    stored = prepare(stereo_wav(left, np.zeros_like(left), 24_000))
    back = decode_clip(stored.audio)
    assert similarity(back, left * np.float32(0.5)) > 0.98
    assert float(np.abs(back).max()) == pytest.approx(float(np.abs(left).max()) / 2, rel=0.1)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "not audio voicelane reads"),
        (b"hello world " * 100, "not audio voicelane reads"),
        (b"RIFF\x00\x00\x00\x00WAVEfmt ", "not audio voicelane reads"),
        (encoded(voice_like(2.0, 24_000), 24_000, AudioFormat.WAV), "2.0 s long; a reference"),
        (encoded(np.zeros(24_000 * 5, np.float32), 24_000, AudioFormat.FLAC), "silent"),
        (encoded(voice_like(31.0, 8_000), 8_000, AudioFormat.FLAC), "longer than 30 s"),
    ],
    ids=["empty", "text", "truncated wav", "too short", "silent", "too long"],
)
def test_bad_clips_are_refused_naming_the_clip(raw: bytes, message: str) -> None:
    with pytest.raises(InvalidInputError) as error:
        prepare(raw)
    assert error.value.field == "clip" and message in error.value.message
    assert error.value.code == "invalid_input"


def test_a_clip_that_decodes_to_hours_is_refused_without_decoding_it_all() -> None:
    """Ten minutes of silence are 60 KB of FLAC; decoding stops at the bound."""
    target = io.BytesIO()
    with open_writer(target, AudioFormat.FLAC, 8_000) as writer:
        for _ in range(60):
            writer.write(np.zeros(80_000, np.float32))
    with pytest.raises(InvalidInputError, match="longer than 30 s"):
        prepare(target.getvalue())


def test_a_container_other_than_the_four_is_refused() -> None:
    target = io.BytesIO()
    with av.open(target, mode="w", format="aiff") as container:
        stream = container.add_stream("pcm_s16be", rate=16_000, layout="mono")
        samples = (voice_like(4.0, 16_000) * 32767).astype(np.int16).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = 16_000
        frame.pts = 0
        container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    with pytest.raises(InvalidInputError, match="aiff is not taken; send WAV, Ogg, MP3 or FLAC"):
        prepare(target.getvalue())


def test_stored_audio_over_its_bound_is_too_large() -> None:
    raw = encoded(voice_like(10.0, 24_000), 24_000, AudioFormat.WAV)
    with pytest.raises(TextTooLargeError) as error:
        prepare(raw, max_bytes=10_000)
    assert error.value.field == "clip" and "at most 10,000" in error.value.message
    assert error.value.http_status == 413
