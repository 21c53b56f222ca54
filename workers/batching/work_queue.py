"""The work waiting for one engine: items per priority class, tenant fairness, cancelled and
expired items swept out, and the scheduler's wait for something to do.

Submitters (any thread) :meth:`~WorkQueue.put` items; the scheduler thread — the static loop
or the step loop — takes them. Both loops wait through the same call
(:meth:`WorkQueue.next_batch` / :meth:`WorkQueue.next_boundary`), which sweeps, honours a
close or a reload asked for, and sleeps until work or time makes a difference. It also says
when the engine should unload for idleness (``idle_unload_s`` without anything queued or
running: :attr:`Boundary.UNLOAD`) and when work waits for an unloaded engine
(:attr:`Boundary.LOAD`). Only the
scheduler thread removes items, so what it peeks at (:meth:`admission_head`) is still there
when it takes it.

Fairness (the batch class only): the head is the oldest item of the group (tenant) served
longest ago, a group never served first — round robin between groups, FIFO within one.
"""

from __future__ import annotations

import enum
import itertools
import threading
from collections import Counter, deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeVar

from voicelane.common.errors import (
    CancelledError,
    DeadlineExceededError,
    ShuttingDownError,
    VoicelaneError,
)
from voicelane.core.settings import BatcherSettings
from voicelane.workers.batching.backoff import OomBackoff
from voicelane.workers.batching.items import Item, Priority
from voicelane.workers.batching.lifecycle import ReloadReport
from voicelane.workers.batching.metrics import BatchMetrics

Clock = Callable[[], float]
R = TypeVar("R")


class Boundary(enum.Enum):
    """What the scheduler does next, besides work."""

    WORK = "work"
    RELOAD = "reload"
    """A reload was asked for and nothing runs: reload the engine now."""
    STOP = "stop"
    """Closing, and nothing more runs (drained, or closed without drain)."""
    UNLOAD = "unload"
    """Nothing queued or running for ``idle_unload_s``: unload the engine now."""
    LOAD = "load"
    """Work is queued and the engine is unloaded: load it now (then ask again: what expired
    meanwhile is swept before anything runs)."""


@dataclass(frozen=True, slots=True)
class Wait:
    """A decision to wait this long (None: until woken) before deciding again."""

    seconds: float | None


def max_wait_s(config: BatcherSettings, priority: Priority) -> float:
    """How long the oldest item of ``priority`` may wait for its batch to fill."""
    if priority is Priority.REALTIME:
        return config.max_wait_realtime_s
    return config.max_wait_batch_s


@dataclass(slots=True)
class _Plan:
    """What the waiting scheduler will start next: the head's key, class, size and cost."""

    key: Hashable
    priority: Priority
    count: int
    cost: int


