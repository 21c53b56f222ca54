"""When a failed call is made again (:class:`RetryPolicy`), and the deadline and backoff of
one logical call across its attempts (:class:`Retrier`)."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

from voicelane.client.pool import ChannelPool, Lease
from voicelane.client.stats import StreamStats
from voicelane.common.errors import InvalidInputError, RemoteError


@dataclass(frozen=True)
class RetryPolicy:
    """When and how often a failed call is made again.

    ``max_attempts`` counts attempts in a row that brought no new chunk (the first call
    included): a stream that resumes and makes progress starts a fresh budget. The wait
    before retry ``n`` (1-based) is ``min(max_backoff_s, initial_backoff_s *
    multiplier ** (n - 1))``, scaled by a random factor in ``[1 - jitter, 1 + jitter]``.
    ``UNAVAILABLE`` is retried; ``RESOURCE_EXHAUSTED`` (the front's load shedding) only when
    ``retry_resource_exhausted``; nothing else.
    """

    max_attempts: int = 5
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.2
    retry_resource_exhausted: bool = False

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise InvalidInputError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if not 0 <= self.initial_backoff_s <= self.max_backoff_s:
            raise InvalidInputError(
                f"backoff must satisfy 0 <= initial_backoff_s <= max_backoff_s, got "
                f"{self.initial_backoff_s} and {self.max_backoff_s}"
            )
        if self.multiplier < 1:
            raise InvalidInputError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter < 1:
            raise InvalidInputError(f"jitter must be in [0, 1), got {self.jitter}")

    def retryable(self, code: str) -> bool:
        return code == "UNAVAILABLE" or (
            code == "RESOURCE_EXHAUSTED" and self.retry_resource_exhausted
        )

    def backoff_s(self, retry: int, rng: random.Random | None = None) -> float:
        """The wait before retry number ``retry`` (1 for the first retry)."""
        base_s = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** (retry - 1))
        if not self.jitter:
            return base_s
        spread = (rng or random).uniform(-self.jitter, self.jitter)
        return base_s * (1.0 + spread)


DEFAULT_RETRY = RetryPolicy()
"""The policy a client uses unless given another."""


class Retrier:
    """Deadline and backoff of one logical call, shared by its attempts."""

    def __init__(self, policy: RetryPolicy, timeout_s: float | None, stats: StreamStats) -> None:
        self.policy = policy
        self.stats = stats
        self._timeout_s = timeout_s
        self._deadline: float | None = None

    def start(self) -> None:
        """The deadline runs from here (the stream's first use), slot wait included."""
        if self._timeout_s is not None and self._deadline is None:
            self._deadline = time.monotonic() + self._timeout_s

    def remaining_s(self) -> float | None:
        """Seconds left for the next attempt; DEADLINE_EXCEEDED when none are."""
        self.start()
        if self._deadline is None:
            return None
        left_s = self._deadline - time.monotonic()
        if left_s <= 0:
            raise RemoteError("DEADLINE_EXCEEDED", "the call's deadline passed")
        return left_s

    async def pause(self, failure: RemoteError, failures: int) -> None:
        """Sleep before the next attempt after ``failure``, or raise it (its message saying
        why when it could have been retried) if there is none."""
        if not self.policy.retryable(failure.status):
            raise failure
        if failures >= self.policy.max_attempts:
            raise failure.with_message(f"{failure.message} (gave up after {failures} attempts)")
        delay_s = self.policy.backoff_s(failures)
        left_s = self.remaining_s()
        if left_s is not None and delay_s >= left_s:
            raise failure.with_message(f"{failure.message} (the deadline leaves no time to retry)")
        self.stats.backoff_s += delay_s
        await asyncio.sleep(delay_s)

    async def acquire(self, pool: ChannelPool) -> Lease:
        """A pool slot, waiting no longer than the deadline allows."""
        waited_from = time.monotonic()
        try:
            async with asyncio.timeout(self.remaining_s()):
                lease = await pool.acquire()
        except TimeoutError:
            raise RemoteError(
                "DEADLINE_EXCEEDED", "the deadline passed while waiting for a free stream slot"
            ) from None
        self.stats.slot_wait_s = time.monotonic() - waited_from
        return lease
