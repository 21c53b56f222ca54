"""voicelane.workers.book_audio: chapters, tags and cover on finished files, read back with
ffprobe (Debian's FFmpeg), PyAV (the bundled one), mutagen and opusinfo."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import zlib
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
from av.video.frame import VideoFrame
from mutagen.flac import FLAC
from mutagen.id3 import ID3
from mutagen.mp4 import MP4
from mutagen.oggopus import OggOpus

from voicelane.common.audio import AudioFormat, decode_to_pcm, open_writer, probe
from voicelane.common.audio.files import M4B_MAX_EXTRA_SAMPLES
from voicelane.common.errors import InvalidInputError, OutputError
from voicelane.workers.book_audio import (
    VORBIS_MAX_CHAPTERS,
    BookTags,
    ChapterMark,
    mp4_language,
    supports_chapters,
    write_book_metadata,
)

RATE_HZ = 24000
CHAPTERS = (
    ChapterMark("Глава первая — the start", 0, 3300),
    ChapterMark("Two: «middle»", 3300, 6700),
    ChapterMark("3", 6700, 10000),
)
TONES_HZ = (300.0, 700.0, 1300.0)
"""One tone per chapter, so where each chapter's audio starts can be seen in the decoded file."""
CHAPTER_FORMATS = [AudioFormat.M4B, AudioFormat.OGG, AudioFormat.MP3, AudioFormat.FLAC]
OPUSINFO = "/usr/bin/opusinfo"


def _png() -> bytes:
    """An 8x8 RGB PNG written by hand (zlib and CRCs): no imaging library needed."""
    rows = b"".join(b"\x00" + bytes([200, 30, 30]) * 8 for _ in range(8))

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data)
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def _jpeg() -> bytes:
    """A 48x32 JPEG from FFmpeg's mjpeg encoder."""
    image = np.zeros((32, 48, 3), dtype=np.uint8)
    image[:, :, 0] = 200
    image[8:24, 8:40, 1] = 150
    codec = av.CodecContext.create("mjpeg", "w")
    assert isinstance(codec, av.VideoCodecContext)
    codec.width, codec.height, codec.pix_fmt = 48, 32, "yuvj420p"
    codec.time_base = Fraction(1, 1)
    frame = VideoFrame.from_ndarray(image, format="rgb24").reformat(format="yuvj420p")
    packets = codec.encode(frame) + codec.encode(None)
    return bytes(packets[0])


COVERS = {"image/jpeg": _jpeg(), "image/png": _png()}


def _tags(media_type: str) -> BookTags:
    return BookTags(
        title="Bøøk of «Tests»",
        author="Ann Áuthor",
        language="en",
        cover=COVERS[media_type],
        cover_media_type=media_type,
    )


