"""Static batches: the scheduler loop for engines that render a batch in one call (espeak).

The queue decides when a batch is due and what is in it (:meth:`WorkQueue.next_batch`);
this loop runs it: whole (``Engine.synthesize_timed``) or streamed
(``Engine.synthesize_stream_timed``, chunks delivered as each step of the batch comes), with
the word events the engine reports, checks the engine returned one output per
input, and applies the failure policy of :mod:`voicelane.workers.batching.backoff`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from voicelane.common.errors import (
    CancelledError,
    EngineOutOfMemoryError,
    EngineOutputMismatchError,
)
from voicelane.workers.batching.backoff import OomBackoff, split_for_retry, typed_engine_error
from voicelane.workers.batching.items import Item
from voicelane.workers.batching.lifecycle import EngineLife
from voicelane.workers.batching.metrics import BatchMetrics
from voicelane.workers.batching.work_queue import Boundary, WorkQueue
from voicelane.workers.engines.base import Engine, TimedAudio

log = logging.getLogger(__name__)


class StaticLoop:
    """Runs static batches on the scheduler thread until the queue says stop."""

    def __init__(
        self,
        engine: Engine,
        queue: WorkQueue,
        *,
        life: EngineLife,
        backoff: OomBackoff,
        metrics: BatchMetrics,
        clock: Callable[[], float],
    ) -> None:
        self._engine = engine
        self._life = life
        self._queue = queue
        self._backoff = backoff
        self._metrics = metrics
        self._clock = clock

    def run(self) -> None:
        queue, life = self._queue, self._life
        while (batch := queue.next_batch(loaded=life.loaded)) is not Boundary.STOP:
            if isinstance(batch, list):
                self._execute(batch)
            elif batch is Boundary.RELOAD:
                life.reload(queue.take_reloads())
            elif batch is Boundary.UNLOAD:
                life.unload_idle(queue.idle_for_s())
            elif batch is Boundary.LOAD:
                life.load_on_demand(queue.drain)

    def _execute(self, candidates: list[Item]) -> None:
        started_at = self._clock()
        batch = [item for item in candidates if item.start()]
        if len(batch) < len(candidates):
            for item in candidates:
                if item not in batch:
                    item.fail(CancelledError("cancelled before it ran"))
            self._metrics.dropped(cancelled=len(candidates) - len(batch))
        if not batch:
            return
        self._metrics.batch_started(batch, started_at)
        try:
            if any(item.stream is not None for item in batch):
                self._run_streamed(batch)
            else:
                self._run_whole(batch)
        except EngineOutOfMemoryError as error:
            self._metrics.out_of_memory()
            self._backoff.out_of_memory(len(batch))
            if len(batch) == 1:
                batch[0].fail(error)
            elif retry := split_for_retry(batch, error):
                self._queue.requeue_front(retry)
        except Exception as error:
            log.exception("batch of %d failed on engine %s", len(batch), self._engine.name)
            self._metrics.batch_failed()
            self._backoff.failed()
            typed = typed_engine_error(self._engine.name, error)
            for item in batch:
                item.fail(typed)
        else:
            audio_s = sum(item.samples for item in batch) / self._engine.sample_rate_hz
            self._metrics.audio_made(audio_s, self._clock() - started_at)
            self._backoff.succeeded()
        finally:
            self._metrics.busy(self._clock() - started_at)

    def _check_count(self, outputs: list[TimedAudio], expected: int) -> None:
        if len(outputs) != expected:
            raise EngineOutputMismatchError(
                f"engine {self._engine.name} returned {len(outputs)} outputs for {expected} inputs"
            )

    def _run_whole(self, batch: list[Item]) -> None:
        outputs = self._engine.synthesize_timed([item.utterance for item in batch])
        self._check_count(outputs, len(batch))
        for item, timed in zip(batch, outputs, strict=True):
            item.deliver(np.asarray(timed.pcm, dtype=np.float32), timed.words)
            item.complete()

    def _run_streamed(self, batch: list[Item]) -> None:
        steps = self._engine.synthesize_stream_timed([item.utterance for item in batch])
        live = list(batch)
        try:
            for step in steps:
                self._check_count(step, len(batch))
                for item, timed in zip(batch, step, strict=True):
                    if item in live:
                        item.deliver(np.asarray(timed.pcm, dtype=np.float32), timed.words)
                now = self._clock()
                live = [item for item in live if not item.gone(now)]
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
            else:
                item.end_gone()
