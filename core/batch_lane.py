"""The batch lane's contract between the fronts and the workers: queues, tasks, enqueueing.

Like :mod:`voicelane.core.lane` for live streams, this module is what both sides agree on:

* the Celery queues (``control``: planning, cleanup; ``render.{engine}``: the workers of one
  engine — a worker started with ``--queues render`` takes its engine's; ``assemble``: CPU
  workers; ``callbacks``: job callbacks, in a process of their own, so a tenant's slow
  receiver never holds a thread that plans jobs) and the task names, routed one queue per
  task (a chunk to its job's engine's render queue);
* :func:`configure_celery`, the one Celery configuration (reliability settings explained
  in ``docs/batch-lane.md`` and the team's notes), used by the workers' app and by the
  fronts' producer alike;
* :class:`Enqueue` (send a task by name, ids only) and :class:`CeleryEnqueue`, its Celery
  implementation, which builds its producer app on first use — importing a front never
  builds a Celery app;
* :class:`BatchClient`, what a front does with the lane: submit a job (ledger + ``plan``),
  cancel one (ledger + ``cleanup``).

Task arguments are job ids and chunk numbers only: Flower, events and logs show arguments,
and must never show a user's text.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Protocol

from voicelane.common.errors import JobStateError, UnavailableError
from voicelane.core.engines import ENGINE_NAMES, render_queue
from voicelane.core.ledger import Job, JobOptions, JobState, Ledger
from voicelane.core.ledger.queues import PRIORITY_STEPS
from voicelane.core.redis_clients import celery_broker
from voicelane.core.settings import ServiceSettings

if TYPE_CHECKING:
    from celery import Celery

log = logging.getLogger(__name__)

CONTROL_QUEUE = "control"
RENDER_QUEUE = "render"
"""What a worker's ``--queues`` names for "the render queue of my engine"
(:func:`~voicelane.core.engines.render_queue`: ``render.espeak``, ``render.piper``...)."""
ASSEMBLE_QUEUE = "assemble"
CALLBACKS_QUEUE = "callbacks"
"""Job callbacks only: a receiver is the tenant's and may be slow or hostile, so callbacks are
consumed by their own worker process (``voicelane worker --queues callbacks``), whose threads
are not the ones that plan, assemble and clean up (issue 26: trickling receivers held every
thread of ``control``)."""
RENDER_QUEUES = tuple(render_queue(engine) for engine in ENGINE_NAMES)
QUEUES = (CONTROL_QUEUE, *RENDER_QUEUES, ASSEMBLE_QUEUE, CALLBACKS_QUEUE)

PLAN_TASK = "voicelane.plan"
RENDER_CHUNK_TASK = "voicelane.render_chunk"
ASSEMBLE_TASK = "voicelane.assemble"
NOTIFY_TASK = "voicelane.notify"
CLEANUP_TASK = "voicelane.cleanup"

TASK_QUEUES = {
    PLAN_TASK: CONTROL_QUEUE,
    NOTIFY_TASK: CALLBACKS_QUEUE,
    CLEANUP_TASK: CONTROL_QUEUE,
    RENDER_CHUNK_TASK: render_queue(ENGINE_NAMES[0]),
    ASSEMBLE_TASK: ASSEMBLE_QUEUE,
}
"""Each task's queue; a chunk goes to its job's engine's queue (the ``queue`` of
:class:`Enqueue`), this one only when none is given."""


class Enqueue(Protocol):
    """Send ``task`` with ``args`` (ids only) to its queue (``queue``: another than the
    task's own, such as a chunk's engine's render queue), at ``priority`` (one of
    :data:`~voicelane.core.ledger.queues.PRIORITY_STEPS`; 0, the default, is served first)."""

    def __call__(
        self,
        task: str,
        *args: str | int,
        countdown_s: float | None = None,
        queue: str | None = None,
        priority: int = 0,
    ) -> None: ...


def configure_celery(app: Celery, settings: ServiceSettings) -> None:
    """Point ``app`` at the settings' Redis with the lane's reliability settings.

    ``task_acks_late`` + ``task_reject_on_worker_lost``: a task whose worker dies is
    delivered again; ``worker_prefetch_multiplier=1``: a worker holds no more messages than it
    runs; ``visibility_timeout`` = 2 x the longest task's time limit, so a healthy long task is
    never handed out twice at once; ``unacked_restore_interval=5`` with
    ``unacked_restore_throttle=1``: a dead worker's messages come back within seconds after
    that (leases and the reconciler recover chunks faster; this is the backstop);
    ``priority_steps`` pinned to :data:`~voicelane.core.ledger.queues.PRIORITY_STEPS` (the
    ledger counts a queue's messages in each step's list, and the fair feed sends a tenant's
    later chunks at lower priorities); each queue its own direct exchange; task events on,
    for Flower. With sentinels, kombu's ``sentinel://`` transport (the primary asked of them
    on every reconnect), with a crash of its fixed (:mod:`voicelane.core.kombu_sentinel`); no
    result backend is used (``task_ignore_result``), so none needs Sentinel.
    """
    from kombu import Exchange, Queue

    broker_url, sentinel_options = celery_broker(settings.redis_target())
    if sentinel_options:
        from voicelane.core.kombu_sentinel import register

        register()  # sentinel:// is kombu's sentinel transport with a crash fixed
    app.conf.update(
        broker_url=broker_url,
        result_backend=None,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": int(2 * settings.render_time_limit_s),
            "unacked_restore_interval": 5,
            "unacked_restore_throttle": 1,
            "priority_steps": list(PRIORITY_STEPS),
            **sentinel_options,
        },
        task_queues=[
            Queue(name, Exchange(name, type="direct"), routing_key=name) for name in QUEUES
        ],
        task_default_queue=CONTROL_QUEUE,
        task_default_exchange=CONTROL_QUEUE,
        task_default_routing_key=CONTROL_QUEUE,
        task_routes={
            name: {"queue": queue, "exchange": queue, "routing_key": queue}
            for name, queue in TASK_QUEUES.items()
            if name != RENDER_CHUNK_TASK  # routed by its engine when sent (send_task)
        },
        worker_send_task_events=True,
        task_send_sent_event=True,
        worker_hijack_root_logger=False,
        task_soft_time_limit=None,
        task_time_limit=None,
    )


def send_task(
    app: Celery,
    task: str,
    *args: str | int,
    countdown_s: float | None = None,
    queue: str | None = None,
    priority: int = 0,
) -> None:
    """Send a task by name to its queue (or ``queue``), at ``priority``: ids only, never
    text."""
    queue = queue or TASK_QUEUES[task]
    app.send_task(
        task,
        args=list(args),
        queue=queue,
        exchange=queue,
        routing_key=queue,
        countdown=countdown_s,
        priority=priority or None,
    )


class CeleryEnqueue:
    """:class:`Enqueue` through a producer-only Celery app, built on the first call."""

    def __init__(self, settings: ServiceSettings) -> None:
        self._settings = settings
        self._app: Any = None
        self._lock = threading.Lock()

    def _producer(self) -> Celery:
        with self._lock:
            if self._app is None:
                from celery import Celery
                from kombu import pools

                # kombu declares a queue once per pooled connection and then trusts it: start
                # from fresh pools, so a Redis that lost its keys since gets them declared.
                pools.reset()
                app = Celery("voicelane-producer")
                configure_celery(app, self._settings)
                self._app = app
            return self._app

    def __call__(
        self,
        task: str,
        *args: str | int,
        countdown_s: float | None = None,
        queue: str | None = None,
        priority: int = 0,
    ) -> None:
        send_task(
            self._producer(), task, *args, countdown_s=countdown_s, queue=queue, priority=priority
        )


class BatchClient:
    """What a front does with the batch lane: submit and cancel jobs."""

    def __init__(self, ledger: Ledger, enqueue: Enqueue) -> None:
        self.ledger = ledger
        self.enqueue = enqueue

    def submit(
        self,
        tenant: str,
        options: JobOptions,
        text: str,
        *,
        max_queued_chars: int | None = None,
        max_stored_bytes: int | None = None,
        job_id: str | None = None,
    ) -> Job:
        """Write the job to the ledger (within the tenant's queued-characters quota) and queue
        its planning. If the queue cannot take it, the job is failed at once (never left
        queued forever) and UnavailableError raised. ``job_id``: drawn by the caller."""
        job = self.ledger.jobs.create(
            tenant,
            options,
            text,
            max_queued_chars=max_queued_chars,
            max_stored_bytes=max_stored_bytes,
            job_id=job_id,
        )
        try:
            self.enqueue(PLAN_TASK, job.id)
        except Exception as error:
            log.exception("could not enqueue job %s", job.id)
            self.ledger.jobs.fail(job.id, "could not enqueue the job")
            raise UnavailableError("the job queue is unavailable") from error
        return job

    def cancel(self, tenant: str, job_id: str) -> Job:
        """Cancel the tenant's job (idempotent for a cancelled one); JobStateError once it
        ended otherwise. Its parts are cleaned up by the ``cleanup`` task."""
        job = self.ledger.jobs.get_for_tenant(tenant, job_id)
        if job.state is JobState.CANCELLED:
            return job
        if not job.state.final and self.ledger.jobs.cancel(job_id):
            self.enqueue(CLEANUP_TASK, job_id)
        job = self.ledger.jobs.get_for_tenant(tenant, job_id)
        if job.state is not JobState.CANCELLED:
            raise JobStateError(f"job {job_id} is already {job.state.value}")
        return job
