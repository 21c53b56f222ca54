"""Continuous batching: the scheduler loop for engines that step a running batch (ChatTTS).

When the engine sets ``steps = True`` and ``BatcherSettings.continuous`` is on, the
batcher's scheduler thread runs :class:`StepLoop` instead of static batches. The loop owns
one :class:`~voicelane.workers.engines.base.StepSession` and works step by step; rows join
and leave between steps. It shares the work queue, the OOM backoff and the metrics with the
static loop (:mod:`voicelane.workers.batching`).

Rules (``docs/batcher.md``, "Continuous batching"):

* No ``max_wait`` and no ``max_batch_cost``: nothing waits to fill a batch, since a row that
  arrives later joins at the next step anyway. Batch keys do not matter either: rows of any
  voice and sampling share the running batch.
* Admission, at every step boundary. ``capacity`` is the effective ``max_batch`` (halved on
  OOM). Real-time items (FIFO) join while the session has fewer than ``capacity`` real-time
  rows; batch items (the fair head, round robin between tenants) join while it has fewer
  than ``capacity`` rows in all, paused ones included. Every row also needs
  ``StepSession.fits``.
* **Preemption**: a real-time item that does not fit takes the place of the youngest batch
  row that has streamed nothing: that row leaves the session (its memory — ChatTTS's KV
  blocks — freed at once), goes back to the front of its queue and is rendered again from
  its start when it rejoins (a seeded row renders the same audio: nothing of it was sent).
  Batch rows are preempted one at a time until the real-time item fits; when none is left to
  preempt, or a batch item does not fit, admission waits for rows to leave (nothing joins
  ahead of it). An item that does not fit an empty session fails with
  :class:`~voicelane.common.errors.EngineOutOfMemoryError`.
* The step set: real-time rows in admission order, then batch rows in admission order, cut
  at ``capacity``. Batch rows beyond it are *paused*: not stepped, keeping their state, and
  resumed when room frees. That is how a real-time row gets into a batch full of batch-lane
  rows: at the very next step, at the price of the youngest batch row waiting.
* Solo steps for first audio: while a real-time row has not produced audio yet, and a step of
  the real-time rows alone has been measured to cost less than 0.6 of a step of the whole
  running batch (a CPU, where a step's cost grows with its rows), the loop steps the
  real-time rows alone, at most ``realtime_solo_steps`` times in a row before the batch rows
  step again. Where a step costs about the same whatever its rows (a GPU), it never does.
* After each step, rows whose stream or future was cancelled, or whose deadline passed, are
  removed from the session: a cancelled stream just ends, an expired row fails with
  :class:`~voicelane.common.errors.DeadlineExceededError`. Other rows are unaffected.
* Out of memory (nothing of the failed step was committed): the backoff's rule
  (:mod:`~voicelane.workers.batching.backoff`), over the step set; the rows of the step set
  beyond the new capacity (youngest batch rows first, then youngest real-time rows) leave
  the session: those that already streamed audio fail with the OOM error, the others go back
  to the front of their queues and join again later. A step set of one row that still does
  not fit fails that row. Capacity grows back after ``grow_after_successes`` *rows
  completed* since the last OOM.
* Any other engine failure fails every row of the session with
  :class:`~voicelane.common.errors.EngineError` (or the engine's own typed error); the
  session is closed and a new one opened; queued work goes on.
* A reload (:meth:`Batcher.reload`) stops admission, lets the running rows finish, then
  closes the session, reloads the engine and opens a new session. An idle unload
  (``idle_unload_s``) happens only with no row running: it closes the session and unloads the
  engine; the next queued item loads it and opens a new session. ``close(drain=True)``
  steps until the queues and the session are empty; ``close(drain=False)`` fails running
  and queued rows with :class:`~voicelane.common.errors.ShuttingDownError`.
* Metrics: ``batches`` counts steps, ``batch_sizes`` is the histogram of step-set sizes,
  ``items`` counts admitted rows (a row put back after an OOM or a preemption counts again),
  waits are submit → admission, busy time is time inside ``StepSession.step``, ``paused``
  the rows left out of the last step, ``preempted`` the rows preempted so far.
"""

from __future__ import annotations

import itertools
import logging
import statistics
from collections import deque
from collections.abc import Callable

import numpy as np

from voicelane.common.errors import (
    CancelledError,
    EngineOutOfMemoryError,
    ShuttingDownError,
    VoicelaneError,
)
from voicelane.core.settings import BatcherSettings
from voicelane.workers.batching.backoff import OomBackoff, split_for_retry, typed_engine_error
from voicelane.workers.batching.items import Item, Priority
from voicelane.workers.batching.lifecycle import EngineLife
from voicelane.workers.batching.metrics import BatchMetrics
from voicelane.workers.batching.work_queue import Boundary, WorkQueue
from voicelane.workers.engines.base import Engine, StepEvent, StepSession

log = logging.getLogger(__name__)


