"""Celery's queues, as the ledger sees them: their lengths (the broker's lists live in the
same Redis; Celery writes them, :data:`~voicelane.core.ledger.keys.CELERY_QUEUE`)."""

from __future__ import annotations

import redis

from voicelane.core.ledger.keys import CELERY_QUEUE


class CeleryQueues:
    def __init__(self, client: redis.Redis) -> None:
        self.redis = client

    def length(self, queue: str) -> int:
        """Messages waiting in a Celery queue."""
        return int(self.redis.llen(CELERY_QUEUE.key(queue)))
