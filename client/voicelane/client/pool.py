"""The channel pool: ``channels`` gRPC channels with ``per_channel`` stream slots each,
least-loaded first, FIFO waiting when all are full; and what the calls made on it share
(their metadata, telling a cancelled call from a cancelled task)."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

import grpc.aio

from voicelane.common.errors import RemoteError
from voicelane.common.wire import speech_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from voicelane.common.wire.speech_pb2_grpc import SpeechAsyncStub

Metadata: TypeAlias = tuple[tuple[str, str], ...]


@dataclass(eq=False)
class Slot:
    index: int
    channel: grpc.aio.Channel
    stub: SpeechAsyncStub
    active: int = 0


@dataclass(eq=False)
class Lease:
    """One stream's place in the pool; it may move to another channel between attempts."""

    slot: Slot


class ChannelPool:
    """``len(slots)`` channels with ``per_channel`` stream slots each; FIFO waiting."""

    def __init__(self, channels: Sequence[grpc.aio.Channel], per_channel: int) -> None:
        self.slots = [
            Slot(i, channel, pb_grpc.SpeechStub(channel)) for i, channel in enumerate(channels)
        ]
        self.per_channel = per_channel
        self._waiters: collections.deque[asyncio.Future[Slot]] = collections.deque()
        self.closed = False

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    def least_loaded(self) -> Slot:
        return min(self.slots, key=lambda s: (s.active, s.index))

    def _take_free(self) -> Slot | None:
        slot = self.least_loaded()
        if slot.active >= self.per_channel:
            return None
        slot.active += 1
        return slot

    async def acquire(self) -> Lease:
        """A slot on the least-loaded channel; waits (FIFO) while every channel is full."""
        self._check_open()
        if not self._waiters and (slot := self._take_free()) is not None:
            return Lease(slot)
        waiter: asyncio.Future[Slot] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return Lease(await waiter)
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self.release(Lease(waiter.result()))  # granted just as we were cancelled
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    def release(self, lease: Lease) -> None:
        lease.slot.active -= 1
        while self._waiters:
            waiter = self._waiters.popleft()
            if waiter.done():
                continue
            slot = self._take_free()
            if slot is None:  # pragma: no cover - a slot was just freed
                self._waiters.appendleft(waiter)
                return
            waiter.set_result(slot)
            return

    def move(self, lease: Lease) -> None:
        """After a failure: switch to the least-loaded *other* channel that has room."""
        others = [s for s in self.slots if s is not lease.slot and s.active < self.per_channel]
        if not others:
            return
        target = min(others, key=lambda s: (s.active, s.index))
        lease.slot.active -= 1
        target.active += 1
        lease.slot = target

    def _check_open(self) -> None:
        if self.closed:
            raise RemoteError("CANCELLED", "the SpeechClient is closed")

    async def close(self) -> None:
        self.closed = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(RemoteError("CANCELLED", "the SpeechClient was closed"))
        await asyncio.gather(*(s.channel.close(grace=None) for s in self.slots))


def cancelled_from_outside() -> bool:
    """In an ``except CancelledError``: was *this task* cancelled (not just its gRPC call)?

    grpc.aio raises CancelledError from a call cancelled elsewhere: by closing the client's
    channels, or by a cancelled ``write`` (which cancels the whole call).
    """
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


def call_cancelled() -> RemoteError:
    return RemoteError("CANCELLED", "the call was cancelled on this side (client closed?)")
