"""A job as users see it: the JSON of ``GET /v1/jobs/{id}`` and of a job's callback body.

Both the REST front (``voicelane.api.routes.jobs``, which adds links) and the CPU worker that
POSTs callbacks (``voicelane.workers.jobs.notify_job``) show a job this way, so it lives in
``core`` — the one layer both may import — and not in the ledger, which returns typed records
(:class:`~voicelane.core.ledger.Job`). It never shows the text.
"""

from __future__ import annotations

import json
import time
from bisect import bisect_right
from collections.abc import Mapping
from typing import Any

from voicelane.core.ledger import Job, JobState


def job_summary(job: Job, *, now: float | None = None) -> dict[str, Any]:
    """The job in the API's field names (never the text)."""
    return {
        "id": job.id,
        "state": job.state.value,
        "voice": job.options.shown_voice,
        "engine": job.options.engine,
        "seed": job.options.seed,
        "format": job.options.format,
        "sample_rate_hz": job.options.sample_rate_hz,
        "speed": job.options.speed,
        "characters": job.characters,
        "chunks_total": job.chunks_total,
        "chunks_done": job.chunks_done,
        "progress": round(job.progress, 4),
        "audio_seconds_rendered": round(job.audio_s, 3),
        "eta_s": _round(job.eta_s(now)),
        "attempts": job.attempts,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "output": (
            {
                "size_bytes": job.size_bytes,
                "duration_s": job.duration_s,
                "sha256": job.sha256,
            }
            if job.state is JobState.DONE
            else None
        ),
        "error": job.error,
        "warnings": list(job.warnings),
        "normalize": job.options.text_options.normalize,
        "ssml": job.options.text_options.ssml,
        "lexicons": list(job.options.text_options.lexicon_names),
        "callback_url": job.options.callback_url,
        "input_format": job.options.book.kind,
        **({"title": job.options.book.title} if job.options.book.title else {}),
        **({"author": job.options.book.author} if job.options.book.author else {}),
    }


def chapter_views(
    job: Job, extras: Mapping[str, str], done: set[int], *, now: float | None = None
) -> list[dict[str, Any]]:
    """Each chapter of the job's document: its title and level, its chunks done and to do,
    its progress and ETA (at the job's pace so far: chunks are rendered in order, so a
    chapter is done when every chunk up to its last is), and where it is in the audio once
    the job is done. ``extras``: the planner's and assembler's records
    (``Jobs.extras``); ``done``: the chunks committed (unused once the job is final)."""
    chapters = job.options.book.chapters
    firsts: list[int] = json.loads(extras.get("chapter_chunks", "[]"))
    times: list[list[int]] = json.loads(extras.get("chapter_times", "[]"))
    ranges = (  # before the job is planned: no chunks yet
        chapter_ranges(firsts, job.chunks_total)
        if len(firsts) == len(chapters)
        else [(0, 0)] * len(chapters)
    )
    pace_s = None
    if job.started_at is not None and job.chunks_done and not job.state.final:
        pace_s = ((now or time.time()) - job.started_at) / job.chunks_done
    out = []
    for index, chapter in enumerate(chapters):
        first, stop = ranges[index]
        total = stop - first
        finished = job.state is JobState.DONE
        chunks_done = total if finished else sum(1 for n in range(first, stop) if n in done)
        view: dict[str, Any] = {
            "title": chapter.title,
            "level": chapter.level,
            "chunks_total": total,
            "chunks_done": chunks_done,
            "progress": round(chunks_done / total, 4) if total else (1.0 if finished else 0.0),
            "eta_s": None,
        }
        if pace_s is not None and total:
            behind = sum(1 for n in range(stop) if n not in done)
            view["eta_s"] = round(pace_s * behind, 1)
        if finished and index < len(times):
            view["start_s"] = times[index][0] / 1000
            view["end_s"] = times[index][1] / 1000
        out.append(view)
    return out


def chapter_ranges(first_chunks: list[int], chunks_total: int) -> list[tuple[int, int]]:
    """Each chapter's chunks ``[first, stop)`` from each chapter's first chunk (-1: none of
    its own, an empty range): a chunk never spans two chapters, so a chapter runs to the next
    chapter's first chunk (the last: to the end). The planner records the first chunks
    (``chapter_chunks``); this view and the assembler derive the rest."""
    starts = sorted(n for n in first_chunks if n >= 0)
    out = []
    for n in first_chunks:
        if n < 0:
            out.append((0, 0))
            continue
        later = bisect_right(starts, n)
        out.append((n, starts[later] if later < len(starts) else chunks_total))
    return out


def _round(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None
