"""The Celery application of the batch lane: Redis broker, json only, ids-only arguments.

Reliability settings (see the team's notes on Celery + Redis):

* ``task_acks_late`` + ``task_reject_on_worker_lost``: a task whose worker dies is delivered
  again instead of being lost;
* ``worker_prefetch_multiplier=1``: a worker holds no more messages than it runs;
* ``visibility_timeout`` = 2 x the longest task's time limit: Redis hands an unacked message
  to another worker only after this long, so a healthy long task is never run twice at once;
* ``unacked_restore_interval=5`` with ``unacked_restore_throttle=1``: once that timeout has
  passed, a dead worker's messages come back within seconds, not kombu's default ~100 s.
  (Faster recovery of a dead worker's chunks comes from the ledger's leases and the
  reconciler; these settings are the backstop.)
* queues ``control`` (planning, callbacks), ``render`` (GPU workers), ``assemble`` (CPU).
* task events on, so Flower's views and metrics work.

Task arguments are job ids and chunk numbers only: Flower, events and logs show arguments,
and must never show a user's text.
"""

from __future__ import annotations

from celery import Celery
from kombu import Exchange, Queue, pools

from core.settings import LaneSettings

CONTROL_QUEUE = "control"
RENDER_QUEUE = "render"
ASSEMBLE_QUEUE = "assemble"
QUEUES = (CONTROL_QUEUE, RENDER_QUEUE, ASSEMBLE_QUEUE)

PLAN_TASK = "voicelane.plan"
RENDER_CHUNK_TASK = "voicelane.render_chunk"
ASSEMBLE_TASK = "voicelane.assemble"
NOTIFY_TASK = "voicelane.notify"
CLEANUP_TASK = "voicelane.cleanup"

TASK_QUEUES = {
    PLAN_TASK: CONTROL_QUEUE,
    NOTIFY_TASK: CONTROL_QUEUE,
    CLEANUP_TASK: CONTROL_QUEUE,
    RENDER_CHUNK_TASK: RENDER_QUEUE,
    ASSEMBLE_TASK: ASSEMBLE_QUEUE,
}

app = Celery("voicelane")


def configure(settings: LaneSettings) -> Celery:
    """Point the app at the settings' Redis; call once per process before using it."""
    longest_task_s = settings.render_time_limit_s
    app.conf.update(
        broker_url=settings.redis_url,
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
            "visibility_timeout": int(2 * longest_task_s),
            "unacked_restore_interval": 5,
            "unacked_restore_throttle": 1,
        },
        # Each queue its own direct exchange and routing key: a message reaches one queue.
        task_queues=[
            Queue(name, Exchange(name, type="direct"), routing_key=name) for name in QUEUES
        ],
        task_default_queue=CONTROL_QUEUE,
        task_default_exchange=CONTROL_QUEUE,
        task_default_routing_key=CONTROL_QUEUE,
        task_routes={
            name: {"queue": queue, "exchange": queue, "routing_key": queue}
            for name, queue in TASK_QUEUES.items()
        },
        worker_send_task_events=True,
        task_send_sent_event=True,
        worker_hijack_root_logger=False,
        task_soft_time_limit=None,
        task_time_limit=None,
    )
    _reset_connections()
    return app


def _reset_connections() -> None:
    """Forget pooled broker connections (and with them kombu's cache of declared queues).

    kombu declares a queue binding once per connection and then trusts it; if Redis lost
    its keys meanwhile (a flushed test database), publishes would silently go nowhere.
    Re-configuring starts from fresh connections.
    """
    pools.reset()  # closes and forgets kombu's process-wide connection/producer pools
    app._pool = None
    amqp = app.__dict__.get("amqp")
    if amqp is not None:
        amqp._producer_pool = None


def enqueue(task: str, *args: str | int, countdown_s: float | None = None) -> None:
    """Send a task by name to its queue: ids only, never text."""
    app.send_task(task, args=list(args), queue=TASK_QUEUES[task], countdown=countdown_s)
