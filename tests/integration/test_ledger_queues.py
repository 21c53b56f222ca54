"""The render queue's priorities through Celery and kombu's real Redis transport: the ledger
counts every priority's list, the key table knows them, and a worker is served every
tenant's first chunk before anyone's second."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from voicelane.core.batch_lane import RENDER_CHUNK_TASK, configure_celery, send_task
from voicelane.core.engines import render_queue
from voicelane.core.ledger import Ledger
from voicelane.core.ledger.keys import CELERY_QUEUE, FAMILIES
from voicelane.core.ledger.queues import PRIORITY_STEPS, priority_for_rank
from voicelane.core.settings import ServiceSettings

pytestmark = pytest.mark.integration

QUEUE = render_queue("espeak")


@pytest.fixture
def ledger(redis_url: str) -> Iterator[Ledger]:
    ledger = Ledger.from_url(redis_url)
    yield ledger
    ledger.redis.close()


def test_ranks_map_onto_the_pinned_priority_steps() -> None:
    assert [priority_for_rank(rank) for rank in (-1, 0, 1, 2, 3, 50)] == [0, 0, 3, 6, 9, 9]


def test_a_worker_takes_every_tenants_first_chunk_before_anyones_second(
    redis_url: str, ledger: Ledger
) -> None:
    app = Celery("queue-test")
    configure_celery(app, ServiceSettings(redis_url=redis_url))
    assert app.conf.broker_transport_options["priority_steps"] == list(PRIORITY_STEPS)
    sent = [("acme-book", 0, 0), ("acme-book", 1, 1), ("acme-book", 2, 2), ("acme-book", 3, 3)]
    sent += [("other-small", 0, 0)]  # planned while acme's four wait
    for job_id, n, rank in sent:
        send_task(app, RENDER_CHUNK_TASK, job_id, n, queue=QUEUE, priority=priority_for_rank(rank))
    assert ledger.queues.length(QUEUE) == 5  # every priority's list counted
    lists = {key.decode() for key in ledger.redis.scan_iter(match=f"{QUEUE}*")}
    assert len(lists) == len(PRIORITY_STEPS)
    for key in lists:
        assert [f for f in FAMILIES if f.matches(key)] == [CELERY_QUEUE], repr(key)

    taken: list[tuple[str, int]] = []
    with app.connection_for_read() as connection:
        channel: Any = connection.default_channel
        while (message := channel.basic_get(QUEUE, no_ack=True)) is not None:
            args, _kwargs, _embed = message.decode()
            taken.append((args[0], args[1]))
    assert taken == [
        ("acme-book", 0),
        ("other-small", 0),  # ahead of acme's second, though sent after it
        ("acme-book", 1),
        ("acme-book", 2),
        ("acme-book", 3),
    ]
    assert ledger.queues.length(QUEUE) == 0
