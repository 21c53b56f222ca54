"""The reconciler: re-enqueues work that a lost message or a dead worker left behind.

It runs as a thread in every CPU worker (``--queues control,assemble``); a short Redis lock
makes one of them do each turn. Every ``reconcile_interval_s`` it looks at each active job:

* ``rendering``: chunks a worker started whose lease lapsed without a commit (the worker
  died) are re-enqueued at once; if the job made no progress for ``stall_timeout_s``, every
  unfinished chunk that was dispatched to the render queue is re-enqueued (a message lost
  with a restarted Redis) — chunks still waiting their turn in their tenant's line are not
  lost, and stay in line;
* ``queued`` / ``planning`` stalled: ``plan`` is enqueued again;
* ``assembling``: when its assembler died (its lease lapsed) ``assemble`` is enqueued again at
  once; when it stalled (a lost message), too.

Each pass also forgets jobs past their retention (``job_retention_s``: records and files,
:func:`voicelane.workers.jobs.sweep_expired_jobs`) and feeds the render queue
(:func:`voicelane.workers.jobs.feed_render_queue`), in case no chunk finished to do it. Duplicates
are harmless: every task is idempotent (leases, the ``done`` set, the assembly lease).
The ledger's ``locks.requeue_once`` keeps a re-enqueued item from being re-enqueued again while
its message is still waiting in the queue."""

from __future__ import annotations

import logging
import threading
import time

from voicelane.core import metrics
from voicelane.core.batch_lane import ASSEMBLE_TASK, PLAN_TASK, RENDER_CHUNK_TASK
from voicelane.core.engines import render_queue
from voicelane.core.ledger import JobState
from voicelane.workers.jobs import JobContext, feed_render_queue, sweep_expired_jobs

log = logging.getLogger(__name__)


def reconcile_once(ctx: JobContext, *, now: float | None = None) -> int:
    """One pass over the active jobs. Returns how many tasks it re-enqueued."""
    ledger = ctx.ledger
    settings = ctx.settings
    now = now if now is not None else time.time()
    hold_s = max(settings.lease_ttl_s, settings.reconcile_interval_s) * 3
    requeued = 0
    for job_id in ledger.jobs.active():
        job = ledger.jobs.get(job_id)
        if job is None:
            continue
        stalled = now - job.updated_at > settings.stall_timeout_s
        if job.state is JobState.RENDERING:
            chunks = ledger.chunks.orphaned(job_id)
            if stalled:
                unfinished = ledger.chunks.unfinished(job_id, job.chunks_total)
                lost = set(unfinished) & ledger.feed.dispatched(job_id)
                chunks = sorted(set(chunks) | lost)
            for n in chunks:
                if ledger.chunks.lease_holder(job_id, n) is None and ledger.locks.requeue_once(
                    job_id, f"chunk:{n}", hold_s
                ):
                    ctx.enqueue(
                        RENDER_CHUNK_TASK, job_id, n, queue=render_queue(job.options.engine)
                    )
                    metrics.LEASE_TAKEOVERS.inc()
                    requeued += 1
        elif stalled and job.state in (JobState.QUEUED, JobState.PLANNING):
            if ledger.locks.requeue_once(job_id, "plan", settings.stall_timeout_s):
                ctx.enqueue(PLAN_TASK, job_id)
                requeued += 1
        elif (
            job.state is JobState.ASSEMBLING
            and (stalled or ledger.assembly.orphaned(job_id))
            and ledger.locks.requeue_once(job_id, "assemble", hold_s)
        ):
            ctx.enqueue(ASSEMBLE_TASK, job_id)
            requeued += 1
    if requeued:
        log.info("reconciler re-enqueued %d tasks", requeued)
    feed_render_queue(ctx)
    sweep_expired_jobs(ctx, now=now)
    return requeued


class Reconciler:
    """Runs :func:`reconcile_once` every interval in a thread, one process at a time."""

    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reconciler", daemon=True)

    def start(self) -> Reconciler:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        interval_s = self.ctx.settings.reconcile_interval_s
        while not self._stop.wait(interval_s):
            try:
                if self.ctx.ledger.locks.reconciler_turn(self.ctx.worker_name, interval_s):
                    reconcile_once(self.ctx)
            except Exception:
                log.exception("reconciler pass failed; trying again next interval")
