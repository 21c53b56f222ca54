"""Reference clips of tenant voices, in the worker's memory: where an engine finds the PCM of
``SpeakerDef.clip_ref`` (zero-shot voices).

The worker layer fetches a clip from the voice store (``decode_clip`` of
:mod:`voicelane.core.voice_clips`: mono float32 at 24 kHz) and :meth:`SpeakerClips.put`\\ s
it into :data:`CLIPS` before it submits an utterance of that voice; the engine reads it with
:meth:`SpeakerClips.get` when the row is planned (on its own thread) and keeps what it
computed from it, so a clip is needed only until its voice's first row. Bounded: the least
recently used clips leave first, past ``max_clips`` clips or ``max_bytes`` of samples.

:data:`MAX_CLIP_S` is the engines' ceiling (every row of the voice carries the clip in its
prompt); the fronts' ``voice_clip_max_s`` (default 30 s) should not exceed it.

Thread-safe; import-light (numpy, no engine).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import numpy.typing as npt

from voicelane.common.errors import InvalidInputError
from voicelane.core.voice_clips import CLIP_SAMPLE_RATE_HZ

MIN_CLIP_S = 0.5
"""Below this a clip makes too few audio tokens to speak from (the fronts ask for 3 s)."""
MAX_CLIP_S = 30.0
"""The longest clip an engine takes: ChatTTS carries 1406 audio tokens of it in every prompt
of the voice (its 4096 positions then leave room for 2048 steps and the texts)."""
DEFAULT_MAX_CLIPS = 1024
DEFAULT_MAX_BYTES = 128 << 20
"""128 MiB: 46 clips of the longest (30 s), 170 of 8 s."""

ClipPcm = npt.NDArray[np.float32]


def check_clip_pcm(pcm: npt.ArrayLike, *, field: str = "clip") -> ClipPcm:
    """The clip as contiguous float32 mono samples at 24 kHz; :class:`InvalidInputError`
    (permanent) when it is not 1-D floats, not finite, or outside the bounds above."""
    array = np.asarray(pcm)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.floating):
        raise InvalidInputError(f"{field}: mono float samples expected", field=field)
    seconds = array.size / CLIP_SAMPLE_RATE_HZ
    if not MIN_CLIP_S <= seconds <= MAX_CLIP_S:
        raise InvalidInputError(
            f"{field}: an engine takes a reference clip of {MIN_CLIP_S:g} to {MAX_CLIP_S:g} s "
            f"(this one: {seconds:.2f} s)",
            field=field,
        )
    if not np.isfinite(array).all():
        raise InvalidInputError(f"{field}: samples must be finite", field=field)
    return np.ascontiguousarray(array, dtype=np.float32)


class SpeakerClips:
    """A thread-safe, bounded LRU of clip ref → mono float32 PCM at 24 kHz."""

    def __init__(
        self, *, max_clips: int = DEFAULT_MAX_CLIPS, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        if max_clips < 1 or max_bytes < 1:
            raise ValueError("max_clips and max_bytes must be positive")
        self.max_clips = max_clips
        self.max_bytes = max_bytes
        self._clips: OrderedDict[str, ClipPcm] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, ref: str, pcm: npt.ArrayLike) -> None:
        """Keep ``pcm`` (mono, 24 kHz, within the bounds above; else
        :class:`InvalidInputError`) under ``ref``; evicts the least recently used clips past
        the bounds. A clip over ``max_bytes`` alone is not kept (ValueError)."""
        if not ref:
            raise ValueError("a clip needs its ref")
        clip = check_clip_pcm(pcm).copy()
        clip.setflags(write=False)
        if clip.nbytes > self.max_bytes:
            raise ValueError(f"a clip of {clip.nbytes} bytes exceeds max_bytes {self.max_bytes}")
        with self._lock:
            old = self._clips.pop(ref, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._clips[ref] = clip
            self._bytes += clip.nbytes
            while len(self._clips) > self.max_clips or self._bytes > self.max_bytes:
                _ref, evicted = self._clips.popitem(last=False)
                self._bytes -= evicted.nbytes

    def get(self, ref: str) -> ClipPcm | None:
        """The clip (read-only), or None when it is not here (never put, or evicted)."""
        with self._lock:
            clip = self._clips.get(ref)
            if clip is not None:
                self._clips.move_to_end(ref)
            return clip

    def __contains__(self, ref: object) -> bool:
        with self._lock:
            return ref in self._clips

    def discard(self, ref: str) -> None:
        """Forget a clip (its voice was deleted)."""
        with self._lock:
            clip = self._clips.pop(ref, None)
            if clip is not None:
                self._bytes -= clip.nbytes

    def clear(self) -> None:
        with self._lock:
            self._clips.clear()
            self._bytes = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._clips)

    @property
    def bytes_held(self) -> int:
        with self._lock:
            return self._bytes


CLIPS = SpeakerClips()
"""The process's clips: the worker puts, the engines get."""
