"""What the workers' engine accepts, as the fronts see it: its published capabilities.

GPU workers publish their engine's :class:`~voicelane.core.rules.EngineCapabilities` (voices, speed
range) in Redis (:meth:`voicelane.core.lane.worker.RealtimeWorkerClient.publish_capabilities`);
the fronts read them here, cached for ``ttl_s``, and check every request against them
(:mod:`voicelane.core.rules`). Before any worker of the ``espeak`` engine ran, its capabilities are
computed locally (espeak ships with the package and loads in milliseconds); for any other
engine a front cannot know them until a worker published them, and answers UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import time

from voicelane.common.errors import UnavailableError
from voicelane.core.lane.front import RealtimeClient
from voicelane.core.rules import EngineCapabilities

ESPEAK = "espeak"
DEFAULT_TTL_S = 10.0


class EngineRegistry:
    """The capabilities of one engine, read from Redis and cached for ``ttl_s``."""

    def __init__(self, lane: RealtimeClient, engine: str, *, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.lane = lane
        self.engine = engine
        self.ttl_s = ttl_s
        self._cached: tuple[float, EngineCapabilities] | None = None
        self._local: EngineCapabilities | None = None
        self._lock = asyncio.Lock()

    async def capabilities(self) -> EngineCapabilities:
        """The engine's capabilities; :class:`UnavailableError` if nobody can tell yet."""
        cached = self._cached
        if cached is not None and time.monotonic() - cached[0] < self.ttl_s:
            return cached[1]
        async with self._lock:
            cached = self._cached
            if cached is not None and time.monotonic() - cached[0] < self.ttl_s:
                return cached[1]
            capabilities = await self._load()
            self._cached = (time.monotonic(), capabilities)
            return capabilities

    async def _load(self) -> EngineCapabilities:
        try:
            published = await self.lane.capabilities(self.engine)
        except ValueError:
            raise UnavailableError(
                f"the published capabilities of the {self.engine} engine are unreadable"
            ) from None
        if published is not None:
            return published
        if self.engine == ESPEAK:
            if self._local is None:
                self._local = await asyncio.to_thread(_espeak_capabilities)
            return self._local
        raise UnavailableError(f"no {self.engine} worker has published its voices yet")


def _espeak_capabilities() -> EngineCapabilities:
    from voicelane.workers.engines import create_engine

    return create_engine(ESPEAK).capabilities()
