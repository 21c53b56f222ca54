"""Chaos on the batch lane: SIGKILL the GPU worker mid-job; restart Redis with jobs queued.

Real redis-server, SeaweedFS's S3 server, real worker and API processes.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import s3_settings
from tests.integration.test_batch_lane import s3_env, wait_final
from tests.support.ledger import commit_log
from tests.support.s3_server import S3Endpoint
from tests.support.stack import Stack, wait_for
from voicelane.core.ledger import Ledger
from voicelane.core.redis_server import RedisServer
from voicelane.core.storage import S3Storage

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# ~150 chunks of about 3 s of audio each.
LONG_TEXT = " ".join(
    f"Paragraph {i} talks about the weather, the harbor and the long road home." for i in range(150)
)


@pytest.fixture
def chaos(
    tmp_path: Path, s3_endpoint: S3Endpoint
) -> Iterator[tuple[Stack, RedisServer, S3Storage]]:
    bucket = f"chaos-{uuid.uuid4().hex[:16]}"
    redis_server = RedisServer(tmp_path / "redis").start()
    env = {**s3_env(s3_endpoint, bucket), "VOICELANE_CHUNK_TARGET_AUDIO_S": "3"}
    lane = Stack(tmp_path / "lane", redis_server.url, env_overrides=env)
    storage = S3Storage(s3_settings(s3_endpoint, bucket))
    try:
        yield lane, redis_server, storage
    finally:
        lane.stop()
        redis_server.stop()


def test_sigkill_of_the_gpu_worker_midway_loses_nothing_and_duplicates_nothing(
    chaos: tuple[Stack, RedisServer, S3Storage],
) -> None:
    lane, redis_server, storage = chaos
    first = lane.gpu_worker("gpu-1", concurrency=2)
    lane.cpu_worker()
    lane.api()
    ledger = Ledger.from_url(redis_server.url)
    with lane.client() as client:
        job_id = client.post("/v1/jobs", json={"text": LONG_TEXT}).json()["id"]
        total: int = wait_for(
            lambda: client.get(f"/v1/jobs/{job_id}").json()["chunks_total"], 30, "the plan"
        )
        assert total >= 100
        wait_for(lambda: ledger.jobs.get(job_id).chunks_done >= total // 2, 120, "half the job")  # type: ignore[union-attr]
        first.kill()
        killed_at = time.monotonic()
        done_at_kill = ledger.jobs.get(job_id).chunks_done  # type: ignore[union-attr]
        assert done_at_kill < total, "the job finished before the kill; make it longer"

        lane.gpu_worker("gpu-2", concurrency=2)
        wait_for(
            lambda: ledger.jobs.get(job_id).chunks_done > done_at_kill,  # type: ignore[union-attr]
            30,
            "the next chunk to be committed after the kill",
        )
        recovery_s = time.monotonic() - killed_at
        job = wait_final(client, job_id, timeout_s=180)
        assert job["state"] == "done", lane.logs()

        # Every chunk committed exactly once, whoever rendered it.
        log = commit_log(ledger.redis, job_id)
        counts = Counter(n for n, _, _ in log)
        assert sorted(counts) == list(range(total))
        assert set(counts.values()) == {1}
        workers = {w for _, _, w in log}
        assert workers == {"gpu-1@test", "gpu-2@test"}

        # The same text, undisturbed, renders to the same duration.
        calm_id = client.post("/v1/jobs", json={"text": LONG_TEXT}).json()["id"]
        calm = wait_final(client, calm_id, timeout_s=180)
    assert calm["state"] == "done"
    # espeak may vary by a few ms per sentence between runs in one process (measured: 30 ms
    # over 715 s); a lost or doubled chunk would change the total by a whole chunk (~3 s).
    assert job["output"]["duration_s"] == pytest.approx(calm["output"]["duration_s"], abs=0.5)
    # No part and no open multipart upload is left behind.
    prefix = f"acme/{job_id}/"
    assert storage.list_keys(prefix) == [  # no part or timings left: the file and subtitles
        f"{prefix}{name}"
        for name in ("audio.ogg", "subtitles.json", "subtitles.srt", "subtitles.vtt")
    ]
    assert storage.incomplete_uploads("acme/") == []
    print(f"\nrecovery: next chunk committed {recovery_s:.2f} s after SIGKILL ({total} chunks)")


def test_redis_restart_with_queued_jobs_loses_none(
    chaos: tuple[Stack, RedisServer, S3Storage],
) -> None:
    lane, redis_server, _ = chaos
    lane.api()  # no workers yet: everything stays queued
    with lane.client() as client:
        ids = [
            client.post("/v1/jobs", json={"text": f"Queued job {i}."}).json()["id"]
            for i in range(4)
        ]
        cancelled = ids.pop()
        assert client.delete(f"/v1/jobs/{cancelled}").json()["state"] == "cancelled"
        assert all(client.get(f"/v1/jobs/{i}").json()["state"] == "queued" for i in ids)

    redis_server.restart()  # SIGTERM: Redis writes its AOF and exits; same dir, same port

    lane.gpu_worker()
    lane.cpu_worker()
    with lane.client() as client:
        finals: list[dict[str, Any]] = [wait_final(client, i, timeout_s=120) for i in ids]
        assert [j["state"] for j in finals] == ["done"] * len(ids), lane.logs()
        assert client.get(f"/v1/jobs/{cancelled}").json()["state"] == "cancelled"
        # The API survived the restart too (its connections reconnect).
        assert httpx.get(f"{lane.api_url}/readyz", timeout=10).status_code == 200
