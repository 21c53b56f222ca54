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
