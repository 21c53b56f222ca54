"""The job functions' context in-process for tests: real Redis, local storage (or the S3 test
server's, see :func:`storage_param`), espeak behind a real batcher, and an enqueue that records
instead of sending."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from voicelane.core.ledger import Ledger
from voicelane.core.settings import ServiceSettings
from voicelane.core.storage import LocalStorage, LocalStorageSettings, Storage
from voicelane.workers.batching import Batcher
from voicelane.workers.engines.espeak import EspeakEngine
from voicelane.workers.jobs import JobContext


class Recorder:
    """An ``Enqueue`` that records each task, its arguments and its priority."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[object, ...]]] = []
        self.priorities: list[int] = []
        """Each call's ``priority``, in the order of :attr:`calls`."""

    def __call__(self, task: str, *args: object, priority: int = 0, **_kwargs: object) -> None:
        self.calls.append((task, args))
        self.priorities.append(priority)

    def clear(self) -> None:
        self.calls.clear()
        self.priorities.clear()

    def of(self, task: str) -> list[tuple[object, ...]]:
        return [args for name, args in self.calls if name == task]

    def prioritised(self, task: str) -> list[tuple[tuple[object, ...], int]]:
        """Each call of ``task``: its arguments and its priority."""
        return [
            (args, priority)
            for (name, args), priority in zip(self.calls, self.priorities, strict=True)
            if name == task
        ]


S3_PARAM = pytest.mark.parametrize("ctx", ["local", "s3"], indirect=True)
"""Run a test whose ``ctx`` fixture uses :func:`storage_param` on both backends: local, and a
fresh bucket of the S3 test server (SeaweedFS, signatures checked)."""


def storage_param(request: pytest.FixtureRequest) -> Storage | None:
    """The storage a ``ctx`` fixture was parametrized with: the ``s3_storage`` fixture's for
    ``"s3"``, None (local) otherwise."""
    if getattr(request, "param", "local") == "s3":
        storage: Storage = request.getfixturevalue("s3_storage")
        return storage
    return None


@contextmanager
def espeak_context(
    redis_url: str, root: Path, *, storage: Storage | None = None, **settings: object
) -> Iterator[JobContext]:
    """A GPU-and-CPU worker's :class:`JobContext` in this process (no lease keeper), on
    ``storage`` (default: a local directory under ``root``)."""
    if storage is None:
        storage = LocalStorage(LocalStorageSettings(root=root / "storage", secret="s" * 40))
        storage.prepare()
    ledger = Ledger.from_url(redis_url)
    batcher = Batcher(EspeakEngine()).start()
    try:
        yield JobContext(
            settings=ServiceSettings.model_validate({"redis_url": redis_url, **settings}),
            ledger=ledger,
            storage=storage,
            worker_name="w@test",
            enqueue=Recorder(),
            batcher=batcher,
        )
    finally:
        batcher.close()
        ledger.redis.close()


def narrow(ctx: JobContext, **settings: object) -> JobContext:
    """The same context with other settings."""
    return JobContext(
        settings=ctx.settings.model_copy(update=settings),
        ledger=ctx.ledger,
        storage=ctx.storage,
        worker_name=ctx.worker_name,
        enqueue=ctx.enqueue,
        batcher=ctx.batcher,
    )
