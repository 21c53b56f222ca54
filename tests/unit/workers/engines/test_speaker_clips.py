"""The worker's store of reference clips (workers/engines/speaker_clips.py): no torch."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from voicelane.common.errors import InvalidInputError
from voicelane.workers.engines.speaker_clips import (
    MAX_CLIP_S,
    MIN_CLIP_S,
    SpeakerClips,
    check_clip_pcm,
)

SECOND = 24000


def clip(seconds: float, value: float = 0.1) -> np.ndarray:
    return np.full(round(seconds * SECOND), value, dtype=np.float32)


def test_a_clip_put_comes_back_read_only_and_a_copy() -> None:
    clips = SpeakerClips()
    source = clip(1.5)
    clips.put("t/a", source)
    source[:] = 0.9  # the caller's array changing afterwards changes nothing
    got = clips.get("t/a")
    assert got is not None
    assert got.dtype == np.float32
    assert float(got.max()) == pytest.approx(0.1)
    assert not got.flags.writeable
    assert "t/a" in clips
    assert clips.get("t/b") is None
    assert len(clips) == 1
    assert clips.bytes_held == got.nbytes


def test_the_least_recently_used_clip_leaves_past_the_count() -> None:
    clips = SpeakerClips(max_clips=2)
    clips.put("a", clip(1))
    clips.put("b", clip(1))
    assert clips.get("a") is not None  # a is now the most recent
    clips.put("c", clip(1))
    assert "b" not in clips
    assert "a" in clips
    assert "c" in clips


def test_the_least_recently_used_clips_leave_past_the_bytes() -> None:
    one_second = SECOND * 4
    clips = SpeakerClips(max_bytes=5 * one_second)
    clips.put("a", clip(2))
    clips.put("b", clip(2))
    clips.put("c", clip(2))  # 6 s > 5 s: a leaves
    assert [ref in clips for ref in "abc"] == [False, True, True]
    assert clips.bytes_held == 4 * one_second
    clips.put("b", clip(1))  # replaced, not added
    assert clips.bytes_held == 3 * one_second
    clips.discard("c")
    clips.discard("nothing")
    assert clips.bytes_held == one_second
    clips.clear()
    assert len(clips) == 0
    assert clips.bytes_held == 0
    with pytest.raises(ValueError, match="exceeds max_bytes"):
        SpeakerClips(max_bytes=one_second).put("x", clip(2))


def test_a_clip_within_the_engines_bounds_comes_back_as_contiguous_float32() -> None:
    checked = check_clip_pcm(np.zeros(60000, dtype=np.float64)[::2])
    assert checked.dtype == np.float32
    assert checked.flags.c_contiguous
    assert checked.size == 30000
    assert check_clip_pcm(clip(MIN_CLIP_S)).size == MIN_CLIP_S * SECOND
    assert check_clip_pcm(clip(MAX_CLIP_S)).size == MAX_CLIP_S * SECOND


@pytest.mark.parametrize(
    ("pcm", "message"),
    [
        (clip(MIN_CLIP_S)[:-1], "0.5 to 30 s"),
        (clip(MAX_CLIP_S + 0.01), "0.5 to 30 s"),
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


def test_a_clip_out_of_bounds_is_refused() -> None:
    clips = SpeakerClips()
    with pytest.raises(InvalidInputError, match=r"this one: 0\.40 s"):
        clips.put("t/short", clip(0.4))
    with pytest.raises(ValueError, match="ref"):
        clips.put("", clip(1))
    assert len(clips) == 0


def test_threads_putting_and_getting_keep_the_bounds() -> None:
    clips = SpeakerClips(max_clips=8)
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for index in range(200):
                ref = f"r{(index + offset) % 20}"
                clips.put(ref, clip(1))
                got = clips.get(ref)
                assert got is None or got.size == SECOND
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(clips) == 8
    assert clips.bytes_held == 8 * SECOND * 4
