"""The fair feed of the render queue: tenants take turns.

A planned job's chunks wait as ``{job_id}:{n}`` references in their tenant's line; tenants
with waiting chunks form a ring. They join the line in the same atomic write that saves the
plan (:meth:`voicelane.core.ledger.jobs.Jobs.save_plan`), never apart from it. Each engine
has its own lines and ring (its own render queue is fed from them), so a backlog for one
engine never holds up another's workers.
Taking work rotates the ring and takes one reference per tenant per turn, so tenants
alternate whatever their backlog; references of jobs that stopped rendering (cancelled,
failed) are dropped on the way, at no cost. The worker side
(:func:`voicelane.workers.jobs.feed_render_queue`) decides how much to take.

The render queue itself is first in, first out, so the feed also counts each tenant's chunks
in it that no worker has started (``sched:{engine}:queued``): a taken chunk comes with its
*rank*, the tenant's chunks queued ahead of it, which the sender turns into a queue priority
(:func:`voicelane.core.ledger.queues.priority_for_rank`) — a tenant's first queued chunk goes
before another tenant's second — and a tenant with none queued gets one chunk at every take,
even when the queue is at its target. The counts are a hint, not a ledger: a chunk task
lowers its tenant's when it starts (never below 0), and :meth:`FairFeed.forget_queued` drops
them when the queue is found empty, so a count a lost message left behind heals.
"""

from __future__ import annotations

from typing import NamedTuple, cast

import redis

from voicelane.core.ledger.keys import (
    DISPATCHED,
    FEED_LINE,
    FEED_QUEUED,
    FEED_RING,
    FEED_TENANTS,
    JOB,
)
from voicelane.core.ledger.lua import register


class FedChunk(NamedTuple):
    job_id: str
    n: int
    rank: int
    """The tenant's chunks already in the render queue, not started, when this one was taken."""


class FairFeed:
    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._take = register(client, "feed_take")
        self._started = register(client, "feed_started")

    def take(self, count: int, *, engine: str) -> list[FedChunk]:
        """Up to ``count`` chunks waiting for ``engine``, one per tenant in turn (round
        robin), then one more of each tenant with no chunk queued (whatever ``count``); each
        is marked dispatched and counted queued. Chunks of jobs no longer rendering are
        dropped on the way."""
        reply = cast(
            list[bytes | int],
            self._take(
                keys=[FEED_RING.key(engine), FEED_TENANTS.key(engine), FEED_QUEUED.key(engine)],
                args=[count, *FEED_LINE.around(engine), *JOB.around(), *DISPATCHED.around()],
            ),
        )
        taken = []
        for ref, rank in zip(reply[::2], reply[1::2], strict=True):
            job_id, _, n = cast(bytes, ref).decode().rpartition(":")
            taken.append(FedChunk(job_id, int(n), int(rank)))
        return taken

    def started(self, *, engine: str, tenant: str) -> None:
        """One of ``tenant``'s queued chunks for ``engine`` left the queue for a worker."""
        self._started(keys=[FEED_QUEUED.key(engine)], args=[tenant])

    def forget_queued(self, *, engine: str) -> None:
        """Drop every tenant's queued count: the render queue was found empty."""
        self.redis.delete(FEED_QUEUED.key(engine))

    def dispatched(self, job_id: str) -> set[int]:
        """The job's chunks handed to the render queue."""
        return {int(m) for m in cast(set[bytes], self.redis.smembers(DISPATCHED.key(job_id)))}
