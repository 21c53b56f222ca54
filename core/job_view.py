"""A job as users see it: the JSON of ``GET /v1/jobs/{id}`` and of a job's callback body.

Both the REST front (``voicelane.api.routes.jobs``, which adds links) and the CPU worker that
POSTs callbacks (``voicelane.workers.jobs.notify_job``) show a job this way, so it lives in
``core`` — the one layer both may import — and not in the ledger, which returns typed records
(:class:`~voicelane.core.ledger.Job`). It never shows the text.
"""

from __future__ import annotations

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
    }


def _round(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None
