"""A reference clip's format and bounds (core/reference_clip.py)."""

from __future__ import annotations

import numpy as np
import pytest

from voicelane.common.errors import InvalidInputError
from voicelane.core.reference_clip import (
    CLIP_SAMPLE_RATE_HZ,
    MAX_CLIP_S,
    MAX_TRANSCRIPT_CHARS,
    MIN_CLIP_S,
    check_clip_pcm,
    check_transcript,
)


def seconds(duration_s: float, dtype: type = np.float32) -> np.ndarray:
    return np.zeros(round(duration_s * CLIP_SAMPLE_RATE_HZ), dtype=dtype)


def test_a_clip_within_bounds_comes_back_as_contiguous_float32() -> None:
    clip = check_clip_pcm(seconds(2.5, np.float64)[::1])
    assert clip.dtype == np.float32
    assert clip.flags.c_contiguous
    assert clip.size == 2.5 * CLIP_SAMPLE_RATE_HZ
    assert check_clip_pcm(seconds(MIN_CLIP_S)).size == MIN_CLIP_S * CLIP_SAMPLE_RATE_HZ
    assert check_clip_pcm(seconds(MAX_CLIP_S)).size == MAX_CLIP_S * CLIP_SAMPLE_RATE_HZ


@pytest.mark.parametrize(
    ("pcm", "message"),
    [
        (seconds(MIN_CLIP_S)[:-1], "lasts 1 to 20 seconds"),
        (seconds(MAX_CLIP_S + 0.01), "lasts 1 to 20 seconds"),
        (np.zeros((2, 48000), dtype=np.float32), "mono"),
        (np.zeros(48000, dtype=np.int16), "mono float"),
        (np.full(48000, np.nan, dtype=np.float32), "finite"),
    ],
    ids=["too short", "too long", "stereo", "integers", "nan"],
)
def test_a_clip_out_of_bounds_is_a_permanent_error_on_the_clip(
    pcm: np.ndarray, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message) as caught:
        check_clip_pcm(pcm)
    assert caught.value.field == "clip"


def test_a_transcript_is_stripped_and_bounded() -> None:
    assert check_transcript("  hello there \n") == "hello there"
    assert len(check_transcript("a" * MAX_TRANSCRIPT_CHARS)) == MAX_TRANSCRIPT_CHARS
    with pytest.raises(InvalidInputError, match="needs its transcript") as caught:
        check_transcript(" \n")
    assert caught.value.field == "transcript"
    with pytest.raises(InvalidInputError, match="at most 500"):
        check_transcript("a" * (MAX_TRANSCRIPT_CHARS + 1))
