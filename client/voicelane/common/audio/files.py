"""Audio files: formats, writers (Ogg/Opus, MP3, WAV, FLAC, M4B) and a decoding probe, via PyAV.

Writers
-------
:func:`open_writer` returns an :class:`AudioFileWriter` that takes mono float32 PCM in pieces
of any length. Durations are exact: a file decodes (with FFmpeg) to exactly the samples
written (mp3: see below for the 0..46-sample exception).

* **ogg** — Opus in Ogg (libopus, 32 kbps by default, complexity
  :data:`~voicelane.common.audio.opus.DEFAULT_COMPLEXITY`). The codec delay is written as the
  Ogg pre-skip and the last page's granule position marks the end, so decoders trim both ends:
  the decoded length (at 48 kHz, Opus always decodes at 48 kHz) equals samples written x
  48000 / rate.
* **mp3** — MPEG audio layer III (LAME, 64 kbps CBR by default). LAME adds an encoder delay
  (576 samples, plus the decoder's 529) and pads the last frame (frames are 576 samples at
  <= 24 kHz, 1152 above). On a *seekable* target (a path, a BytesIO) the muxer writes the
  LAME/Xing gapless header and FFmpeg (and most players) trim both: the start is always exact,
  and the decoded length equals the samples written, except when the last frame's padding is
  1..46 samples (about 8 % of lengths at <= 24 kHz, 4 % above; measured over every padding
  value at 24 and 44.1 kHz): then those padding samples (codec tail, not silence) stay, so
  the tolerance is ``0 <= extra <= 46`` samples (< 2 ms at 24 kHz, < 6 ms at 8 kHz). On a
  *non-seekable* file object the header cannot be written: decoders see the 1105 delay
  samples first and the whole padded last frame (< 0.1 s longer at 24 kHz).
* **wav** — 16-bit PCM (values clipped to [-1, 1], scaled by 32767, rounded). On a
  non-seekable target the RIFF sizes cannot be patched at the end; FFmpeg still reads every
  sample, stricter readers may not.
* **flac** — 16-bit FLAC, same quantization as wav.
* **m4b** — AAC-LC in an MP4 container (FFmpeg's native ``aac`` encoder, 64 kbps by default,
  major brand ``M4B``): the audiobook format; chapters, tags and a cover are added to a finished
  file by :mod:`voicelane.workers.book_audio`. The encoder's 1024-sample priming is written as
  the MP4 edit list, so the start is exact; FFmpeg does not trim the last frame's padding, so the
  file decodes (with FFmpeg) to the samples written rounded *up* to a whole 1024-sample frame
  (``0 <= extra <= 1023`` samples, :data:`M4B_MAX_EXTRA_SAMPLES`; players that honour the edit
  list's duration, as Apple's do, stop at the written end). MP4 writes its index at the end:
  m4b needs a path or a *seekable* file object (UnsupportedFormatError otherwise), which is why
  no live stream offers it (:mod:`voicelane.common.audio.stream`). On a path the index is moved
  to the front when the file is closed (FFmpeg's ``faststart``), so players can start before
  the whole file is downloaded.

A writer closed without any samples gives a valid empty wav or flac file; for ogg, mp3 and m4b
it gives headers without an audio packet, which FFmpeg cannot probe.

PCM is handed to PyAV in blocks of at least ~100 ms, aligned to the codec's frame size, so
per-call overhead stays negligible whatever the size of the pieces written.

Reading
-------
:func:`probe` and :func:`decode_to_pcm` decode the whole stream with PyAV and count samples;
container headers are not trusted for the duration. For Opus the decoded rate is 48 kHz; the
rate reported (and the default rate of :func:`decode_to_pcm`) is the original input rate from
the OpusHead, so a 24 kHz Ogg/Opus file probes as 24000 Hz.
"""

from __future__ import annotations

import io
import math
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO

import av
import av.error
import numpy as np
import numpy.typing as npt
from av.audio.frame import AudioFrame
from av.audio.stream import AudioStream
from av.container import InputContainer, OutputContainer

