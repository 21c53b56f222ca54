"""What every final state does, for the two scripts that end a job (``end_job.lua``: failed,
cancelled; ``finish_job.lua``: done): the ``ending.lua`` library — leave the active set, join
retention's finished index, give back the job's queued characters — and its keys."""

from __future__ import annotations

from voicelane.core.ledger.keys import ACTIVE_JOBS, FINISHED_JOBS, JOB, QUEUED_CHARS

ENDING = "ending"
"""The Lua library (``ending.lua``)."""


def ending_keys(job_id: str) -> list[str]:
    """The first ``KEYS`` of a script that ends a job: the job, the active set, the index."""
    return [JOB.key(job_id), ACTIVE_JOBS.key(), FINISHED_JOBS.key()]


def ending_args() -> tuple[str, str]:
    """The last ``ARGV`` of a script that ends a job: the parts of the tenant's
    queued-characters key around the tenant (the script reads the tenant from the job)."""
    return QUEUED_CHARS.around()
