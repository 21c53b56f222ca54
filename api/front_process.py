"""What the separate front processes (``voicelane grpc``, ``voicelane wyoming``) share: the
serve loop — start, wait for SIGTERM/SIGINT (or a ``stop`` event), stop gracefully — and the
wait of a relay on its next chunk while a feeder task sends the client's text."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from voicelane.core.lane.front import RealtimeClient
from voicelane.core.redis_target import RedisTarget
from voicelane.core.settings import RealtimeSettings

Front = TypeVar("Front")


class FrontProcessSettings(Protocol):
    def redis_target(self) -> RedisTarget: ...
    @property
    def realtime(self) -> RealtimeSettings: ...
    @property
    def shutdown_grace_s(self) -> float: ...


async def serve_front(
    settings: FrontProcessSettings,
    start: Callable[[RealtimeClient], Awaitable[Front]],
    stop_front: Callable[[Front, float], Awaitable[None]],
    *,
    lane: RealtimeClient | None = None,
    ready: asyncio.Event | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run a front until SIGTERM/SIGINT (or ``stop`` is set, or the task is cancelled); then
    stop it within ``shutdown_grace_s``. ``lane``: a lane of the caller's (else one of its own,
    closed at the end); ``ready``: set once the front serves."""
    own_lane = lane is None
    lane = lane or RealtimeClient.from_url(settings.redis_target(), settings.realtime)
    signals = stop is None
    stop = stop or asyncio.Event()
    if signals:
        _on_signals(stop)
    try:
        front = await start(lane)
        if ready is not None:
            ready.set()
        try:
            await stop.wait()
        finally:
            await stop_front(front, settings.shutdown_grace_s)
    finally:
        if signals:
            _on_signals(None)
        if own_lane:
            await lane.close()


def _on_signals(stop: asyncio.Event | None) -> None:
    """SIGTERM/SIGINT set ``stop`` (``None``: back to the defaults). Main thread only."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            if stop is None:
                loop.remove_signal_handler(sig)
            else:
                loop.add_signal_handler(sig, stop.set)


async def wait_step(step: asyncio.Future[Any], feeder: asyncio.Task[None] | None) -> None:
    """Wait for ``step`` (a relay's next chunk); raise the feeder's error as soon as it fails
    (even if it failed while the previous chunk was being sent). ``feeder``: none, when the
    text is all known."""
    while True:
        if feeder is not None and feeder.done() and not feeder.cancelled():
            error = feeder.exception()
            if error is not None:
                raise error
        if step.done():
            return
        waiting: set[asyncio.Future[Any]] = {step}
        if feeder is not None and not feeder.done():
            waiting.add(feeder)
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
