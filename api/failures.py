"""Failures of the services behind the fronts, as the errors clients see.

Redis errors become :class:`~voicelane.common.errors.UnavailableError` (503 / UNAVAILABLE:
unreachable, timed out — retry shortly) or :class:`~voicelane.common.errors.StoreFullError` (503 /
RESOURCE_EXHAUSTED: Redis is at its ``maxmemory`` and refuses new writes; nothing is evicted). Every
front maps them the same way, here; anything else stays an internal error.
"""

from __future__ import annotations

import redis

from voicelane.common.errors import StoreFullError, UnavailableError, VoicelaneError

UNREACHABLE_RETRY_S = 1.0
FULL_RETRY_S = 30.0


def service_error(error: BaseException) -> VoicelaneError | None:
    """The client-facing error for a failure of a service behind the front, or None."""
    if isinstance(error, redis.ResponseError) and str(error).startswith("OOM"):
        return StoreFullError(
            "the service is at its memory limit and takes no new work; retry later",
            retry_after_s=FULL_RETRY_S,
        )
    if isinstance(error, redis.ConnectionError | redis.TimeoutError):
        return UnavailableError(
            "the service's store (Redis) is unreachable; retry shortly",
            retry_after_s=UNREACHABLE_RETRY_S,
        )
    return None
