"""Chapter marks, tags and a cover on a finished audio file: what makes a render an audiobook.

:func:`write_book_metadata` rewrites a file that :func:`voicelane.common.audio.open_writer`
finished, in place: the new file is written beside it and renamed over it
(:func:`voicelane.common.atomic.atomic_output`), so the path holds either the old file or the
whole new one, never half of either. The audio itself is never re-encoded.

Per container (docs/audio.md has the table):

* **m4b** — the AAC stream is copied (PyAV, no re-encode) into a new MP4 whose chapters FFmpeg
  writes twice, as a QuickTime chapter text track (what Apple's players read) and a Nero
  ``chpl`` box (what most others read), with the index (``moov``) at the front. Tags and cover
  then go in with mutagen as iTunes atoms: ``©nam``/``©alb`` (title), ``©ART``/``aART``
  (author), ``stik`` 2 (audiobook), ``covr``; the language, which iTunes has no atom for, as the
  free-form ``----:com.apple.iTunes:LANGUAGE`` (FFmpeg shows it as ``LANGUAGE``) and, as
  ISO 639-2/T, the audio track's own language (``mdhd``; ``en`` → ``eng``).
* **ogg** (Opus) and **flac** — Vorbis comments: ``CHAPTER001=00:01:02.345`` and
  ``CHAPTER001NAME=…`` (the Xiph chapter extension; FFmpeg reads them back as chapters; three
  digits, so at most :data:`VORBIS_MAX_CHAPTERS`), ``TITLE``, ``ALBUM``, ``ARTIST``,
  ``LANGUAGE``; the cover as a FLAC picture block (``METADATA_BLOCK_PICTURE`` in Ogg, a
  ``PICTURE`` metadata block in FLAC). mutagen rewrites the comment header only.
* **mp3** — an ID3v2.3 tag (the version every player reads): one ``CHAP`` frame per chapter
  (start and end in ms, a ``TIT2`` title inside) under one ordered, top-level ``CTOC``;
  ``TIT2``/``TALB`` (title), ``TPE1`` (author), ``TLAN``, ``APIC`` (front cover).
* **wav** — no chapters (:func:`supports_chapters` is False; any given are ignored); title,
  author, language and cover in an ID3 chunk, which FFmpeg reads.

Why mutagen: it writes every tag format above (and reads them back) in pure Python, in place,
fixing what a tag's size changes (MP4 chunk offsets, Ogg page numbers); FFmpeg's muxers write
tags too but not Vorbis chapters or a FLAC picture, and a cover through FFmpeg means an
attached-picture stream. PyAV is used only where mutagen cannot write: MP4 chapters.

The language is written as given (a BCP 47 tag such as ``en`` or ``pt-BR`` from the
document); ID3's ``TLAN`` asks for ISO 639-2, which players do not enforce.
"""

from __future__ import annotations

import base64
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import av.error
import mutagen
from mutagen.flac import FLAC, Picture
from mutagen.id3 import (
    APIC,
    CHAP,
    CTOC,
    ID3,
    TALB,
    TIT2,
    TLAN,
    TPE1,
    CTOCFlags,
    ID3NoHeaderError,
    PictureType,
)
from mutagen.mp4 import MP4, MP4Cover, MP4FreeForm, MP4Tags
from mutagen.oggopus import OggOpus
from mutagen.wave import WAVE

from voicelane.common.atomic import atomic_output
from voicelane.common.audio import AudioFormat
from voicelane.common.audio.files import M4B_BRAND
from voicelane.common.errors import InvalidInputError, OutputError


@dataclass(frozen=True, slots=True)
class ChapterMark:
    """One chapter: its title and where it starts and ends in the delivered audio (ms)."""

    title: str
    start_ms: int
    end_ms: int


@dataclass(frozen=True, slots=True)
class BookTags:
    """What a book says about itself; ``None`` leaves a tag out."""

    title: str | None = None
    author: str | None = None
    language: str | None = None
    cover: bytes | None = None
    cover_media_type: str | None = None  # image/jpeg or image/png; None: from the bytes


