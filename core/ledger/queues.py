"""Celery's queues, as the ledger sees them: their lengths (the broker's lists live in the
same Redis; Celery writes them, :data:`~voicelane.core.ledger.keys.CELERY_QUEUE`).

kombu's Redis transport keeps a queue's messages of priority ``p`` in the list
``{queue}\\x06\\x16{p}`` (``{queue}`` for 0) and its consumers take from the lists in step
order: priority 0 first (kombu's Redis priorities run the other way from AMQP's). The steps are
pinned in the broker's transport options (:func:`voicelane.core.batch_lane.configure_celery`)
to :data:`PRIORITY_STEPS`; the render queue uses them to put a tenant's first waiting chunk
ahead of another tenant's second (:func:`priority_for_rank`).
"""

from __future__ import annotations

from typing import cast

import redis

from voicelane.core.ledger.keys import CELERY_QUEUE

PRIORITY_STEPS = (0, 3, 6, 9)
"""kombu's Redis priority steps, first served first."""
PRIORITY_SEPARATOR = "\x06\x16"
"""kombu's separator between a queue's name and its priority (``Channel.sep``)."""


def priority_key(queue: str, priority: int) -> str:
    """The list holding ``queue``'s messages of ``priority`` (one of :data:`PRIORITY_STEPS`)."""
    key = CELERY_QUEUE.key(queue)
    return f"{key}{PRIORITY_SEPARATOR}{priority}" if priority else key


def priority_for_rank(rank: int) -> int:
    """The priority of a message with ``rank`` messages of the same tenant waiting ahead of
    it: its first goes with everyone's first, its second after every tenant's first..."""
    return PRIORITY_STEPS[min(max(rank, 0), len(PRIORITY_STEPS) - 1)]


class CeleryQueues:
    def __init__(self, client: redis.Redis) -> None:
        self.redis = client

    def length(self, queue: str) -> int:
        """Messages waiting in a Celery queue, every priority."""
        with self.redis.pipeline(transaction=False) as pipe:
            for priority in PRIORITY_STEPS:
                pipe.llen(priority_key(queue, priority))
            return sum(int(n) for n in cast(list[int], pipe.execute()))
