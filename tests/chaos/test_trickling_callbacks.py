"""Issue 26 item 5: callbacks to a receiver that trickles its answer must not hold up planning.

Tenant ``acme``'s jobs end and their callbacks go to a receiver that answers one byte at a time,
forever (each byte well within the per-read timeout; ``callback_timeout_s`` is set high here,
so that only where callbacks run is tested — the deadline has its own test in
``tests/integration/test_callbacks.py``). The CPU worker runs with 2 threads, as many as there
are such callbacks. Tenant ``other``'s job must then be planned, rendered and assembled while
both callbacks are still being trickled. Real processes: redis-server, API, a render worker
(espeak), the CPU worker and the callback worker as ``voicelane up`` runs them.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.stack import ACME_KEY, OTHER_KEY, Stack, wait_for
from tests.support.trickle import Trickler
from voicelane.core.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ENV = {
    "VOICELANE_CALLBACK_SIGNING_SECRET": "callback-master-secret-0123456789",
    "VOICELANE_CALLBACK_ALLOW": "127.0.0.1",
    "VOICELANE_CALLBACK_TIMEOUT_S": "600",
    "VOICELANE_CONCURRENCY": "2",
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("trickle")
    redis_server = RedisServer(directory / "redis").start()
    lane = Stack(directory / "stack", redis_server.url, env_overrides=ENV)
    try:
        lane.gpu_worker(concurrency=4)
        lane.cpu_worker()
        lane.callback_worker()
        lane.api()
        yield lane
    except BaseException:
        print(lane.logs())
        raise
    finally:
        lane.stop()
        redis_server.stop()


def submit(lane: Stack, key: str, body: dict[str, str]) -> str:
    with httpx.Client(
        base_url=lane.api_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as client:
        response = client.post("/v1/jobs", json=body)
        assert response.status_code == 202, response.text
        return str(response.json()["id"])


def state(lane: Stack, key: str, job_id: str) -> str:
    with httpx.Client(
        base_url=lane.api_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as client:
        return str(client.get(f"/v1/jobs/{job_id}").json()["state"])


def test_trickling_callbacks_do_not_hold_up_another_tenants_job(stack: Stack) -> None:
    trickler = Trickler(every_s=0.5, forever=True)
    try:
        for n in range(2):
            submit(stack, ACME_KEY, {"text": f"Call me, {n}.", "callback_url": trickler.url()})
        wait_for(lambda: trickler.open >= 2, 120, "both callbacks to be trickled")
        job_id = submit(stack, OTHER_KEY, {"text": "Mine is small."})
        try:
            wait_for(lambda: state(stack, OTHER_KEY, job_id) == "done", 90, "other's job")
        except AssertionError:
            print(stack.logs())
            raise
        assert trickler.open >= 2 and trickler.completed == 0  # still trickling all along
    finally:
        trickler.close()
