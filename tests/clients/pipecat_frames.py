"""What both Pipecat client scripts (``pipecat_openai.py``, ``pipecat_voicelane.py``) use to
watch a pipeline: :class:`Seen` (every frame at its two ends, timed, and a way to await a
condition on them) and :class:`Tap` (a processor recording the frames going one way past it).
Imported by the scripts from their own folder (a script's folder is first on its path)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from pipecat.frames.frames import Frame
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

STEP_TIMEOUT_S = 30.0
"""How long a script waits for any one thing it expects."""


class Seen:
    """Every frame at the two ends of the pipeline, with its arrival time, and a way to
    await a condition on them."""

    def __init__(self) -> None:
        self.down: list[tuple[float, Frame]] = []
        self.up: list[tuple[float, Frame]] = []
        self.changed = asyncio.Event()

    def add(self, frames: list[tuple[float, Frame]], frame: Frame) -> None:
        frames.append((time.monotonic(), frame))
        self.changed.set()

    async def until(self, what: str, condition: Callable[[], Any]) -> Any:
        try:
            async with asyncio.timeout(STEP_TIMEOUT_S):
                while not (value := condition()):
                    self.changed.clear()
                    await self.changed.wait()
                return value
        except TimeoutError:
            raise TimeoutError(f"timed out waiting for {what}") from None


class Tap(FrameProcessor):
    """Records the frames going one way past it."""

    def __init__(self, seen: Seen, direction: FrameDirection) -> None:
        super().__init__()
        self._seen = seen
        self._direction = direction

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == self._direction:
            self._seen.add(
                self._seen.down if direction == FrameDirection.DOWNSTREAM else self._seen.up, frame
            )
        await self.push_frame(frame, direction)
