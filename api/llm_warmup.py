"""The LLM's warm-up: the model loaded before the first user asks (``VOICELANE_LLM__PRELOAD``).

Ollama loads a model on its first request (seconds for a 7B model); :class:`Warmup` sends the
request that loads it (:meth:`LlmBridge.preload`: Ollama's empty request, or an
OpenAI-compatible server's model check and one-token reply) when the front starts, retrying
every few seconds while the server is not there yet. Readiness (``/readyz``, the gRPC health
service) waits for it when preloading is on; with it off the lane is ready at once and the
first chat pays the load.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from voicelane.api.llm import LlmBridge

log = logging.getLogger(__name__)

RETRY_S = 2.0


class Warmup:
    """Preloads the bridge's model once, in the background; :attr:`ready` when done."""

    def __init__(self, bridge: LlmBridge, *, retry_s: float = RETRY_S) -> None:
        self.bridge = bridge
        self.retry_s = retry_s
        self.ready = not bridge.settings.preload
        self.on_ready: Callable[[], Awaitable[None]] | None = None
        """Called once preloading succeeded (the gRPC front turns its health to SERVING)."""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if not self.ready and self._task is None:
            self._task = asyncio.create_task(self._run(), name="llm-warmup")

    async def _run(self) -> None:
        model = self.bridge.settings.model
        while True:
            try:
                await self.bridge.preload()
            except Exception as error:
                log.warning(
                    "LLM warm-up of %s failed (%s); retrying in %g s", model, error, self.retry_s
                )
                await asyncio.sleep(self.retry_s)
                continue
            log.info("LLM %s preloaded", model)
            self.ready = True
            if self.on_ready is not None:
                await self.on_ready()
            return

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None
