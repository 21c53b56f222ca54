"""The one writer of an agent-protocol socket: every message of every context goes through it.

Contexts produce messages concurrently; a socket must get each message whole, one after the
other, so one task sends them all (:meth:`Outbox.run`). Urgent messages (``cancelled``) go
before the ones waiting. A message belongs to an owner (its context): once the owner is
silenced (cancelled, failed), its messages still waiting are dropped, and none it puts later
is sent — "no audio, words or done of that context follow its ``cancelled``" holds in the one
place that writes. Each message's future resolves once it was sent (or dropped): a context's
relay waits for it, so a slow client slows its streams (backpressure), as on ``/v1/stream``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Owner:
    """What a message belongs to (a context); ``silenced``: its messages are dropped."""

    name: str
    silenced: bool = False


@dataclass(eq=False)
class _Item:
    message: dict[str, Any]
    owner: Owner | None
    sent: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class OutboxClosedError(Exception):
    """The socket is gone: nothing more is sent."""


class Outbox:
    def __init__(self) -> None:
        self._urgent: deque[_Item] = deque()
        self._normal: deque[_Item] = deque()
        self._wake = asyncio.Event()
        self.closed = False
        self._finishing = False
        self.sent = 0
        self.dropped = 0

    def put(
        self, message: dict[str, Any], *, owner: Owner | None = None, urgent: bool = False
    ) -> asyncio.Future[None]:
        """Queue ``message``; the future resolves when it was sent or dropped (an exception:
        the socket is gone)."""
        item = _Item(message, owner)
        if self.closed:
            _fail(item.sent)
            return item.sent
        (self._urgent if urgent else self._normal).append(item)
        self._wake.set()
        return item.sent

    async def run(self, send: Callable[[str], Awaitable[None]]) -> None:
        """Send until :meth:`close`; a failed send (the socket is gone) closes the outbox and
        raises."""
        try:
            while True:
                item = self._next()
                if item is None:
                    if self.closed or self._finishing:
                        return
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                if item.owner is not None and item.owner.silenced:
                    self.dropped += 1
                    _resolve(item.sent)
                    continue
                try:
                    await send(json.dumps(item.message, separators=(",", ":")))
                except BaseException:
                    _fail(item.sent)
                    raise
                self.sent += 1
                _resolve(item.sent)
        finally:
            self.close()

    def close(self) -> None:
        """No more messages: those waiting are dropped (their futures fail)."""
        self.closed = True
        self._wake.set()
        for queue in (self._urgent, self._normal):
            while queue:
                item = queue.popleft()
                _fail(item.sent)

    def finish(self) -> None:
        """Send what is queued, then stop (:meth:`run` returns once it is out)."""
        self._finishing = True
        self._wake.set()

    def _next(self) -> _Item | None:
        if self._urgent:
            return self._urgent.popleft()
        if self._normal:
            return self._normal.popleft()
        return None


def _resolve(future: asyncio.Future[None]) -> None:
    with contextlib.suppress(asyncio.InvalidStateError):
        future.set_result(None)


def _fail(future: asyncio.Future[None]) -> None:
    """The socket is gone: the message was not sent (the exception is marked retrieved:
    nobody has to await it)."""
    if not future.done():
        future.set_exception(OutboxClosedError())
        future.exception()
