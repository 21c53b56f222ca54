"""Chunk leases, fencing tokens and commits.

A worker *leases* a chunk: the lease is a lock (:mod:`~voicelane.core.ledger.locks`) whose
owner is ``{token}|{worker}``, the token the job's next fencing token. It renders the chunk,
stores the audio under a key of that attempt's own (the chunk and its token: no two attempts
ever write one object, whatever a store does with an upload cut short) and *commits* with its
lease. A commit counts only while its lease still holds (fencing), so two workers can never
both commit one chunk; the ``done`` set means a duplicate commit cannot count twice; the
counted commit records its token (:meth:`Chunks.parts`: the parts assembly reads); the commit
that completes the set moves the job to ``assembling`` and is told so — exactly once.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import cast

import redis

from voicelane.core.ledger.keys import (
    ATTEMPTS,
    CHUNK_LEASE,
    CHUNK_PARTS,
    CHUNKS_DONE,
    CHUNKS_STARTED,
    COMMITS,
    FENCE,
    JOB,
)
from voicelane.core.ledger.locks import LIBRARY, Locks, ttl_ms
from voicelane.core.ledger.lua import register
from voicelane.core.ledger.records import text_of


class LeaseStatus(enum.StrEnum):
    ACQUIRED = "acquired"
    DONE = "done"
    """Already committed."""
    BUSY = "busy"
    """Another worker holds the lease."""
    INACTIVE = "inactive"
    """The job is no longer rendering."""


class CommitOutcome(enum.StrEnum):
    COMMITTED = "committed"
    ASSEMBLE = "assemble"
    """This commit completed the job: assemble it (told to one commit only)."""
    FENCED = "fenced"
    """The lease was lost (lapsed, taken over): the commit did not count — whatever became of
    the job since (a late commit is told so even after the job ended)."""
    DUPLICATE = "duplicate"
    INACTIVE = "inactive"
    """The lease held, but the job is no longer rendering (cancelled, failed)."""


@dataclass(frozen=True, slots=True)
class Lease:
    status: LeaseStatus
    token: int = 0
    """The fencing token (0 unless acquired)."""
    owner: str = ""
    """The lease lock's owner, ``{token}|{worker}`` ("" unless acquired): renew, release and
    commit with this lease."""


class Chunks:
    """The chunks of rendering jobs: leases, attempts, commits, and which are left."""

    def __init__(self, client: redis.Redis, locks: Locks) -> None:
        self.redis = client
        self.locks = locks
        self._acquire = register(client, "acquire_chunk", libraries=(LIBRARY,))
        self._commit = register(client, "commit_chunk", libraries=(LIBRARY,))

    def acquire(self, job_id: str, n: int, worker: str, ttl_s: float) -> Lease:
        """Lease chunk ``n`` for ``worker`` (status ``acquired``) unless it is done, leased
        by another worker, or the job is not rendering."""
        keys = [
            JOB.key(job_id),
            CHUNKS_DONE.key(job_id),
            CHUNKS_STARTED.key(job_id),
            CHUNK_LEASE.key(job_id, n),
            FENCE.key(job_id),
        ]
        status, token, owner = self._acquire(keys=keys, args=[n, worker, ttl_ms(ttl_s)])
        return Lease(LeaseStatus(text_of(status) or ""), int(token), text_of(owner) or "")

    def renew(self, job_id: str, n: int, lease: Lease, ttl_s: float) -> bool:
        """Extend the lease to ``ttl_s`` from now; False once it is no longer this one."""
        return self.locks.renew(CHUNK_LEASE.key(job_id, n), lease.owner, ttl_s)

    def release(self, job_id: str, n: int, lease: Lease) -> bool:
        """Give the lease up without committing (the render failed)."""
        return self.locks.release(CHUNK_LEASE.key(job_id, n), lease.owner)

    def commit(self, job_id: str, n: int, lease: Lease, audio_s: float) -> CommitOutcome:
        """Count chunk ``n`` (``audio_s`` of audio) as done, if the lease still holds; the
        lease's token is recorded as the chunk's part (:meth:`parts`)."""
        status, _ = self._commit(
            keys=[
                JOB.key(job_id),
                CHUNKS_DONE.key(job_id),
                CHUNK_LEASE.key(job_id, n),
                COMMITS.key(job_id),
                CHUNK_PARTS.key(job_id),
            ],
            args=[n, lease.owner, repr(float(audio_s)), time.time(), lease.token],
        )
        return CommitOutcome(text_of(status) or "")

    def part(self, job_id: str, n: int) -> int | None:
        """The token of chunk ``n``'s counted commit; None while none counted."""
        token = cast(bytes | None, self.redis.hget(CHUNK_PARTS.key(job_id), str(n)))
        return None if token is None else int(token)

    def parts(self, job_id: str) -> dict[int, int]:
        """Chunk n -> the token of the attempt whose commit counted: the part to assemble.
        A chunk committed before commits recorded it is missing (its part has the old
        key, shared by every attempt)."""
        raw = cast(dict[bytes, bytes], self.redis.hgetall(CHUNK_PARTS.key(job_id)))
        return {int(n): int(token) for n, token in raw.items()}

    def record_attempt(self, job_id: str, n: int) -> int:
        """Count one more attempt at chunk ``n``; returns its attempts so far."""
        return int(self.redis.hincrby(ATTEMPTS.key(job_id), str(n), 1))

    def forgive_attempt(self, job_id: str, n: int) -> int:
        """Take back one attempt at chunk ``n`` (one that failed for want of storage room,
        which is not the chunk's fault); returns its attempts so far, never below 0."""
        attempts = int(self.redis.hincrby(ATTEMPTS.key(job_id), str(n), -1))
        if attempts < 0:
            self.redis.hset(ATTEMPTS.key(job_id), str(n), 0)
            return 0
        return attempts

    def lease_holder(self, job_id: str, n: int) -> str | None:
        """The worker holding chunk ``n``'s lease, if any."""
        held = text_of(cast(bytes | None, self.redis.get(CHUNK_LEASE.key(job_id, n))))
        return held.split("|", 1)[1] if held else None

    def done(self, job_id: str) -> set[int]:
        return _numbers(self.redis, CHUNKS_DONE.key(job_id))

    def unfinished(self, job_id: str, chunks_total: int) -> list[int]:
        """The job's chunks not committed yet."""
        done = self.done(job_id)
        return [n for n in range(chunks_total) if n not in done]

    def orphaned(self, job_id: str) -> list[int]:
        """Chunks a worker started whose lease lapsed without a commit (the worker died)."""
        started = _numbers(self.redis, CHUNKS_STARTED.key(job_id))
        candidates = sorted(started - self.done(job_id))
        if not candidates:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for n in candidates:
            pipe.exists(CHUNK_LEASE.key(job_id, n))
        leased = pipe.execute()
        return [n for n, held in zip(candidates, leased, strict=True) if not held]


def _numbers(client: redis.Redis, key: str) -> set[int]:
    return {int(m) for m in cast(set[bytes], client.smembers(key))}
