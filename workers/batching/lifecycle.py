"""The engine's life on the scheduler thread: load, hot-swap (reload), idle unload, unload.

:class:`EngineLife` is the one object that loads and unloads the engine; only the batcher's
scheduler thread calls it (no locks on the engine). Its :attr:`EngineLife.loaded` may be read
from any thread (the ``voicelane_engine_loaded`` gauge).

**Idle unload** (``VOICELANE_IDLE_UNLOAD_S``, ``docs/batcher.md``): when the batcher has had
no work for that long the scheduler unloads the engine (:meth:`EngineLife.unload_idle`): the
engine drops its weights (a GPU engine empties the CUDA allocator's cache), then the cyclic
collector runs and, on glibc, ``malloc_trim(0)`` hands the freed heap back to the system so
the resident memory really drops. The next work loads it again on the same thread
(:meth:`EngineLife.load_on_demand`); what arrives meanwhile waits in the queue.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from functools import cache

from voicelane.common.errors import EngineError
from voicelane.core import metrics
from voicelane.workers.batching.items import Item
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
    audio). Frozen objects are still freed by reference counting, and :class:`EngineLife`
    unfreezes them before it unloads."""
    gc.collect()
    gc.freeze()


def load_engine(engine: Engine) -> None:
    engine.load()
    freeze_loaded()


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None (another C library: musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def release_freed_memory() -> None:
    """Collect cycles, then give the C heap's free pages back to the system
    (``malloc_trim(0)`` on glibc): without it, freed weights stay in the process's resident
    memory (glibc keeps freed heap for reuse; its mmap threshold grows to 32 MB after big
    blocks are freed, so most of a model's tensors live on the heap, not in their own maps)."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


class EngineLife:
    """Loads and unloads one engine on the scheduler thread, measuring each change."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.loaded = False
        """Whether the engine holds its weights now (any thread may read it)."""

    # ---- loading ------------------------------------------------------------------------------

    def load(self, cause: str) -> float:
        """Load the engine (``cause``: ``start``, ``demand`` after an idle unload, ``reload``);
        the seconds it took. Raises what the engine raised."""
        started = time.monotonic()
        load_engine(self.engine)
        seconds = time.monotonic() - started
        self.loaded = True
        metrics.ENGINE_LOAD_S.labels(self.engine.name, cause).observe(seconds)
        return seconds

    def load_on_demand(self, queued: Callable[[], list[Item]]) -> None:
        """Work came for an idly unloaded engine: load it. A failure fails the work queued
        now (``queued`` takes it off the queue) with a transient :class:`EngineError`; the
        engine stays unloaded and the next work tries again."""
        before = self.engine.memory_in_use_bytes()
        try:
            seconds = self.load("demand")
        except Exception as error:
            log.exception("engine %s failed to load again after an idle unload", self.engine.name)
            failure = EngineError(
                f"engine {self.engine.name} could not load again after an idle unload: "
                f"{type(error).__name__}: {error}"
            )
            for item in queued():
                item.fail(failure)
            return
        after = self.engine.memory_in_use_bytes()
        metrics.ENGINE_MEMORY_BYTES.labels("after_idle_reload").set(after)
        log.info(
            "engine %s loaded again for new work in %.2f s: memory %d MiB before, %d MiB after",
            self.engine.name, seconds, before >> 20, after >> 20,
        )  # fmt: skip

    # ---- unloading ----------------------------------------------------------------------------

    def unload_idle(self, idle_s: float) -> None:
        """Nothing to do for ``idle_s``: drop the engine's weights and give the memory back."""
        if not self.loaded:
            return
        started = time.monotonic()
        before = self.engine.memory_in_use_bytes()
        self.loaded = False  # the gauge says so from now: a load follows any new work
        gc.unfreeze()  # the model's objects go back to the collector before unloading
        try:
            self.engine.unload()
        except Exception:
            log.exception("engine %s failed to unload", self.engine.name)
        release_freed_memory()
        after = self.engine.memory_in_use_bytes()
        metrics.ENGINE_IDLE_UNLOADS.labels(self.engine.name).inc()
        metrics.ENGINE_MEMORY_BYTES.labels("before_idle_unload").set(before)
        metrics.ENGINE_MEMORY_BYTES.labels("idle_unloaded").set(after)
        log.info(
            "engine %s unloaded after %.0f s idle, in %.2f s: memory %d MiB before, %d MiB after",
            self.engine.name, idle_s, time.monotonic() - started, before >> 20, after >> 20,
        )  # fmt: skip

    def close(self) -> None:
        """The batcher stops: unload, logging (not raising) a failure."""
        if not self.loaded:
            return
        self.loaded = False
        try:
            self.engine.unload()
        except Exception:
            log.exception("engine %s failed to unload", self.engine.name)

    # ---- hot-swap ------------------------------------------------------------------------------

    def reload(self, waiting: list[Future[ReloadReport]]) -> None:
        """Reload the engine's weights now (between two batches or step sessions) and answer
        every future in ``waiting`` with the memory report, or with the failure. An engine
        unloaded for idleness is just loaded (the new weights are read, and checked, now)."""
        started = time.monotonic()
        before = self.engine.memory_in_use_bytes()
        try:
            if self.loaded:
                self.loaded = False
                gc.unfreeze()  # the old model's objects go back to the collector
                self.engine.unload()
            unloaded = self.engine.memory_in_use_bytes()
            self.load("reload")
        except BaseException as error:
            log.exception("engine %s failed to reload", self.engine.name)
            for future in waiting:
                future.set_exception(error)
            return
        report = ReloadReport(
            before_bytes=before,
            unloaded_bytes=unloaded,
            after_bytes=self.engine.memory_in_use_bytes(),
            seconds=time.monotonic() - started,
        )
        metrics.ENGINE_RELOADS.inc()
        metrics.ENGINE_MEMORY_BYTES.labels("before_reload").set(report.before_bytes)
        metrics.ENGINE_MEMORY_BYTES.labels("unloaded").set(report.unloaded_bytes)
        metrics.ENGINE_MEMORY_BYTES.labels("after_reload").set(report.after_bytes)
        log.info(
            "engine %s reloaded in %.1f s: memory %d MiB before, %d MiB unloaded, %d MiB after",
            self.engine.name, report.seconds, report.before_bytes >> 20,
            report.unloaded_bytes >> 20, report.after_bytes >> 20,
        )  # fmt: skip
        for future in waiting:
            future.set_result(report)
