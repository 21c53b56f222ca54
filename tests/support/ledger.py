"""Raw reads of the ledger's keys for tests (and the soak benchmark): what production code
never needs to read, found through the key table (:mod:`voicelane.core.ledger.keys`)."""

from __future__ import annotations

from typing import cast

import redis

from voicelane.core.ledger.keys import ASSEMBLY_LOCK, COMMITS, FEED_LINE, QUEUED_CHARS


def commit_log(client: redis.Redis, job_id: str) -> list[tuple[int, int, str]]:
    """Every counted commit of the job: (chunk, fencing token, worker), in commit order."""
    log: list[tuple[int, int, str]] = []
    for entry in cast(list[bytes], client.lrange(COMMITS.key(job_id), 0, -1)):
        n, token, worker = entry.decode().split("|", 2)
        log.append((int(n), int(token), worker))
    return log


def assembly_holder(client: redis.Redis, job_id: str) -> str | None:
    """The worker holding the job's assembly lock now, if any."""
    held = cast(bytes | None, client.get(ASSEMBLY_LOCK.key(job_id)))
    return held.decode() if held is not None else None


def waiting_chunks(client: redis.Redis, tenant: str, engine: str = "espeak") -> int:
    """Chunks of the tenant's jobs waiting their turn in the fair feed of ``engine``."""
    return int(client.llen(FEED_LINE.key(engine, tenant)))


def queued_chars(client: redis.Redis, tenant: str) -> int:
    """Characters the tenant's unfinished jobs hold of its quota."""
    return int(cast(bytes | None, client.get(QUEUED_CHARS.key(tenant))) or 0)
