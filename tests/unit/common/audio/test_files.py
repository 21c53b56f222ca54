"""voicelane.common.audio.files: formats, writers (read back with probe), validation, opusinfo."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import av
import numpy as np
import pytest

from voicelane.common.audio.files import (
    AAC_SAMPLE_RATES_HZ,
    ADTS_MAX_EXTRA_SAMPLES,
    ADTS_PRIMING_SAMPLES,
    M4B_MAX_EXTRA_SAMPLES,
    MP3_MAX_EXTRA_SAMPLES,
    AudioFileWriter,
    AudioFormat,
    decode_to_pcm,
    format_from_name,
    format_from_path,
    open_adts_writer,
    open_writer,
    probe,
    validate_sample_rate,
)
from voicelane.common.audio.pcm import PcmF32
from voicelane.common.errors import InvalidInputError, UnsupportedFormatError

OPUSINFO = "/usr/bin/opusinfo"

EXPECTED = {
    AudioFormat.OGG: ("ogg", "opus"),
    AudioFormat.MP3: ("mp3", "mp3"),
    AudioFormat.WAV: ("wav", "pcm_s16le"),
    AudioFormat.FLAC: ("flac", "flac"),
    AudioFormat.M4B: ("mov,mp4,m4a,3gp,3g2,mj2", "aac"),
}
SEEKABLE_ONLY = {AudioFormat.M4B}


def _signal(rate: int, n: int) -> PcmF32:
    t = np.arange(n) / rate
    rng = np.random.default_rng(7)
    tone = 0.4 * np.sin(2 * np.pi * (220 * t + 400 * t**2)) + 0.02 * rng.standard_normal(n)
    return tone.astype(np.float32)


def _write(
    target: str | os.PathLike[str] | io.BytesIO,
    fmt: AudioFormat,
    rate: int,
    x: PcmF32,
    pieces: tuple[int, ...] = (1, 7, 4800, 333, 10000),
) -> AudioFileWriter:
    """Write x in pieces of cycling sizes, tiny ones included."""
    with open_writer(target, fmt, rate) as writer:
        i = k = 0
        while i < len(x):
            size = pieces[k % len(pieces)]
            writer.write(x[i : i + size])
            i += size
            k += 1
    return writer


def _corr(a: PcmF32, b: PcmF32) -> float:
    return float(np.corrcoef(a.astype(np.float64), b.astype(np.float64))[0, 1])


# ---- formats -----------------------------------------------------------------------------


def test_audio_format_properties() -> None:
    assert [f.value for f in AudioFormat] == ["ogg", "mp3", "wav", "flac", "m4b"]
    assert [f.extension for f in AudioFormat] == ["ogg", "mp3", "wav", "flac", "m4b"]
    assert AudioFormat.OGG.mime_type == "audio/ogg"
    assert AudioFormat.MP3.mime_type == "audio/mpeg"
    assert AudioFormat.WAV.mime_type == "audio/wav"
    assert AudioFormat.FLAC.mime_type == "audio/flac"
    assert AudioFormat.M4B.mime_type == "audio/mp4"
    assert str(AudioFormat.FLAC) == "flac"


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("ogg", AudioFormat.OGG),
        ("opus", AudioFormat.OGG),
        ("OPUS", AudioFormat.OGG),
        ("Mp3", AudioFormat.MP3),
        ("WAV", AudioFormat.WAV),
        (" flac ", AudioFormat.FLAC),
        ("M4B", AudioFormat.M4B),
    ],
)
def test_format_from_name(name: str, fmt: AudioFormat) -> None:
    assert format_from_name(name) is fmt


@pytest.mark.parametrize("name", ["aac", "", "ogg/opus", "mpeg", "wave", "m4a", "mp4"])
def test_format_from_name_rejects_with_the_supported_list(name: str) -> None:
    with pytest.raises(UnsupportedFormatError) as info:
        format_from_name(name)
    message = str(info.value)
    assert "\n" not in message
    assert "ogg, opus, mp3, wav, flac, m4b" in message
    assert repr(name) in message


@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        ("out.ogg", AudioFormat.OGG),
        ("/a/b/c.opus", AudioFormat.OGG),
        ("X.OGG", AudioFormat.OGG),
        (Path("dir.x/song.Mp3"), AudioFormat.MP3),
        ("a.b.wav", AudioFormat.WAV),
        (Path("t.flac"), AudioFormat.FLAC),
        ("book.M4B", AudioFormat.M4B),
    ],
)
def test_format_from_path(path: str | Path, fmt: AudioFormat) -> None:
    assert format_from_path(path) is fmt


@pytest.mark.parametrize(("path", "shown"), [("a.aac", "'.aac'"), ("noext", "none")])
def test_format_from_path_names_the_extension(path: str, shown: str) -> None:
    with pytest.raises(UnsupportedFormatError) as info:
        format_from_path(path)
    message = str(info.value)
    assert f"extension {shown}" in message and ".ogg" in message and "\n" not in message


def test_validate_sample_rate() -> None:
    for rate in (8000, 12000, 16000, 24000, 48000):
        validate_sample_rate(AudioFormat.OGG, rate)
    for rate in (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000):
        validate_sample_rate(AudioFormat.MP3, rate)
    for fmt in (AudioFormat.WAV, AudioFormat.FLAC):
        for rate in (8000, 22050, 96000, 192000):
            validate_sample_rate(fmt, rate)
    for rate in AAC_SAMPLE_RATES_HZ:
        validate_sample_rate(AudioFormat.M4B, rate)
    assert 7350 not in AAC_SAMPLE_RATES_HZ  # an AAC rate, but under the project's 8 kHz floor

    with pytest.raises(UnsupportedFormatError, match="8000, 12000, 16000, 24000, 48000"):
        validate_sample_rate(AudioFormat.OGG, 22050)
    with pytest.raises(UnsupportedFormatError, match="11025, 12000, 16000, 22050"):
        validate_sample_rate(AudioFormat.MP3, 96000)
    for rate in (7350, 7999, 20000, 192000):
        with pytest.raises(UnsupportedFormatError, match=r"m4b .* allowed: 8000, 11025, 12000"):
            validate_sample_rate(AudioFormat.M4B, rate)
    for fmt in (AudioFormat.WAV, AudioFormat.FLAC):
        for rate in (7999, 192001, 0):
            with pytest.raises(UnsupportedFormatError, match=r"8000\.\.192000"):
                validate_sample_rate(fmt, rate)
    with pytest.raises(UnsupportedFormatError):
        validate_sample_rate(AudioFormat.WAV, 24000.0)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedFormatError):
        validate_sample_rate(AudioFormat.WAV, True)


# ---- writers -----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", list(AudioFormat))
def test_written_file_probes_right_with_exact_duration(fmt: AudioFormat) -> None:
    rate = 24000
    x = _signal(rate, rate + 1234)
    buf = io.BytesIO()
    writer = _write(buf, fmt, rate, x)
    assert writer.samples_written == len(x) and writer.closed
    assert writer.duration_s == pytest.approx(len(x) / rate)
    info = probe(buf.getvalue())
    assert (info.format_name, info.codec) == EXPECTED[fmt]
    assert info.sample_rate_hz == rate and info.channels == 1
    # Exact to one sample at the decoded rate (48 kHz for Opus): Ogg pre-skip and end
    # granule, and mp3's LAME gapless header, trim the codec padding. The spec allows a
    # frame; we pin the exact result so a regression shows.
    _assert_duration(fmt, info.duration_s, len(x), rate)


def _assert_duration(fmt: AudioFormat, duration_s: float, n: int, rate: int) -> None:
    if fmt is AudioFormat.MP3:
        extra = round(duration_s * rate) - n
        assert 0 <= extra <= MP3_MAX_EXTRA_SAMPLES
    elif fmt is AudioFormat.M4B:
        # FFmpeg trims the priming (edit list) but not the last frame's padding: the written
        # length rounded up to a whole 1024-sample AAC frame, exactly.
        decoded = round(duration_s * rate)
        assert decoded == -(-n // 1024) * 1024
        assert 0 <= decoded - n <= M4B_MAX_EXTRA_SAMPLES
    else:
        assert duration_s == pytest.approx(n / rate, abs=1 / 48000)


@pytest.mark.parametrize(("n", "extra"), [(20000, 0), (24000, 0), (20741, 42), (20780, 3)])
def test_mp3_length_quirk_is_as_documented(n: int, extra: int) -> None:
    # At 24 kHz the last frame's padding is (-(n + 1105)) % 576: 207 and 239 (trimmed) for
    # the first two, 42 and 3 (FFmpeg leaves them) for the last two.
    buf = io.BytesIO()
    _write(buf, AudioFormat.MP3, 24000, _signal(24000, n))
    y, _ = decode_to_pcm(buf.getvalue())
    assert len(y) - n == extra <= MP3_MAX_EXTRA_SAMPLES


@pytest.mark.parametrize(
    ("fmt", "rate"),
    [
        (AudioFormat.OGG, 8000),
        (AudioFormat.OGG, 48000),
        (AudioFormat.MP3, 8000),
        (AudioFormat.MP3, 22050),
        (AudioFormat.MP3, 44100),
        (AudioFormat.WAV, 96000),
        (AudioFormat.FLAC, 16000),
        (AudioFormat.M4B, 8000),
        (AudioFormat.M4B, 22050),
        (AudioFormat.M4B, 44100),
        (AudioFormat.M4B, 96000),
    ],
)
def test_other_rates(fmt: AudioFormat, rate: int) -> None:
    x = _signal(rate, rate // 2 + 77)
    buf = io.BytesIO()
    _write(buf, fmt, rate, x)
    info = probe(buf.getvalue())
    assert info.sample_rate_hz == rate and info.codec == EXPECTED[fmt][1]
    _assert_duration(fmt, info.duration_s, len(x), rate)


@pytest.mark.parametrize("fmt", [AudioFormat.WAV, AudioFormat.FLAC])
def test_lossless_content_is_exact_to_int16(fmt: AudioFormat) -> None:
    rate = 24000
    x = _signal(rate, 30000)
    x[100] = 1.7  # clipped
    buf = io.BytesIO()
    _write(buf, fmt, rate, x)
    y, y_rate = decode_to_pcm(buf.getvalue())
    assert y_rate == rate and y.dtype == np.float32 and len(y) == len(x)
    np.testing.assert_allclose(y, np.clip(x, -1, 1), atol=0.5 / 32767 + 1e-7, rtol=0)


@pytest.mark.parametrize("fmt", [AudioFormat.OGG, AudioFormat.MP3, AudioFormat.M4B])
def test_lossy_content_is_aligned_without_a_shift(fmt: AudioFormat) -> None:
    rate = 24000
    x = _signal(rate, 2 * rate)
    buf = io.BytesIO()
    _write(buf, fmt, rate, x)
    y, y_rate = decode_to_pcm(buf.getvalue())
    assert y_rate == rate
    _assert_duration(fmt, len(y) / rate, len(x), rate)
    y = y[: len(x)]
    # The codec delay is trimmed by the container: correlation at lag 0.
    assert _corr(x, y) > 0.9


def test_decode_to_pcm_resamples_on_request() -> None:
    rate = 24000
    x = _signal(rate, rate)
    buf = io.BytesIO()
    _write(buf, AudioFormat.OGG, rate, x)
    y48, r48 = decode_to_pcm(buf.getvalue(), 48000)
    assert r48 == 48000 and len(y48) == 2 * len(x)
    y16, r16 = decode_to_pcm(buf.getvalue(), sample_rate_hz=16000)
    assert r16 == 16000 and len(y16) == 16000


def test_writing_to_paths(tmp_path: Path) -> None:
    x = _signal(24000, 24000)
    for fmt in AudioFormat:
        as_str = tmp_path / f"a.{fmt.extension}"
        _write(str(as_str), fmt, 24000, x)
        as_path = tmp_path / f"b.{fmt.extension}"
        _write(as_path, fmt, 24000, x)
        for target in (as_str, as_path):
            _assert_duration(fmt, probe(target).duration_s, len(x), 24000)
            assert probe(str(target)).codec == EXPECTED[fmt][1]
            assert format_from_path(target) is fmt


def test_opusinfo_accepts_the_ogg_file(tmp_path: Path) -> None:
    if not os.path.exists(OPUSINFO):
        if os.environ.get("CI"):
            pytest.fail(f"{OPUSINFO} is missing (install opus-tools); required when CI is set")
        pytest.skip(f"{OPUSINFO} not installed (opus-tools)")
    path = tmp_path / "speech.ogg"
    _write(path, AudioFormat.OGG, 24000, _signal(24000, 3 * 24000))
    result = subprocess.run(
        [OPUSINFO, str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "WARNING" not in out.upper() and "ERROR" not in out.upper()
    assert "Original sample rate: 24000 Hz" in out
    assert "Pre-skip: 312" in out
    assert "Playback length: 0m:03.000s" in out
    assert "Channels: 1" in out


class _NonSeekable(io.RawIOBase):
    """A write-only stream that cannot seek (like a pipe or a socket)."""

    def __init__(self) -> None:
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        self.data += b
        return len(b)


@pytest.mark.parametrize("fmt", [f for f in AudioFormat if f not in SEEKABLE_ONLY])
def test_writing_to_a_non_seekable_file_object(fmt: AudioFormat) -> None:
    rate = 24000
    x = _signal(rate, rate + 1)
    sink = _NonSeekable()
    _write(sink, fmt, rate, x)  # type: ignore[arg-type]
    assert not sink.closed  # the caller's file object stays open
    info = probe(bytes(sink.data))
    assert info.codec == EXPECTED[fmt][1]
    expected = len(x) / rate
    if fmt is AudioFormat.MP3:
        # No room for the LAME gapless header: 576 + 529 samples of codec delay lead, and
        # the last 576-sample frame is padded (documented in voicelane.common.audio.files).
        frames = -(-(len(x) + 1105) // 576)
        assert info.duration_s == pytest.approx(frames * 576 / rate, abs=1 / rate)
    elif fmt is AudioFormat.WAV:
        # The RIFF sizes cannot be patched; FFmpeg still decodes every sample.
        assert info.duration_s == pytest.approx(expected, abs=1 / rate)
    else:
        assert info.duration_s == pytest.approx(expected, abs=1 / 48000)


def test_m4b_refuses_a_non_seekable_file_object() -> None:
    # MP4 writes its index after the audio and patches sizes: no stream can carry it, which is
    # why the live lane offers no m4b (voicelane.common.audio.stream).
    sink = _NonSeekable()
    with pytest.raises(UnsupportedFormatError, match="m4b cannot be written to a stream"):
        open_writer(sink, AudioFormat.M4B, 24000)  # type: ignore[arg-type]
    assert not sink.data


def test_m4b_on_a_path_has_the_audiobook_brand_and_the_index_first(tmp_path: Path) -> None:
    path = tmp_path / "book.m4b"
    _write(path, AudioFormat.M4B, 24000, _signal(24000, 3 * 24000))
    head = path.read_bytes()[:64]
    assert head[4:12] == b"ftypM4B "
    # faststart: the moov box (the index) follows ftyp, before the audio (mdat)
    assert head.find(b"moov") != -1 and head.find(b"mdat") == -1
    buf = io.BytesIO()
    _write(buf, AudioFormat.M4B, 24000, _signal(24000, 3 * 24000))
    assert buf.getvalue()[4:12] == b"ftypM4B "


def test_m4b_bitrate_bounds() -> None:
    open_writer(io.BytesIO(), AudioFormat.M4B, 8000, bitrate_bps=48000).close()
    bad = r"m4b at 8000 Hz takes a bitrate of 16000\.\.48000 bps"
    with pytest.raises(InvalidInputError, match=bad):
        open_writer(io.BytesIO(), AudioFormat.M4B, 8000, bitrate_bps=64000)
    with pytest.raises(InvalidInputError, match=r"16000\.\.320000"):
        open_writer(io.BytesIO(), AudioFormat.M4B, 96000, bitrate_bps=8000)


def test_adts_writes_to_a_non_seekable_target_with_the_priming_left_in() -> None:
    # AAC in ADTS streams (no index, no trailer); without an edit list the 1024-sample priming
    # is decoded, and the last frame's padding.
    sink = _NonSeekable()
    n = 24000 + 17
    with open_adts_writer(sink, 24000) as writer:  # type: ignore[arg-type]
        writer.write(_signal(24000, n))
    assert writer.format is None and writer.samples_written == n
    info = probe(bytes(sink.data))
    assert (info.format_name, info.codec, info.sample_rate_hz) == ("aac", "aac", 24000)
    decoded = round(info.duration_s * 24000)
    assert n + ADTS_PRIMING_SAMPLES <= decoded <= n + ADTS_MAX_EXTRA_SAMPLES


def test_adts_rates_and_bitrates_are_aacs() -> None:
    with pytest.raises(UnsupportedFormatError, match="aac does not support a sample rate of 7350"):
        open_adts_writer(io.BytesIO(), 7350)
    with pytest.raises(
        InvalidInputError, match=r"aac at 8000 Hz takes a bitrate of 16000\.\.48000"
    ):
        open_adts_writer(io.BytesIO(), 8000, bitrate_bps=64000)
    open_adts_writer(io.BytesIO(), 8000).close()  # the default fits what 8 kHz holds


def _is_closed(writer: AudioFileWriter) -> bool:
    return writer.closed  # a call, so mypy does not carry narrowing across close()


def test_writer_lifecycle() -> None:
    buf = io.BytesIO()
    writer = open_writer(buf, AudioFormat.WAV, 16000)
    assert isinstance(writer, AudioFileWriter)
    assert writer.samples_written == 0 and writer.duration_s == 0.0
    assert not _is_closed(writer)
    writer.write(np.zeros(8000, dtype=np.float32))
    writer.write(np.zeros(0, dtype=np.float32))
    writer.write(np.array([np.nan, np.inf, -np.inf], dtype=np.float32))
    assert writer.samples_written == 8003
    assert writer.duration_s == pytest.approx(8003 / 16000)
    writer.close()
    writer.close()  # idempotent
    assert _is_closed(writer) and not buf.closed
    with pytest.raises(ValueError, match="closed"):
        writer.write(np.zeros(10, dtype=np.float32))
    y, _ = decode_to_pcm(buf.getvalue())
    assert len(y) == 8003 and y[-3:].tolist() == [0.0, 1.0, -1.0]
    with pytest.raises(InvalidInputError):
        open_writer(io.BytesIO(), AudioFormat.WAV, 16000).write(np.zeros((2, 2), dtype=np.float32))


def test_writer_copies_what_it_buffers() -> None:
    # A caller that reuses one buffer for every piece must not corrupt the file.
    buf = io.BytesIO()
    piece = np.zeros(100, dtype=np.float32)
    with open_writer(buf, AudioFormat.WAV, 24000) as writer:
        for k in range(10):
            piece[:] = k / 10
            writer.write(piece)
    y, _ = decode_to_pcm(buf.getvalue())
    expected = np.repeat(np.arange(10) / 10, 100)
    np.testing.assert_allclose(y, expected, atol=0.5 / 32767 + 1e-7, rtol=0)


def test_context_manager_finalizes_on_error() -> None:
    buf = io.BytesIO()
    writer = open_writer(buf, AudioFormat.FLAC, 24000)
    with pytest.raises(RuntimeError, match="mid-write"), writer:
        writer.write(np.zeros(24000, dtype=np.float32))
        raise RuntimeError("mid-write")
    assert _is_closed(writer)
    assert probe(buf.getvalue()).duration_s == pytest.approx(1.0)


def test_abstract_writer_cannot_be_instantiated() -> None:
    with pytest.raises(TypeError):
        AudioFileWriter(AudioFormat.WAV, 24000)  # type: ignore[abstract]


def test_open_writer_validation() -> None:
    with pytest.raises(UnsupportedFormatError, match="8000, 12000"):
        open_writer(io.BytesIO(), AudioFormat.OGG, 22050)
    with pytest.raises(UnsupportedFormatError):
        open_writer(io.BytesIO(), AudioFormat.MP3, 96000)
    with pytest.raises(InvalidInputError, match="bitrate"):
        open_writer(io.BytesIO(), AudioFormat.OGG, 24000, bitrate_bps=1000)
    with pytest.raises(InvalidInputError, match="bitrate"):
        open_writer(io.BytesIO(), AudioFormat.MP3, 24000, bitrate_bps=320000)
    # bitrate is ignored for lossless formats
    open_writer(io.BytesIO(), AudioFormat.FLAC, 24000, bitrate_bps=1).close()


def test_bitrate_sets_the_file_size() -> None:
    x = _signal(24000, 5 * 24000)
    sizes = {}
    for bitrate in (16000, 64000):
        buf = io.BytesIO()
        with open_writer(buf, AudioFormat.MP3, 24000, bitrate_bps=bitrate) as writer:
            writer.write(x)
        sizes[bitrate] = len(buf.getvalue())
    assert sizes[64000] == pytest.approx(64000 / 8 * 5, rel=0.1)
    assert sizes[16000] == pytest.approx(16000 / 8 * 5, rel=0.2)


def test_m4b_bitrate_sets_the_file_size() -> None:
    x = _signal(24000, 10 * 24000)
    sizes = {}
    for bitrate in (32000, 96000):
        buf = io.BytesIO()
        with open_writer(buf, AudioFormat.M4B, 24000, bitrate_bps=bitrate) as writer:
            writer.write(x)
        sizes[bitrate] = len(buf.getvalue())
    buf = io.BytesIO()
    with open_writer(buf, AudioFormat.M4B, 24000) as writer:
        writer.write(x)
    assert len(buf.getvalue()) == pytest.approx(64000 / 8 * 10, rel=0.15)  # the default
    assert sizes[32000] == pytest.approx(32000 / 8 * 10, rel=0.15)
    assert sizes[96000] == pytest.approx(96000 / 8 * 10, rel=0.15)


# ---- reading -----------------------------------------------------------------------------


def test_probe_counts_decoded_samples_of_a_stereo_file() -> None:
    # A stereo 22050 Hz wav made directly with PyAV: probe reports 2 channels, and
    # decode_to_pcm averages them to mono.
    rate, n = 22050, 5000
    left = np.full(n, 1000, dtype=np.int16)
    right = np.full(n, 3000, dtype=np.int16)
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="wav") as container:
        stream = container.add_stream("pcm_s16le", rate=rate, layout="stereo")
        frame = av.AudioFrame.from_ndarray(
            np.stack([left, right], axis=1).reshape(1, -1), format="s16", layout="stereo"
        )
        frame.sample_rate = rate
        container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    info = probe(buf.getvalue())
    assert info.channels == 2 and info.sample_rate_hz == rate
    assert info.duration_s == pytest.approx(n / rate)
    y, y_rate = decode_to_pcm(io.BytesIO(buf.getvalue()))
    assert y_rate == rate and len(y) == n
    np.testing.assert_allclose(y, 2000 / 32767, rtol=1e-6)


def test_probe_rejects_garbage_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="cannot decode audio"):
        probe(b"this is not audio at all" * 100)
    with pytest.raises(FileNotFoundError):
        probe(tmp_path / "missing.ogg")


def test_header_only_files() -> None:
    # No samples: wav and flac still probe (0 s); Ogg/Opus and mp3 hold no audio packet,
    # which FFmpeg cannot probe (documented limitation).
    for fmt in (AudioFormat.WAV, AudioFormat.FLAC):
        buf = io.BytesIO()
        open_writer(buf, fmt, 24000).close()
        assert probe(buf.getvalue()).duration_s == 0.0
    for fmt in (AudioFormat.OGG, AudioFormat.MP3, AudioFormat.M4B):
        buf = io.BytesIO()
        open_writer(buf, fmt, 24000).close()
        with pytest.raises(InvalidInputError):
            probe(buf.getvalue())


@pytest.mark.parametrize(("n", "decoded"), [(8, 0), (9, 1024), (1025, 2048)])
def test_m4b_tiny_files_are_as_documented(n: int, decoded: int) -> None:
    # FFmpeg's aac encoder emits only its priming packet for 8 samples or fewer.
    buf = io.BytesIO()
    _write(buf, AudioFormat.M4B, 24000, np.full(n, 0.1, dtype=np.float32))
    y, _ = decode_to_pcm(buf.getvalue())
    assert len(y) == decoded