class StepCosts:
    """What a step costs with the batch rows in it (full) and with the real-time rows alone
    (solo): medians of the last steps measured (a step that also decoded a window or a
    finished row's audio costs more; the median ignores such spikes), deciding whether solo
    steps pay."""

    KEPT = 15
    SOLO_SHARE = 0.6
    """Solo steps pay when they cost less than this share of a full step."""
    REPROBE_AFTER_STEPS = 512
    """When solo steps did not pay, measure them again after this many full steps."""

    def __init__(self) -> None:
        self._full: deque[float] = deque(maxlen=self.KEPT)
        self._solo: deque[float] = deque(maxlen=self.KEPT)
        self._full_since_solo = 0

    @property
    def full_s(self) -> float | None:
        return statistics.median(self._full) if self._full else None

    @property
    def solo_s(self) -> float | None:
        return statistics.median(self._solo) if self._solo else None

    def observe_full(self, seconds: float) -> None:
        self._full.append(seconds)
        self._full_since_solo += 1
        if self._full_since_solo >= self.REPROBE_AFTER_STEPS:
            self._solo.clear()  # the load changed since: measure again
            self._full_since_solo = 0

    def observe_solo(self, seconds: float) -> None:
        self._solo.append(seconds)
        self._full_since_solo = 0

    def solo_pays(self) -> bool:
        full, solo = self.full_s, self.solo_s
        if full is None or full <= 0:
            return False
        return solo is None or solo < self.SOLO_SHARE * full


