"""The job context of this worker process, for the Celery tasks to find.

``voicelane worker`` builds one :class:`~voicelane.workers.jobs.JobContext` and installs it here
before the Celery consumer starts; every task calls :func:`current`. (Its own module, so the tasks
and the process runtime need not import each other.)
"""

from __future__ import annotations

import threading

from voicelane.workers.jobs import JobContext

_current: JobContext | None = None
_lock = threading.Lock()


def current() -> JobContext:
    if _current is None:
        raise RuntimeError("the worker context is not set up (run `voicelane worker`)")
    return _current


def install(ctx: JobContext | None) -> None:
    global _current  # noqa: PLW0603 - one context per worker process
    with _lock:
        _current = ctx
