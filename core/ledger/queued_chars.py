"""The tenants' queued-characters quota: characters of a tenant's unfinished jobs, together.

A job created under the quota reserves its characters (:meth:`QueuedChars.reserve`, atomic
against the limit) and records what it holds in its ``queued_chars`` field; it gives them back
when it ends, in the same script as its final state (``ending.lua``). The other tenant limits
live beside the state they bound: the request rate in :mod:`voicelane.core.quotas`, streams in
the real-time lane.
"""

from __future__ import annotations

import redis

from voicelane.core.ledger.keys import QUEUED_CHARS
from voicelane.core.ledger.lua import register

RETRY_S = 60.0
"""The retry hint of a submission refused for this quota (jobs take about this long to move
on; there is no exact time to give)."""


class QueuedChars:
    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._reserve = register(client, "reserve_chars")

    def reserve(self, tenant: str, characters: int, limit: int) -> bool:
        """Add ``characters`` to the tenant's count unless that would pass ``limit``."""
        return bool(self._reserve(keys=[QUEUED_CHARS.key(tenant)], args=[characters, limit]))

    def give_back(self, tenant: str, characters: int) -> None:
        """Undo a reservation whose job was never written."""
        self.redis.decrby(QUEUED_CHARS.key(tenant), characters)