class WorkQueue:
    """Queued items of one batcher and the scheduler's condition variable."""

    def __init__(
        self,
        config: BatcherSettings,
        *,
        clock: Clock,
        backoff: OomBackoff,
        metrics: BatchMetrics,
        name: str,
        idle_unload_s: float | None = None,
    ) -> None:
        self._config = config
        self._idle_unload_s = idle_unload_s if idle_unload_s else None
        """None: never unload for idleness."""
        self._idle_since: float | None = None
        """When the scheduler last found nothing queued and nothing running (None: busy)."""
        self._clock = clock
        self._backoff = backoff
        self._metrics = metrics
        self._name = name
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._idle = threading.Condition(self._lock)
        self._queues: dict[Priority, deque[Item]] = {p: deque() for p in Priority}
        self._served: dict[str, int] = {}
        """Batch-class groups (tenants) → the turn they were last served in."""
        self._turn = 0
        self._groups: Counter[str] = Counter()
        """Batch-class items queued per group: with one group, the head is just the oldest."""
        self._earliest_deadline: float | None = None
        self._cancel_pending = False
        self._closing = False
        self._drain = True
        self._reloads: list[Future[ReloadReport]] = []
        self._submitted = itertools.count(1)
        self._last_submitted = 0
        self._last_seen = 0
        self._waiting = False
        self._plan: _Plan | None = None

    # ---- any thread -------------------------------------------------------------------------

    def put(self, item: Item) -> None:
        """Queue ``item``; wake the scheduler if it could start something sooner now.
        Raises ShuttingDownError once the batcher closes."""
        with self._lock:
            if self._closing:
                raise ShuttingDownError(f"{self._name} is shutting down")
            self._queues[item.priority].append(item)
            if item.priority is Priority.BATCH:
                self._groups[item.group] += 1
            if item.deadline_s is not None and (
                self._earliest_deadline is None or item.deadline_s < self._earliest_deadline
            ):
                self._earliest_deadline = item.deadline_s
            if self._changes_plan(item):
                self._notify()

    def note_cancel(self) -> None:
        """Something queued may have been cancelled: sweep at the next look."""
        with self._lock:
            self._cancel_pending = True
            self._wakeup.notify_all()

    def wake(self) -> None:
        """Make the scheduler look again now (e.g. after a test clock moved)."""
        with self._lock:
            self._notify()

    def settle(self, timeout_s: float) -> bool:
        """Wait until the scheduler has seen every submission and waits for more: True once
        nothing more can start without new work or time passing (tests, benchmarks)."""
        with self._lock:
            return self._idle.wait_for(
                lambda: self._waiting and self._last_seen == self._last_submitted, timeout_s
            )

    def close(self, *, drain: bool) -> None:
        """Stop taking submissions; the scheduler runs (``drain``) or fails what is queued."""
        with self._lock:
            self._closing = True
            self._drain = drain
            self._wakeup.notify_all()

    def ask_reload(self, future: Future[ReloadReport]) -> bool:
        """Ask the scheduler to reload the engine at its next boundary; False when closing."""
        with self._lock:
            if self._closing:
                return False
            self._reloads.append(future)
            self._wakeup.notify_all()
            return True

    def depth(self) -> dict[Priority, int]:
        with self._lock:
            return {p: len(q) for p, q in self._queues.items()}

    # ---- the scheduler thread: waiting -------------------------------------------------------

    def next_batch(self, *, loaded: bool = True) -> list[Item] | Boundary:
        """The static loop's next batch, taken off the queues, once it is due: full
        (``capacity`` items or ``max_batch_cost``), or its head waited its class's
        ``max_wait``. The head is the oldest real-time item, else the fair batch head; the
        batch is it, its key's real-time items, then its key's batch items. ``loaded``: whether
        the engine is loaded (UNLOAD and LOAD boundaries)."""

        def decide(now: float) -> list[Item] | Wait:
            head = self._head(realtime=True, batch=True)
            assert head is not None
            batch, full = self._collect(head)
            due_at = head.submitted_at + max_wait_s(self._config, head.priority)
            if full or now >= due_at or self._closing:
                self._take(batch)
                return batch
            self._plan = _Plan(head.key, head.priority, len(batch), sum(i.cost for i in batch))
            return Wait(due_at - now)

        return self._await(running=False, loaded=loaded, decide=decide)

    def next_boundary(self, *, running: bool, loaded: bool = True) -> Boundary:
        """The step loop at a step boundary: WORK while rows run (``running``) or items are
        queued; RELOAD when asked and nothing runs; STOP when closing and done; UNLOAD and
        LOAD as for :meth:`next_batch`."""
        return self._await(running=running, loaded=loaded, decide=lambda _now: Boundary.WORK)

    def _await(
        self, *, running: bool, loaded: bool, decide: Callable[[float], R | Wait]
    ) -> R | Boundary:
        dropped: list[tuple[Item, VoicelaneError]] = []
        try:
            with self._lock:
                while True:
                    now = self._clock()
                    self._sweep(now, dropped)
                    if self._closing and not self._drain:
                        return Boundary.STOP
                    if self._reloads and not self._closing:
                        if running:
                            return Boundary.WORK
                        self._idle_since = None  # the idle time counts again after it
                        return Boundary.RELOAD
                    queued = bool(self._queues[Priority.REALTIME] or self._queues[Priority.BATCH])
                    if not queued and not running:
                        if self._closing:
                            return Boundary.STOP
                        self._plan = None
                        idle_left_s = self._idle_left_s(now, loaded)
                        if idle_left_s is not None and idle_left_s <= 0:
                            return Boundary.UNLOAD
                        self._wait(idle_left_s)
                        continue
                    self._idle_since = None
                    if not loaded:
                        return Boundary.LOAD  # nothing runs on an unloaded engine
                    if not queued:
                        return Boundary.WORK
                    decision = decide(now)
                    if not isinstance(decision, Wait):
                        return decision
                    self._wait(decision.seconds)
        finally:
            if dropped:  # rare: every boundary of the step loop comes through here
                self._metrics.dropped(
                    cancelled=sum(isinstance(e, CancelledError) for _, e in dropped),
                    expired=sum(isinstance(e, DeadlineExceededError) for _, e in dropped),
                )
            for item, error in dropped:
                item.fail(error)

    def idle_for_s(self) -> float:
        """How long the scheduler has had nothing to do (0 while busy)."""
        with self._lock:
            return 0.0 if self._idle_since is None else self._clock() - self._idle_since

    def take_reloads(self) -> list[Future[ReloadReport]]:
        with self._lock:
            waiting, self._reloads = self._reloads, []
            return waiting

    # ---- the scheduler thread: admission (step loop) -----------------------------------------

    def admission_head(self, *, realtime: bool, batch: bool) -> Item | None:
        """The next item to join a running batch, left queued: the oldest real-time item
        (when ``realtime`` rows have room), else the fair batch head (when ``batch`` rows
        have room); None when nothing may join now (room, a reload asked for, closing
        without drain)."""
        with self._lock:
            if (self._reloads and not self._closing) or (self._closing and not self._drain):
                return None
            return self._head(realtime=realtime, batch=batch)

    def take(self, item: Item) -> None:
        """Take ``item`` (just returned by :meth:`admission_head`) off its queue."""
        with self._lock:
            self._take([item])

    def requeue_front(self, items: list[Item]) -> None:
        """Put ``items`` back at the front of their queues, in this order."""
        with self._lock:
            for priority in (Priority.BATCH, Priority.REALTIME):
                mine = [item for item in items if item.priority is priority]
                self._queues[priority].extendleft(reversed(mine))
            for item in items:
                if item.priority is Priority.BATCH:
                    self._groups[item.group] += 1
            self._last_submitted = next(self._submitted)

    def drain(self) -> list[Item]:
        """Everything still queued, taken off (to fail it when the batcher stops)."""
        with self._lock:
            items = [item for q in self._queues.values() for item in q]
            for q in self._queues.values():
                q.clear()
            self._groups.clear()
            return items

    # ---- under the lock ---------------------------------------------------------------------

    def _idle_left_s(self, now: float, loaded: bool) -> float | None:
        """Nothing queued or running: seconds until the engine should unload for idleness
        (the idle time starts now if it had not yet); None: never (not set, or unloaded)."""
        if self._idle_since is None:
            self._idle_since = now
        if self._idle_unload_s is None or not loaded:
            return None
        return self._idle_since + self._idle_unload_s - now

    def _notify(self) -> None:
        self._last_submitted = next(self._submitted)
        self._wakeup.notify_all()

    def _wait(self, timeout_s: float | None) -> None:
        self._last_seen = self._last_submitted
        self._waiting = True
        self._idle.notify_all()
        self._wakeup.wait(timeout_s)
        self._waiting = False

    def _changes_plan(self, item: Item) -> bool:
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
        cost_limit = self._config.max_batch_cost
        return plan.count >= self._backoff.capacity or (
            cost_limit is not None and plan.cost >= cost_limit
        )

    def _sweep(self, now: float, dropped: list[tuple[Item, VoicelaneError]]) -> None:
        """Drop cancelled and expired items (cheap unless something was cancelled/expired)."""
        expiry_due = self._earliest_deadline is not None and now >= self._earliest_deadline
        if not (self._cancel_pending or expiry_due):
            return
        self._cancel_pending = False
        earliest: float | None = None
        for priority, q in self._queues.items():
            kept: deque[Item] = deque()
            for item in q:
                if item.cancelled:
                    dropped.append((item, CancelledError("cancelled before it ran")))
                elif item.expired(now):
                    dropped.append((item, DeadlineExceededError("deadline passed before it ran")))
                else:
                    kept.append(item)
                    if item.deadline_s is not None and (
                        earliest is None or item.deadline_s < earliest
                    ):
                        earliest = item.deadline_s
            self._queues[priority] = kept
        self._groups = Counter(item.group for item in self._queues[Priority.BATCH])
        self._earliest_deadline = earliest

    def _head(self, *, realtime: bool, batch: bool) -> Item | None:
        if realtime and self._queues[Priority.REALTIME]:
            return self._queues[Priority.REALTIME][0]
        if batch and self._queues[Priority.BATCH]:
            return self._fair_batch_head(self._queues[Priority.BATCH])
        return None

    def _fair_batch_head(self, queue: deque[Item]) -> Item:
        """The oldest batch item of the group served longest ago (a group never served goes
        first): one pass over the queue, cut short by the first group never served."""
        if len(self._groups) <= 1:
            return queue[0]
        served = self._served
        firsts: dict[str, Item] = {}
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

    def _collect(self, head: Item) -> tuple[list[Item], bool]:
        """The static batch of ``head``: it, then its key's real-time items, then its key's
        batch items; and whether it is full."""
        limit = self._backoff.capacity
        cost_limit = self._config.max_batch_cost
        key = head.key
        batch: list[Item] = [head]
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

    def _take(self, batch: list[Item]) -> None:
        for item in batch:
            if item.priority is Priority.BATCH:
                self._served[item.group] = self._turn
                left = self._groups[item.group] - 1
                if left > 0:
                    self._groups[item.group] = left
                else:
                    del self._groups[item.group]
        self._turn += 1
        for priority, q in self._queues.items():
            mine = {id(item) for item in batch if item.priority is priority}
            while q and id(q[0]) in mine:  # the common case: the batch is a prefix
                mine.discard(id(q.popleft()))
            if mine:
                self._queues[priority] = deque(item for item in q if id(item) not in mine)