def _write_book(path: Path, fmt: AudioFormat) -> int:
    """10 s: each chapter a tone of its own, written in 200 ms pieces. Returns the samples."""
    total = 0
    with open_writer(path, fmt, RATE_HZ) as writer:
        for mark, tone_hz in zip(CHAPTERS, TONES_HZ, strict=True):
            n = round((mark.end_ms - mark.start_ms) * RATE_HZ / 1000)
            t = np.arange(n) / RATE_HZ
            pcm = (0.3 * np.sin(2 * np.pi * tone_hz * t)).astype(np.float32)
            for i in range(0, n, RATE_HZ // 5):
                writer.write(pcm[i : i + RATE_HZ // 5])
            total += n
    return total


def _ffprobe() -> str:
    found = shutil.which("ffprobe")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("ffprobe is missing (install ffmpeg); required when CI is set")
        pytest.skip("ffprobe not installed (ffmpeg)")
    return found


def _ffprobe_json(path: Path) -> dict[str, Any]:
    args = ["-v", "error", "-show_chapters", "-show_format", "-show_streams", "-of", "json"]
    result = subprocess.run(
        [_ffprobe(), *args, str(path)], capture_output=True, text=True, timeout=60, check=True
    )
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def _lower(tags: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in tags.items()}


def _dominant_hz(pcm: np.ndarray[Any, Any], start_ms: int) -> float:
    """The strongest frequency of 100 ms of audio from 20 ms after ``start_ms``."""
    first = round((start_ms + 20) * RATE_HZ / 1000)
    window = pcm[first : first + RATE_HZ // 10] * np.hanning(RATE_HZ // 10)
    spectrum = np.abs(np.fft.rfft(window))
    return float(np.argmax(spectrum) * RATE_HZ / len(window))


# ---- every chapter format, read back -----------------------------------------------------


@pytest.mark.parametrize("media_type", ["image/jpeg", "image/png"])
@pytest.mark.parametrize("fmt", CHAPTER_FORMATS)
def test_chapters_tags_and_cover_read_back(
    tmp_path: Path, fmt: AudioFormat, media_type: str
) -> None:
    path = tmp_path / f"book.{fmt.extension}"
    written = _write_book(path, fmt)
    tags = _tags(media_type)
    write_book_metadata(path, fmt, chapters=CHAPTERS, tags=tags)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temporary left

    # ffprobe (Debian's FFmpeg 5.1): chapters, tags, the cover as an attached picture
    report = _ffprobe_json(path)
    chapters = report["chapters"]
    assert [c["tags"]["title"] for c in chapters] == [m.title for m in CHAPTERS]
    for chapter, mark in zip(chapters, CHAPTERS, strict=True):
        assert float(chapter["start_time"]) * 1000 == pytest.approx(mark.start_ms, abs=1)
    audio = next(s for s in report["streams"] if s["codec_type"] == "audio")
    # Ogg's tags belong to its stream; the others' to the file
    found = _lower(audio["tags"] if fmt is AudioFormat.OGG else report["format"]["tags"])
    assert found["title"] == tags.title and found["artist"] == tags.author
    assert found["album"] == tags.title and found["language"] == tags.language
    if fmt is AudioFormat.M4B:  # the track's own language, ISO 639-2 as MP4 wants it
        assert audio["tags"]["language"] == "eng"
    pictures = [s for s in report["streams"] if s["disposition"]["attached_pic"]]
    assert len(pictures) == 1
    assert pictures[0]["codec_name"] == {"image/jpeg": "mjpeg", "image/png": "png"}[media_type]

    # PyAV (the bundled FFmpeg): the same chapters, and the cover's bytes unchanged
    with av.open(str(path)) as container:
        got = container.chapters()
        assert [c["metadata"]["title"] for c in got] == [m.title for m in CHAPTERS]
        for chapter_dict, mark in zip(got, CHAPTERS, strict=True):
            base = chapter_dict["time_base"]
            assert base is not None
            assert float(chapter_dict["start"] * base) * 1000 == pytest.approx(mark.start_ms, abs=1)
        picture = next(
            s for s in container.streams if s.disposition & av.stream.Disposition.attached_pic
        )
        packet = next(iter(container.demux(picture)))
        assert bytes(packet) == tags.cover

    # the audio is untouched: whole duration, each chapter's tone where its mark says
    info = probe(path)
    if fmt is AudioFormat.M4B:
        extra = round(info.duration_s * RATE_HZ) - written
        assert 0 <= extra <= M4B_MAX_EXTRA_SAMPLES
    elif fmt is AudioFormat.MP3:
        assert round(info.duration_s * RATE_HZ) - written in range(0, 47)
    else:
        assert info.duration_s == pytest.approx(written / RATE_HZ, abs=1 / 48000)
    pcm, _ = decode_to_pcm(path, RATE_HZ)
    for mark, tone_hz in zip(CHAPTERS, TONES_HZ, strict=True):
        assert _dominant_hz(pcm, mark.start_ms) == pytest.approx(tone_hz, abs=15)


def test_m4b_is_an_audiobook_with_its_atoms(tmp_path: Path) -> None:
    path = tmp_path / "book.m4b"
    _write_book(path, AudioFormat.M4B)
    tags = _tags("image/jpeg")
    write_book_metadata(path, AudioFormat.M4B, chapters=CHAPTERS, tags=tags)
    head = path.read_bytes()[:64]
    assert head[4:12] == b"ftypM4B "
    assert head.find(b"moov") != -1 and head.find(b"mdat") == -1  # index first (faststart)
    atoms = MP4(path).tags
    assert atoms is not None
    assert atoms["\xa9nam"] == [tags.title] and atoms["\xa9ART"] == [tags.author]
    assert atoms["\xa9alb"] == [tags.title] and atoms["aART"] == [tags.author]
    assert atoms["stik"] == [2]
    assert bytes(atoms["----:com.apple.iTunes:LANGUAGE"][0]) == b"en"
    assert [bytes(c) for c in atoms["covr"]] == [tags.cover]
    # the AAC packets were copied, not re-encoded: the decoded audio is identical
    before = tmp_path / "plain.m4b"
    _write_book(before, AudioFormat.M4B)
    np.testing.assert_array_equal(decode_to_pcm(path)[0], decode_to_pcm(before)[0])


def test_mp3_has_chap_frames_in_time_order_under_one_ordered_ctoc(tmp_path: Path) -> None:
    path = tmp_path / "book.mp3"
    _write_book(path, AudioFormat.MP3)
    tags = _tags("image/png")
    write_book_metadata(path, AudioFormat.MP3, chapters=CHAPTERS, tags=tags)
    assert path.read_bytes()[:4] == b"ID3\x03"  # v2.3
    id3 = ID3(path)
    chaps = id3.getall("CHAP")
    assert sorted((c.start_time, c.end_time, str(c.sub_frames["TIT2"])) for c in chaps) == [
        (m.start_ms, m.end_ms, m.title) for m in CHAPTERS
    ]
    (toc,) = id3.getall("CTOC")
    assert toc.flags & 0x01 and toc.flags & 0x02  # ordered, top-level
    by_id = {c.element_id: c.start_time for c in chaps}
    assert [by_id[e] for e in toc.child_element_ids] == [m.start_ms for m in CHAPTERS]
    assert str(id3["TIT2"]) == tags.title and str(id3["TPE1"]) == tags.author
    assert str(id3["TLAN"]) == "en"
    (apic,) = id3.getall("APIC")
    assert apic.data == tags.cover and apic.mime == "image/png" and apic.type == 3


@pytest.mark.parametrize("fmt", [AudioFormat.OGG, AudioFormat.FLAC])
def test_vorbis_comments_and_picture(tmp_path: Path, fmt: AudioFormat) -> None:
    path = tmp_path / f"book.{fmt.extension}"
    _write_book(path, fmt)
    tags = _tags("image/jpeg")
    write_book_metadata(path, fmt, chapters=CHAPTERS, tags=tags)
    audio = OggOpus(path) if fmt is AudioFormat.OGG else FLAC(path)
    comments = audio.tags
    assert comments is not None
    assert comments["CHAPTER001"] == ["00:00:00.000"]
    assert comments["CHAPTER002"] == ["00:00:03.300"]
    assert comments["CHAPTER003NAME"] == [CHAPTERS[2].title]
    assert comments["TITLE"] == [tags.title] and comments["ARTIST"] == [tags.author]
    if fmt is AudioFormat.FLAC:
        assert isinstance(audio, FLAC)
        assert [p.data for p in audio.pictures] == [tags.cover]
    else:
        assert len(comments["METADATA_BLOCK_PICTURE"]) == 1


def test_opusinfo_accepts_the_tagged_ogg(tmp_path: Path) -> None:
    if not os.path.exists(OPUSINFO):
        if os.environ.get("CI"):
            pytest.fail(f"{OPUSINFO} is missing (install opus-tools); required when CI is set")
        pytest.skip(f"{OPUSINFO} not installed (opus-tools)")
    path = tmp_path / "book.ogg"
    _write_book(path, AudioFormat.OGG)
    # a 200 KB cover: the comment header spans several Ogg pages (a page holds < 64 KiB)
    big_cover = COVERS["image/jpeg"] + bytes(200_000)
    tags = BookTags(title="T", author="A", language="en", cover=big_cover)
    write_book_metadata(path, AudioFormat.OGG, chapters=CHAPTERS, tags=tags)
    result = subprocess.run(
        [OPUSINFO, str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "WARNING" not in out.upper() and "ERROR" not in out.upper()
    assert "CHAPTER002=00:00:03.300" in out and "CHAPTER003NAME=3" in out
    assert "Playback length: 0m:10.000s" in out
    assert "METADATA_BLOCK_PICTURE=3|image/jpeg|" in out


# ---- wav, re-application, no metadata ----------------------------------------------------


def test_supports_chapters() -> None:
    assert {f for f in AudioFormat if supports_chapters(f)} == set(CHAPTER_FORMATS)
    assert not supports_chapters(AudioFormat.WAV)


def test_wav_takes_tags_and_cover_but_no_chapters(tmp_path: Path) -> None:
    path = tmp_path / "book.wav"
    written = _write_book(path, AudioFormat.WAV)
    tags = _tags("image/png")
    write_book_metadata(path, AudioFormat.WAV, chapters=CHAPTERS, tags=tags)
    with av.open(str(path)) as container:  # Debian's ffprobe 5.1 does not show WAV's ID3 tags
        assert container.chapters() == []
        found = _lower(dict(container.metadata))
        picture = next(
            s for s in container.streams if s.disposition & av.stream.Disposition.attached_pic
        )
        assert bytes(next(iter(container.demux(picture)))) == tags.cover
    assert found["title"] == tags.title and found["artist"] == tags.author
    assert found["language"] == "en"
    pcm, _ = decode_to_pcm(path)
    assert len(pcm) == written


def test_wav_without_tags_is_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "book.wav"
    _write_book(path, AudioFormat.WAV)
    before = path.read_bytes()
    write_book_metadata(path, AudioFormat.WAV, chapters=CHAPTERS, tags=BookTags())
    assert path.read_bytes() == before


@pytest.mark.parametrize("fmt", CHAPTER_FORMATS)
def test_a_second_application_replaces_the_first(tmp_path: Path, fmt: AudioFormat) -> None:
    path = tmp_path / f"book.{fmt.extension}"
    _write_book(path, fmt)
    four = [ChapterMark(f"old {n}", n * 2000, n * 2000 + 2000) for n in range(4)]
    write_book_metadata(path, fmt, chapters=four, tags=_tags("image/jpeg"))
    two = [ChapterMark("new A", 0, 5000), ChapterMark("new B", 5000, 10000)]
    tags = BookTags(title="Second", cover=COVERS["image/png"])
    write_book_metadata(path, fmt, chapters=two, tags=tags)
    with av.open(str(path)) as container:
        assert [c["metadata"]["title"] for c in container.chapters()] == ["new A", "new B"]
        meta = _lower(
            dict(
                container.streams.audio[0].metadata
                if fmt is AudioFormat.OGG
                else container.metadata
            )
        )
        pictures = [
            s for s in container.streams if s.disposition & av.stream.Disposition.attached_pic
        ]
        assert len(pictures) == 1
        assert bytes(next(iter(container.demux(pictures[0])))) == COVERS["image/png"]
    assert meta["title"] == "Second"
    assert "artist" not in meta  # the first author is gone with the rest of the old tags


def test_no_chapters_and_no_tags_still_a_valid_m4b(tmp_path: Path) -> None:
    path = tmp_path / "book.m4b"
    written = _write_book(path, AudioFormat.M4B)
    write_book_metadata(path, AudioFormat.M4B, chapters=[], tags=BookTags())
    with av.open(str(path)) as container:
        assert container.chapters() == []
    extra = round(probe(path).duration_s * RATE_HZ) - written
    assert 0 <= extra <= M4B_MAX_EXTRA_SAMPLES


# ---- refusals: nothing written -----------------------------------------------------------


@pytest.mark.parametrize(
    ("chapters", "message"),
    [
        ([ChapterMark("a", 0, 1000), ChapterMark("b", 900, 2000)], "before the previous"),
        ([ChapterMark("a", 1000, 1000)], "not after its start"),
        ([ChapterMark("a", -5, 1000)], "before the previous"),
        ([ChapterMark("a\x00b", 0, 1000)], "without NUL"),
        ([ChapterMark("a", 0, 1.5)], "integers"),  # type: ignore[arg-type]
    ],
)
def test_bad_chapters_are_refused_and_the_file_untouched(
    tmp_path: Path, chapters: list[ChapterMark], message: str
) -> None:
    path = tmp_path / "book.ogg"
    _write_book(path, AudioFormat.OGG)
    before = path.read_bytes()
    with pytest.raises(InvalidInputError, match=message):
        write_book_metadata(path, AudioFormat.OGG, chapters=chapters, tags=BookTags())
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


@pytest.mark.parametrize(
    ("tags", "message"),
    [
        (BookTags(cover=b"GIF89a...."), "not a JPEG or PNG"),
        (BookTags(cover=COVERS["image/png"], cover_media_type="image/jpeg"), "but it is image/png"),
        (BookTags(cover=COVERS["image/png"], cover_media_type="image/gif"), "is not taken"),
        (BookTags(title="x\x00y"), "title: must be text without NUL"),
    ],
)
def test_bad_tags_are_refused(tmp_path: Path, tags: BookTags, message: str) -> None:
    path = tmp_path / "book.mp3"
    _write_book(path, AudioFormat.MP3)
    before = path.read_bytes()
    with pytest.raises(InvalidInputError, match=message):
        write_book_metadata(path, AudioFormat.MP3, chapters=CHAPTERS, tags=tags)
    assert path.read_bytes() == before


def test_too_many_vorbis_chapters(tmp_path: Path) -> None:
    path = tmp_path / "book.flac"
    _write_book(path, AudioFormat.FLAC)
    marks = [ChapterMark(str(n), n * 10, n * 10 + 10) for n in range(VORBIS_MAX_CHAPTERS + 1)]
    with pytest.raises(InvalidInputError, match="at most 999 chapter marks"):
        write_book_metadata(path, AudioFormat.FLAC, chapters=marks, tags=BookTags())
    write_book_metadata(path, AudioFormat.FLAC, chapters=marks[:-1], tags=BookTags())
    with av.open(str(path)) as container:
        assert len(container.chapters()) == VORBIS_MAX_CHAPTERS


@pytest.mark.parametrize("fmt", [AudioFormat.M4B, AudioFormat.OGG, AudioFormat.FLAC])
def test_a_file_that_is_not_its_format_fails_cleanly(tmp_path: Path, fmt: AudioFormat) -> None:
    path = tmp_path / f"book.{fmt.extension}"
    _write_book(path, AudioFormat.MP3)  # mp3 bytes under another name
    before = path.read_bytes()
    with pytest.raises(OutputError, match=f"cannot add chapters and tags to book.{fmt.value}"):
        write_book_metadata(path, fmt, chapters=CHAPTERS, tags=_tags("image/png"))
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_book_metadata(
            tmp_path / "none.m4b", AudioFormat.M4B, chapters=CHAPTERS, tags=BookTags()
        )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("language", "code"),
    [("en", "eng"), ("en-GB", "eng"), ("de_AT", "deu"), ("ZH-Hant", "zho"), ("haw", "haw"),
     ("x-klingon", None), ("", None), ("qq", None)],
)  # fmt: skip
def test_mp4_language(language: str, code: str | None) -> None:
    assert mp4_language(language) == code
