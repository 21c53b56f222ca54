"""Reference clips of tenant voices: an upload checked and stored as Ogg Opus, and the stored
clip back as the PCM an engine takes.

A clip comes as WAV, Ogg (Opus or Vorbis), MP3 or FLAC (:data:`CLIP_FORMATS`; any rate, any
channels). It is decoded with PyAV **bounded**: decoding stops as soon as it passes the longest
clip allowed, so a small file that would decode to hours of audio costs no more than a long
clip. Its channels are averaged, it is resampled to :data:`CLIP_SAMPLE_RATE_HZ` (ChatTTS's
rate), checked (:func:`prepare_clip`: duration within bounds, not silent) and stored as Ogg
Opus, mono, 24 kHz, :data:`CLIP_BITRATE_BPS` — 30 s are about 180 KB, where 16-bit PCM would
be 1.4 MB — transparent for speech. :func:`decode_clip` gives it back as float32 mono at
24 kHz.

Import-light: PyAV and numpy are imported when a clip is read or written.
"""

from __future__ import annotations

import hashlib
import io
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from voicelane.common.errors import InvalidInputError, TextTooLargeError

if TYPE_CHECKING:
    from voicelane.common.audio.pcm import PcmF32

__all__ = [
    "CLIP_BITRATE_BPS",
    "CLIP_FORMATS",
    "CLIP_SAMPLE_RATE_HZ",
    "SILENT_PEAK",
    "StoredClip",
    "decode_clip",
    "prepare_clip",
]

CLIP_SAMPLE_RATE_HZ = 24_000
"""The rate a clip is stored at and comes back at (ChatTTS's)."""
CLIP_BITRATE_BPS = 48_000
"""Of the stored Ogg Opus."""
CLIP_FORMATS = frozenset({"wav", "ogg", "mp3", "flac"})
"""The containers a clip may come in (FFmpeg's names)."""
SILENT_PEAK = 1e-3
"""A clip whose loudest sample is below this (-60 dBFS) holds no voice."""


@dataclass(frozen=True, slots=True)
class StoredClip:
    """A clip as it is stored."""

    audio: bytes
    """Ogg Opus, mono, :data:`CLIP_SAMPLE_RATE_HZ`."""
    sha256: str
    """Of ``audio``."""
    duration_s: float
    source_format: str
    """The container it came in (``wav``...)."""


def prepare_clip(
    raw: bytes, *, min_s: float, max_s: float, max_bytes: int, field: str = "clip"
) -> StoredClip:
    """An uploaded clip checked and encoded for storage. Not audio of :data:`CLIP_FORMATS`,
    outside ``min_s``..``max_s`` or silent: InvalidInputError; stored audio over ``max_bytes``:
    TextTooLargeError (413). Both name ``field``."""
    pcm, source_format = _decode_bounded(raw, max_s=max_s, field=field)
    duration_s = len(pcm) / CLIP_SAMPLE_RATE_HZ
    if not min_s <= duration_s <= max_s:
        raise InvalidInputError(
            f"{field}: the clip is {duration_s:.1f} s long; a reference clip is {min_s:g} to "
            f"{max_s:g} s",
            field=field,
        )
    if float(abs(pcm).max()) < SILENT_PEAK:
        raise InvalidInputError(f"{field}: the clip is silent", field=field)
    audio = _encode(pcm)
    if len(audio) > max_bytes:
        raise TextTooLargeError(
            f"{field}: the clip is {len(audio):,} bytes stored; at most {max_bytes:,}",
            field=field,
        )
    return StoredClip(audio, hashlib.sha256(audio).hexdigest(), round(duration_s, 3), source_format)


def decode_clip(audio: bytes) -> PcmF32:
    """A stored clip (:attr:`StoredClip.audio`) as float32 mono PCM at
    :data:`CLIP_SAMPLE_RATE_HZ`."""
    from voicelane.common.audio import decode_to_pcm

    pcm, _ = decode_to_pcm(audio, CLIP_SAMPLE_RATE_HZ)
    return pcm


def _decode_bounded(raw: bytes, *, max_s: float, field: str) -> tuple[PcmF32, str]:
    """``raw`` decoded to mono float32 at 24 kHz, refused once it passes ``max_s``."""
    import av
    import av.error
    import numpy as np

    limit = int(max_s * CLIP_SAMPLE_RATE_HZ) + CLIP_SAMPLE_RATE_HZ // 10  # 0.1 s of slack
    unreadable = InvalidInputError(
        f"{field}: not audio voicelane reads (WAV, Ogg, MP3 or FLAC)", field=field
    )
    chunks: list[PcmF32] = []
    count = 0
    try:
        with av.open(io.BytesIO(raw), mode="r") as container:
            names = set(container.format.name.split(","))
            if not names & CLIP_FORMATS:
                raise InvalidInputError(
                    f"{field}: {container.format.name} is not taken; send WAV, Ogg, MP3 or FLAC",
                    field=field,
                )
            if not container.streams.audio:
                raise unreadable
            stream = container.streams.audio[0]
            source_format = sorted(names & CLIP_FORMATS)[0]
            resampler = av.AudioResampler(format="fltp", rate=CLIP_SAMPLE_RATE_HZ)
            for frame in itertools.chain(container.decode(stream), [None]):  # None: flush
                for out in resampler.resample(frame):
                    planes = out.to_ndarray().astype(np.float32, copy=False)
                    chunks.append(planes.mean(axis=0, dtype=np.float32))
                    count += len(chunks[-1])
                    if count > limit:
                        raise InvalidInputError(
                            f"{field}: the clip is longer than {max_s:g} s; a reference clip "
                            f"is at most {max_s:g} s",
                            field=field,
                        )
    except av.error.FFmpegError:
        raise unreadable from None
    except (ValueError, IndexError):  # PyAV on a stream it cannot describe
        raise unreadable from None
    pcm: PcmF32 = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
    return pcm, source_format


def _encode(pcm: PcmF32) -> bytes:
    from voicelane.common.audio import AudioFormat, open_writer

    target = io.BytesIO()
    with open_writer(
        target, AudioFormat.OGG, CLIP_SAMPLE_RATE_HZ, bitrate_bps=CLIP_BITRATE_BPS
    ) as writer:
        writer.write(pcm)
    return target.getvalue()
