"""The dynamic batcher: one per engine (one per GPU), shared by both lanes.

One scheduler thread owns the engine: it loads it, runs every batch on it and unloads it.
Callers on any thread submit utterances and get back a :class:`~concurrent.futures.Future`
(whole utterance: :meth:`Batcher.submit` its PCM, :meth:`Batcher.submit_timed` a
:class:`~voicelane.workers.engines.base.TimedAudio`, the PCM with the engine's word events)
or an :class:`AudioStream` (chunks as the engine produces them, word events among them).

Rules (DESIGN.md, "The dynamic batcher"; ``docs/batcher.md``):

* Two priority classes, ``realtime`` and ``batch``. The head of the next batch is the oldest
  real-time item if there is one, else a batch item chosen fairly between *groups* (the
  batch lane passes the tenant): the oldest item of the group served longest ago, so one
  tenant's thousands of queued sentences do not stand in front of another tenant's few.
  The batch is that head, then the same batch key's other real-time items (oldest first),
  topped up with batch items of the same key.
* A batch starts when it is full (``max_batch`` items, or ``max_batch_cost`` total cost, the
  cost of an item being its text length) or when its head has waited its class's
  ``max_wait``; the timer starts when the head was submitted. While a real-time item is
  queued, no batch-class work starts ahead of it: the GPU waits the few milliseconds of the
  real-time ``max_wait`` instead, so a live voice waits at most one running batch.
* Cancelled items (future cancelled, stream cancelled) and expired items (deadline passed)
  are dropped before a batch runs; their futures/streams end with
  :class:`~voicelane.common.errors.CancelledError` /
  :class:`~voicelane.common.errors.DeadlineExceededError`. In a streamed batch, an item
  cancelled between steps gets no more audio, and the batch stops when every item in it is
  gone.
* Failures (:mod:`~voicelane.workers.batching.backoff`): out of memory splits the batch and
  halves ``max_batch``, which grows back after a run of successes; nothing is lost. An
  engine returning a different number of outputs than inputs is an
  :class:`~voicelane.common.errors.EngineOutputMismatchError` on every future of that batch.
* Idle unload (``idle_unload_s``, ``VOICELANE_IDLE_UNLOAD_S``): after that long with
  nothing queued or running, the scheduler unloads the engine (its weights, GPU memory, the
  resident memory they took); the next submission loads it again on the scheduler thread.
  Work submitted during the unload or the load waits in the queue as usual, deadlines
  included; it is neither refused nor failed (unless the load itself fails).
* Metrics: batch sizes, wait per class, queue depth per class, utilisation, OOM events,
  preemptions (:meth:`Batcher.stats`), whether the engine is loaded
  (:attr:`Batcher.engine_loaded`).

The parts, one job each: :mod:`~voicelane.workers.batching.items` (what is queued),
:mod:`~voicelane.workers.batching.work_queue` (classes, fairness, sweep, the scheduler's
wait), :mod:`~voicelane.workers.batching.backoff` (the failure policy),
:mod:`~voicelane.workers.batching.metrics`, :mod:`~voicelane.workers.batching.lifecycle`
(load, reload, unload), and two scheduler loops over them:
:mod:`~voicelane.workers.batching.static` (static batches) and
:mod:`~voicelane.workers.batching.stepping` (continuous batching, for an engine that steps a
running batch, ``Engine.steps``, when ``BatcherSettings.continuous`` is on).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from voicelane.common.errors import ShuttingDownError
from voicelane.core.settings import BatcherSettings
from voicelane.workers.batching.backoff import OomBackoff
from voicelane.workers.batching.items import AudioStream, Item, Priority
from voicelane.workers.batching.lifecycle import EngineLife, ReloadReport
from voicelane.workers.batching.metrics import BatcherStats, BatchMetrics
from voicelane.workers.batching.static import StaticLoop
from voicelane.workers.batching.stepping import StepLoop
from voicelane.workers.batching.work_queue import WorkQueue
from voicelane.workers.engines.base import Engine, PcmF32, TimedAudio, Utterance

log = logging.getLogger(__name__)

Clock = Callable[[], float]


class Batcher:
    """Forms batches from queued utterances and runs them on one engine, on one thread."""

    def __init__(
        self,
        engine: Engine,
        config: BatcherSettings | None = None,
        *,
        clock: Clock = time.monotonic,
        name: str = "batcher",
        idle_unload_s: float | None = None,
    ) -> None:
        """``idle_unload_s``: unload the engine after that long without work (None or 0:
        never; ``EngineSettings.idle_unload_s``; ignored for an engine whose unload frees
        nothing, ``Engine.unload_frees_memory``). ``clock`` measures it too."""
        self.engine = engine
        self.config = config or BatcherSettings()
        self.clock = clock
        self.name = name
        # An engine that gains nothing from batching (espeak renders one utterance after the
        # other) caps the batch: bigger batches would only make real-time items wait longer.
        self.max_batch = min(self.config.max_batch, engine.max_batch or self.config.max_batch)
        self._backoff = OomBackoff(self.max_batch, self.config.grow_after_successes)
        self._metrics = BatchMetrics(clock())
        self._queue = WorkQueue(
            self.config,
            clock=clock,
            backoff=self._backoff,
            metrics=self._metrics,
            name=name,
            idle_unload_s=idle_unload_s if engine.unload_frees_memory else None,
        )
        self._life = EngineLife(engine)
        self._thread: threading.Thread | None = None
        self._loaded = threading.Event()
        self._load_error: BaseException | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout_s: float | None = None) -> Batcher:
        """Start the scheduler thread; it loads the engine. Re-raises a load failure."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        if not self._loaded.wait(timeout_s):
            raise TimeoutError(f"engine {self.engine.name} did not load within {timeout_s} s")
        if self._load_error is not None:
            raise self._load_error
        return self

    def close(self, *, drain: bool = True, timeout_s: float | None = None) -> None:
        """Stop accepting work; run (``drain``) or fail what is queued; unload the engine."""
        self._queue.close(drain=drain)
        if self._thread is not None:
            self._thread.join(timeout_s)

    def __enter__(self) -> Batcher:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def engine_loaded(self) -> bool:
        """Whether the engine holds its weights now (False before start, after an idle
        unload until work loads it again, and after close)."""
        return self._life.loaded

    @property
    def continuous(self) -> bool:
        """Whether this batcher schedules per step (continuous batching): the engine can
        step a running batch and the configuration asks for it."""
        return self.engine.steps and self.config.continuous

    # ------------------------------------------------------------------ submission

    def submit(
        self,
        utterance: Utterance,
        *,
        priority: Priority = Priority.BATCH,
        deadline_s: float | None = None,
        group: str = "",
    ) -> Future[PcmF32]:
        """Queue a whole-utterance render. ``deadline_s`` is absolute, on :attr:`clock`;
        ``group`` (the tenant) makes the batch class fair between groups."""
        future: Future[PcmF32] = Future()
        self._put_future(utterance, future, priority, deadline_s, group, timed=False)
        return future

    def submit_timed(
        self,
        utterance: Utterance,
        *,
        priority: Priority = Priority.BATCH,
        deadline_s: float | None = None,
        group: str = "",
    ) -> Future[TimedAudio]:
        """:meth:`submit`, answered with the PCM and the engine's word events (none from an
        engine that does not know them: ``Engine.word_timings``)."""
        future: Future[TimedAudio] = Future()
        self._put_future(utterance, future, priority, deadline_s, group, timed=True)
        return future

    def submit_stream(
        self,
        utterance: Utterance,
        *,
        priority: Priority = Priority.REALTIME,
        deadline_s: float | None = None,
    ) -> AudioStream:
        """Queue a streamed render: chunks arrive on the returned stream as they are made
        (and the engine's word events, :meth:`AudioStream.read_event`)."""
        item = self._make_item(utterance, priority, deadline_s, "")
        item.stream = AudioStream(on_cancel=self._queue.note_cancel)
        self._queue.put(item)
        return item.stream

    def reload(self) -> Future[ReloadReport]:
        """Reload the engine's weights (hot-swap) between two batches, on the engine thread:
        queued work waits and then runs on the new weights; nothing is dropped. The future
        answers with the engine's memory before and after. (Continuous batching: no row
        joins until the running rows finished; then a new step session.)"""
        future: Future[ReloadReport] = Future()
        if not self._queue.ask_reload(future):
            future.set_exception(ShuttingDownError(f"{self.name} is stopping"))
        return future

    def wake(self) -> None:
        """Make the scheduler re-check its queues now (e.g. after a test clock moved)."""
        self._queue.wake()

    def settle(self, timeout_s: float = 5.0) -> bool:
        """Wait until the scheduler has seen every submission and is waiting for more.

        For tests and benchmarks that drive a fake clock: it returns True once nothing more
        can start without new work or time passing.
        """
        return self._queue.settle(timeout_s)

    def stats(self) -> BatcherStats:
        return self._metrics.snapshot(
            now=self.clock(),
            queue_depth=self._queue.depth(),
            effective_max_batch=self._backoff.capacity,
        )

    def _make_item(
        self, utterance: Utterance, priority: Priority, deadline_s: float | None, group: str
    ) -> Item:
        self.engine.validate(utterance)  # permanent errors surface here, on the caller's thread
        return Item(
            utterance=utterance,
            priority=priority,
            key=self.engine.batch_key(utterance),
            cost=max(1, len(utterance.text)),
            submitted_at=self.clock(),
            deadline_s=deadline_s,
            group=group,
        )

    def _put_future(
        self,
        utterance: Utterance,
        future: Future[Any],
        priority: Priority,
        deadline_s: float | None,
        group: str,
        *,
        timed: bool,
    ) -> None:
        item = self._make_item(utterance, priority, deadline_s, group)
        item.future = future
        item.timed = timed
        future.add_done_callback(self._on_future_done)
        self._queue.put(item)

    def _on_future_done(self, future: Future[Any]) -> None:
        if future.cancelled():
            self._queue.note_cancel()

    # ------------------------------------------------------------------ scheduler thread

    def _run(self) -> None:
        try:
            self._life.load("start")
            loop = self._make_loop()  # a step loop opens the engine's step session
        except BaseException as error:
            self._load_error = error
            self._queue.close(drain=False)
            self._loaded.set()
            self._fail_queued(ShuttingDownError(f"engine {self.engine.name} failed to load"))
            return
        self._loaded.set()
        try:
            loop.run()
        except Exception:
            # The loop itself failed (e.g. the engine could not open a new step session):
            # the batcher stops; submissions then raise ShuttingDownError.
            log.exception("the scheduler loop of engine %s stopped", self.engine.name)
            self._queue.close(drain=False)
        finally:
            self._fail_queued(ShuttingDownError(f"{self.name} stopped"))
            self._life.close()

    def _make_loop(self) -> StaticLoop | StepLoop:
        if self.continuous:
            return StepLoop(
                self.engine,
                self._queue,
                life=self._life,
                config=self.config,
                backoff=self._backoff,
                metrics=self._metrics,
                clock=self.clock,
                name=self.name,
            )
        return StaticLoop(
            self.engine,
            self._queue,
            life=self._life,
            backoff=self._backoff,
            metrics=self._metrics,
            clock=self.clock,
        )

    def _fail_queued(self, error: ShuttingDownError) -> None:
        for item in self._queue.drain():
            item.fail(error)
