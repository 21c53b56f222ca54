"""Redis clients as voicelane makes them: bounded timeouts, one immediate reconnect.

redis-py's default retries a failed command ten times with exponential backoff, timeouts
included: a paused Redis then holds a request for minutes, and a stale pooled connection
(after a Redis restart) costs a second of backoff. voicelane's clients instead retry a
command once, at once, and only after a *connection* error (the pool's connection was
closed under it: reconnect and go on); a timeout is not retried (Redis stopped answering:
the caller answers 503 / UNAVAILABLE now, with a retry hint).
"""

from __future__ import annotations

import redis
import redis.asyncio as aredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

CONNECT_TIMEOUT_S = 5.0


def sync_client(url: str, *, socket_timeout_s: float) -> redis.Redis:
    return redis.Redis.from_url(
        url,
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=min(CONNECT_TIMEOUT_S, socket_timeout_s),
        retry=Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
    )


def async_client(url: str, *, socket_timeout_s: float) -> aredis.Redis:
    return aredis.Redis.from_url(
        url,
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=min(CONNECT_TIMEOUT_S, socket_timeout_s),
        retry=AsyncRetry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,)),
    )
