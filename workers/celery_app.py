"""The workers' Celery application: the batch lane's configuration
(:mod:`voicelane.core.batch_lane`) on an app the tasks register with (``workers/tasks.py``).

Fronts never import this module: they enqueue through
:class:`voicelane.core.batch_lane.CeleryEnqueue`.
"""

from __future__ import annotations

from celery import Celery
from kombu import pools

from voicelane.core.batch_lane import configure_celery, send_task
from voicelane.core.settings import ServiceSettings

app = Celery("voicelane")


def configure(settings: ServiceSettings) -> Celery:
    """Point the app at the settings' Redis; call once per process before using it."""
    configure_celery(app, settings)
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


def enqueue(
    task: str,
    *args: str | int,
    countdown_s: float | None = None,
    queue: str | None = None,
    priority: int = 0,
) -> None:
    """:class:`voicelane.core.batch_lane.Enqueue` on the workers' app."""
    send_task(app, task, *args, countdown_s=countdown_s, queue=queue, priority=priority)
