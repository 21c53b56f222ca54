"""``voicelane flower``: Flower on the lane's broker, basic auth, read-only, task events on.

Read-only: Flower's API can shut workers down, resize pools, revoke tasks and send new ones;
none of that belongs in a dashboard. Those handlers are removed from Flower's URL table
before it starts, so they answer 404 like any unknown path. Reading (workers, tasks, queue
lengths, /metrics) stays. The password goes to Flower through its environment variable,
never on a command line that ``ps`` would show.
"""

from __future__ import annotations

import os

from voicelane.common.errors import ConfigError
from voicelane.core.settings import FlowerSettings

DEV_BASIC_AUTH = "admin:admin"

# Flower's handlers that change the cluster (all POST endpoints of its API).
MUTATING_PATHS = (
    "/api/worker/shutdown/",
    "/api/worker/pool/",
    "/api/worker/queue/",
    "/api/task/apply/",
    "/api/task/async-apply/",
    "/api/task/send-task/",
    "/api/task/abort/",
    "/api/task/timeout/",
    "/api/task/rate-limit/",
    "/api/task/revoke/",
)


def basic_auth(settings: FlowerSettings) -> str:
    value = settings.flower_basic_auth or (DEV_BASIC_AUTH if settings.dev_mode else None)
    if not value:
        raise ConfigError("set VOICELANE_FLOWER_BASIC_AUTH=user:password (or VOICELANE_DEV_MODE=1)")
    user, sep, password = value.partition(":")
    if not sep or not user or not password:
        raise ConfigError("VOICELANE_FLOWER_BASIC_AUTH must be user:password")
    return value


def make_read_only() -> int:
    """Drop Flower's mutating handlers from its URL table; returns how many were dropped."""
    import flower.urls

    def path_of(handler: object) -> str:
        pattern = getattr(handler, "regex", None)
        if pattern is not None:
            return str(pattern.pattern)
        return str(handler[0]) if isinstance(handler, tuple) else ""

    before = len(flower.urls.handlers)
    flower.urls.handlers[:] = [
        h for h in flower.urls.handlers if not path_of(h).startswith(MUTATING_PATHS)
    ]
    return before - len(flower.urls.handlers)


def run_flower(settings: FlowerSettings) -> None:
    from celery import Celery

    from voicelane.core.batch_lane import configure_celery

    auth = basic_auth(settings)
    app = Celery("voicelane")
    configure_celery(app, settings)
    make_read_only()
    os.environ["FLOWER_BASIC_AUTH"] = auth
    os.environ.pop("FLOWER_UNAUTHENTICATED_API", None)
    app.start(
        argv=[
            "flower",
            f"--address={settings.flower_host}",
            f"--port={settings.flower_port}",
            "--persistent=False",
            "--purge_offline_workers=300",
        ]
    )
