"""Continuous batching: the batcher's scheduler loop for engines that step a running batch.

When the engine sets ``steps = True`` and ``BatcherSettings.continuous`` is on, the
batcher's scheduler thread runs :class:`StepLoop` instead of static batches. The loop owns
one :class:`~voicelane.workers.engines.base.StepSession` and works step by step; rows join and leave
between steps. It shares the batcher's queues, lock, counters and helpers (sweeping, fair
heads, requeueing, reloading): it is the batcher's other half, kept in its own module.

Rules (``docs/batcher.md``, "Continuous batching"):

* No ``max_wait`` and no ``max_batch_cost``: nothing waits to fill a batch, since a row that
  arrives later joins at the next step anyway. Batch keys do not matter either: rows of any
  voice and sampling share the running batch.
* Admission, at every step boundary. ``capacity`` is the effective ``max_batch`` (halved on
  OOM). Real-time items (FIFO) join while the session has fewer than ``capacity`` real-time
  rows; batch items (the batcher's fair head, round robin between tenants) join while it has
  fewer than ``capacity`` rows in all, paused ones included. Every row also needs
  ``StepSession.fits``; a queued real-time item that does not fit stops all admission
  (nothing batch takes memory ahead of it), and an item that does not fit an empty session
  fails with :class:`~voicelane.common.errors.EngineOutOfMemoryError`.
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
* Out of memory (nothing of the failed step was committed): ``capacity`` becomes half of
  ``min(capacity, step set size)``; the rows of the step set beyond it (youngest batch rows
  first, then youngest real-time rows) leave the session: those that already streamed audio
  fail with the OOM error, the others go back to the front of their queues and join again
  later. A step set of one row that still does not fit fails that row. Capacity doubles back
  (up to ``max_batch``) after ``grow_after_successes`` *rows completed* since the last OOM.
* Any other engine failure fails every row of the session with
  :class:`~voicelane.common.errors.EngineError` (or the engine's own typed error); the session is
  closed and a new one opened; queued work goes on.
* A reload (:meth:`Batcher.reload`) stops admission, lets the running rows finish, then
  closes the session, reloads the engine and opens a new session. ``close(drain=True)``
  steps until the queues and the session are empty; ``close(drain=False)`` fails running
  and queued rows with :class:`~voicelane.common.errors.ShuttingDownError`.
* Metrics: ``batches`` counts steps, ``batch_sizes`` is the histogram of step-set sizes,
  ``items`` counts admitted rows (a row put back after an OOM counts again), waits are
  submit → admission, busy time is time inside ``StepSession.step``, ``paused`` the rows
  left out of the last step.
"""

from __future__ import annotations

import enum
import itertools
import logging
import statistics
from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from voicelane.common.errors import (
    CancelledError,
    DeadlineExceededError,
    EngineError,
    EngineOutOfMemoryError,
    ShuttingDownError,
    VoicelaneError,
)
from voicelane.core import metrics
from voicelane.workers.batcher import Priority, _Item
from voicelane.workers.engines.base import StepEvent, StepSession

if TYPE_CHECKING:
    from voicelane.workers.batcher import Batcher

log = logging.getLogger(__name__)


class _Next(enum.Enum):
    """What the loop does after a step boundary."""

    STEP = "step"
    RELOAD = "reload"
    STOP = "stop"