CHAPTER_FORMATS = frozenset({AudioFormat.M4B, AudioFormat.OGG, AudioFormat.MP3, AudioFormat.FLAC})
VORBIS_MAX_CHAPTERS = 999
"""``CHAPTERxxx`` has three digits (FFmpeg reads no other width)."""
COVER_SIGNATURES = {"image/jpeg": b"\xff\xd8\xff", "image/png": b"\x89PNG\r\n\x1a\n"}
_MS = Fraction(1, 1000)


def supports_chapters(fmt: AudioFormat) -> bool:
    """Whether ``fmt`` carries chapter marks: m4b, ogg, mp3 and flac do, wav does not."""
    return AudioFormat(fmt) in CHAPTER_FORMATS


def write_book_metadata(
    path: Path, fmt: AudioFormat, *, chapters: Sequence[ChapterMark], tags: BookTags
) -> None:
    """Put ``chapters`` (ignored for wav), ``tags`` and the cover into the finished ``fmt`` file
    at ``path``, in place and atomically; what the file held of these before is replaced.

    Chapters must be in order and not overlap (each starts at or after the previous one's end,
    ends after it starts). Raises InvalidInputError for bad chapters, text with a NUL or a
    cover that is not the JPEG or PNG it says; OutputError when the file cannot be read as
    ``fmt`` or the new one cannot be written; FileNotFoundError when there is no file.
    """
    fmt = AudioFormat(fmt)
    path = Path(path)
    marks = tuple(chapters) if supports_chapters(fmt) else ()
    _check_chapters(marks, fmt)
    cover_type = _cover_media_type(tags)
    _check_text(tags)
    if not path.is_file():
        raise FileNotFoundError(f"no audio file at {path}")
    try:
        with atomic_output(path) as part:
            if fmt is AudioFormat.M4B:
                _remux_mp4_with_chapters(path, part, marks, tags.language)
            else:
                shutil.copyfile(path, part)
            _TAGGERS[fmt](part, marks, tags, cover_type)
    except (mutagen.MutagenError, av.error.FFmpegError) as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise OutputError(
            f"cannot add chapters and tags to {path.name} as {fmt.value}: {error}"
        ) from error


# ---- checks ------------------------------------------------------------------------------


def _check_chapters(marks: Sequence[ChapterMark], fmt: AudioFormat) -> None:
    previous_end_ms = 0
    for n, mark in enumerate(marks):
        where = f"chapters[{n}]"
        if not isinstance(mark.title, str) or "\x00" in mark.title:
            raise InvalidInputError(f"{where}: the title must be text without NUL", field=where)
        if not (isinstance(mark.start_ms, int) and isinstance(mark.end_ms, int)):
            raise InvalidInputError(f"{where}: start_ms and end_ms must be integers", field=where)
        if mark.start_ms < previous_end_ms:
            raise InvalidInputError(
                f"{where}: starts at {mark.start_ms} ms, before the previous chapter ends "
                f"({previous_end_ms} ms)",
                field=where,
            )
        if mark.end_ms <= mark.start_ms:
            raise InvalidInputError(
                f"{where}: ends at {mark.end_ms} ms, not after its start ({mark.start_ms} ms)",
                field=where,
            )
        previous_end_ms = mark.end_ms
    if fmt in (AudioFormat.OGG, AudioFormat.FLAC) and len(marks) > VORBIS_MAX_CHAPTERS:
        raise InvalidInputError(
            f"chapters: {fmt.value} holds at most {VORBIS_MAX_CHAPTERS} chapter marks, "
            f"got {len(marks)}",
            field="chapters",
        )


def _check_text(tags: BookTags) -> None:
    for name in ("title", "author", "language"):
        value = getattr(tags, name)
        if value is not None and (not isinstance(value, str) or "\x00" in value):
            raise InvalidInputError(f"{name}: must be text without NUL", field=name)


def _cover_media_type(tags: BookTags) -> str | None:
    """The cover's media type, checked against its first bytes; None without a cover."""
    if tags.cover is None:
        return None
    cover = bytes(tags.cover)
    found = next((t for t, sig in COVER_SIGNATURES.items() if cover.startswith(sig)), None)
    declared = tags.cover_media_type
    if declared is not None and declared not in COVER_SIGNATURES:
        raise InvalidInputError(
            f"cover: {declared!r} is not taken; image/jpeg or image/png", field="cover"
        )
    if found is None:
        raise InvalidInputError("cover: not a JPEG or PNG image", field="cover")
    if declared is not None and declared != found:
        raise InvalidInputError(f"cover: said to be {declared}, but it is {found}", field="cover")
    return found


