"""What the ledger keeps of a job, and for how long.

The key table (:class:`~voicelane.core.ledger.keys.Lifetime`) decides: once a job is final,
the ``cleanup`` task drops its bulky and in-flight keys (text, plan, chunk bookkeeping:
:meth:`Retention.drop_data`); ``job_retention_s`` after it ended, the sweep forgets the job
entirely (:meth:`Retention.forget`: record, history, listings). Leases, locks and holds expire
on their own.
"""

from __future__ import annotations

from typing import cast

import redis

from voicelane.core.ledger.keys import (
    FINISHED_JOBS,
    JOB,
    STORED_BYTES,
    TENANT_JOBS,
    Lifetime,
    job_keys,
)


class Retention:
    def __init__(self, client: redis.Redis) -> None:
        self.redis = client

    def drop_data(self, job_id: str) -> None:
        """Drop a final job's bulky keys (text, plan, chunk bookkeeping)."""
        self.redis.delete(*job_keys(job_id, Lifetime.CLEANUP))

    def expired(self, finished_before: float, limit: int) -> list[str]:
        """Final jobs that ended before ``finished_before`` (unix s), oldest first."""
        ids = cast(
            list[bytes],
            self.redis.zrangebyscore(
                FINISHED_JOBS.key(), "-inf", finished_before, start=0, num=limit
            ),
        )
        return [i.decode() for i in ids]

    def forget(self, job_id: str, tenant: str) -> None:
        """Forget a final job entirely: its record, bookkeeping and listings; a done job's
        output bytes leave its tenant's stored bytes (never below 0: outputs finished before
        the counter existed were never added)."""
        state, size = cast(
            list[bytes | None], self.redis.hmget(JOB.key(job_id), ["state", "size_bytes"])
        )
        size_bytes = int(size or 0) if state == b"done" else 0
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(*job_keys(job_id, Lifetime.CLEANUP, Lifetime.RETENTION))
        pipe.zrem(TENANT_JOBS.key(tenant), job_id)
        pipe.zrem(FINISHED_JOBS.key(), job_id)
        if size_bytes > 0:
            pipe.decrby(STORED_BYTES.key(tenant), size_bytes)
        answers = pipe.execute()
        if size_bytes > 0 and int(answers[-1]) <= 0:
            self.redis.delete(STORED_BYTES.key(tenant))
