"""The job ledger: the batch lane's state in Redis (AOF on), decided atomically with Lua.

One module per concern, each a small class over one Redis client; :class:`Ledger` holds one
of each, so a process passes one object around:

===================  =====================================================================
``ledger.jobs``      the job record and its state machine (:mod:`.jobs`)
``ledger.chunks``    chunk leases, fencing tokens, attempts, commits (:mod:`.chunks`)
``ledger.assembly``  the assembly lock and assembling → done (:mod:`.assembly`)
``ledger.feed``      the fair feed of the render queue: tenants take turns (:mod:`.feed`)
``ledger.locks``     the one lock mechanism; the reconciler's turn and holds (:mod:`.locks`)
``ledger.retention`` cleanup of a final job's data, and forgetting old jobs (:mod:`.retention`)
``ledger.queues``    Celery's queue lengths (:mod:`.queues`)
``ledger.lexicons``  the tenants' pronunciation lexicons and their defaults (:mod:`.lexicons`)
``ledger.voices``    the tenants' voices and their reference clips (:mod:`.voices`)
===================  =====================================================================

The tenants' queued-characters quota is :mod:`.queued_chars` (used by ``jobs.create``); every
Redis key is built from the table in :mod:`.keys`; the Lua scripts are the ``.lua`` files
beside these modules (:mod:`.lua`); the records returned are :mod:`.records`' dataclasses —
how the API shows a job is :mod:`voicelane.core.job_view`'s.
"""

from __future__ import annotations

import redis

from voicelane.core.ledger.assembly import Assembly, FinishOutcome
from voicelane.core.ledger.chunks import Chunks, CommitOutcome, Lease, LeaseStatus
from voicelane.core.ledger.feed import FairFeed
from voicelane.core.ledger.jobs import Jobs
from voicelane.core.ledger.lexicons import Lexicons
from voicelane.core.ledger.locks import Locks
from voicelane.core.ledger.queues import CeleryQueues
from voicelane.core.ledger.records import (
    BookInfo,
    ChapterInfo,
    ChunkPlan,
    Job,
    JobOptions,
    JobState,
)
from voicelane.core.ledger.retention import Retention
from voicelane.core.ledger.voices import Voices
from voicelane.core.redis_clients import sync_client
from voicelane.core.redis_target import RedisTarget

__all__ = [
    "BookInfo",
    "ChapterInfo",
    "ChunkPlan",
    "CommitOutcome",
    "FinishOutcome",
    "Job",
    "JobOptions",
    "JobState",
    "Lease",
    "LeaseStatus",
    "Ledger",
]


class Ledger:
    """One of each part of the ledger on one Redis client. Safe to share between threads
    (redis-py pools connections)."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self.locks = Locks(client)
        self.jobs = Jobs(client)
        self.chunks = Chunks(client, self.locks)
        self.assembly = Assembly(client, self.locks)
        self.feed = FairFeed(client)
        self.retention = Retention(client)
        self.queues = CeleryQueues(client)
        self.lexicons = Lexicons(client)
        self.voices = Voices(client)

    @classmethod
    def from_url(cls, url: str | RedisTarget, *, socket_timeout_s: float = 10.0) -> Ledger:
        """A ledger on its own connection pool. A front passes a short ``socket_timeout_s``:
        a paused Redis then fails its requests fast (503) instead of holding them."""
        return cls(sync_client(url, socket_timeout_s=socket_timeout_s))
