"""The dynamic batcher: one per engine (one per GPU), shared by both lanes.

One scheduler thread owns the engine: it loads it, runs every batch on it and unloads it.
Callers on any thread submit utterances and get back a :class:`~concurrent.futures.Future`
(whole utterance) or an :class:`AudioStream` (chunks as the engine produces them).

Rules (DESIGN.md, "The dynamic batcher"):

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
  :class:`~voicelane.common.errors.DeadlineExceededError`. In a streamed batch, an item cancelled
  between steps gets no more audio, and the batch stops when every item in it is gone.
* Out of memory (:class:`~voicelane.common.errors.EngineOutOfMemoryError`): the batch's items go
back
  to the front of their queues, the effective ``max_batch`` halves (below the failed batch's
  size), and it doubles back after ``grow_after_successes`` successful batches in a row.
  A single item that still does not fit fails with the OOM error. Nothing else is lost.
* An engine returning a different number of outputs than inputs is an
  :class:`~voicelane.common.errors.EngineOutputMismatchError` on every future of that batch.
* Metrics: batch sizes, wait per class, queue depth per class, utilisation, OOM events
  (:meth:`Batcher.stats`).

An engine that steps a running batch (``Engine.steps``) is scheduled per step instead
(continuous batching, ``BatcherSettings.continuous``): rows join and leave between steps.
Those rules are in :mod:`voicelane.workers.stepping`; the rules above stay for every other engine.
"""

from __future__ import annotations

import enum
import gc
import itertools
import logging
import math
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from voicelane.common.errors import (
    CancelledError,
    DeadlineExceededError,
    EngineError,
    EngineOutOfMemoryError,
    EngineOutputMismatchError,
    ShuttingDownError,
    VoicelaneError,
)
from voicelane.core import metrics
from voicelane.core.settings import BatcherSettings
from voicelane.workers.engines.base import Engine, PcmF32, Utterance

if TYPE_CHECKING:
    from voicelane.workers.stepping import StepLoop

log = logging.getLogger(__name__)

Clock = Callable[[], float]
_EMPTY = np.zeros(0, dtype=np.float32)
_WAIT_SAMPLES_KEPT = 10_000


class Priority(enum.StrEnum):
    REALTIME = "realtime"
    BATCH = "batch"


def max_wait_s(config: BatcherSettings, priority: Priority) -> float:
    """How long the oldest item of ``priority`` may wait for its batch to fill."""
    if priority is Priority.REALTIME:
        return config.max_wait_realtime_s
    return config.max_wait_batch_s


@dataclass(frozen=True, slots=True)
class WaitStats:
    count: int
    mean_s: float
    p50_s: float
    p99_s: float
    max_s: float


@dataclass(frozen=True, slots=True)
class ReloadReport:
    """A hot-swap: the engine's memory (device allocator on a GPU, resident memory on the
    CPU) before, with the old weights gone, and with the new ones; how long it took."""

    before_bytes: int
    unloaded_bytes: int
    after_bytes: int
    seconds: float


@dataclass(frozen=True, slots=True)
class BatcherStats:
    batches: int
    items: int
    batch_sizes: dict[int, int]
    """Batch size → how many batches had that size."""
    wait: dict[Priority, WaitStats]
    """Submit → batch start, per class."""
    queue_depth: dict[Priority, int]
    busy_s: float
    uptime_s: float
    oom_events: int
    dropped_cancelled: int
    dropped_expired: int
    failed_batches: int
    effective_max_batch: int
    paused: int = 0
    """Continuous batching: rows of the running batch left out of the last step (a full
    step set makes room for real-time rows by pausing batch rows)."""

    @property
    def utilization(self) -> float:
        return self.busy_s / self.uptime_s if self.uptime_s > 0 else 0.0

    @property
    def mean_batch_size(self) -> float:
        return self.items / self.batches if self.batches else 0.0


