"""Celery tasks: thin. Parse ids, call a plain function in ``voicelane.workers.jobs``, map errors.

Permanent errors end the job (the job functions do that themselves); anything else is
retried with exponential backoff and jitter, up to ``max_chunk_attempts`` for chunks (the
ledger counts attempts, so a chunk whose worker died counts too) and a few times for the
rest. Arguments are ids only.

A full store (:func:`~voicelane.core.storage.is_storage_full`: ``ENOSPC``, MinIO's 507) is
nobody's fault and usually passes when retention or an operator frees room, so it is retried
on a slow schedule instead (:func:`storage_full_countdown_s`: 5, 15, 45, 135, then every 300 s,
plus up to 20 % jitter), the chunk's attempt is not counted, and the job fails with the reason
only after :data:`_MAX_RETRIES` such waits (~23 minutes). docs/operations.md, "Full storage".
"""

from __future__ import annotations

import logging
import random

from celery import Task

from voicelane.common.errors import is_permanent
from voicelane.core.batch_lane import (
    ASSEMBLE_TASK,
    CLEANUP_TASK,
    NOTIFY_TASK,
    PLAN_TASK,
    RENDER_CHUNK_TASK,
)
from voicelane.core.storage import is_storage_full
from voicelane.workers.celery_app import app
from voicelane.workers.context import current as context
from voicelane.workers.jobs import (
    assemble_job,
    cleanup_job,
    fail_job,
    notify_job,
    plan_job,
    render_chunk,
)

log = logging.getLogger(__name__)

_MAX_RETRIES = 8


STORAGE_FULL_BASE_S = 5.0
STORAGE_FULL_FACTOR = 3.0
STORAGE_FULL_CAP_S = 300.0
STORAGE_FULL_JITTER = 0.2


def _backoff_s(retries: int, base_s: float = 1.0, cap_s: float = 60.0) -> float:
    return float(random.uniform(0, min(cap_s, base_s * 2**retries)))


def storage_full_countdown_s(retries: int) -> float:
    """The wait before retry ``retries + 1`` of work that found the store full: 5 s, 15 s,
    45 s, 135 s, then 300 s, each plus up to 20 % (so workers do not all retry at once)."""
    base_s = min(STORAGE_FULL_CAP_S, STORAGE_FULL_BASE_S * STORAGE_FULL_FACTOR**retries)
    return base_s * (1.0 + random.uniform(0, STORAGE_FULL_JITTER))


def retry_countdown_s(error: BaseException, retries: int) -> float:
    """How long a task that failed with ``error`` (after ``retries`` retries) waits."""
    if is_storage_full(error):
        return storage_full_countdown_s(retries)
    return _backoff_s(retries)


@app.task(bind=True, name=PLAN_TASK, max_retries=_MAX_RETRIES)
def plan(self: Task, job_id: str) -> int:
    try:
        return plan_job(context(), str(job_id))
    except Exception as error:
        if is_permanent(error):
            fail_job(context(), str(job_id), str(error))
            return 0
        raise self.retry(
            exc=error, countdown=retry_countdown_s(error, self.request.retries)
        ) from error


@app.task(bind=True, name=RENDER_CHUNK_TASK, max_retries=_MAX_RETRIES)
def render(self: Task, job_id: str, n: int) -> str:
    try:
        return render_chunk(context(), str(job_id), int(n))
    except Exception as error:
        if is_storage_full(error) and self.request.retries >= _MAX_RETRIES:
            fail_job(context(), str(job_id), f"chunk {n}: storage stayed full: {error}")
            return "failed"
        log.warning("job %s chunk %s failed, will retry: %s", job_id, n, error)
        raise self.retry(
            exc=error, countdown=retry_countdown_s(error, self.request.retries)
        ) from error


@app.task(bind=True, name=ASSEMBLE_TASK, max_retries=_MAX_RETRIES)
def assemble(self: Task, job_id: str) -> bool:
    try:
        return assemble_job(context(), str(job_id))
    except Exception as error:
        if is_permanent(error) or self.request.retries >= _MAX_RETRIES:
            fail_job(context(), str(job_id), f"assembly failed: {error}")
            return False
        raise self.retry(
            exc=error, countdown=retry_countdown_s(error, self.request.retries)
        ) from error


@app.task(bind=True, name=NOTIFY_TASK, max_retries=16)
def notify(self: Task, job_id: str) -> int:
    try:
        return notify_job(context(), str(job_id))
    except Exception as error:
        if self.request.retries + 1 >= context().settings.callback_max_attempts:
            log.warning("giving up on the callback of job %s: %s", job_id, error)
            return 0
        raise self.retry(exc=error, countdown=_backoff_s(self.request.retries)) from error


@app.task(bind=True, name=CLEANUP_TASK, max_retries=_MAX_RETRIES)
def cleanup(self: Task, job_id: str) -> int:
    try:
        return cleanup_job(context(), str(job_id))
    except Exception as error:
        raise self.retry(exc=error, countdown=_backoff_s(self.request.retries)) from error
