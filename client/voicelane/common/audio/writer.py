"""What every audio file writer is: :class:`AudioFormat` (the formats voicelane writes) and
:class:`AudioFileWriter` (the writers' contract).

Apart from :mod:`voicelane.common.audio.files` (the PyAV writers and ``open_writer``) so that
another writer module — :mod:`voicelane.common.audio.ogg_parallel` — builds on them without
importing ``files``, which hands Ogg to it. ``files`` re-exports both.
"""

from __future__ import annotations

import abc
from enum import StrEnum
from types import TracebackType
from typing import Self

import numpy as np

from voicelane.common.audio.pcm import PcmF32, as_pcm_f32


class AudioFormat(StrEnum):
    """The file formats voicelane writes. ``OGG`` is always Opus in Ogg."""

    OGG = "ogg"
    MP3 = "mp3"
    WAV = "wav"
    FLAC = "flac"
    M4B = "m4b"

    @property
    def extension(self) -> str:
        """File name extension without the dot: ``"ogg"``, ``"mp3"``, ``"wav"``, ``"flac"``,
        ``"m4b"``."""
        return self.value

    @property
    def mime_type(self) -> str:
        return _MIME_TYPES[self]


_MIME_TYPES: dict[AudioFormat, str] = {
    AudioFormat.OGG: "audio/ogg",
    AudioFormat.MP3: "audio/mpeg",
    AudioFormat.WAV: "audio/wav",
    AudioFormat.FLAC: "audio/flac",
    AudioFormat.M4B: "audio/mp4",
}


class AudioFileWriter(abc.ABC):
    """Writes mono float32 PCM at ``sample_rate_hz`` to one file; see :func:`open_writer`.

    ``write`` any number of pieces of any length, then ``close`` (or use ``with``). ``close``
    flushes the encoder and finalizes the container; it is idempotent. A file object target is
    flushed but not closed.
    """

    def __init__(self, fmt: AudioFormat | None, sample_rate_hz: int) -> None:
        self.format = fmt
        """The file format; None for AAC in ADTS, a stream encoding (:func:`open_adts_writer`)."""
        self.sample_rate_hz = sample_rate_hz
        self._samples = 0
        self._closed = False

    @property
    def samples_written(self) -> int:
        return self._samples

    @property
    def duration_s(self) -> float:
        """Samples written / sample rate."""
        return self._samples / self.sample_rate_hz

    @property
    def closed(self) -> bool:
        return self._closed

    def write(self, pcm: PcmF32) -> None:
        """Append mono float32 PCM (NaN is written as 0, +/-inf as +/-1)."""
        if self._closed:
            raise ValueError("write() on a closed AudioFileWriter")
        arr = as_pcm_f32(pcm)
        if not len(arr):
            return
        if not np.isfinite(arr).all():
            arr = np.nan_to_num(arr, nan=0.0, posinf=1.0, neginf=-1.0)
        self._write(arr)
        self._samples += len(arr)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # already failing: finalize what we can, keep the original error
            self.close()
        except Exception:
            return

    @abc.abstractmethod
    def _write(self, pcm: PcmF32) -> None: ...

    @abc.abstractmethod
    def _close(self) -> None: ...
