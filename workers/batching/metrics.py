"""The batcher's counters (:class:`BatchMetrics`) and the snapshot they make
(:class:`BatcherStats`); every event also goes to the process's Prometheus metrics
(:mod:`voicelane.core.metrics`). Both scheduler loops feed the same object; any thread may
read it (:meth:`BatchMetrics.snapshot`)."""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from voicelane.core import metrics
from voicelane.workers.batching.items import Item, Priority

_WAIT_SAMPLES_KEPT = 10_000


@dataclass(frozen=True, slots=True)
class WaitStats:
    count: int
    mean_s: float
    p50_s: float
    p99_s: float
    max_s: float


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
    preempted: int = 0
    """Continuous batching: batch rows taken out of the running batch (their memory freed,
    put back at the front of their queue) to make room for a real-time row that did not fit."""

    @property
    def utilization(self) -> float:
        return self.busy_s / self.uptime_s if self.uptime_s > 0 else 0.0

    @property
    def mean_batch_size(self) -> float:
        return self.items / self.batches if self.batches else 0.0


def _top_class(items: Iterable[Item]) -> Priority:
    """The highest class among ``items`` (a batch holding a real-time item is real-time)."""
    realtime = any(item.priority is Priority.REALTIME for item in items)
    return Priority.REALTIME if realtime else Priority.BATCH


class BatchMetrics:
    """Counters behind :meth:`Batcher.stats`, with their own lock."""

    def __init__(self, now: float) -> None:
        self._lock = threading.Lock()
        self._started_at = now
        self._batches = 0
        self._items = 0
        self._batch_sizes: dict[int, int] = {}
        self._waits: dict[Priority, deque[float]] = {
            p: deque(maxlen=_WAIT_SAMPLES_KEPT) for p in Priority
        }
        self._wait_count = dict.fromkeys(Priority, 0)
        self._wait_sum_s = dict.fromkeys(Priority, 0.0)
        self._wait_max_s = dict.fromkeys(Priority, 0.0)
        self._busy_s = 0.0
        self._oom_events = 0
        self._dropped_cancelled = 0
        self._dropped_expired = 0
        self._failed_batches = 0
        self._paused = 0
        self._preempted = 0

    # ---- events -----------------------------------------------------------------------------

    def batch_started(self, items: list[Item], started_at: float) -> None:
        """A static batch of ``items`` started: its size, and each item's wait."""
        size = len(items)
        with self._lock:
            self._batches += 1
            self._items += size
            self._batch_sizes[size] = self._batch_sizes.get(size, 0) + 1
            for item in items:
                self._observe_wait(item, started_at)
        metrics.BATCH_SIZE.labels(_top_class(items).name.lower()).observe(size)

    def row_admitted(self, item: Item, admitted_at: float) -> None:
        """Continuous batching: a row joined the running batch (its wait ends here)."""
        with self._lock:
            self._items += 1
            self._observe_wait(item, admitted_at)

    def step_started(self, items: list[Item], paused: int) -> None:
        """Continuous batching: one step of ``items``, ``paused`` rows left out."""
        size = len(items)
        with self._lock:
            self._batches += 1
            self._batch_sizes[size] = self._batch_sizes.get(size, 0) + 1
            self._paused = paused
        metrics.BATCH_SIZE.labels(_top_class(items).name.lower()).observe(size)

    def busy(self, seconds: float) -> None:
        with self._lock:
            self._busy_s += seconds

    def audio_made(self, audio_s: float, elapsed_s: float) -> None:
        """A batch made ``audio_s`` of audio in ``elapsed_s`` (the real-time factor)."""
        if elapsed_s > 0 and audio_s > 0:
            metrics.REALTIME_FACTOR.observe(audio_s / elapsed_s)

    def dropped(self, *, cancelled: int = 0, expired: int = 0) -> None:
        with self._lock:
            self._dropped_cancelled += cancelled
            self._dropped_expired += expired

    def out_of_memory(self) -> None:
        metrics.OOM_EVENTS.inc()
        with self._lock:
            self._oom_events += 1

    def batch_failed(self) -> None:
        with self._lock:
            self._failed_batches += 1

    def row_preempted(self) -> None:
        metrics.PREEMPTIONS.inc()
        with self._lock:
            self._preempted += 1

    # ---- reading ----------------------------------------------------------------------------

    def snapshot(
        self, *, now: float, queue_depth: dict[Priority, int], effective_max_batch: int
    ) -> BatcherStats:
        with self._lock:
            return BatcherStats(
                batches=self._batches,
                items=self._items,
                batch_sizes=dict(self._batch_sizes),
                wait={p: self._wait_stats(p) for p in Priority},
                queue_depth=queue_depth,
                busy_s=self._busy_s,
                uptime_s=now - self._started_at,
                oom_events=self._oom_events,
                dropped_cancelled=self._dropped_cancelled,
                dropped_expired=self._dropped_expired,
                failed_batches=self._failed_batches,
                effective_max_batch=effective_max_batch,
                paused=self._paused,
                preempted=self._preempted,
            )

    # ---- under the lock -------------------------------------------------------------------

    def _observe_wait(self, item: Item, started_at: float) -> None:
        waited = max(0.0, started_at - item.submitted_at)
        metrics.BATCH_WAIT_S.labels(item.priority.name.lower()).observe(waited)
        self._waits[item.priority].append(waited)
        self._wait_count[item.priority] += 1
        self._wait_sum_s[item.priority] += waited
        self._wait_max_s[item.priority] = max(self._wait_max_s[item.priority], waited)

    def _wait_stats(self, priority: Priority) -> WaitStats:
        count = self._wait_count[priority]
        samples = sorted(self._waits[priority])
        if not samples:
            return WaitStats(0, 0.0, 0.0, 0.0, 0.0)

        def pct(q: float) -> float:
            return samples[min(len(samples) - 1, math.ceil(q * len(samples)) - 1)]

        return WaitStats(
            count=count,
            mean_s=self._wait_sum_s[priority] / count,
            p50_s=pct(0.50),
            p99_s=pct(0.99),
            max_s=self._wait_max_s[priority],
        )
