"""A tenant voice's reference clip (zero-shot): its format and bounds, for the front that
stores it and the worker that renders with it.

A clip is mono float32 PCM at 24 kHz (ChatTTS's rate; the front resamples uploads), between
:data:`MIN_CLIP_S` and :data:`MAX_CLIP_S` seconds, with what is said in it
(:data:`MAX_TRANSCRIPT_CHARS` at most). ChatTTS turns it into audio tokens (one per 512
samples, 21.3 ms) that every row of that voice carries in its prompt, beside its
transcript: a longer clip costs prompt tokens and KV cache on every utterance
(docs/chattts.md, "Tenant voices").

Import-light: numpy only.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from voicelane.common.errors import InvalidInputError

CLIP_SAMPLE_RATE_HZ = 24000
MIN_CLIP_S = 1.0
"""Shorter clips carry too little of a voice to imitate."""
MAX_CLIP_S = 20.0
"""938 audio tokens in every prompt of the voice; 3-10 s is the recommended length."""
MAX_TRANSCRIPT_CHARS = 500
"""A clip's transcript, at most (20 s of speech is about 300 characters of English)."""

ClipPcm = npt.NDArray[np.float32]


def check_clip_pcm(pcm: npt.ArrayLike, *, field: str = "clip") -> ClipPcm:
    """The clip as contiguous float32 mono samples at 24 kHz; :class:`InvalidInputError`
    when it is not 1-D, not finite, or shorter or longer than the bounds."""
    array = np.asarray(pcm)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.floating):
        raise InvalidInputError(f"{field}: mono float samples expected", field=field)
    seconds = array.size / CLIP_SAMPLE_RATE_HZ
    if not MIN_CLIP_S <= seconds <= MAX_CLIP_S:
        raise InvalidInputError(
            f"{field}: a reference clip lasts {MIN_CLIP_S:g} to {MAX_CLIP_S:g} seconds "
            f"(this one: {seconds:.2f} s)",
            field=field,
        )
    if not np.isfinite(array).all():
        raise InvalidInputError(f"{field}: samples must be finite", field=field)
    return np.ascontiguousarray(array, dtype=np.float32)


def check_transcript(text: str, *, field: str = "transcript") -> str:
    """The transcript, stripped; :class:`InvalidInputError` when empty or too long."""
    stripped = text.strip()
    if not stripped:
        raise InvalidInputError(f"{field}: a reference clip needs its transcript", field=field)
    if len(stripped) > MAX_TRANSCRIPT_CHARS:
        raise InvalidInputError(
            f"{field}: at most {MAX_TRANSCRIPT_CHARS} characters (this one: {len(stripped)})",
            field=field,
        )
    return stripped
