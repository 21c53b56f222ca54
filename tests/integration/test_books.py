"""Books through the batch lane in-process (real Redis, local storage, espeak behind a real
batcher): chapters never share a chunk, the audio gets chapter pauses and marks, and every job
gets subtitles in the clock of the audio as delivered — checked on the decoded audio."""

from __future__ import annotations

import io
import itertools
import json
import math
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import srt
import webvtt

from tests.support.documents import ebooklib_epub, pandoc_epub
from tests.support.jobs import S3_PARAM, espeak_context, storage_param
from tests.support.tools import require_tool
from voicelane.common.audio import decode_to_pcm
from voicelane.core.documents import DocumentLimits, read_document
from voicelane.core.job_files import subtitles_key
from voicelane.core.ledger import BookInfo, ChapterInfo, JobOptions, JobState
from voicelane.core.subtitles import Subtitles
from voicelane.workers.jobs import (
    JobContext,
    assemble_job,
    cleanup_job,
    plan_job,
    render_chunk,
)

pytestmark = pytest.mark.integration

FRAME_S = 0.005
VOICED_DBFS = -40.0

CHAPTERS = [
    ("Chapter One", "The first chapter opens here. It has two sentences."),
    (
        "Chapter Two",
        "The second chapter is longer. It goes on for a while.\n\n"
        "A new paragraph holds 42 apples, and $3.50 of change. Then it ends.",
    ),
    ("Chapter Three", "The last chapter is short."),
]


def book_text() -> tuple[str, list[ChapterInfo]]:
    """A title page, then three chapters, each starting with its heading."""
    text = "A Small Book.\n\nBy Nobody.\n\n"
    chapters = []
    for title, body in CHAPTERS:
        chapters.append(ChapterInfo(title, len(text)))
        text += f"{title}.\n\n{body}\n\n"
    return text.rstrip(), chapters


@pytest.fixture
def ctx(request: pytest.FixtureRequest, redis_url: str, tmp_path: Path) -> Iterator[JobContext]:
    with espeak_context(
        redis_url, tmp_path, storage=storage_param(request), chunk_target_audio_s=2
    ) as context:
        yield context


def run_job(ctx: JobContext, text: str, fmt: str, book: BookInfo = BookInfo()) -> str:  # noqa: B008
    options = JobOptions(voice="en-us", format=fmt, sample_rate_hz=24000, book=book)
    job_id = ctx.ledger.jobs.create("acme", options, text).id
    total = plan_job(ctx, job_id)
    assert total > 0
    for n in range(total):
        render_chunk(ctx, job_id, n)
    assert assemble_job(ctx, job_id)
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None and job.state is JobState.DONE
    return job_id


def output_path(ctx: JobContext, job_id: str, tmp_path: Path, name: str) -> Path:
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None and job.output_key
    path = tmp_path / name
    path.write_bytes(ctx.storage.get_bytes(job.output_key))
    return path


def subtitles_of(ctx: JobContext, job_id: str, fmt: str) -> str:
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None
    return ctx.storage.get_bytes(subtitles_key(job, fmt)).decode()