class AudioStream:
    """The chunks of one streamed utterance, in order, as the engine produces them.

    Iterate it, or call :meth:`read`. It ends (``read`` returns None, iteration stops) when
    the utterance is complete or after :meth:`cancel`; an engine failure is raised from
    ``read``.
    """

    _END: object = object()

    def __init__(self, on_cancel: Callable[[], None]) -> None:
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._on_cancel = on_cancel
        self._cancelled = threading.Event()
        self._finished = False
        self._listener: Callable[[], None] | None = None

    def listen(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the batcher's thread; keep it short) whenever something new
        can be read: for a reader that is not a thread, e.g. an asyncio task."""
        self._listener = callback
        if not self._queue.empty():
            callback()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Stop this utterance: queued, it never runs; running, it gets no more audio."""
        if not self._cancelled.is_set():
            self._cancelled.set()
            self._offer(self._END)
            self._on_cancel()

    def read(self, timeout_s: float | None = None) -> PcmF32 | None:
        """The next chunk, or None at the end. Raises TimeoutError after ``timeout_s``."""
        if self._finished:
            return None
        try:
            entry = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError(f"no audio within {timeout_s} s") from None
        return self._take(entry)

    def read_nowait(self) -> PcmF32 | None:
        """The next chunk, or None at the end; BlockingIOError when none is ready yet."""
        if self._finished:
            return None
        try:
            entry = self._queue.get_nowait()
        except queue.Empty:
            raise BlockingIOError("no audio ready") from None
        return self._take(entry)

    def _take(self, entry: object) -> PcmF32 | None:
        if entry is self._END:
            self._finished = True
            return None
        if isinstance(entry, BaseException):
            self._finished = True
            raise entry
        assert isinstance(entry, np.ndarray)
        return entry

    def __iter__(self) -> Iterator[PcmF32]:
        while (chunk := self.read()) is not None:
            yield chunk

    # -- scheduler side --
    def _put(self, chunk: PcmF32) -> None:
        if not self._cancelled.is_set():
            self._offer(chunk)

    def _end(self, error: BaseException | None = None) -> None:
        self._offer(error if error is not None else self._END)

    def _offer(self, entry: object) -> None:
        self._queue.put(entry)
        listener = self._listener
        if listener is not None:
            listener()


@dataclass(eq=False, slots=True)
class _Item:
    utterance: Utterance
    priority: Priority
    key: Hashable
    cost: int
    submitted_at: float
    deadline_s: float | None
    group: str = ""
    """Who the item is for (the tenant): batch-class heads go round the groups."""
    future: Future[PcmF32] | None = None
    stream: AudioStream | None = None
    chunks: list[PcmF32] = field(default_factory=list)
    delivered: bool = False
    """True once any audio went out to a stream (it can no longer be retried)."""
    samples: int = 0
    """Audio produced so far (for the real-time factor)."""

    @property
    def cancelled(self) -> bool:
        if self.stream is not None:
            return self.stream.cancelled
        assert self.future is not None
        return self.future.cancelled()

    def start(self) -> bool:
        """Mark running; False if the caller cancelled first."""
        if self.stream is not None:
            return not self.stream.cancelled
        assert self.future is not None
        return self.future.running() or self.future.set_running_or_notify_cancel()

    def fail(self, error: BaseException) -> None:
        if self.stream is not None:
            self.stream._end(error)
            return
        future = self.future
        assert future is not None
        if future.done():
            return
        if future.running() or future.set_running_or_notify_cancel():
            future.set_exception(error)

    def deliver(self, chunk: PcmF32) -> None:
        if chunk.size == 0:
            return
        self.samples += chunk.size
        if self.stream is not None:
            self.stream._put(chunk)
            self.delivered = True
        else:
            self.chunks.append(chunk)

    def complete(self) -> None:
        if self.stream is not None:
            self.stream._end()
        elif self.future is not None and not self.future.done():
            audio = np.concatenate(self.chunks) if self.chunks else _EMPTY.copy()
            self.future.set_result(audio.astype(np.float32, copy=False))


@dataclass(slots=True)
class _WaitPlan:
    """What the waiting scheduler will start next: the head's key, class, size and cost."""

    key: Hashable
    priority: Priority
    count: int
    cost: int


class _Metrics:
    """Counters behind :meth:`Batcher.stats`; guarded by the batcher's lock."""

    def __init__(self, now: float) -> None:
        self.started_at = now
        self.batches = 0
        self.items = 0
        self.batch_sizes: dict[int, int] = {}
        self.waits: dict[Priority, deque[float]] = {
            p: deque(maxlen=_WAIT_SAMPLES_KEPT) for p in Priority
        }
        self.wait_count = dict.fromkeys(Priority, 0)
        self.wait_sum_s = dict.fromkeys(Priority, 0.0)
        self.wait_max_s = dict.fromkeys(Priority, 0.0)
        self.busy_s = 0.0
        self.oom_events = 0
        self.dropped_cancelled = 0
        self.dropped_expired = 0
        self.failed_batches = 0
        self.paused = 0

    def observe_batch(self, items: list[_Item], started_at: float) -> None:
        self.batches += 1
        self.items += len(items)
        self.batch_sizes[len(items)] = self.batch_sizes.get(len(items), 0) + 1
        realtime = any(item.priority is Priority.REALTIME for item in items)
        top = Priority.REALTIME if realtime else Priority.BATCH
        metrics.BATCH_SIZE.labels(top.name.lower()).observe(len(items))
        for item in items:
            self.observe_wait(item, started_at)

    def observe_wait(self, item: _Item, started_at: float) -> None:
        """How long ``item`` waited: submit → its batch started (or it joined one)."""
        waited = max(0.0, started_at - item.submitted_at)
        metrics.BATCH_WAIT_S.labels(item.priority.name.lower()).observe(waited)
        self.waits[item.priority].append(waited)
        self.wait_count[item.priority] += 1
        self.wait_sum_s[item.priority] += waited
        self.wait_max_s[item.priority] = max(self.wait_max_s[item.priority], waited)

    def observe_admission(self, item: _Item, admitted_at: float) -> None:
        """Continuous batching: a row joined the running batch (its wait ends here)."""
        self.items += 1
        self.observe_wait(item, admitted_at)

    def observe_step(self, size: int, top: Priority, paused: int) -> None:
        """Continuous batching: one step of ``size`` rows, ``paused`` rows left out."""
        self.batches += 1
        self.batch_sizes[size] = self.batch_sizes.get(size, 0) + 1
        self.paused = paused
        metrics.BATCH_SIZE.labels(top.name.lower()).observe(size)

    def wait_stats(self, priority: Priority) -> WaitStats:
        count = self.wait_count[priority]
        samples = sorted(self.waits[priority])
        if not samples:
            return WaitStats(0, 0.0, 0.0, 0.0, 0.0)

        def pct(q: float) -> float:
            return samples[min(len(samples) - 1, math.ceil(q * len(samples)) - 1)]

        return WaitStats(
            count=count,
            mean_s=self.wait_sum_s[priority] / count,
            p50_s=pct(0.50),
            p99_s=pct(0.99),
            max_s=self.wait_max_s[priority],
        )


def _freeze_loaded() -> None:
    """Move everything alive now (the engine's model and its libraries: hundreds of thousands
    of objects for ChatTTS) out of the cyclic garbage collector's sight (``gc.freeze``). Its
    full collections then scan only what was made since, instead of stopping every thread for
    140-380 ms each (measured with ChatTTS loaded; they were the tail of a live voice's first
    audio). Frozen objects are still freed by reference counting, and ``reload`` unfreezes them
    before it unloads."""
    gc.collect()
    gc.freeze()


class Batcher:
    """Forms batches from queued utterances and runs them on one engine, on one thread."""

    def __init__(
        self,
        engine: Engine,
        config: BatcherSettings | None = None,
        *,
        clock: Clock = time.monotonic,
        name: str = "batcher",
    ) -> None:
        self.engine = engine
        self.config = config or BatcherSettings()
        self.clock = clock
        self._name = name
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._idle = threading.Condition(self._lock)
        self._queues: dict[Priority, deque[_Item]] = {p: deque() for p in Priority}
        # An engine that gains nothing from batching (espeak renders one utterance after the
        # other) caps the batch: bigger batches would only make real-time items wait longer.
        self.max_batch = min(self.config.max_batch, engine.max_batch or self.config.max_batch)
        self._effective_max = self.max_batch
        self._served: dict[str, int] = {}
        """Batch-class groups (tenants) → the turn they were last served in."""
        self._turn = 0
        self._batch_groups: Counter[str] = Counter()
        """Batch-class items queued per group: with one group, the head is just the oldest."""
        self._successes = 0
        self._earliest_deadline: float | None = None
        self._cancel_pending = False
        self._closing = False
        self._drain = True
        self._thread: threading.Thread | None = None
        self._loaded = threading.Event()
        self._load_error: BaseException | None = None
        self._submitted = itertools.count(1)
        self._last_submitted = 0
        self._last_seen = 0
        self._waiting = False
        self._plan: _WaitPlan | None = None
        self._metrics = _Metrics(clock())
        self._reloads: list[Future[ReloadReport]] = []

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout_s: float | None = None) -> Batcher:
        """Start the scheduler thread; it loads the engine. Re-raises a load failure."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        if not self._loaded.wait(timeout_s):
            raise TimeoutError(f"engine {self.engine.name} did not load within {timeout_s} s")
        if self._load_error is not None:
            raise self._load_error
        return self

    def close(self, *, drain: bool = True, timeout_s: float | None = None) -> None:
        """Stop accepting work; run (``drain``) or fail what is queued; unload the engine."""
        with self._lock:
            self._closing = True
            self._drain = drain
            self._wakeup.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def __enter__(self) -> Batcher:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

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
        item = self._make_item(utterance, priority, deadline_s, group)
        item.future = future
        future.add_done_callback(self._on_future_done)
        self._enqueue(item)
        return future

    def submit_stream(
        self,
        utterance: Utterance,
        *,
        priority: Priority = Priority.REALTIME,
        deadline_s: float | None = None,
    ) -> AudioStream:
        """Queue a streamed render: chunks arrive on the returned stream as they are made."""
        item = self._make_item(utterance, priority, deadline_s, "")
        item.stream = AudioStream(on_cancel=self._note_cancel)
        self._enqueue(item)
        return item.stream

    def wake(self) -> None:
        """Make the scheduler re-check its queues now (e.g. after a test clock moved)."""
        with self._lock:
            self._last_submitted = next(self._submitted)
            self._wakeup.notify_all()

    def settle(self, timeout_s: float = 5.0) -> bool:
        """Wait until the scheduler has seen every submission and is waiting for more.

        For tests and benchmarks that drive a fake clock: it returns True once nothing more
        can start without new work or time passing.
        """
        with self._lock:
            return self._idle.wait_for(
                lambda: self._waiting and self._last_seen == self._last_submitted, timeout_s
            )

    def stats(self) -> BatcherStats:
        with self._lock:
            m = self._metrics
            return BatcherStats(
                batches=m.batches,
                items=m.items,
                batch_sizes=dict(m.batch_sizes),
                wait={p: m.wait_stats(p) for p in Priority},
                queue_depth={p: len(q) for p, q in self._queues.items()},
                busy_s=m.busy_s,
                uptime_s=self.clock() - m.started_at,
                oom_events=m.oom_events,
                dropped_cancelled=m.dropped_cancelled,
                dropped_expired=m.dropped_expired,
                failed_batches=m.failed_batches,
                effective_max_batch=self._effective_max,
                paused=m.paused,
            )

    def _make_item(
        self, utterance: Utterance, priority: Priority, deadline_s: float | None, group: str
    ) -> _Item:
        self.engine.validate(utterance)  # permanent errors surface here, on the caller's thread
        return _Item(
            utterance=utterance,
            priority=priority,
            key=self.engine.batch_key(utterance),
            cost=max(1, len(utterance.text)),
            submitted_at=self.clock(),
            deadline_s=deadline_s,
            group=group,
        )

    def _enqueue(self, item: _Item) -> None:
        with self._lock:
            if self._closing:
                raise ShuttingDownError(f"{self._name} is shutting down")
            self._queues[item.priority].append(item)
            if item.priority is Priority.BATCH:
                self._batch_groups[item.group] += 1
            if item.deadline_s is not None and (
                self._earliest_deadline is None or item.deadline_s < self._earliest_deadline
            ):
                self._earliest_deadline = item.deadline_s
            if self._changes_plan(item):
                self._last_submitted = next(self._submitted)
                self._wakeup.notify_all()

    def _changes_plan(self, item: _Item) -> bool:
        """Whether a new item could start a batch sooner than the scheduler's current plan.

        Waking the scheduler for every submission costs a context switch and a queue scan
        each; with 64 submitters that is most of the batcher's overhead. It only needs to
        wake when idle, when real-time work arrives behind a batch-class head, or when the
        planned batch just became full. While it runs a batch it re-plans afterwards anyway.
        """
        if not self._waiting:
            return False
        plan = self._plan
        if plan is None:
            return True
        if item.priority is Priority.REALTIME and plan.priority is Priority.BATCH:
            return True
        if item.key != plan.key:
            return False
        plan.count += 1
        plan.cost += item.cost
        cost_limit = self.config.max_batch_cost
        return plan.count >= self._effective_max or (
            cost_limit is not None and plan.cost >= cost_limit
        )

    def _on_future_done(self, future: Future[PcmF32]) -> None:
        if future.cancelled():
            self._note_cancel()

    def _note_cancel(self) -> None:
        with self._lock:
            self._cancel_pending = True
            self._wakeup.notify_all()

    # ------------------------------------------------------------------ scheduler thread

    def reload(self) -> Future[ReloadReport]:
        """Reload the engine's weights (hot-swap) between two batches, on the engine thread:
        queued work waits and then runs on the new weights; nothing is dropped. The future
        answers with the engine's memory before and after. (Continuous batching: no row
        joins until the running rows finished; then a new step session.)"""
        future: Future[ReloadReport] = Future()
        with self._lock:
            if self._closing:
                future.set_exception(ShuttingDownError(f"{self._name} is stopping"))
                return future
            self._reloads.append(future)
            self._wakeup.notify_all()
        return future

    def _reload_engine(self) -> None:
        with self._lock:
            waiting, self._reloads = self._reloads, []
        started = time.monotonic()
        before = self.engine.memory_in_use_bytes()
        try:
            gc.unfreeze()  # the old model's objects go back to the collector before unloading
            self.engine.unload()
            unloaded = self.engine.memory_in_use_bytes()
            self.engine.load()
            _freeze_loaded()
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

    @property
    def continuous(self) -> bool:
        """Whether this batcher schedules per step (continuous batching): the engine can
        step a running batch and the configuration asks for it."""
        return self.engine.steps and self.config.continuous

    def _run(self) -> None:
        steps: StepLoop | None = None
        try:
            self.engine.load()
            _freeze_loaded()
            if self.continuous:
                from voicelane.workers.stepping import StepLoop

                steps = StepLoop(self)  # opens the engine's step session
        except BaseException as error:
            self._load_error = error
            with self._lock:
                self._closing = True
            self._loaded.set()
            self._fail_all(ShuttingDownError(f"engine {self.engine.name} failed to load"))
            return
        self._loaded.set()
        try:
            if steps is not None:
                self._run_steps(steps)
                return
            while (batch := self._next_batch()) is not None:
                if not batch:  # a reload asked for: between two batches
                    self._reload_engine()
                    continue
                self._execute(batch)
        finally:
            self._fail_all(ShuttingDownError(f"{self._name} stopped"))
            try:
                self.engine.unload()
            except Exception:
                log.exception("engine %s failed to unload", self.engine.name)

    def _run_steps(self, steps: StepLoop) -> None:
        """Continuous batching until closed; a failure of the loop itself (the engine could
        not open a new session) stops the batcher: submissions then raise ShuttingDownError."""
        try:
            steps.run()
        except Exception:
            log.exception("the step loop of engine %s stopped", self.engine.name)
            with self._lock:
                self._closing = True

    def _fail_all(self, error: VoicelaneError) -> None:
        with self._lock:
            items = [item for q in self._queues.values() for item in q]
            for q in self._queues.values():
                q.clear()
            self._batch_groups.clear()
        for item in items:
            item.fail(error)

    def _next_batch(self) -> list[_Item] | None:
        """Block until a batch is due; take it off the queues. None when closing and done."""
        dropped: list[tuple[_Item, VoicelaneError]] = []
        try:
            with self._lock:
                while True:
                    if self._reloads and not self._closing:
                        return []
                    now = self.clock()
                    self._sweep(now, dropped)
                    queues = self._queues
                    if self._closing and not self._drain:
                        return None
                    if not queues[Priority.REALTIME] and not queues[Priority.BATCH]:
                        if self._closing:
                            return None
                        self._plan = None
                        self._wait(None)
                        continue
                    if queues[Priority.REALTIME]:
                        head = queues[Priority.REALTIME][0]
                    else:
                        head = self._fair_batch_head(queues[Priority.BATCH])
                    batch, full = self._collect(head)
                    due_at = head.submitted_at + max_wait_s(self.config, head.priority)
                    if full or now >= due_at or self._closing:
                        self._take(batch)
                        return batch
                    self._plan = _WaitPlan(
                        head.key, head.priority, len(batch), sum(i.cost for i in batch)
                    )
                    self._wait(due_at - now)
        finally:
            for item, error in dropped:
                item.fail(error)

    def _wait(self, timeout_s: float | None) -> None:
        self._last_seen = self._last_submitted
        self._waiting = True
        self._idle.notify_all()
        self._wakeup.wait(timeout_s)
        self._waiting = False

    def _sweep(self, now: float, dropped: list[tuple[_Item, VoicelaneError]]) -> None:
        """Drop cancelled and expired items (cheap unless something was cancelled/expired)."""
        expiry_due = self._earliest_deadline is not None and now >= self._earliest_deadline
        if not (self._cancel_pending or expiry_due):
            return
        self._cancel_pending = False
        earliest: float | None = None
        for priority, q in self._queues.items():
            kept: deque[_Item] = deque()
            for item in q:
                if item.cancelled:
                    self._metrics.dropped_cancelled += 1
                    dropped.append((item, CancelledError("cancelled before it ran")))
                elif item.deadline_s is not None and now >= item.deadline_s:
                    self._metrics.dropped_expired += 1
                    dropped.append((item, DeadlineExceededError("deadline passed before it ran")))
                else:
                    kept.append(item)
                    if item.deadline_s is not None and (
                        earliest is None or item.deadline_s < earliest
                    ):
                        earliest = item.deadline_s
            self._queues[priority] = kept
        self._batch_groups = Counter(item.group for item in self._queues[Priority.BATCH])
        self._earliest_deadline = earliest

    def _fair_batch_head(self, queue: deque[_Item]) -> _Item:
        """The oldest batch item of the group served longest ago (a group never served goes
        first): round robin between groups, FIFO within one. One pass over the queue, cut
        short by the first group never served."""
        if len(self._batch_groups) <= 1:
            return queue[0]
        served = self._served
        firsts: dict[str, _Item] = {}
        for item in queue:
            if item.group in firsts:
                continue
            if item.group not in served:
                return item
            firsts[item.group] = item
        if len(firsts) == 1:
            return queue[0]
        self._served = {g: served[g] for g in firsts}  # forget groups that left
        return firsts[min(firsts, key=served.__getitem__)]

    def _collect(self, head: _Item) -> tuple[list[_Item], bool]:
        """The batch of ``head``: it, then its key's real-time items, then its key's batch
        items; and whether it is full."""
        limit = self._effective_max
        cost_limit = self.config.max_batch_cost
        key = head.key
        batch: list[_Item] = [head]
        cost = head.cost
        if len(batch) >= limit or (cost_limit is not None and cost >= cost_limit):
            return batch, True
        for priority in (Priority.REALTIME, Priority.BATCH):
            for item in self._queues[priority]:
                if item.key != key or item is head:
                    continue
                if cost_limit is not None and batch and cost + item.cost > cost_limit:
                    return batch, True
                batch.append(item)
                cost += item.cost
                if len(batch) >= limit or (cost_limit is not None and cost >= cost_limit):
                    return batch, True
        return batch, False

    def _take(self, batch: list[_Item]) -> None:
        for item in batch:
            if item.priority is Priority.BATCH:
                self._served[item.group] = self._turn
                self._count_out(item)
        self._turn += 1
        for priority, q in self._queues.items():
            mine = {id(item) for item in batch if item.priority is priority}
            while q and id(q[0]) in mine:  # the common case: the batch is a prefix
                mine.discard(id(q.popleft()))
            if mine:
                self._queues[priority] = deque(item for item in q if id(item) not in mine)

    def _count_out(self, item: _Item) -> None:
        left = self._batch_groups[item.group] - 1
        if left > 0:
            self._batch_groups[item.group] = left
        else:
            del self._batch_groups[item.group]

    def _requeue_front(self, items: list[_Item]) -> None:
        with self._lock:
            for priority in (Priority.BATCH, Priority.REALTIME):
                mine = [item for item in items if item.priority is priority]
                self._queues[priority].extendleft(reversed(mine))
            for item in items:
                if item.priority is Priority.BATCH:
                    self._batch_groups[item.group] += 1
            self._last_submitted = next(self._submitted)

    def _execute(self, candidates: list[_Item]) -> None:
        started_at = self.clock()
        batch = [item for item in candidates if item.start()]
        if len(batch) < len(candidates):
            for item in candidates:
                if item not in batch:
                    item.fail(CancelledError("cancelled before it ran"))
            with self._lock:
                self._metrics.dropped_cancelled += len(candidates) - len(batch)
        if not batch:
            return
        with self._lock:
            self._metrics.observe_batch(batch, started_at)
        try:
            if any(item.stream is not None for item in batch):
                self._run_streamed(batch)
            else:
                self._run_whole(batch)
        except EngineOutOfMemoryError as error:
            self._on_oom(batch, error)
        except Exception as error:
            typed = (
                error
                if isinstance(error, VoicelaneError)
                else EngineError(
                    f"engine {self.engine.name} failed: {type(error).__name__}: {error}"
                )
            )
            log.exception("batch of %d failed on engine %s", len(batch), self.engine.name)
            with self._lock:
                self._metrics.failed_batches += 1
                self._successes = 0
            for item in batch:
                item.fail(typed)
        else:
            elapsed_s = self.clock() - started_at
            audio_s = sum(item.samples for item in batch) / self.engine.sample_rate_hz
            if elapsed_s > 0 and audio_s > 0:
                metrics.REALTIME_FACTOR.observe(audio_s / elapsed_s)
            with self._lock:
                self._successes += 1
                if (
                    self._effective_max < self.max_batch
                    and self._successes >= self.config.grow_after_successes
                ):
                    self._effective_max = min(self.max_batch, self._effective_max * 2)
                    self._successes = 0
                    log.info("max_batch grows back to %d", self._effective_max)
        finally:
            elapsed = self.clock() - started_at
            with self._lock:
                self._metrics.busy_s += elapsed

    def _check_count(self, outputs: list[PcmF32], expected: int) -> None:
        if len(outputs) != expected:
            raise EngineOutputMismatchError(
                f"engine {self.engine.name} returned {len(outputs)} outputs for {expected} inputs"
            )

    def _run_whole(self, batch: list[_Item]) -> None:
        outputs = self.engine.synthesize([item.utterance for item in batch])
        self._check_count(outputs, len(batch))
        for item, audio in zip(batch, outputs, strict=True):
            item.deliver(np.asarray(audio, dtype=np.float32))
            item.complete()

    def _run_streamed(self, batch: list[_Item]) -> None:
        steps = self.engine.synthesize_stream([item.utterance for item in batch])
        live = list(batch)
        try:
            for step in steps:
                self._check_count(step, len(batch))
                for item, chunk in zip(batch, step, strict=True):
                    if item in live:
                        item.deliver(np.asarray(chunk, dtype=np.float32))
                live = [item for item in live if not self._gone(item)]
                if not live:
                    log.info("every item of a streamed batch is gone; stopping it")
                    break
        finally:
            close = getattr(steps, "close", None)
            if close is not None:
                close()
        for item in batch:
            if item in live:
                item.complete()
            elif item.stream is not None and item.stream.cancelled:
                item.stream._end()
            else:
                item.fail(DeadlineExceededError("deadline passed while rendering"))

    def _gone(self, item: _Item) -> bool:
        if item.stream is not None and item.stream.cancelled:
            return True
        return item.deadline_s is not None and self.clock() >= item.deadline_s

    def _on_oom(self, batch: list[_Item], error: EngineOutOfMemoryError) -> None:
        retry = [item for item in batch if not item.delivered]
        lost = [item for item in batch if item.delivered]
        metrics.OOM_EVENTS.inc()
        with self._lock:
            self._metrics.oom_events += 1
            self._successes = 0
            if len(batch) > 1:
                self._effective_max = max(1, min(self._effective_max, len(batch)) // 2)
            log.warning(
                "out of memory on a batch of %d; max_batch is now %d",
                len(batch),
                self._effective_max,
            )
        for item in lost:  # a stream that already played audio cannot be re-rendered
            item.fail(error)
        if len(batch) == 1:
            for item in retry:
                item.fail(error)
            return
        for item in retry:
            item.chunks.clear()
        self._requeue_front(retry)
