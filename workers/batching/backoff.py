"""What the batcher does when the engine fails, for the static loop and the step loop alike.

* Out of memory: the batch's (or step's) capacity halves, below the size that failed
  (64 → 32 → 16 …, never below 1); a single item that still does not fit fails alone and
  says nothing about how many others fit, so it leaves the capacity as it is. Capacity
  doubles back (up to ``max_batch``) after ``grow_after_successes`` successes in a row — whole
  batches for the static loop, completed rows for the step loop. Items that already streamed
  audio fail (their audio cannot be sent twice); the others go back to the front of their
  queues, nothing of them kept (:func:`split_for_retry`).
* Any other failure: the engine's own typed error, or an
  :class:`~voicelane.common.errors.EngineError` naming the failure (:func:`typed_engine_error`),
  on every item of the batch; the success run starts again.
"""

from __future__ import annotations

import logging

from voicelane.common.errors import EngineError, EngineOutOfMemoryError, VoicelaneError
from voicelane.workers.batching.items import Item

log = logging.getLogger(__name__)


class OomBackoff:
    """The effective ``max_batch`` of one batcher.

    Changed only on the scheduler thread; :attr:`capacity` may be read from any thread (an
    int: a reader sees the old or the new value)."""

    def __init__(self, max_batch: int, grow_after_successes: int) -> None:
        self.max_batch = max_batch
        self.capacity = max_batch
        self._grow_after = grow_after_successes
        self._successes = 0

    def out_of_memory(self, size: int) -> int:
        """A batch (or step) of ``size`` items ran out of memory: the capacity now."""
        self._successes = 0
        if size > 1:
            self.capacity = max(1, min(self.capacity, size) // 2)
        log.warning("out of memory on %d items; max_batch is now %d", size, self.capacity)
        return self.capacity

    def failed(self) -> None:
        """Another failure: the run of successes starts again."""
        self._successes = 0

    def succeeded(self) -> None:
        """One success; after enough in a row, the capacity doubles back."""
        self._successes += 1
        if self.capacity < self.max_batch and self._successes >= self._grow_after:
            self.capacity = min(self.max_batch, self.capacity * 2)
            self._successes = 0
            log.info("max_batch grows back to %d", self.capacity)


def typed_engine_error(engine_name: str, error: Exception) -> VoicelaneError:
    """The engine's own typed error, or an :class:`EngineError` naming the failure."""
    if isinstance(error, VoicelaneError):
        return error
    return EngineError(f"engine {engine_name} failed: {type(error).__name__}: {error}")


def split_for_retry(items: list[Item], error: EngineOutOfMemoryError) -> list[Item]:
    """After an out-of-memory: fail the items that already streamed audio; reset the others
    and return them, to go back to the front of their queues."""
    retry = []
    for item in items:
        if item.delivered:
            item.fail(error)
        else:
            item.reset()
            retry.append(item)
    return retry
