"""The ledger's one lock mechanism, and its two plain uses.

A lock is a string key holding its owner, with a TTL: taken only when free, renewed and
released only by its owner, lapsing on its own when the owner dies. ``lock.lua`` is its code
for every script that takes, renews or drops one — this class's own scripts, and the chunk
lease (:mod:`~voicelane.core.ledger.chunks`: owner ``{token}|{worker}``), the assembly lock
(:mod:`~voicelane.core.ledger.assembly`) and the commits and finish that drop them. The plain
uses here:

* :meth:`Locks.reconciler_turn`: one CPU worker's reconciler pass per interval (never
  released; it lapses at the next turn);
* :meth:`Locks.requeue_once`: the reconciler's hold on re-enqueueing one job's work while its
  first message may still wait in the queue.
"""

from __future__ import annotations

import math

import redis

from voicelane.core.ledger.keys import RECONCILER_LOCK, REQUEUE_HOLD
from voicelane.core.ledger.lua import register

LIBRARY = "lock"
"""The Lua library of the lock (``lock.lua``), for scripts that take or drop one."""


def ttl_ms(ttl_s: float) -> int:
    """A TTL in whole milliseconds, at least 1 (Redis refuses 0)."""
    return max(1, math.ceil(ttl_s * 1000))


class Locks:
    """Take, renew and release locks by key (the key from :mod:`~voicelane.core.ledger.keys`)."""

    def __init__(self, client: redis.Redis) -> None:
        libraries = (LIBRARY,)
        self._take = register(client, "lock_take", libraries=libraries)
        self._renew = register(client, "lock_renew", libraries=libraries)
        self._drop = register(client, "lock_drop", libraries=libraries)

    def acquire(self, key: str, owner: str, ttl_s: float) -> bool:
        """Take the lock for ``owner`` if nobody holds it."""
        return bool(self._take(keys=[key], args=[owner, ttl_ms(ttl_s)]))

    def renew(self, key: str, owner: str, ttl_s: float) -> bool:
        """Extend ``owner``'s lock to ``ttl_s`` from now; False if it is not theirs (lapsed)."""
        return bool(self._renew(keys=[key], args=[owner, ttl_ms(ttl_s)]))

    def release(self, key: str, owner: str) -> bool:
        """Release ``owner``'s lock; False if it is not theirs (lapsed, taken over)."""
        return bool(self._drop(keys=[key], args=[owner]))

    def reconciler_turn(self, owner: str, interval_s: float) -> bool:
        """True for one caller per ``interval_s``: that one runs the reconciler pass."""
        return self.acquire(RECONCILER_LOCK.key(), owner, interval_s)

    def requeue_once(self, job_id: str, what: str, hold_s: float) -> bool:
        """True at most once per ``hold_s`` for the job's ``what`` (``plan``, ``assemble``,
        ``chunk:{n}``): stops the reconciler from re-enqueueing the same work while the first
        re-enqueued message still waits."""
        return self.acquire(REQUEUE_HOLD.key(job_id, what), "1", hold_s)
