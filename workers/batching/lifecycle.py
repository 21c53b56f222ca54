"""The engine's life on the scheduler thread: load, hot-swap (reload), unload."""

from __future__ import annotations

import gc
import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass

from voicelane.core import metrics
from voicelane.workers.engines.base import Engine

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReloadReport:
    """A hot-swap: the engine's memory (device allocator on a GPU, resident memory on the
    CPU) before, with the old weights gone, and with the new ones; how long it took."""

    before_bytes: int
    unloaded_bytes: int
    after_bytes: int
    seconds: float


def freeze_loaded() -> None:
    """Move everything alive now (the engine's model and its libraries: hundreds of thousands
    of objects for ChatTTS) out of the cyclic garbage collector's sight (``gc.freeze``). Its
    full collections then scan only what was made since, instead of stopping every thread for
    140-380 ms each (measured with ChatTTS loaded; they were the tail of a live voice's first
    audio). Frozen objects are still freed by reference counting, and :func:`reload_engine`
    unfreezes them before it unloads."""
    gc.collect()
    gc.freeze()


def load_engine(engine: Engine) -> None:
    engine.load()
    freeze_loaded()


def unload_engine(engine: Engine) -> None:
    """Unload, logging (not raising) a failure: the batcher is stopping anyway."""
    try:
        engine.unload()
    except Exception:
        log.exception("engine %s failed to unload", engine.name)


def reload_engine(engine: Engine, waiting: list[Future[ReloadReport]]) -> None:
    """Reload the engine's weights now (between two batches or step sessions) and answer
    every future in ``waiting`` with the memory report, or with the failure."""
    started = time.monotonic()
    before = engine.memory_in_use_bytes()
    try:
        gc.unfreeze()  # the old model's objects go back to the collector before unloading
        engine.unload()
        unloaded = engine.memory_in_use_bytes()
        load_engine(engine)
    except BaseException as error:
        log.exception("engine %s failed to reload", engine.name)
        for future in waiting:
            future.set_exception(error)
        return
    report = ReloadReport(
        before_bytes=before,
        unloaded_bytes=unloaded,
        after_bytes=engine.memory_in_use_bytes(),
        seconds=time.monotonic() - started,
    )
    metrics.ENGINE_RELOADS.inc()
    metrics.ENGINE_MEMORY_BYTES.labels("before_reload").set(report.before_bytes)
    metrics.ENGINE_MEMORY_BYTES.labels("unloaded").set(report.unloaded_bytes)
    metrics.ENGINE_MEMORY_BYTES.labels("after_reload").set(report.after_bytes)
    log.info(
        "engine %s reloaded in %.1f s: memory %d MiB before, %d MiB unloaded, %d MiB after",
        engine.name, report.seconds, report.before_bytes >> 20,
        report.unloaded_bytes >> 20, report.after_bytes >> 20,
    )  # fmt: skip
    for future in waiting:
        future.set_result(report)
