"""Measuring decoded speech: where its sounds start and stop, and the silences between them
(what word-timing and SSML-break tests compare against)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import numpy.typing as npt

from voicelane.common.audio import AudioFormat, decode_to_pcm
from voicelane.core.speech_text import PreparedText
from voicelane.workers.render import EmbeddedRenderer, RenderResult

FRAME_MS = 2
THRESHOLD = 10 ** (-40 / 20)
"""A frame whose peak reaches -40 dBFS is sound."""


def sound_runs(
    pcm: npt.NDArray[np.float32],
    rate_hz: int,
    *,
    min_gap_ms: int = 60,
    threshold: float = THRESHOLD,
) -> list[tuple[int, int]]:
    """``(start_ms, end_ms)`` of each stretch of sound, in 2 ms frames; silences shorter than
    ``min_gap_ms`` (inside a word, a stop's closure) do not split a stretch."""
    frame = max(1, rate_hz * FRAME_MS // 1000)
    count = len(pcm) // frame
    loud = np.abs(pcm[: count * frame]).reshape(count, frame).max(axis=1) >= threshold
    runs: list[list[int]] = []
    index = 0
    while index < count:
        if not loud[index]:
            index += 1
            continue
        end = index
        while end < count and loud[end]:
            end += 1
        start_ms, end_ms = index * FRAME_MS, end * FRAME_MS
        if runs and start_ms - runs[-1][1] < min_gap_ms:
            runs[-1][1] = end_ms
        else:
            runs.append([start_ms, end_ms])
        index = end
    return [(a, b) for a, b in runs]


def gaps_ms(runs: list[tuple[int, int]]) -> list[int]:
    """The silences between consecutive stretches of sound."""
    return [b[0] - a[1] for a, b in itertools.pairwise(runs)]


def rms(pcm: npt.NDArray[np.float32]) -> float:
    return float(np.sqrt(np.mean(np.square(pcm, dtype=np.float64))))


SILENCE = 10 ** (-45 / 20)
"""Below -45 dBFS is silence (what the renderer trims around an SSML break)."""


def longest_silence_ms(pcm: npt.NDArray[np.float32], rate_hz: int) -> float:
    """The longest run of samples below :data:`SILENCE`, in ms."""
    quiet = np.abs(pcm) < SILENCE
    if not quiet.any():
        return 0.0
    # Lengths of the runs of True: between the edges of the padded boolean array.
    edges = np.flatnonzero(np.diff(np.concatenate(([0], quiet.astype(np.int8), [0]))))
    return float((edges[1::2] - edges[::2]).max()) * 1000 / rate_hz


def render_plan(
    renderer: EmbeddedRenderer,
    text: str,
    plan: PreparedText,
    path: Path,
    *,
    rate_hz: int = 24000,
) -> tuple[RenderResult, npt.NDArray[np.float32]]:
    """Render ``text`` as if it had been prepared as ``plan`` (segments with breaks, voicings
    or marks set by hand), to WAV: the result and the decoded audio."""
    original = renderer.prepare
    renderer.prepare = lambda *_args, **_kwargs: plan  # type: ignore[method-assign]
    try:
        result = renderer.render(
            text, path, fmt=AudioFormat.WAV, sample_rate_hz=rate_hz, timings=True
        )
    finally:
        renderer.prepare = original  # type: ignore[method-assign]
    pcm, decoded_rate = decode_to_pcm(path)
    assert decoded_rate == rate_hz
    return result, pcm
