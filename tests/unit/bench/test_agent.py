"""The agent bench's measure of word timings against the audio: voiced onsets of PCM, and each
sentence's first word against the nearest onset."""

from __future__ import annotations

import random

import numpy as np

from bench.agent import RATE_HZ, onsets_ms, pieces, sentence_starts, timing_errors_ms


def pcm(*spans_ms: tuple[int, int], total_ms: int = 2000) -> bytes:
    """A tone over each ``(start_ms, end_ms)``, silence elsewhere."""
    samples = np.zeros(RATE_HZ * total_ms // 1000, dtype="<i2")
    for start, end in spans_ms:
        t = np.arange(RATE_HZ * (end - start) // 1000)
        tone = (8000 * np.sin(2 * np.pi * 220 * t / RATE_HZ)).astype("<i2")
        samples[RATE_HZ * start // 1000 : RATE_HZ * start // 1000 + len(tone)] = tone
    return samples.tobytes()


def word(text: str, start: int, char_start: int) -> dict[str, int | str]:
    return {"text": text, "start_ms": start, "end_ms": start + 100, "char_start": char_start,
            "char_end": char_start + len(text)}  # fmt: skip


def test_onsets_follow_silences_of_50_ms() -> None:
    from bench.agent import voiced_frames

    audio = pcm((100, 400), (420, 600), (900, 1200))  # a 20 ms gap is no new onset
    assert onsets_ms(voiced_frames(audio)) == [100, 900]


def test_each_sentences_first_word_against_the_nearest_onset() -> None:
    text = "Hi there. Bye now."
    words = [word("Hi", 110, 0), word("there", 300, 3), word("Bye", 880, 10),
             word("now", 1000, 14)]  # fmt: skip
    assert [w["text"] for w in sentence_starts(text, words)] == ["Hi", "Bye"]
    errors = timing_errors_ms(text, words, pcm((100, 600), (900, 1200)))
    assert errors == [10.0, -20.0]


def test_pieces_rebuild_the_text() -> None:
    text = "The harbor was quiet in the early morning."
    parts = pieces(text, random.Random(1))
    assert "".join(parts) == text and len(parts) > 3