# ---- m4b ---------------------------------------------------------------------------------


_ISO_639_PAIRS = (
    "aaaar ababk aeave afafr akaka amamh anarg arara asasm avava ayaym azaze babak bebel "
    "bgbul bhbih bibis bmbam bnben bobod brbre bsbos cacat ceche chcha cocos crcre csces "
    "cuchu cvchv cycym dadan dedeu dvdiv dzdzo eeewe elell eneng eoepo esspa etest eueus "
    "fafas ffful fifin fjfij fofao frfra fyfry gagle gdgla glglg gngrn guguj gvglv hahau "
    "heheb hihin hohmo hrhrv hthat huhun hyhye hzher iaina idind ieile igibo iiiii ikipk "
    "ioido isisl itita iuiku jajpn jvjav kakat kgkon kikik kjkua kkkaz klkal kmkhm knkan "
    "kokor krkau kskas kukur kvkom kwcor kykir lalat lbltz lglug lilim lnlin lolao ltlit "
    "lulub lvlav mgmlg mhmah mimri mkmkd mlmal mnmon mrmar msmsa mtmlt mymya nanau nbnob "
    "ndnde nenep ngndo nlnld nnnno nonor nrnbl nvnav nynya ococi ojoji omorm orori ososs "
    "papan pipli plpol pspus ptpor quque rmroh rnrun roron rurus rwkin sasan scsrd sdsnd "
    "sesme sgsag sisin skslk slslv smsmo snsna sosom sqsqi srsrp ssssw stsot susun svswe "
    "swswa tatam tetel tgtgk ththa titir tktuk tltgl tntsn toton trtur tstso tttat twtwi "
    "tytah uguig ukukr ururd uzuzb veven vivie vovol wawln wowol xhxho yiyid yoyor zazha "
    "zhzho zuzul"
)
_ISO_639_1_TO_2T = {pair[:2]: pair[2:] for pair in _ISO_639_PAIRS.split()}
"""ISO 639-1 codes to ISO 639-2/T, which an MP4 track's language must be (Debian's iso-codes)."""


def mp4_language(language: str) -> str | None:
    """The ISO 639-2/T code an MP4 track takes for a BCP 47 tag (``en-GB`` → ``eng``), or None
    when its primary subtag is neither a known two-letter code nor three letters."""
    primary = language.replace("_", "-").split("-")[0].lower()
    if len(primary) == 3 and primary.isascii() and primary.isalpha():
        return primary
    return _ISO_639_1_TO_2T.get(primary)


def _remux_mp4_with_chapters(
    source: Path, target: Path, marks: Sequence[ChapterMark], language: str | None
) -> None:
    """Copy the first audio stream's packets into a new M4B with ``marks`` as its chapters and
    the track's language set (FFmpeg takes ISO 639-2 only: see :func:`mp4_language`)."""
    with av.open(str(source), mode="r") as inp:
        audio = inp.streams.audio[0] if inp.streams.audio else None
        codec = audio.codec_context.name if audio is not None else "no audio"
        if audio is None or codec != "aac":
            raise OutputError(
                f"cannot add chapters and tags to {source.name} as m4b: it holds {codec}, not AAC"
            )
        with av.open(
            str(target),
            mode="w",
            format="ipod",
            options={"brand": M4B_BRAND, "movflags": "+faststart"},
        ) as out:
            stream = out.add_stream_from_template(audio)
            code = mp4_language(language) if language is not None else None
            if code is not None:
                stream.metadata["language"] = code
            out.set_chapters(
                [
                    {
                        "id": n + 1,
                        "start": mark.start_ms,
                        "end": mark.end_ms,
                        "time_base": _MS,
                        "metadata": {"title": mark.title},
                    }
                    for n, mark in enumerate(marks)
                ]
            )
            for packet in inp.demux(audio):
                if packet.dts is None:  # the demuxer's end-of-stream marker
                    continue
                packet.stream = stream
                out.mux(packet)


_MP4_LANGUAGE = "----:com.apple.iTunes:LANGUAGE"
_MP4_REPLACED = ("\xa9nam", "\xa9alb", "\xa9ART", "aART", _MP4_LANGUAGE, "covr")