def typed_engine_error(engine_name: str, error: Exception) -> VoicelaneError:
    """The engine's own typed error, or an :class:`EngineError` naming the failure."""
    if isinstance(error, VoicelaneError):
        return error
    return EngineError(f"engine {engine_name} failed: {type(error).__name__}: {error}")


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
    """The batcher's scheduler loop for a stepping engine (continuous batching).

    Made and run on the batcher's scheduler thread, after the engine loaded; only that
    thread touches the session and the rows.
    """

    def __init__(self, batcher: Batcher) -> None:
        self._batcher = batcher
        self._costs = StepCosts()
        self._solo_run = 0
        """Real-time-only steps in a row."""
        self._engine = batcher.engine
        self._session: StepSession = batcher.engine.open_steps()
        self._rows: dict[int, _Item] = {}
        """Handle → item, for every row in the session, in admission order."""
        self._handles = itertools.count(1)
        self._fresh: set[int] = set()
        """Rows admitted and not stepped yet: their first step prefills them, and such a step
        is not a fair sample of what a step costs."""

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        """Step until the batcher closes; then fail what still runs and close the session."""
        try:
            while (action := self._boundary()) is not _Next.STOP:
                if action is _Next.RELOAD:
                    self._reload()
                    continue
                self._admit_queued()
                handles = self._step_set()
                if handles:
                    self._step(handles)
                self._drop_gone()
        finally:
            self._fail_rows(ShuttingDownError(f"{self._batcher._name} stopped"))
            self._close_session()

    def _boundary(self) -> _Next:
        """At a step boundary, under the lock: drop cancelled and expired queued items, then
        decide: step (rows running or queued), reload (asked for, and no row running), stop
        (closing without drain, or drained), or wait for work."""
        b = self._batcher
        dropped: list[tuple[_Item, VoicelaneError]] = []
        try:
            with b._lock:
                while True:
                    b._sweep(b.clock(), dropped)
                    if b._closing and not b._drain:
                        return _Next.STOP
                    if b._reloads and not b._closing:
                        return _Next.STEP if self._rows else _Next.RELOAD
                    queues = b._queues
                    if self._rows or queues[Priority.REALTIME] or queues[Priority.BATCH]:
                        return _Next.STEP
                    if b._closing:
                        return _Next.STOP
                    b._plan = None
                    b._wait(None)
        finally:
            for item, error in dropped:
                item.fail(error)

    def _reload(self) -> None:
        """No row running: close the session, reload the engine, open a new session."""
        self._close_session()
        self._batcher._reload_engine()
        self._session = self._engine.open_steps()

    # ------------------------------------------------------------------ admission

    def _admit_queued(self) -> None:
        """Let queued items join the running batch, one at a time (each admission changes
        what the session :meth:`~StepSession.fits`)."""
        while (taken := self._next_admission()) is not None:
            item, fits = taken
            self._admit(item, fits=fits)

    def _next_admission(self) -> tuple[_Item, bool] | None:
        """Under the lock: the next item to join, taken off its queue, and whether it fits
        the session; None when nothing more joins at this boundary."""
        b = self._batcher
        with b._lock:
            if (b._reloads and not b._closing) or (b._closing and not b._drain):
                return None
            capacity = b._effective_max
            realtime, batch = b._queues[Priority.REALTIME], b._queues[Priority.BATCH]
            if realtime and self._count(Priority.REALTIME) < capacity:
                head = realtime[0]
            elif batch and len(self._rows) < capacity:
                head = b._fair_batch_head(batch)
            else:
                return None
            fits = self._session.fits(head.utterance)
            if not fits and self._rows:
                return None  # it waits for rows to leave; nothing goes ahead of it
            b._take([head])
            return head, fits

    def _admit(self, item: _Item, *, fits: bool) -> None:
        """Outside the lock: mark the item running and add it to the session."""
        b = self._batcher
        if not item.start():
            item.fail(CancelledError("cancelled before it ran"))
            with b._lock:
                b._metrics.dropped_cancelled += 1
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
            self._session.admit(handle, item.utterance, stream=item.stream is not None)
        except Exception as error:
            log.exception("engine %s refused a row", self._engine.name)
            item.fail(typed_engine_error(self._engine.name, error))
            return
        self._rows[handle] = item
        self._fresh.add(handle)
        with b._lock:
            b._metrics.observe_admission(item, b.clock())

    def _count(self, priority: Priority) -> int:
        return sum(1 for item in self._rows.values() if item.priority is priority)

    # ------------------------------------------------------------------ stepping

    def _step_set(self) -> list[int]:
        """Real-time rows, then batch rows, each in admission order, cut at the capacity;
        the rows cut off are paused for this step. A solo step (real-time rows only) while a
        real-time row waits for its first audio and solo steps pay (:class:`StepCosts`)."""
        realtime = [h for h, item in self._rows.items() if item.priority is Priority.REALTIME]
        batch = [h for h, item in self._rows.items() if item.priority is Priority.BATCH]
        capacity = self._batcher._effective_max
        if realtime and batch and self._solo_now(realtime):
            self._solo_run += 1
            return realtime[:capacity]
        self._solo_run = 0
        return (realtime + batch)[:capacity]

    def _solo_now(self, realtime: list[int]) -> bool:
        if self._solo_run >= self._batcher.config.realtime_solo_steps:
            return False
        if all(self._rows[handle].samples > 0 for handle in realtime):
            return False  # every live row already plays: they step with the batch
        return self._costs.solo_pays()

    def _step(self, handles: list[int]) -> None:
        """One step of ``handles``: deliver its audio, complete the rows that finished."""
        b = self._batcher
        top = self._rows[handles[0]].priority
        with b._lock:
            b._metrics.observe_step(len(handles), top, len(self._rows) - len(handles))
        started = b.clock()
        try:
            events = self._session.step(handles)
        except Exception as error:
            self._add_busy(started)
            if isinstance(error, EngineOutOfMemoryError):
                self._on_oom(handles, error)
            else:
                self._on_failure(handles, error)
            return
        elapsed = self._add_busy(started)
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

    def _add_busy(self, started: float) -> float:
        b = self._batcher
        elapsed = b.clock() - started
        with b._lock:
            b._metrics.busy_s += elapsed
        return elapsed

    def _deliver(self, event: StepEvent) -> None:
        item = self._rows.get(event.handle)
        if item is None:
            log.warning("engine %s sent audio for row %d, not running", self._engine.name,
                        event.handle)  # fmt: skip
            return
        item.deliver(np.asarray(event.audio, dtype=np.float32))
        if event.finished:
            del self._rows[event.handle]  # the session already released it
            item.complete()
            self._note_success()

    def _note_success(self) -> None:
        """A row completed: after enough of them since the last OOM, capacity doubles."""
        b = self._batcher
        with b._lock:
            b._successes += 1
            if b._effective_max < b.max_batch and b._successes >= b.config.grow_after_successes:
                b._effective_max = min(b.max_batch, b._effective_max * 2)
                b._successes = 0
                log.info("max_batch grows back to %d", b._effective_max)

    def _drop_gone(self) -> None:
        """Remove the rows cancelled or past their deadline; end or fail them."""
        now = self._batcher.clock()
        for handle, item in list(self._rows.items()):
            if item.cancelled:
                self._evict(handle)
                if item.stream is not None:
                    item.stream._end()
                else:
                    item.fail(CancelledError("cancelled while rendering"))
            elif item.deadline_s is not None and now >= item.deadline_s:
                self._evict(handle).fail(DeadlineExceededError("deadline passed while rendering"))

    def _evict(self, handle: int) -> _Item:
        """Take a row out of the session (its memory is released now)."""
        self._session.remove(handle)
        self._fresh.discard(handle)
        return self._rows.pop(handle)

    # ------------------------------------------------------------------ failures

    def _on_oom(self, handles: list[int], error: EngineOutOfMemoryError) -> None:
        """Halve the capacity; the step set's rows beyond it leave the session: back to
        the front of their queues, or failed when they already streamed audio."""
        b = self._batcher
        metrics.OOM_EVENTS.inc()
        with b._lock:
            b._metrics.oom_events += 1
            b._successes = 0
            b._effective_max = max(1, min(b._effective_max, len(handles)) // 2)
            capacity = b._effective_max
        log.warning("out of memory on a step of %d rows; max_batch is now %d", len(handles),
                    capacity)  # fmt: skip
        if len(handles) == 1:
            self._evict(handles[0]).fail(error)
            return
        retry: list[_Item] = []
        for handle in handles[capacity:]:  # the youngest batch rows, then real-time ones
            item = self._evict(handle)
            if item.delivered:  # a stream that already played audio cannot be re-rendered
                item.fail(error)
            else:
                item.chunks.clear()
                retry.append(item)
        if retry:
            b._requeue_front(retry)

    def _on_failure(self, handles: list[int], error: Exception) -> None:
        """Any other engine failure: every row fails; a new session carries on."""
        b = self._batcher
        log.error("a step of %d rows failed on engine %s", len(handles), self._engine.name,
                  exc_info=error)  # fmt: skip
        with b._lock:
            b._metrics.failed_batches += 1
            b._successes = 0
        self._fail_rows(typed_engine_error(self._engine.name, error))
        self._close_session()
        self._session = self._engine.open_steps()

    def _fail_rows(self, error: VoicelaneError) -> None:
        rows = list(self._rows.values())
        self._rows.clear()
        for item in rows:
            item.fail(error)

    def _close_session(self) -> None:
        try:
            self._session.close()
        except Exception:
            log.exception("engine %s failed to close its step session", self._engine.name)
