"""Where a job's files beside its audio are kept in storage: its subtitles and its chapter
files (the workers write them, the fronts link them)."""

from __future__ import annotations

from voicelane.common.audio import AudioFormat
from voicelane.core.ledger import Job

__all__ = ["chapter_file_key", "cover_key", "subtitles_key"]


def subtitles_key(job: Job, fmt: str) -> str:
    """The job's subtitles in ``fmt`` (``vtt``, ``srt``, ``json``)."""
    return f"{job.tenant}/{job.id}/subtitles.{fmt}"


def chapter_file_key(job: Job, index: int) -> str:
    """Chapter ``index``'s own audio file (``split_chapters``), numbered from 1."""
    extension = AudioFormat(job.options.format).extension
    return f"{job.tenant}/{job.id}/chapters/{index + 1:03d}.{extension}"


def cover_key(tenant: str, job_id: str, media_type: str) -> str:
    """Where a document's cover waits for the assembler (removed with the job's parts)."""
    extension = "png" if media_type == "image/png" else "jpg"
    return f"{tenant}/{job_id}/cover.{extension}"
