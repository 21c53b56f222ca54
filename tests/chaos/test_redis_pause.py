"""A paused Redis (SIGSTOP: it accepts connections and answers nothing) must not freeze the
API: health answers at once, readiness within a second, and requests that need Redis get a
503 within a few seconds instead of hanging or a 500. Real processes: redis-server, the API.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.stack import ACME_KEY, Stack, wait_for
from voicelane.core.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

AUTH = {"Authorization": f"Bearer {ACME_KEY}"}


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Stack, RedisServer]]:
    redis_server = RedisServer(tmp_path / "redis").start()
    stack = Stack(tmp_path / "stack", redis_server.url)
    try:
        stack.api()
        yield stack, redis_server
    except BaseException:
        print(stack.logs())
        raise
    finally:
        if redis_server.pid is not None:
            os.kill(redis_server.pid, signal.SIGCONT)
        stack.stop()
        redis_server.stop()


def timed(call: httpx.Client, method: str, path: str, **kw: object) -> tuple[int, float]:
    started = time.monotonic()
    response = call.request(method, path, **kw)  # type: ignore[arg-type]
    return response.status_code, time.monotonic() - started


def test_health_readiness_and_requests_answer_fast_while_redis_is_paused(
    stack: tuple[Stack, RedisServer],
) -> None:
    lane, redis_server = stack
    with httpx.Client(base_url=lane.api_url, headers=AUTH, timeout=30) as client:
        assert client.post("/v1/jobs", json={"text": "Before the pause."}).status_code == 202
        assert redis_server.pid is not None
        os.kill(redis_server.pid, signal.SIGSTOP)
        try:
            status, took_s = timed(client, "GET", "/healthz")
            assert status == 200 and took_s < 1.0
            status, took_s = timed(client, "GET", "/readyz")
            assert status == 503 and took_s < 1.0
            for method, path, body in (
                ("GET", "/v1/jobs", None),
                ("POST", "/v1/jobs", {"text": "During the pause."}),
            ):
                status, took_s = timed(client, method, path, json=body)
                assert status == 503, (method, path, status)
                assert took_s < 8.0, (method, path, took_s)
            # The event loop was never blocked: health stayed instant throughout.
            assert timed(client, "GET", "/healthz")[1] < 1.0
        finally:
            os.kill(redis_server.pid, signal.SIGCONT)

        def ready() -> bool:
            return client.get("/readyz").status_code == 200

        wait_for(ready, 30, "readiness after the pause")
        assert client.post("/v1/jobs", json={"text": "After the pause."}).status_code == 202
