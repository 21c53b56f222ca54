"""Encodings a live stream can be delivered in, and the encoder of the byte-stream ones.

The real-time lane delivers audio in one of these :class:`StreamEncoding` values; the front
asks for the one it needs and the worker encodes it, so no front ever decodes and re-encodes:

* ``opus`` — raw 20 ms Opus packets (gRPC and WebSocket clients decode them);
* ``ogg`` (Ogg Opus), ``mp3``, ``wav``, ``flac`` — a file, produced as a byte stream
  (OpenAI's ``/v1/audio/speech``): the pieces concatenated are the whole file;
* ``aac`` — AAC-LC frames each behind an ADTS header (OpenAI's ``aac``, ``audio/aac``):
  streamable as it is, no index; it decodes with the encoder's 1024-sample priming at the
  start (ADTS has no edit list to trim it: :func:`~voicelane.common.audio.files.open_adts_writer`);
* ``pcm`` — raw 16-bit little-endian mono samples, no header (OpenAI's ``pcm``).

``m4b`` is deliberately not among them: MP4 writes its index after the audio and patches
sizes at the end, so it cannot be produced as a byte stream (``open_writer`` refuses a
non-seekable target for it); it is a file format for jobs and renders only.

:class:`ByteStreamEncoder` produces the byte-stream encodings from float32 PCM in pieces.
A WAV stream cannot know its length when it starts: its RIFF sizes are set to the maximum
(FFmpeg and browsers read such streams to their end). MP3 and Ogg written to a stream carry
no seek tables (see :mod:`voicelane.common.audio.files`). AAC's pieces are whole ADTS frames,
each ready once the encoder has seen the next ~0.1 s (its look-ahead and block size).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from voicelane.common.audio.files import (
    AAC_SAMPLE_RATES_HZ,
    AudioFileWriter,
    AudioFormat,
    allowed_sample_rates,
    open_adts_writer,
    open_writer,
)
from voicelane.common.audio.opus import OPUS_SAMPLE_RATES_HZ
from voicelane.common.audio.pcm import PcmF32, float_to_int16


class StreamEncoding(StrEnum):
    """How a stream's audio travels from the worker to the front."""

    OPUS = "opus"
    OGG = "ogg"
    MP3 = "mp3"
    WAV = "wav"
    FLAC = "flac"
    AAC = "aac"
    PCM = "pcm"

    @property
    def packets(self) -> bool:
        """Opus packets (20 ms each, timestamped), rather than pieces of one byte stream."""
        return self is StreamEncoding.OPUS

    @property
    def media_type(self) -> str:
        return _MEDIA_TYPES[self]


_MEDIA_TYPES = {
    StreamEncoding.OPUS: "audio/opus",
    StreamEncoding.OGG: "audio/ogg",
    StreamEncoding.MP3: "audio/mpeg",
    StreamEncoding.WAV: "audio/wav",
    StreamEncoding.FLAC: "audio/flac",
    StreamEncoding.AAC: "audio/aac",
    StreamEncoding.PCM: "audio/pcm",
}

_FILE_FORMATS = {
    StreamEncoding.OGG: AudioFormat.OGG,
    StreamEncoding.MP3: AudioFormat.MP3,
    StreamEncoding.WAV: AudioFormat.WAV,
    StreamEncoding.FLAC: AudioFormat.FLAC,
}


def stream_sample_rates(encoding: StreamEncoding) -> Sequence[int]:
    """The output sample rates an encoding can carry (a ``range`` for the PCM-based ones)."""
    if encoding is StreamEncoding.OPUS:
        return OPUS_SAMPLE_RATES_HZ
    if encoding is StreamEncoding.PCM:
        return allowed_sample_rates(AudioFormat.WAV)
    if encoding is StreamEncoding.AAC:
        return AAC_SAMPLE_RATES_HZ
    return allowed_sample_rates(_FILE_FORMATS[encoding])


class _Sink(io.RawIOBase):
    """A write-only, non-seekable file that hands out what was written since last asked."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self._parts.append(chunk)
        return len(chunk)

    def take(self) -> bytes:
        data, self._parts = b"".join(self._parts), []
        return data


def wav_stream_header(sample_rate_hz: int) -> bytes:
    """A 16-bit mono WAV header for a stream of unknown length (sizes at their maximum)."""
    unknown = 0xFFFFFFFF
    return (
        b"RIFF" + struct.pack("<I", unknown) + b"WAVE"
        + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate_hz, sample_rate_hz * 2, 2, 16)
        + b"data" + struct.pack("<I", unknown)
    )  # fmt: skip


class ByteStreamEncoder:
    """Float32 PCM in pieces → the bytes of a byte-stream encoding, as they become ready.

    ``encode`` returns what is ready (possibly nothing), ``close`` the rest; concatenated,
    everything returned is one valid file (or raw PCM). Not for ``opus`` packets: those come
    from :class:`~voicelane.common.audio.opus.OpusStreamEncoder`.
    """

    def __init__(
        self, encoding: StreamEncoding, sample_rate_hz: int, *, bitrate_bps: int | None = None
    ) -> None:
        if encoding.packets:
            raise ValueError("Opus packets come from OpusStreamEncoder")
        self.encoding = encoding
        self.sample_rate_hz = sample_rate_hz
        self.samples_in = 0
        self._sink = _Sink()
        self._writer: AudioFileWriter | None = None
        self._header = b""
        fmt = _FILE_FORMATS.get(encoding)
        if encoding is StreamEncoding.WAV:
            self._header = wav_stream_header(sample_rate_hz)
        elif encoding is StreamEncoding.AAC:  # the bitrate given is Ogg's: AAC keeps its own
            self._writer = open_adts_writer(self._sink, sample_rate_hz)  # type: ignore[arg-type]
        elif fmt is not None:
            bitrate = bitrate_bps if fmt is AudioFormat.OGG else None
            self._writer = open_writer(self._sink, fmt, sample_rate_hz, bitrate_bps=bitrate)  # type: ignore[arg-type]

    def encode(self, pcm: PcmF32) -> bytes:
        self.samples_in += len(pcm)
        header, self._header = self._header, b""
        if self._writer is None:
            return header + float_to_int16(pcm).astype("<i2").tobytes()
        self._writer.write(pcm)
        return header + self._sink.take()

    def close(self) -> bytes:
        header, self._header = self._header, b""
        if self._writer is not None:
            self._writer.close()
        return header + self._sink.take()
