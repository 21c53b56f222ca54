"""A job as users see it: a document's chapters with their own progress and ETA."""

from __future__ import annotations

import json
from dataclasses import replace

from voicelane.core.job_view import chapter_views, job_summary
from voicelane.core.ledger import BookInfo, ChapterInfo, Job, JobOptions, JobState

BOOK = BookInfo(
    kind="epub",
    title="A Book",
    author="Someone",
    chapters=(ChapterInfo("One", 10), ChapterInfo("Two", 50, 2), ChapterInfo("Empty", 60)),
)


def job(state: JobState = JobState.RENDERING, done: int = 3) -> Job:
    return Job(
        id="j" * 32,
        tenant="acme",
        state=state,
        options=JobOptions(voice="en-us", format="m4b", sample_rate_hz=24000, book=BOOK),
        characters=100,
        created_at=0.0,
        updated_at=0.0,
        started_at=100.0,
        finished_at=None,
        chunks_total=6,
        chunks_done=done,
        audio_s=0.0,
        attempts=0,
        output_key=None,
        size_bytes=None,
        duration_s=None,
        sha256=None,
        error=None,
    )


# chunk 0: the title page; chapter One: chunks 1-3; Two: 4-5; Empty: none of its own.
EXTRAS = {"chapter_chunks": json.dumps([1, 4, -1])}


def test_each_chapter_counts_its_own_chunks_and_eta_at_the_jobs_pace() -> None:
    views = chapter_views(job(), EXTRAS, done={0, 1, 4}, now=130.0)  # 10 s per chunk so far
    assert [(v["title"], v["level"]) for v in views] == [("One", 1), ("Two", 2), ("Empty", 1)]
    assert [(v["chunks_done"], v["chunks_total"]) for v in views] == [(1, 3), (1, 2), (0, 0)]
    assert views[0]["progress"] == round(1 / 3, 4)
    # One ends with chunk 3: chunks 2 and 3 still to do; Two needs 2, 3 and 5.
    assert views[0]["eta_s"] == 20.0 and views[1]["eta_s"] == 30.0
    assert views[2]["eta_s"] is None


def test_a_done_job_shows_where_each_chapter_is_in_the_audio() -> None:
    done_job = replace(job(JobState.DONE, done=6), finished_at=200.0)
    extras = {**EXTRAS, "chapter_times": json.dumps([[1500, 9000], [10500, 20000], [20000, 20000]])}
    views = chapter_views(done_job, extras, done=set())
    assert [(v["start_s"], v["end_s"]) for v in views] == [
        (1.5, 9.0),
        (10.5, 20.0),
        (20.0, 20.0),
    ]
    assert all(v["progress"] == 1.0 and v["eta_s"] is None for v in views)


def test_the_summary_names_the_document() -> None:
    summary = job_summary(job())
    assert summary["input_format"] == "epub"
    assert summary["title"] == "A Book" and summary["author"] == "Someone"