from voicelane.common.audio.opus import DEFAULT_COMPLEXITY, OPUS_SAMPLE_RATES_HZ
from voicelane.common.audio.pcm import PcmF32, float_to_int16, resample
from voicelane.common.audio.writer import AudioFileWriter as AudioFileWriter
from voicelane.common.audio.writer import AudioFormat as AudioFormat
from voicelane.common.errors import InvalidInputError, UnsupportedFormatError

_NAMES: dict[str, AudioFormat] = {
    "ogg": AudioFormat.OGG,
    "opus": AudioFormat.OGG,
    "mp3": AudioFormat.MP3,
    "wav": AudioFormat.WAV,
    "flac": AudioFormat.FLAC,
    "m4b": AudioFormat.M4B,
}

_MPEG1_RATES_HZ = (32000, 44100, 48000)
_MPEG2_RATES_HZ = (8000, 11025, 12000, 16000, 22050, 24000)  # MPEG-2 and MPEG-2.5
MP3_SAMPLE_RATES_HZ: tuple[int, ...] = (*_MPEG2_RATES_HZ, *_MPEG1_RATES_HZ)
AAC_SAMPLE_RATES_HZ: tuple[int, ...] = (
    8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000, 64000, 88200, 96000,
)  # fmt: skip
"""The AAC sampling frequencies (ISO 14496-3's table, less 7350 Hz) that m4b takes."""
PCM_MIN_SAMPLE_RATE_HZ = 8000
PCM_MAX_SAMPLE_RATE_HZ = 192000

DEFAULT_BITRATE_BPS: dict[AudioFormat, int] = {
    AudioFormat.OGG: 32000,
    AudioFormat.MP3: 64000,
    AudioFormat.M4B: 64000,
}
AAC_MIN_BITRATE_BPS = 16000
AAC_MAX_BITRATE_BPS = 320000
AAC_MAX_BITS_PER_SAMPLE = 6
"""FFmpeg's aac encoder holds at most 6144 bits per 1024-sample frame per channel (6 bits a
sample); it silently clamps a higher bitrate, so open_writer refuses one instead."""


def format_from_name(name: str) -> AudioFormat:
    """``"ogg"``, ``"opus"``, ``"mp3"``, ``"wav"``, ``"flac"`` or ``"m4b"`` (any case, blanks
    around ignored) as an :class:`AudioFormat`; anything else is UnsupportedFormatError."""
    fmt = _NAMES.get(name.strip().lower()) if isinstance(name, str) else None
    if fmt is None:
        supported = ", ".join(_NAMES)
        raise UnsupportedFormatError(
            f"unsupported audio format {name!r}; supported formats: {supported}"
        )
    return fmt


def format_from_path(path: str | os.PathLike[str]) -> AudioFormat:
    """The format named by a path's extension (``.ogg``/``.opus`` give OGG), any case."""
    _, ext = os.path.splitext(os.fspath(path))
    fmt = _NAMES.get(ext[1:].lower()) if ext else None
    if fmt is None:
        supported = ", ".join(f".{n}" for n in _NAMES)
        shown = repr(ext) if ext else "none"
        raise UnsupportedFormatError(
            f"unsupported audio file extension {shown} in {os.fspath(path)!r}; "
            f"supported extensions: {supported}"
        )
    return fmt


def allowed_sample_rates(fmt: AudioFormat) -> Sequence[int]:
    """The sample rates ``fmt`` accepts (a ``range`` for wav and flac)."""
    if fmt is AudioFormat.OGG:
        return OPUS_SAMPLE_RATES_HZ
    if fmt is AudioFormat.MP3:
        return MP3_SAMPLE_RATES_HZ
    if fmt is AudioFormat.M4B:
        return AAC_SAMPLE_RATES_HZ
    return range(PCM_MIN_SAMPLE_RATE_HZ, PCM_MAX_SAMPLE_RATE_HZ + 1)


def validate_sample_rate(fmt: AudioFormat, sample_rate_hz: int) -> None:
    """UnsupportedFormatError, listing the allowed rates, if ``fmt`` cannot hold that rate."""
    fmt = AudioFormat(fmt)
    allowed = allowed_sample_rates(fmt)
    ok = (
        isinstance(sample_rate_hz, int | np.integer)
        and not isinstance(sample_rate_hz, bool)
        and int(sample_rate_hz) in allowed
    )
    if not ok:
        if isinstance(allowed, range):
            listed = f"{allowed.start}..{allowed.stop - 1}"
        else:
            listed = ", ".join(str(r) for r in allowed)
        raise UnsupportedFormatError(
            f"{fmt.value} does not support a sample rate of {sample_rate_hz!r} Hz; "
            f"allowed: {listed}"
        )


def _validate_bitrate(fmt: AudioFormat | None, sample_rate_hz: int, bitrate_bps: int) -> None:
    """``fmt`` None: AAC in ADTS (:func:`open_adts_writer`), whose bounds are m4b's."""
    name = "aac" if fmt is None else fmt.value
    if fmt is AudioFormat.OGG:
        lo, hi = 6000, 510000
    elif fmt is AudioFormat.M4B or fmt is None:
        lo = AAC_MIN_BITRATE_BPS
        hi = min(AAC_MAX_BITRATE_BPS, AAC_MAX_BITS_PER_SAMPLE * sample_rate_hz)
    elif sample_rate_hz >= 32000:  # MPEG-1 layer III
        lo, hi = 32000, 320000
    else:  # MPEG-2 / 2.5 layer III
        lo, hi = 8000, 160000
    if not lo <= bitrate_bps <= hi:
        raise InvalidInputError(
            f"{name} at {sample_rate_hz} Hz takes a bitrate of {lo}..{hi} bps, got {bitrate_bps}"
        )


# ---- writers -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Codec:
    container: str
    codec: str
    sample_format: str  # the encoder's native format, so PyAV converts nothing


_CODECS: dict[AudioFormat, _Codec] = {
    AudioFormat.OGG: _Codec("ogg", "libopus", "flt"),
    AudioFormat.MP3: _Codec("mp3", "libmp3lame", "fltp"),
    AudioFormat.WAV: _Codec("wav", "pcm_s16le", "s16"),
    AudioFormat.FLAC: _Codec("flac", "flac", "s16"),
    AudioFormat.M4B: _Codec("ipod", "aac", "fltp"),  # FFmpeg's muxer for .m4a/.m4b
}

ADTS_CODEC = _Codec("adts", "aac", "fltp")
"""AAC-LC frames each behind an ADTS header: no index, no trailer, so it streams."""

M4B_BRAND = "M4B "
"""The MP4 major brand of an audiobook (iTunes' ``M4B``; FFmpeg's ipod muxer would say M4A)."""

MP3_MAX_EXTRA_SAMPLES = 46
"""The most samples an mp3 on a seekable target decodes longer than written (see above)."""

M4B_MAX_EXTRA_SAMPLES = 1023
"""The most samples an m4b decodes (with FFmpeg) longer than written: the last frame's padding."""

# Hand PyAV blocks of at least this long (seconds), whole codec frames where it has one.
_BLOCK_S = 0.1


def _open_output(
    target: str | os.PathLike[str] | BinaryIO,
    fmt: AudioFormat | None,
    sample_rate_hz: int,
    bitrate_bps: int | None,
) -> tuple[OutputContainer, AudioStream]:
    """``fmt``'s container (None: ADTS) on ``target`` with its one mono stream, the header
    written (:meth:`start_encoding`); closed again if any of that fails."""
    spec = ADTS_CODEC if fmt is None else _CODECS[fmt]
    file: str | BinaryIO = os.fspath(target) if isinstance(target, str | os.PathLike) else target
    options: dict[str, str] = {}
    container_options: dict[str, str] = {}
    if fmt is AudioFormat.OGG:
        options["compression_level"] = str(DEFAULT_COMPLEXITY)
    if fmt is AudioFormat.M4B:
        container_options["brand"] = M4B_BRAND
        if isinstance(file, str):  # faststart reopens the file by name: paths only
            container_options["movflags"] = "+faststart"
    container: OutputContainer = av.open(
        file, mode="w", format=spec.container, options=container_options
    )
    try:
        stream = container.add_stream(
            spec.codec, rate=sample_rate_hz, options=options, layout="mono"
        )
        if not isinstance(stream, AudioStream):  # pragma: no cover - codecs above are audio
            raise TypeError(f"{spec.codec} is not an audio codec")
        stream.format = spec.sample_format
        if bitrate_bps is not None:
            stream.bit_rate = bitrate_bps
        container.start_encoding()
    except BaseException:
        container.close()
        raise
    return container, stream


