"""Fixtures shared by every test directory."""

from tests.support.redis import redis_server, redis_url

__all__ = ["redis_server", "redis_url"]
