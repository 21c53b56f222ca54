"""A job's files from its parts: the audio (with chapter pauses, marks, tags and cover), one
file per chapter when asked, and the subtitles — built in a local folder, uploaded by
:func:`voicelane.workers.jobs.assemble_job`.

Where everything lands in the audio is counted in samples as it is written, so the chapter
marks and the subtitles are in the clock of the file as delivered: every chunk's audio
(paragraph pauses and SSML breaks inside it), and ``chapter_pause_s`` of silence before each
chapter but the first. A chapter's mark is where its first chunk's audio starts (after that
pause); it ends where the next one starts (the last: at the end of the file).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from voicelane.common.audio import AudioFileWriter, AudioFormat, int16_to_float, open_writer
from voicelane.common.audio.pcm import silence
from voicelane.common.errors import StorageNotFoundError
from voicelane.core.job_view import chapter_ranges
from voicelane.core.ledger import Job
from voicelane.core.storage import Storage
from voicelane.core.subtitles import SubtitleChapter, Subtitles, TimedSentence, normalize_cues
from voicelane.core.word_timings import SentenceTiming
from voicelane.workers.book_audio import BookTags, ChapterMark, write_book_metadata
from voicelane.workers.job_timings import read_chunk_timings, shifted

log = logging.getLogger(__name__)

__all__ = ["AssembledFiles", "build_job_files", "chapter_times_json", "chunk_chapters"]


@dataclass
class AssembledFiles:
    audio: Path
    duration_s: float
    chapters: list[ChapterMark] = field(default_factory=list)
    """The chapter marks (empty: the document has no chapters)."""
    subtitles: Subtitles | None = None
    """None when a part has no timings (a job planned before subtitles)."""
    chapter_files: list[Path] = field(default_factory=list)
    """One audio file per chapter (``split_chapters``), in order."""


def chunk_chapters(first_chunks: list[int], chunks_total: int) -> list[int | None]:
    """Each chunk's chapter (:func:`voicelane.core.job_view.chapter_ranges`); chunks before
    the first chapter have None."""
    out: list[int | None] = [None] * chunks_total
    for chapter, (first, stop) in enumerate(chapter_ranges(first_chunks, chunks_total)):
        for n in range(first, min(stop, chunks_total)):
            out[n] = chapter
    return out


def build_job_files(
    job: Job,
    storage: Storage,
    folder: Path,
    *,
    part_key: Callable[[int], str],
    timings_key: Callable[[int], str],
    first_chunks: list[int],
    chapter_pause_s: float,
    touch: Callable[[], None],
) -> AssembledFiles:
    """Decode the parts in order into the job's format in ``folder``: chunk n's audio and
    timings from ``part_key(n)`` and ``timings_key(n)`` (the keys its counted commit
    recorded); ``touch`` is called every few chunks (the ledger's sign of life)."""
    fmt = AudioFormat(job.options.format)
    rate = job.options.sample_rate_hz
    book = job.options.book
    titles = [c.title for c in book.chapters]
    chapters_of = chunk_chapters(first_chunks, job.chunks_total) if titles else []
    starts_ms: dict[int, int] = {}
    sentences: list[TimedSentence] = []
    word_timings = True
    complete = True
    written = 0  # samples in the file so far
    path = folder / f"audio.{fmt.extension}"
    chapter_files: list[Path] = []
    chapter_writer: AudioFileWriter | None = None
    previous: int | None = None
    with open_writer(path, fmt, rate) as writer:
        try:
            for n in range(job.chunks_total):
                chapter = chapters_of[n] if chapters_of else None
                if chapter is not None and chapter != previous:
                    if n > 0 and chapter_pause_s > 0:
                        gap = silence(chapter_pause_s, rate)
                        writer.write(gap)
                        written += len(gap)
                    starts_ms[chapter] = round(written * 1000 / rate)
                    if book.split_chapters:
                        if chapter_writer is not None:
                            chapter_writer.close()
                        chapter_files.append(folder / f"chapter-{chapter + 1:03d}.{fmt.extension}")
                        chapter_writer = open_writer(chapter_files[-1], fmt, rate)
                previous = chapter
                pcm = int16_to_float(np.frombuffer(storage.get_bytes(part_key(n)), dtype=np.int16))
                if complete:
                    try:
                        timings = read_chunk_timings(storage.get_bytes(timings_key(n)))
                    except StorageNotFoundError:
                        complete = False  # planned before subtitles: none for this job
                    else:
                        offset_ms = round(written * 1000 / rate)
                        word_timings = word_timings and timings.word_timings
                        sentences += [
                            _timed(shifted(s, offset_ms), chapter) for s in timings.sentences
                        ]
                writer.write(pcm)
                if chapter_writer is not None:
                    chapter_writer.write(pcm)
                written += len(pcm)
                if n % 16 == 15:
                    touch()
        finally:
            if chapter_writer is not None:
                chapter_writer.close()
    duration_ms = round(written * 1000 / rate)
    marks = _marks(titles, starts_ms, duration_ms)
    subtitles = (
        Subtitles(
            sentences=normalize_cues(sentences, duration_ms),
            duration_ms=duration_ms,
            word_timings=word_timings,
            chapters=tuple(SubtitleChapter(m.title, m.start_ms, m.end_ms) for m in marks),
        )
        if complete
        else None
    )
    tags = _tags(job, storage)
    if marks or tags != BookTags():
        write_book_metadata(path, fmt, chapters=marks, tags=tags)
    for index, chapter_path in enumerate(chapter_files):
        write_book_metadata(
            chapter_path,
            fmt,
            chapters=(),
            tags=BookTags(
                title=marks[index].title if index < len(marks) else None,
                author=tags.author,
                language=tags.language,
            ),
        )
    return AssembledFiles(path, writer.duration_s, marks, subtitles, chapter_files)


def _timed(sentence: SentenceTiming, chapter: int | None) -> TimedSentence:
    return TimedSentence(
        text=sentence.text,
        start_ms=sentence.start_ms,
        end_ms=sentence.end_ms,
        char_start=sentence.char_start,
        char_end=sentence.char_end,
        words=sentence.words,
        chapter=chapter,
    )


def _marks(titles: list[str], starts_ms: dict[int, int], duration_ms: int) -> list[ChapterMark]:
    """A mark per chapter; a chapter with no audio of its own starts where the next one
    does."""
    if not titles:
        return []
    starts: list[int] = [0] * len(titles)
    following = duration_ms
    for index in reversed(range(len(titles))):
        following = starts_ms.get(index, following)
        starts[index] = following
    return [
        ChapterMark(
            title,
            starts[i],
            starts[i + 1] if i + 1 < len(titles) else duration_ms,
        )
        for i, title in enumerate(titles)
    ]


def _tags(job: Job, storage: Storage) -> BookTags:
    book = job.options.book
    cover = None
    if book.cover_key:
        try:
            cover = storage.get_bytes(book.cover_key)
        except StorageNotFoundError:
            log.warning("job %s: its cover is gone from storage; the file has none", job.id)
    return BookTags(
        title=book.title,
        author=book.author,
        language=book.language,
        cover=cover,
        cover_media_type=book.cover_media_type if cover is not None else None,
    )


def chapter_times_json(marks: list[ChapterMark]) -> str:
    return json.dumps([[m.start_ms, m.end_ms] for m in marks])
