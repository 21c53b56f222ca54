"""The job functions' context in-process for tests: real Redis, local storage, espeak behind a
real batcher, and an enqueue that records instead of sending."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from voicelane.core.ledger import Ledger
from voicelane.core.settings import ServiceSettings
from voicelane.core.storage import LocalStorage, LocalStorageSettings
from voicelane.workers.batching import Batcher
from voicelane.workers.engines.espeak import EspeakEngine
from voicelane.workers.jobs import JobContext


class Recorder:
    """An ``Enqueue`` that records each task and its arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[object, ...]]] = []

    def __call__(self, task: str, *args: object, **_kwargs: object) -> None:
        self.calls.append((task, args))

    def of(self, task: str) -> list[tuple[object, ...]]:
        return [args for name, args in self.calls if name == task]


@contextmanager
def espeak_context(redis_url: str, root: Path, **settings: object) -> Iterator[JobContext]:
    """A GPU-and-CPU worker's :class:`JobContext` in this process (no lease keeper)."""
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
