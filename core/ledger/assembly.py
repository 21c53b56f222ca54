"""The assembly lock, and the job's last transition: assembling → done.

Assembly is locked like a chunk is leased (:mod:`~voicelane.core.ledger.locks`): a short lock
renewed while the file is built, so a dead assembler's job is taken over within seconds; only
the lock's owner may finish the job, in the same script that drops the lock.
"""

from __future__ import annotations

import enum
import time

import redis

from voicelane.core.ledger.ending import ENDING, ending_args, ending_keys
from voicelane.core.ledger.keys import ASSEMBLY_LOCK, JOB, STORED_BYTES
from voicelane.core.ledger.locks import LIBRARY, Locks, ttl_ms
from voicelane.core.ledger.lua import register
from voicelane.core.ledger.records import text_of


class FinishOutcome(enum.StrEnum):
    DONE = "done"
    INACTIVE = "inactive"
    """Cancelled or failed meanwhile: the file must not outlive the job."""
    FENCED = "fenced"
    """The lock lapsed and another assembler may be at it: leave its file alone."""


class Assembly:
    def __init__(self, client: redis.Redis, locks: Locks) -> None:
        self.redis = client
        self.locks = locks
        self._acquire = register(client, "acquire_assembly", libraries=(LIBRARY,))
        self._finish = register(client, "finish_job", libraries=(LIBRARY, ENDING))

    def acquire(self, job_id: str, owner: str, ttl_s: float) -> bool:
        """Lock the job's assembly (it must be ``assembling`` and nobody else at it)."""
        keys = [JOB.key(job_id), ASSEMBLY_LOCK.key(job_id)]
        return bool(self._acquire(keys=keys, args=[owner, ttl_ms(ttl_s)]))

    def renew(self, job_id: str, owner: str, ttl_s: float) -> bool:
        return self.locks.renew(ASSEMBLY_LOCK.key(job_id), owner, ttl_s)

    def release(self, job_id: str, owner: str) -> bool:
        return self.locks.release(ASSEMBLY_LOCK.key(job_id), owner)

    def orphaned(self, job_id: str) -> bool:
        """An assembler started and its lock lapsed without finishing (it died)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(JOB.key(job_id), "assembly_started")
        pipe.exists(ASSEMBLY_LOCK.key(job_id))
        started, locked = pipe.execute()
        return started is not None and not locked

    def finish(
        self,
        job_id: str,
        *,
        owner: str,
        key: str,
        size_bytes: int,
        duration_s: float,
        sha256: str,
    ) -> FinishOutcome:
        """assembling → done with the uploaded file (``key``), for the lock's owner only."""
        outcome = self._finish(
            keys=[*ending_keys(job_id), ASSEMBLY_LOCK.key(job_id)],
            args=[
                job_id,
                time.time(),
                key,
                size_bytes,
                duration_s,
                sha256,
                owner,
                *ending_args(),
                *STORED_BYTES.around(),
            ],
        )
        return FinishOutcome(text_of(outcome) or "")
