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
"""

from __future__ import annotations

from typing import cast

import redis

from voicelane.core.ledger.keys import DISPATCHED, FEED_LINE, FEED_RING, FEED_TENANTS, JOB
from voicelane.core.ledger.lua import register


class FairFeed:
    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._take = register(client, "feed_take")

    def take(self, count: int, *, engine: str) -> list[tuple[str, int]]:
        """Up to ``count`` chunks waiting for ``engine``, one per tenant in turn (round
        robin); each is marked dispatched. Chunks of jobs no longer rendering are dropped on
        the way."""
        refs = cast(
            list[bytes],
            self._take(
                keys=[FEED_RING.key(engine), FEED_TENANTS.key(engine)],
                args=[count, *FEED_LINE.around(engine), *JOB.around(), *DISPATCHED.around()],
            ),
        )
        taken = []
        for ref in refs:
            job_id, _, n = ref.decode().rpartition(":")
            taken.append((job_id, int(n)))
        return taken

    def dispatched(self, job_id: str) -> set[int]:
        """The job's chunks handed to the render queue."""
        return {int(m) for m in cast(set[bytes], self.redis.smembers(DISPATCHED.key(job_id)))}