class _PyAVWriter(AudioFileWriter):
    def __init__(
        self,
        target: str | os.PathLike[str] | BinaryIO,
        fmt: AudioFormat | None,
        sample_rate_hz: int,
        bitrate_bps: int | None,
    ) -> None:
        super().__init__(fmt, sample_rate_hz)
        self._sample_format = (ADTS_CODEC if fmt is None else _CODECS[fmt]).sample_format
        self._container, stream = _open_output(target, fmt, sample_rate_hz, bitrate_bps)
        self._stream = stream
        frame_size = stream.codec_context.frame_size
        self._frame_size = frame_size if frame_size > 0 else 1
        min_block = math.ceil(sample_rate_hz * _BLOCK_S)
        self._block = -(-min_block // self._frame_size) * self._frame_size
        self._pending: list[PcmF32] = []
        self._pending_len = 0
        self._pts = 0

    def _write(self, pcm: PcmF32) -> None:
        self._pending.append(pcm.copy())  # the caller may reuse its buffer
        self._pending_len += len(pcm)
        if self._pending_len >= self._block:
            self._drain(final=False)

    def _drain(self, *, final: bool) -> None:
        if not self._pending_len:
            return
        data = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        n = len(data) if final else (len(data) // self._frame_size) * self._frame_size
        rest = data[n:]
        self._pending = [rest] if len(rest) else []
        self._pending_len = len(rest)
        if n:
            self._encode(data[:n])

    def _encode(self, pcm: PcmF32) -> None:
        samples: npt.NDArray[np.float32] | npt.NDArray[np.int16]
        if self._sample_format == "s16":
            samples = float_to_int16(pcm).reshape(1, -1)
        else:
            samples = np.ascontiguousarray(pcm).reshape(1, -1)
        frame = AudioFrame.from_ndarray(samples, format=self._sample_format, layout="mono")
        frame.sample_rate = self.sample_rate_hz
        frame.pts = self._pts
        self._pts += len(pcm)
        self._container.mux(self._stream.encode(frame))

    def _close(self) -> None:
        try:
            self._drain(final=True)
            self._container.mux(self._stream.encode(None))
        finally:
            self._container.close()


def open_writer(
    target: str | os.PathLike[str] | BinaryIO,
    fmt: AudioFormat,
    sample_rate_hz: int,
    *,
    bitrate_bps: int | None = None,
    encode_threads: int = 1,
) -> AudioFileWriter:
    """A writer of mono ``fmt`` audio at ``sample_rate_hz`` to a path or a binary file object.

    ``bitrate_bps`` applies to ogg (6000..510000, default 32000), mp3 (default 64000;
    8000..160000 below 32 kHz, 32000..320000 from 32 kHz) and m4b (default 64000, 48000 at
    8 kHz; 16000..min(320000, 6 x the rate)); it is ignored for wav and flac.
    ``encode_threads`` > 1 encodes ogg in pieces on that many threads
    (:class:`voicelane.common.audio.ogg_parallel.ParallelOggWriter`: for whole files; its
    first bytes come only once a 10 s piece is encoded, so never for a live stream); other
    formats ignore it.
    Raises UnsupportedFormatError for a rate the format cannot hold or an m4b on a non-seekable
    file object, InvalidInputError for a bad bitrate, and OSError when a path cannot be opened.
    """
    fmt = AudioFormat(fmt)
    validate_sample_rate(fmt, sample_rate_hz)
    if fmt is AudioFormat.M4B and not isinstance(target, str | os.PathLike):
        seekable = getattr(target, "seekable", None)
        if not (callable(seekable) and seekable()):
            raise UnsupportedFormatError(
                "m4b cannot be written to a stream: MP4 needs a path or a seekable file"
            )
    bitrate: int | None = None
    if fmt in DEFAULT_BITRATE_BPS:
        bitrate = DEFAULT_BITRATE_BPS[fmt] if bitrate_bps is None else bitrate_bps
        if fmt is AudioFormat.M4B and bitrate_bps is None:  # 48 kbps is all 8 kHz AAC holds
            bitrate = min(bitrate, AAC_MAX_BITS_PER_SAMPLE * int(sample_rate_hz))
        _validate_bitrate(fmt, sample_rate_hz, bitrate)
    if fmt is AudioFormat.OGG and encode_threads > 1 and bitrate is not None:
        from voicelane.common.audio.ogg_parallel import ParallelOggWriter  # imports this module

        # The one-encoder writer's container and header: the same OpusHead, pre-skip included.
        container, stream = _open_output(target, fmt, int(sample_rate_hz), bitrate)
        return ParallelOggWriter(container, stream, int(sample_rate_hz), bitrate, encode_threads)
    return _PyAVWriter(target, fmt, int(sample_rate_hz), bitrate)


def open_adts_writer(
    target: str | os.PathLike[str] | BinaryIO,
    sample_rate_hz: int,
    *,
    bitrate_bps: int | None = None,
) -> AudioFileWriter:
    """A writer of mono AAC-LC in ADTS (``.aac``, ``audio/aac``, what OpenAI's ``aac`` gives)
    at one of :data:`AAC_SAMPLE_RATES_HZ`, to a path or any file object (seekable or not).

    The same encoder and bitrates as m4b (FFmpeg's native ``aac``; 64000 bps by default, 48000
    at 8 kHz); its ``format`` is None: ADTS is a stream encoding
    (:class:`voicelane.common.audio.stream.StreamEncoding`), not a file format of jobs. ADTS
    has no edit list, so the encoder's 1024-sample priming is not trimmed: FFmpeg decodes it to
    the samples written plus 1024, plus the last frame's padding (``1024 <= extra <= 2047``,
    :data:`ADTS_MAX_EXTRA_SAMPLES`). Raises UnsupportedFormatError for another rate and
    InvalidInputError for a bad bitrate.
    """
    ok = (
        isinstance(sample_rate_hz, int | np.integer)
        and not isinstance(sample_rate_hz, bool)
        and int(sample_rate_hz) in AAC_SAMPLE_RATES_HZ
    )
    if not ok:
        listed = ", ".join(str(r) for r in AAC_SAMPLE_RATES_HZ)
        raise UnsupportedFormatError(
            f"aac does not support a sample rate of {sample_rate_hz!r} Hz; allowed: {listed}"
        )
    rate = int(sample_rate_hz)
    default = min(DEFAULT_BITRATE_BPS[AudioFormat.M4B], AAC_MAX_BITS_PER_SAMPLE * rate)
    bitrate = default if bitrate_bps is None else bitrate_bps
    _validate_bitrate(None, rate, bitrate)
    return _PyAVWriter(target, None, rate, bitrate)


ADTS_PRIMING_SAMPLES = 1024
ADTS_MAX_EXTRA_SAMPLES = ADTS_PRIMING_SAMPLES + 1023
"""The most samples an ADTS stream decodes (with FFmpeg) longer than written: the priming and
the last frame's padding."""


# ---- reading -----------------------------------------------------------------------------

AudioSource = str | os.PathLike[str] | bytes | bytearray | memoryview | BinaryIO


@dataclass(frozen=True)
class AudioInfo:
    """What decoding a file found.

    ``format_name``: FFmpeg's container name (``"ogg"``, ``"mp3"``, ``"wav"``, ``"flac"``,
    ``"mov,mp4,m4a,3gp,3g2,mj2"`` for m4b);
    ``codec``: FFmpeg's codec name (``"opus"``, ``"mp3"``, ``"pcm_s16le"``, ``"flac"``, ``"aac"``);
    ``sample_rate_hz``: the content's rate (for Opus the original input rate, see the module
    docstring); ``duration_s``: decoded samples / decoded rate.
    """

    format_name: str
    codec: str
    sample_rate_hz: int
    channels: int
    duration_s: float


@dataclass
class _Decoded:
    format_name: str
    codec: str
    decoded_rate_hz: int
    content_rate_hz: int
    channels: int
    chunks: list[PcmF32]

    @property
    def n_samples(self) -> int:
        return sum(len(c) for c in self.chunks)


def _opus_input_rate(extradata: bytes | None) -> int | None:
    """The input sample rate recorded in an OpusHead, when it is an Opus rate."""
    if extradata is None or len(extradata) < 19 or not extradata.startswith(b"OpusHead"):
        return None
    (rate,) = struct.unpack_from("<I", extradata, 12)
    return int(rate) if rate in OPUS_SAMPLE_RATES_HZ else None


def _frame_to_mono(frame: AudioFrame) -> PcmF32:
    arr: npt.NDArray[np.generic] = frame.to_ndarray()
    channels = frame.layout.nb_channels
    if not frame.format.is_planar:
        arr = arr.reshape(-1, channels).T
    if arr.dtype == np.int16:
        data = arr.astype(np.float32) / np.float32(32767.0)
    elif arr.dtype == np.int32:
        data = (arr.astype(np.float64) / 2147483647.0).astype(np.float32)
    elif arr.dtype == np.uint8:
        data = (arr.astype(np.float32) - np.float32(128.0)) / np.float32(127.0)
    else:
        data = arr.astype(np.float32)
    mono: PcmF32 = data[0] if channels == 1 else data.mean(axis=0, dtype=np.float32)
    return mono


def _open_source(source: AudioSource) -> str | BinaryIO:
    if isinstance(source, bytes | bytearray | memoryview):
        return io.BytesIO(bytes(source))
    if isinstance(source, str | os.PathLike):
        return os.fspath(source)
    return source


def _decode(source: AudioSource) -> _Decoded:
    try:
        with av.open(_open_source(source), mode="r") as container:
            return _decode_container(container)
    except FileNotFoundError:
        raise
    except av.error.FFmpegError as exc:
        raise InvalidInputError(f"cannot decode audio: {exc}") from exc


def _decode_container(container: InputContainer) -> _Decoded:
    if not container.streams.audio:
        raise InvalidInputError("no audio stream found")
    stream = container.streams.audio[0]
    chunks: list[PcmF32] = []
    rate = 0
    channels = 0
    for frame in container.decode(stream):
        if not frame.samples:
            continue
        rate = frame.sample_rate
        channels = frame.layout.nb_channels
        chunks.append(_frame_to_mono(frame))
    ctx = stream.codec_context
    rate = rate or ctx.sample_rate
    channels = channels or ctx.channels
    if not rate:
        raise InvalidInputError("audio stream has no sample rate")
    codec = ctx.codec.canonical_name
    content_rate = rate
    if codec == "opus":
        content_rate = _opus_input_rate(ctx.extradata) or rate
    return _Decoded(container.format.name, codec, rate, content_rate, channels, chunks)


def probe(path_or_bytes: AudioSource) -> AudioInfo:
    """Decode the whole first audio stream and describe it (duration from counted samples)."""
    dec = _decode(path_or_bytes)
    return AudioInfo(
        format_name=dec.format_name,
        codec=dec.codec,
        sample_rate_hz=dec.content_rate_hz,
        channels=dec.channels,
        duration_s=dec.n_samples / dec.decoded_rate_hz,
    )


def decode_to_pcm(
    path_or_bytes: AudioSource, sample_rate_hz: int | None = None
) -> tuple[PcmF32, int]:
    """The first audio stream as mono float32 (channels averaged) and its rate.

    With ``sample_rate_hz`` the audio is resampled to it
    (:func:`voicelane.common.audio.pcm.resample`); without, it comes at
    :attr:`AudioInfo.sample_rate_hz` (Opus: resampled from 48 kHz to the original input rate).
    int16 sources are scaled by 1/32767, as :func:`int16_to_float` does.
    """
    dec = _decode(path_or_bytes)
    pcm = np.concatenate(dec.chunks) if dec.chunks else np.zeros(0, dtype=np.float32)
    target = dec.content_rate_hz if sample_rate_hz is None else sample_rate_hz
    if target != dec.decoded_rate_hz:
        pcm = resample(pcm, dec.decoded_rate_hz, target)
    return pcm, target