def _tag_mp4(path: Path, _marks: Sequence[ChapterMark], tags: BookTags, cover: str | None) -> None:
    audio = MP4(path)
    if audio.tags is None:
        audio.add_tags()
    atoms = audio.tags
    assert isinstance(atoms, MP4Tags)
    for key in _MP4_REPLACED:
        atoms.pop(key, None)
    atoms["stik"] = [2]  # media kind: audiobook
    if tags.title is not None:
        atoms["\xa9nam"] = [tags.title]
        atoms["\xa9alb"] = [tags.title]
    if tags.author is not None:
        atoms["\xa9ART"] = [tags.author]
        atoms["aART"] = [tags.author]
    if tags.language is not None:
        atoms[_MP4_LANGUAGE] = [MP4FreeForm(tags.language.encode())]
    if tags.cover is not None:
        kind = MP4Cover.FORMAT_PNG if cover == "image/png" else MP4Cover.FORMAT_JPEG
        atoms["covr"] = [MP4Cover(bytes(tags.cover), imageformat=kind)]
    audio.save()


# ---- ogg and flac: Vorbis comments -------------------------------------------------------


def _vorbis_time(ms: int) -> str:
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}.{millis:03d}"


_VORBIS_REPLACED = ("TITLE", "ALBUM", "ARTIST", "LANGUAGE", "METADATA_BLOCK_PICTURE")


def _vorbis_comments(marks: Sequence[ChapterMark], tags: BookTags) -> dict[str, str]:
    comments: dict[str, str] = {}
    for n, mark in enumerate(marks, start=1):
        comments[f"CHAPTER{n:03d}"] = _vorbis_time(mark.start_ms)
        comments[f"CHAPTER{n:03d}NAME"] = mark.title
    if tags.title is not None:
        comments["TITLE"] = tags.title
        comments["ALBUM"] = tags.title
    if tags.author is not None:
        comments["ARTIST"] = tags.author
    if tags.language is not None:
        comments["LANGUAGE"] = tags.language
    return comments


def _picture(tags: BookTags, cover: str | None) -> Picture | None:
    if tags.cover is None or cover is None:
        return None
    picture = Picture()
    picture.type = PictureType.COVER_FRONT
    picture.mime = cover
    picture.desc = "Cover"
    picture.data = bytes(tags.cover)
    return picture


def _is_replaced(key: str) -> bool:
    upper = key.upper()
    return upper.startswith("CHAPTER") or upper in _VORBIS_REPLACED


def _tag_ogg(path: Path, marks: Sequence[ChapterMark], tags: BookTags, cover: str | None) -> None:
    audio = OggOpus(path)
    comments = audio.tags
    assert comments is not None  # an Opus stream always has its OpusTags header
    for key in {k for k in comments.keys() if _is_replaced(k)}:  # noqa: SIM118 - not a dict
        del comments[key]
    for key, value in _vorbis_comments(marks, tags).items():
        comments[key] = [value]
    picture = _picture(tags, cover)
    if picture is not None:
        comments["METADATA_BLOCK_PICTURE"] = [base64.b64encode(picture.write()).decode("ascii")]
    audio.save()


def _tag_flac(path: Path, marks: Sequence[ChapterMark], tags: BookTags, cover: str | None) -> None:
    audio = FLAC(path)
    if audio.tags is None:
        audio.add_tags()
    comments = audio.tags
    assert comments is not None
    for key in {k for k in comments.keys() if _is_replaced(k)}:  # noqa: SIM118 - not a dict
        del comments[key]
    for key, value in _vorbis_comments(marks, tags).items():
        comments[key] = [value]
    picture = _picture(tags, cover)
    if picture is not None:
        audio.clear_pictures()
        audio.add_picture(picture)
    audio.save()


# ---- mp3 and wav: ID3 --------------------------------------------------------------------


