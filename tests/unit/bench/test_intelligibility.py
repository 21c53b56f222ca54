"""The intelligibility check's own arithmetic: words, word errors, the listener's resampler
and file reader (no recognizer needed: pocketsphinx is only loaded to transcribe)."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest

from bench.intelligibility import (
    decode_file,
    load_sentences,
    normalize_words,
    resample_fft,
    score,
    word_error_rate,
    word_errors,
)


def test_words_are_lower_case_without_punctuation() -> None:
    assert normalize_words("Can you tell me where the station is?") == [
        "can", "you", "tell", "me", "where", "the", "station", "is",
    ]  # fmt: skip
    assert normalize_words("  Hello,   world! ") == ["hello", "world"]


@pytest.mark.parametrize(
    ("heard", "spelled"),
    [
        ("we're going", "we are going"),
        ("the weather's nice", "the weather is nice"),
        ("I'm here", "i am here"),
        ("don't go", "do not go"),
        ("won't go", "will not go"),
        ("can't go", "can not go"),
        ("cannot go", "can not go"),
        ("they'll see", "they will see"),
        ("we’ve seen", "we have seen"),
    ],
)
def test_contractions_are_spelled_out(heard: str, spelled: str) -> None:
    assert normalize_words(heard) == spelled.split()


def test_word_errors_count_substitutions_deletions_and_insertions() -> None:
    def errors(heard: str) -> int:
        return word_errors(normalize_words("the cat sat on the mat"), normalize_words(heard))

    assert errors("the cat sat on the mat") == 0
    assert errors("the cat sat on the map") == 1  # substitution
    assert errors("the cat on the mat") == 1  # deletion
    assert errors("the cat sat down on the mat") == 1  # insertion
    assert errors("") == 6
    assert errors("a b c d e f g h") == 8


def test_word_error_rate_is_errors_over_reference_words() -> None:
    assert word_error_rate(["a", "b", "c", "d"], ["a", "x", "c"]) == pytest.approx(0.5)
    assert word_error_rate(["a"], ["b", "c", "d"]) == pytest.approx(3.0)  # insertions: above 1
    with pytest.raises(ValueError, match="no words"):
        word_error_rate([], ["a"])


def test_a_sentence_heard_with_a_contraction_scores_no_error() -> None:
    scored = score("We are going to the park.", "we're going to the park")
    assert (scored.errors, scored.words, scored.wer) == (0, 6, 0.0)


@pytest.mark.parametrize(("src_hz", "dst_hz"), [(22050, 16000), (24000, 16000), (48000, 16000)])
def test_resampling_keeps_a_tone_and_the_duration(src_hz: int, dst_hz: int) -> None:
    seconds = 0.5
    t = np.arange(round(seconds * src_hz)) / src_hz
    tone = (0.5 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)
    out = resample_fft(tone, src_hz, dst_hz)
    assert len(out) == round(seconds * dst_hz)
    expected = 0.5 * np.sin(2 * np.pi * 1000 * np.arange(len(out)) / dst_hz)
    assert np.max(np.abs(out - expected)) < 1e-3


def test_resampling_removes_what_the_new_rate_cannot_hold() -> None:
    src_hz = 48000
    t = np.arange(src_hz // 2) / src_hz
    above = np.sin(2 * np.pi * 12000 * t).astype(np.float32)  # above 16 kHz's Nyquist
    assert np.max(np.abs(resample_fft(above, src_hz, 16000))) < 1e-3


def test_a_wav_file_is_read_back_as_written(tmp_path: Path) -> None:
    rate_hz = 24000
    samples = (np.sin(np.arange(2400) / 7) * 20000).astype("<i2")
    path = tmp_path / "tone.wav"
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate_hz)
        out.writeframes(samples.tobytes())
    pcm, decoded_hz = decode_file(path)
    assert decoded_hz == rate_hz
    np.testing.assert_allclose(pcm, samples / 32767.0, atol=1e-6)


def test_the_sentence_set_loads_without_comments() -> None:
    sentences = load_sentences()
    assert sentences and not any(s.startswith("#") for s in sentences)