class StepLoop:
    """The scheduler loop for a stepping engine (continuous batching).

    Made and run on the batcher's scheduler thread, after the engine loaded; only that
    thread touches the session and the rows.
    """

    def __init__(
        self,
        engine: Engine,
        queue: WorkQueue,
        *,
        life: EngineLife,
        config: BatcherSettings,
        backoff: OomBackoff,
        metrics: BatchMetrics,
        clock: Callable[[], float],
        name: str,
    ) -> None:
        self._engine = engine
        self._life = life
        self._queue = queue
        self._config = config
        self._backoff = backoff
        self._metrics = metrics
        self._clock = clock
        self._name = name
        self._costs = StepCosts()
        self._solo_run = 0
        """Real-time-only steps in a row."""
        self._session: StepSession | None = engine.open_steps()
        """None while the engine is unloaded for idleness."""
        self._rows: dict[int, Item] = {}
        """Handle → item, for every row in the session, in admission order."""
        self._handles = itertools.count(1)
        self._fresh: set[int] = set()
        """Rows admitted and not stepped yet: their first step prefills them, and such a step
        is not a fair sample of what a step costs."""

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        """Step until the batcher closes; then fail what still runs and close the session."""
        try:
            while True:
                action = self._queue.next_boundary(
                    running=bool(self._rows), loaded=self._life.loaded
                )
                if action is Boundary.STOP:
                    return
                if action is Boundary.RELOAD:
                    self._reload()
                    continue
                if action is Boundary.UNLOAD:
                    self._close_session()
                    self._life.unload_idle(self._queue.idle_for_s())
                    continue
                if action is Boundary.LOAD:
                    self._life.load_on_demand(self._queue.drain)
                    if self._life.loaded:
                        self._session = self._engine.open_steps()
                    continue
                self._admit_queued()
                handles = self._step_set()
                if handles:
                    self._step(handles)
                self._drop_gone()
        finally:
            self._fail_rows(ShuttingDownError(f"{self._name} stopped"))
            self._close_session()

    def _reload(self) -> None:
        """No row running: close the session, reload the engine, open a new session."""
        self._close_session()
        self._life.reload(self._queue.take_reloads())
        if self._life.loaded:
            self._session = self._engine.open_steps()

    @property
    def _open(self) -> StepSession:
        """The session (the engine is loaded whenever a row is admitted or stepped)."""
        assert self._session is not None, "no step session: the engine is unloaded"
        return self._session

    # ------------------------------------------------------------------ admission

    def _admit_queued(self) -> None:
        """Let queued items join the running batch, one at a time (each admission changes
        what the session :meth:`~StepSession.fits`)."""
        while True:
            capacity = self._backoff.capacity
            head = self._queue.admission_head(
                realtime=self._count(Priority.REALTIME) < capacity,
                batch=len(self._rows) < capacity,
            )
            if head is None:
                return
            fits = self._open.fits(head.utterance)
            if not fits and self._rows:
                if head.priority is Priority.REALTIME and self._preempt_one():
                    continue  # a batch row made room: try again
                return  # it waits for rows to leave; nothing goes ahead of it
            self._queue.take(head)
            self._admit(head, fits=fits)

    def _preempt_one(self) -> bool:
        """Take the youngest batch row that streamed nothing out of the session (its memory
        freed) and put it back at the front of its queue; False when there is none."""
        for handle in reversed(self._rows):
            item = self._rows[handle]
            if item.priority is Priority.BATCH and not item.delivered:
                self._evict(handle).reset()
                self._queue.requeue_front([item])
                self._metrics.row_preempted()
                log.info("preempted a batch row for a real-time row that did not fit")
                return True
        return False

    def _admit(self, item: Item, *, fits: bool) -> None:
        """Mark the item running and add it to the session."""
        if not item.start():
            item.fail(CancelledError("cancelled before it ran"))
            self._metrics.dropped(cancelled=1)
            return
        if not fits:
            item.fail(
                EngineOutOfMemoryError(
                    f"the utterance does not fit engine {self._engine.name}'s memory even alone"
                )
            )
            return
        handle = next(self._handles)
        try:
            self._open.admit(handle, item.utterance, stream=item.stream is not None)
        except Exception as error:
            log.exception("engine %s refused a row", self._engine.name)
            item.fail(typed_engine_error(self._engine.name, error))
            return
        self._rows[handle] = item
        self._fresh.add(handle)
        self._metrics.row_admitted(item, self._clock())

    def _count(self, priority: Priority) -> int:
        return sum(1 for item in self._rows.values() if item.priority is priority)

    # ------------------------------------------------------------------ stepping

    def _step_set(self) -> list[int]:
        """Real-time rows, then batch rows, each in admission order, cut at the capacity;
        the rows cut off are paused for this step. A solo step (real-time rows only) while a
        real-time row waits for its first audio and solo steps pay (:class:`StepCosts`)."""
        realtime = [h for h, item in self._rows.items() if item.priority is Priority.REALTIME]
        batch = [h for h, item in self._rows.items() if item.priority is Priority.BATCH]
        capacity = self._backoff.capacity
        if realtime and batch and self._solo_now(realtime):
            self._solo_run += 1
            return realtime[:capacity]
        self._solo_run = 0
        return (realtime + batch)[:capacity]

    def _solo_now(self, realtime: list[int]) -> bool:
        if self._solo_run >= self._config.realtime_solo_steps:
            return False
        if all(self._rows[handle].samples > 0 for handle in realtime):
            return False  # every live row already plays: they step with the batch
        return self._costs.solo_pays()

    def _step(self, handles: list[int]) -> None:
        """One step of ``handles``: deliver its audio, complete the rows that finished."""
        self._metrics.step_started([self._rows[h] for h in handles], len(self._rows) - len(handles))
        started = self._clock()
        try:
            events = self._open.step(handles)
        except Exception as error:
            self._metrics.busy(self._clock() - started)
            if isinstance(error, EngineOutOfMemoryError):
                self._on_oom(handles, error)
            else:
                self._on_failure(handles, error)
            return
        elapsed = self._clock() - started
        self._metrics.busy(elapsed)
        prefilled = not self._fresh.isdisjoint(handles)
        self._fresh.difference_update(handles)
        if prefilled:
            pass  # a prefill step: not a sample of either cost
        elif any(self._rows[h].priority is Priority.BATCH for h in handles):
            self._costs.observe_full(elapsed)
        elif self._solo_run:
            self._costs.observe_solo(elapsed)
        for event in events:
            self._deliver(event)

    def _deliver(self, event: StepEvent) -> None:
        item = self._rows.get(event.handle)
        if item is None:
            log.warning("engine %s sent audio for row %d, not running", self._engine.name,
                        event.handle)  # fmt: skip
            return
        item.deliver(np.asarray(event.audio, dtype=np.float32), event.words)
        if event.finished:
            del self._rows[event.handle]  # the session already released it
            item.complete()
            self._backoff.succeeded()

    def _drop_gone(self) -> None:
        """Remove the rows cancelled or past their deadline; end or fail them."""
        now = self._clock()
        for handle, item in list(self._rows.items()):
            if item.gone(now):
                self._evict(handle).end_gone()

    def _evict(self, handle: int) -> Item:
        """Take a row out of the session (its memory is released now)."""
        self._open.remove(handle)
        self._fresh.discard(handle)
        return self._rows.pop(handle)

    # ------------------------------------------------------------------ failures

    def _on_oom(self, handles: list[int], error: EngineOutOfMemoryError) -> None:
        """The backoff's new capacity; the step set's rows beyond it leave the session: back
        to the front of their queues, or failed when they already streamed audio."""
        self._metrics.out_of_memory()
        capacity = self._backoff.out_of_memory(len(handles))
        if len(handles) == 1:
            self._evict(handles[0]).fail(error)
            return
        leaving = [self._evict(handle) for handle in handles[capacity:]]
        if retry := split_for_retry(leaving, error):  # youngest batch rows, then real-time
            self._queue.requeue_front(retry)

    def _on_failure(self, handles: list[int], error: Exception) -> None:
        """Any other engine failure: every row fails; a new session carries on."""
        log.error("a step of %d rows failed on engine %s", len(handles), self._engine.name,
                  exc_info=error)  # fmt: skip
        self._metrics.batch_failed()
        self._backoff.failed()
        self._fail_rows(typed_engine_error(self._engine.name, error))
        self._close_session()
        self._session = self._engine.open_steps()

    def _fail_rows(self, error: VoicelaneError) -> None:
        rows = list(self._rows.values())
        self._rows.clear()
        for item in rows:
            item.fail(error)

    def _close_session(self) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        try:
            session.close()
        except Exception:
            log.exception("engine %s failed to close its step session", self._engine.name)