def _id3_frames(id3: ID3, tags: BookTags, cover: str | None) -> None:
    for frame_id in ("TIT2", "TALB", "TPE1", "TLAN", "APIC"):
        id3.delall(frame_id)
    if tags.title is not None:
        id3.add(TIT2(encoding=3, text=[tags.title]))
        id3.add(TALB(encoding=3, text=[tags.title]))
    if tags.author is not None:
        id3.add(TPE1(encoding=3, text=[tags.author]))
    if tags.language is not None:
        id3.add(TLAN(encoding=3, text=[tags.language]))
    if tags.cover is not None and cover is not None:
        id3.add(
            APIC(
                encoding=3,
                mime=cover,
                type=PictureType.COVER_FRONT,
                desc="Cover",
                data=bytes(tags.cover),
            )
        )


def _tag_mp3(path: Path, marks: Sequence[ChapterMark], tags: BookTags, cover: str | None) -> None:
    try:
        id3 = ID3(path)
    except ID3NoHeaderError:
        id3 = ID3()
    id3.delall("CHAP")
    id3.delall("CTOC")
    ids = [f"chp{n}" for n in range(len(marks))]
    for element_id, mark in zip(ids, marks, strict=True):
        id3.add(
            CHAP(
                element_id=element_id,
                start_time=mark.start_ms,
                end_time=mark.end_ms,
                sub_frames=[TIT2(encoding=3, text=[mark.title])],
            )
        )
    if marks:
        id3.add(
            CTOC(
                element_id="toc",
                flags=CTOCFlags.TOP_LEVEL | CTOCFlags.ORDERED,
                child_element_ids=ids,
                sub_frames=[TIT2(encoding=3, text=["Chapters"])],
            )
        )
    _id3_frames(id3, tags, cover)
    id3.save(path, v2_version=3)
    if marks:
        _put_chapter_frames_in_time_order(path)


_ID3_HEADER_BYTES = 10
_ID3_FRAME_HEADER_BYTES = 10


def _put_chapter_frames_in_time_order(path: Path) -> None:
    """Reorder the ``CHAP`` frames of the ID3v2.3 tag at the start of ``path`` by start time.

    mutagen orders frames of one kind by their size, and FFmpeg (whose readers most players
    use) lists ID3 chapters in the tag's order rather than the CTOC's. The frames keep their
    bytes and the tag its size: only the order of the CHAP frames among themselves changes.
    """
    with path.open("r+b") as file:
        header = file.read(_ID3_HEADER_BYTES)
        if header[:3] != b"ID3" or header[3] != 3 or header[5] != 0:
            return  # not the plain v2.3 tag written just above
        size = 0
        for byte in header[6:10]:  # "syncsafe": 7 bits a byte
            size = (size << 7) | (byte & 0x7F)
        body = file.read(size)
        frames: list[bytes] = []
        pos = 0
        while pos + _ID3_FRAME_HEADER_BYTES <= len(body) and body[pos] != 0:  # 0: padding
            length = int.from_bytes(body[pos + 4 : pos + 8], "big")
            end = pos + _ID3_FRAME_HEADER_BYTES + length
            frames.append(body[pos:end])
            pos = end
        slots = [n for n, frame in enumerate(frames) if frame[:4] == b"CHAP"]
        ordered = sorted((frames[n] for n in slots), key=_chap_start_ms)
        for n, frame in zip(slots, ordered, strict=True):
            frames[n] = frame
        file.seek(_ID3_HEADER_BYTES)
        file.write(b"".join(frames))


def _chap_start_ms(frame: bytes) -> int:
    """A CHAP frame's start time: after the element ID and its NUL terminator."""
    data = frame[_ID3_FRAME_HEADER_BYTES:]
    start = data.index(b"\x00") + 1
    return int.from_bytes(data[start : start + 4], "big")


def _tag_wav(path: Path, _marks: Sequence[ChapterMark], tags: BookTags, cover: str | None) -> None:
    if tags == BookTags():
        return
    audio = WAVE(path)
    if audio.tags is None:
        audio.add_tags()
    id3 = audio.tags
    assert isinstance(id3, ID3)
    _id3_frames(id3, tags, cover)
    audio.save(v2_version=3)


_Tagger = Callable[[Path, Sequence[ChapterMark], BookTags, str | None], None]
_TAGGERS: dict[AudioFormat, _Tagger] = {
    AudioFormat.M4B: _tag_mp4,
    AudioFormat.OGG: _tag_ogg,
    AudioFormat.MP3: _tag_mp3,
    AudioFormat.FLAC: _tag_flac,
    AudioFormat.WAV: _tag_wav,
}