def voiced_frames(pcm: np.ndarray, rate: int) -> np.ndarray:
    """Per 5 ms frame, whether it is louder than -40 dBFS."""
    size = int(rate * FRAME_S)
    frames = pcm[: len(pcm) // size * size].reshape(-1, size)
    rms = np.sqrt(np.mean(frames.astype(np.float64) ** 2, axis=1) + 1e-12)
    voiced: np.ndarray = 20 * np.log10(rms) > VOICED_DBFS
    return voiced


def onset_ms(voiced: np.ndarray, from_ms: float) -> float:
    """The first voiced frame starting at or after ``from_ms``."""
    first = max(0, math.ceil(from_ms / 1000 / FRAME_S - 1e-9))
    hits = np.flatnonzero(voiced[first:])
    assert hits.size, f"no speech after {from_ms} ms"
    return float((first + hits[0]) * FRAME_S * 1000)


def ffprobe(path: Path) -> dict[str, Any]:
    require_tool("ffprobe")
    out = subprocess.run(
        [
            "ffprobe",
            "-v",
            "error",
            "-show_chapters",
            "-show_format",
            "-show_streams",
            "-of",
            "json",
            str(path),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    data: dict[str, Any] = json.loads(out)
    return data


def test_an_m4b_book_has_its_chapters_where_their_audio_starts_with_tags_and_cover(
    ctx: JobContext, tmp_path: Path
) -> None:
    text, chapters = book_text()
    cover = tiny_png()
    ctx.storage.put_bytes("acme/cover-upload.png", cover, content_type="image/png")
    book = BookInfo(
        kind="markdown",
        title="A Small Book",
        author="Nobody",
        language="en",
        chapters=tuple(chapters),
        cover_key="acme/cover-upload.png",
        cover_media_type="image/png",
    )
    job_id = run_job(ctx, text, "m4b", book)
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None
    plans = [ctx.ledger.jobs.chunk(job_id, n) for n in range(job.chunks_total)]
    # A chunk never spans two chapters; the title page belongs to none.
    assert plans[0].chapter is None
    chapters_of = [-1 if p.chapter is None else p.chapter for p in plans]
    assert chapters_of == sorted(chapters_of) and set(chapters_of) == {-1, 0, 1, 2}
    path = output_path(ctx, job_id, tmp_path, "book.m4b")
    info = ffprobe(path)
    titles = [c["tags"]["title"] for c in info["chapters"]]
    assert titles == [title for title, _ in CHAPTERS]
    tags = {k.lower(): v for k, v in info["format"]["tags"].items()}
    assert tags["title"] == "A Small Book" and tags["artist"] == "Nobody"
    assert cover_of_m4b(path) == cover
    # Decodes end to end; each chapter mark within 100 ms of where its audio starts (the
    # first voiced frame after the chapter pause).
    pcm, rate = decode_to_pcm(path)
    duration_ms = len(pcm) / rate * 1000
    assert job.duration_s is not None
    assert abs(duration_ms - job.duration_s * 1000) < 100
    voiced = voiced_frames(pcm, rate)
    for chapter in info["chapters"]:
        mark_ms = float(chapter["start_time"]) * 1000
        heard_ms = onset_ms(voiced, mark_ms - 1000)
        assert abs(heard_ms - mark_ms) <= 100, (chapter["tags"]["title"], mark_ms, heard_ms)
    assert float(info["chapters"][-1]["end_time"]) * 1000 == pytest.approx(duration_ms, abs=150)
    # The cover is gone from storage once the job is cleaned up (it is in the file now).
    cleanup_job(ctx, job_id)
    assert not ctx.storage.exists("acme/cover-upload.png")


@pytest.mark.parametrize("producer", ["pandoc", "ebooklib"])
def test_epubs_of_third_party_producers_become_m4bs_with_their_table_of_contents(
    ctx: JobContext, tmp_path: Path, producer: str
) -> None:
    built = pandoc_epub(tmp_path) if producer == "pandoc" else ebooklib_epub()
    document = read_document(built.data, filename="book.epub", limits=DocumentLimits(10**6))
    cover_key = None
    if document.cover is not None:
        cover_key = f"acme/{producer}-cover"
        ctx.storage.put_bytes(cover_key, document.cover.data)
    book = BookInfo(
        kind=document.kind,
        title=document.title,
        author=document.author,
        language=document.language,
        chapters=tuple(ChapterInfo(c.title, c.start, c.level) for c in document.chapters),
        cover_key=cover_key,
        cover_media_type=document.cover.media_type if document.cover else None,
    )
    job_id = run_job(ctx, document.text, "m4b", book)
    path = output_path(ctx, job_id, tmp_path, "book.m4b")
    info = ffprobe(path)
    # Chapter count and titles equal the book's table of contents.
    assert [c["tags"]["title"] for c in info["chapters"]] == list(built.toc_titles)
    tags = {k.lower(): v for k, v in info["format"]["tags"].items()}
    assert tags["title"] == built.title and tags["artist"] == built.author
    if built.cover is not None:
        assert cover_of_m4b(path) == built.cover
    pcm, rate = decode_to_pcm(path)  # decodes end to end
    voiced = voiced_frames(pcm, rate)
    for chapter in info["chapters"]:
        mark_ms = float(chapter["start_time"]) * 1000
        heard_ms = onset_ms(voiced, mark_ms - 1000)
        assert abs(heard_ms - mark_ms) <= 100, (chapter["tags"]["title"], mark_ms, heard_ms)
    subs = Subtitles.from_json(json.loads(subtitles_of(ctx, job_id, "json")))
    assert [c.title for c in subs.chapters] == list(built.toc_titles)
    assert all(document.text[s.char_start : s.char_end] == s.text for s in subs.sentences)


def cover_of_m4b(path: Path) -> bytes | None:
    from mutagen.mp4 import MP4

    tags = MP4(path).tags
    covers = tags.get("covr") if tags else None
    return bytes(covers[0]) if covers else None


def test_subtitles_match_the_sentences_and_the_audio_as_delivered(
    ctx: JobContext, tmp_path: Path
) -> None:
    text, chapters = book_text()
    job_id = run_job(ctx, text, "wav", BookInfo(kind="markdown", chapters=tuple(chapters)))
    data = json.loads(subtitles_of(ctx, job_id, "json"))
    subs = Subtitles.from_json(data)
    sentences = subs.sentences
    # One cue per sentence, in order, with the user's own text (not "forty-two").
    expected = [
        "A Small Book.",
        "By Nobody.",
        "Chapter One.",
        "The first chapter opens here.",
        "It has two sentences.",
        "Chapter Two.",
        "The second chapter is longer.",
        "It goes on for a while.",
        "A new paragraph holds 42 apples, and $3.50 of change.",
        "Then it ends.",
        "Chapter Three.",
        "The last chapter is short.",
    ]
    assert [s.text for s in sentences] == expected
    assert all(text[s.char_start : s.char_end] == s.text for s in sentences)
    assert subs.word_timings
    words = [w.text for s in sentences for w in s.words]
    assert "42" in words and "$3.50" in words
    # Never overlapping; on the decoded audio each cue starts within 80 ms of the speech
    # onset after the pause before it, and the last ends within 300 ms of the audio's end.
    assert all(a.end_ms <= b.start_ms for a, b in itertools.pairwise(sentences))
    pcm, rate = decode_to_pcm(output_path(ctx, job_id, tmp_path, "book.wav"))
    voiced = voiced_frames(pcm, rate)
    previous_end = 0.0
    for sentence in sentences:
        heard = onset_ms(voiced, previous_end)
        assert abs(heard - sentence.start_ms) <= 80, (sentence.text, sentence.start_ms, heard)
        previous_end = sentence.end_ms
    last_voiced_ms = (np.flatnonzero(voiced)[-1] + 1) * FRAME_S * 1000
    audio_ms = len(pcm) / rate * 1000
    assert abs(sentences[-1].end_ms - audio_ms) <= 300
    assert abs(sentences[-1].end_ms - last_voiced_ms) <= 300
    # Chapters in the subtitles too, in order.
    assert [c.title for c in subs.chapters] == [title for title, _ in CHAPTERS]
    # WebVTT and SRT parse with kept libraries, with the same cues.
    vtt = webvtt.from_buffer(io.StringIO(subtitles_of(ctx, job_id, "vtt")))
    assert [" ".join(c.text.split()) for c in vtt.captions] == expected
    cues = list(srt.parse(subtitles_of(ctx, job_id, "srt")))
    assert [" ".join(c.content.split()) for c in cues] == expected
    assert [round(c.start.total_seconds() * 1000) for c in cues] == [s.start_ms for s in sentences]


def test_a_plain_text_job_gets_subtitles_too_and_no_chapters(ctx: JobContext) -> None:
    job_id = run_job(ctx, "Hello there. How are you today?", "ogg")
    subs = Subtitles.from_json(json.loads(subtitles_of(ctx, job_id, "json")))
    assert [s.text for s in subs.sentences] == ["Hello there.", "How are you today?"]
    assert subs.chapters == ()


@S3_PARAM
def test_split_chapters_writes_one_file_per_chapter(ctx: JobContext, tmp_path: Path) -> None:
    text, chapters = book_text()
    job_id = run_job(
        ctx, text, "ogg", BookInfo(kind="html", chapters=tuple(chapters), split_chapters=True)
    )
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None
    keys = ctx.storage.list_keys(f"acme/{job_id}/chapters/")
    assert [k.rsplit("/", 1)[-1] for k in keys] == ["001.ogg", "002.ogg", "003.ogg"]
    # The book itself carries the chapters as Vorbis comments, read back by ffprobe.
    book_file = output_path(ctx, job_id, tmp_path, "book.ogg")
    info = ffprobe(book_file)
    assert [c["tags"]["title"] for c in info["chapters"]] == [t for t, _ in CHAPTERS]
    times = json.loads(ctx.ledger.jobs.extras(job_id)["chapter_times"])
    assert [round(float(c["start_time"]) * 1000) for c in info["chapters"]] == [
        start for start, _ in times
    ]
    for key, (start_ms, end_ms) in zip(keys, times, strict=True):
        pcm, rate = decode_to_pcm(ctx.storage.get_bytes(key))
        # Each file holds its chapter's audio (the chapter pause stays in the book only).
        assert len(pcm) / rate * 1000 <= end_ms - start_ms + 50
        assert len(pcm) / rate > 0.5


def tiny_png() -> bytes:
    """A 2x2 red PNG, built by hand."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    raw = b"".join(b"\x00" + b"\xff\x00\x00" * 2 for _ in range(2))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )
