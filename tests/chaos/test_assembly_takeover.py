"""A CPU worker SIGKILLed while it assembles a job's file: another one takes over within
seconds (the assembly lease lapses), not after a long lock (it was 600 s). Real processes:
redis-server, the API, a GPU worker and two CPU workers (espeak, local storage)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.ledger import assembly_holder
from tests.support.stack import ACME_KEY, Stack, wait_for
from voicelane.core.ledger import Ledger
from voicelane.core.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

AUTH = {"Authorization": f"Bearer {ACME_KEY}"}
BOOK = " ".join(
    f"Sentence number {i} of a chapter that takes a while to encode." for i in range(500)
)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Stack, RedisServer]]:
    redis_server = RedisServer(tmp_path / "redis").start()
    lane = Stack(tmp_path / "stack", redis_server.url)
    try:
        lane.gpu_worker()
        lane.cpu_worker("cpu-a")
        lane.cpu_worker("cpu-b")
        lane.api()
        yield lane, redis_server
    except BaseException:
        print(lane.logs())
        raise
    finally:
        lane.stop()
        redis_server.stop()


def test_a_killed_assembler_is_replaced_within_seconds(stack: tuple[Stack, RedisServer]) -> None:
    lane, redis_server = stack
    ledger = Ledger.from_url(redis_server.url)
    with httpx.Client(base_url=lane.api_url, headers=AUTH, timeout=30) as client:
        response = client.post("/v1/jobs", json={"text": BOOK, "format": "flac"})
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        holder = wait_for(
            lambda: assembly_holder(ledger.redis, job_id), 120, "the assembly to start"
        )
        victim = next(p for p in lane.procs if holder.startswith(f"{p.name}@"))
        victim.kill()
        killed_at = time.monotonic()

        def final() -> str | None:
            state = str(client.get(f"/v1/jobs/{job_id}").json()["state"])
            return state if state in ("done", "failed", "cancelled") else None

        state = wait_for(final, 120, "the job to finish after the kill")
        took_s = time.monotonic() - killed_at
        job = client.get(f"/v1/jobs/{job_id}").json()
    print(f"assembler {holder} killed; job {state} {took_s:.1f} s later")
    assert state == "done", job
    assert took_s < 60, took_s  # lease (3 s in tests) + reconcile turn + a fresh assembly
    assert assembly_holder(ledger.redis, job_id) is None
