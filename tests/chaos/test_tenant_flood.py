"""One tenant floods the service; another tenant's small job and live stream still go through.

Tenant ``acme`` holds all the work its quotas allow for the whole test (books and streams,
:class:`tests.support.flood.Flood`); its excess is refused with retry hints, and what it is
allowed waits in its own line of the fair render feed. Tenant ``other``'s small job must then
finish while ``acme``'s books are still far from done (it did not wait behind them), and its
live stream must complete. (How long they take against an idle service is measured, not
asserted: ``bench/flood.py``.) Real processes: redis-server, API, gRPC front, a GPU and a CPU
worker (espeak).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.flood import LIVE_TEXT, QUOTAS, SMALL_JOB, Flood, job_seconds, stream_seconds
from tests.support.stack import ACME_KEY, OTHER_KEY, Stack
from voicelane.core.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("flood")
    redis_server = RedisServer(directory / "redis").start()
    lane = Stack(directory / "stack", redis_server.url, env_overrides=QUOTAS)
    try:
        lane.gpu_worker()
        lane.cpu_worker()
        lane.grpc()
        lane.api()
        lane.wait_realtime_workers()
        yield lane
    except BaseException:
        print(lane.logs())
        raise
    finally:
        lane.stop()
        redis_server.stop()


def unfinished_chunks(lane: Stack) -> int:
    """Chunks of ``acme``'s jobs not rendered yet."""
    with httpx.Client(
        base_url=lane.api_url, headers={"Authorization": f"Bearer {ACME_KEY}"}, timeout=30
    ) as client:
        jobs = client.get("/v1/jobs", params={"limit": 100}).json()["jobs"]
    return sum(j["chunks_total"] - j["chunks_done"] for j in jobs if j["state"] == "rendering")


def test_a_flooding_tenant_does_not_hold_up_another_tenants_job_and_stream(
    stack: Stack,
) -> None:
    with Flood(stack) as flood:
        time.sleep(5)  # the flood fills every queue it is allowed to
        backlog_before = unfinished_chunks(stack)
        job_s = job_seconds(stack, OTHER_KEY, SMALL_JOB)
        backlog_after = unfinished_chunks(stack)
        stream_s = asyncio.run(stream_seconds(stack, OTHER_KEY, LIVE_TEXT))
    print(
        f"other's job took {job_s:.2f} s with acme's backlog at {backlog_before} → "
        f"{backlog_after} chunks; its stream {stream_s:.2f} s; flood {dict(flood.outcomes)}"
    )
    assert flood.outcomes["job 202"] > 0 and flood.outcomes["job 429"] > 0  # a real flood,
    assert flood.outcomes["stream RESOURCE_EXHAUSTED"] > 0  # its excess refused with hints
    # The small job went between acme's chunks: most of acme's backlog is still waiting.
    assert backlog_before > 100
    assert backlog_after > backlog_before / 2, (backlog_before, backlog_after)
