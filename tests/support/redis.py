"""A real redis-server for tests: one per session, flushed between tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from voicelane.core.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """Started by the test session itself (AOF on, noeviction); a missing redis-server is an
    error, never a skip: ``make test`` installs it."""
    server = RedisServer(Path(tmp_path_factory.mktemp("redis"))).start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    yield redis_server.url


def fill_to_maxmemory(client: redis.Redis, prefix: str = "test:filler:") -> None:
    """Write until Redis (at its ``maxmemory``, ``noeviction``) refuses even a small write:
    big values first, then small ones (a refused big write's query buffer counted too, so
    memory dips below the limit once it is freed)."""
    index = 0
    for size_bytes in (64 * 1024, 1024, 16):
        for _ in range(100_000):
            index += 1
            try:
                client.set(f"{prefix}{index}", b"x" * size_bytes)
            except redis.exceptions.OutOfMemoryError:
                break
        else:
            raise AssertionError("Redis never filled up")
