"""One ``Converse`` stream (:class:`ConverseSession`): text in pieces, audio back as sentences
complete. Never resumed; retried before its first chunk only while no text was sent."""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Self, TypeAlias

import grpc.aio

from voicelane.client.failure import remote_error
from voicelane.client.clock import ClockSync, wall_ms
from voicelane.client.pool import ChannelPool, Lease, Metadata, call_cancelled, cancelled_from_outside
from voicelane.client.retry import Retrier
from voicelane.client.stats import Meter
from voicelane.common.errors import InvalidInputError, RemoteError
from voicelane.common.wire import speech_pb2 as pb

# What a write to a Converse call that already ended (or is ending) raises.
_WRITE_ERRORS = (grpc.aio.AioRpcError, asyncio.InvalidStateError)

_ConverseCall: TypeAlias = grpc.aio.StreamStreamCall[pb.ConverseRequest, pb.ConverseResponse]


class ConverseSession:
    """One ``Converse`` stream: ``send``/``flush``/``end`` text, iterate the audio chunks.

    The session opens on ``async with``, :meth:`open`, or the first send or iteration. A
    background task reads the responses (unbounded buffer: 32 kbps of Opus is small), so
    sending and reading never block each other; iterate from another task for real-time
    playback, or after :meth:`end` for a whole reply. Chunks carry their captions.

    Not resumed: the Converse wire has no request id or resume point, and the text already
    sent cannot be replayed without the server speaking it twice. ``UNAVAILABLE`` (or
    ``RESOURCE_EXHAUSTED`` when the policy allows) before the first chunk is retried only
    while no text has been sent (text counts as sent once its write started on a live call,
    whether or not the write then succeeded).
    """

    def __init__(
        self,
        pool: ChannelPool,
        metadata: Metadata,
        start: pb.ConverseStart,
        retrier: Retrier,
        *,
        clock: ClockSync | None = None,
    ) -> None:
        self._pool = pool
        self._metadata = metadata
        self._start = start
        self._retrier = retrier
        self.stats = retrier.stats
        self._meter = Meter(self.stats, clock)
        self._lease: Lease | None = None
        self._call: _ConverseCall | None = None
        self._reader: asyncio.Task[None] | None = None
        self._open_lock = asyncio.Lock()
        self._lock = asyncio.Lock()  # writes, and replacing the call
        self._replaced = asyncio.Event()  # set when the current call is replaced or failed
        self._queue: asyncio.Queue[pb.AudioChunk | RemoteError | None] = asyncio.Queue()
        self._write_error: RemoteError | None = None  # once set, writes raise it
        self._text_sent = False
        self._ended = False
        self._exhausted = False
        self._closed = False

    # -- lifecycle

    async def open(self) -> None:
        """Take a pool slot and start the call (idempotent)."""
        async with self._open_lock:
            if self._closed:
                raise RemoteError("CANCELLED", "the session is closed")
            if self._reader is not None:
                return
            self._lease = await self._retrier.acquire(self._pool)
            try:
                async with self._lock:
                    await self._start_call()
            except BaseException:
                self._release()
                raise
            self._reader = asyncio.create_task(self._read_all())

    async def close(self) -> None:
        """Cancel the call if it is still running and give the slot back (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._call is not None:
            self._call.cancel()
        self._release()
        closed = RemoteError("CANCELLED", "the session was closed")
        self._refuse_writes(closed)
        self._queue.put_nowait(closed)  # wakes a reader of the session; unseen after the end

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _release(self) -> None:
        if self._lease is not None:
            self._pool.release(self._lease)
            self._lease = None
            self._meter.finished()

    # -- sending

    async def send(self, text_delta: str) -> None:
        """More text. Raises :class:`RemoteError` once the session failed."""
        await self._write(pb.ConverseRequest(text_delta=text_delta), is_text=True)

    async def flush(self) -> None:
        """Speak what has arrived even if the sentence is not finished."""
        await self._write(pb.ConverseRequest(flush=pb.Flush()), is_text=False)

    async def end(self) -> None:
        """No more text; the audio ends once everything is spoken (idempotent)."""
        if not self._ended:
            await self._write(pb.ConverseRequest(end=pb.End()), is_text=False, last=True)

    async def _write(
        self, request: pb.ConverseRequest, *, is_text: bool, last: bool = False
    ) -> None:
        if self._ended:
            raise InvalidInputError("the conversation has ended; nothing more can be sent")
        await self.open()
        while True:
            async with self._lock:
                if self._write_error is not None:
                    raise self._write_error
                replaced = self._replaced
                assert self._call is not None
                if not self._call.done():
                    # Sent from the moment it may reach the server: a write that then fails
                    # may still have been read (and spoken), so it is never replayed.
                    if is_text and not self._text_sent:
                        self._text_sent = True
                        self._meter.sent()
                    if await self._try_write(request):
                        if last:  # under the same lock: a retried call replays the end
                            self._ended = True
                            await self._done_writing()
                        return
            await replaced.wait()  # the reader retries the call or records the failure

    async def _try_write(self, request: pb.ConverseRequest) -> bool:
        assert self._call is not None
        try:
            await self._call.write(request)
        except _WRITE_ERRORS:
            return False
        return True

    async def _done_writing(self) -> None:
        assert self._call is not None
        with contextlib.suppress(*_WRITE_ERRORS):  # the reader sees the call's status
            await self._call.done_writing()

    async def _start_call(self) -> None:
        """A new call with the start message (and End again if it was sent); under the lock."""
        assert self._lease is not None
        call = self._lease.slot.stub.Converse(
            timeout=self._retrier.remaining_s(), metadata=self._metadata
        )
        self._call = call
        self.stats.attempts += 1
        start = pb.ConverseStart()
        start.CopyFrom(self._start)
        start.client_ts_ms = int(wall_ms())
        if await self._try_write(pb.ConverseRequest(start=start)) and self._ended:
            await self._try_write(pb.ConverseRequest(end=pb.End()))
            await self._done_writing()

    # -- reading

    async def _read_all(self) -> None:
        failures = 0
        try:
            while True:
                assert self._call is not None
                try:
                    async for response in self._call:
                        failures = 0
                        self._meter.chunk(response.audio)
                        self._queue.put_nowait(response.audio)
                except grpc.aio.AioRpcError as exc:
                    failures += 1
                    if await self._retry(exc, failures):
                        continue
                    return
                self._queue.put_nowait(None)
                self._refuse_writes(RemoteError("FAILED_PRECONDITION", "the conversation is over"))
                return
        except RemoteError as exc:  # the deadline passed between attempts
            self._fail(exc)
        except asyncio.CancelledError:
            if cancelled_from_outside():
                raise
            self._fail(call_cancelled())
        finally:
            self._release()

    async def _retry(self, error: grpc.aio.AioRpcError, failures: int) -> bool:
        """Start a new call if the failure allows it; else record it. True if retried."""
        failure = remote_error(error)
        async with self._lock:  # a text write in progress marks the text sent first
            replayable = not self._text_sent and self.stats.chunks == 0
        if not replayable:
            self._fail(failure)
            return False
        try:
            await self._retrier.pause(failure, failures)
        except RemoteError as exc:
            self._fail(exc)
            return False
        async with self._lock:
            await self._start_call()
            self.stats.retries += 1
            self._replaced.set()
            self._replaced = asyncio.Event()
        return True

    def _fail(self, error: RemoteError) -> None:
        self._refuse_writes(error)
        self._queue.put_nowait(error)

    def _refuse_writes(self, error: RemoteError) -> None:
        if self._write_error is None:
            self._write_error = error
        self._replaced.set()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> pb.AudioChunk:
        if self._exhausted:
            raise StopAsyncIteration
        await self.open()
        item = await self._queue.get()
        if isinstance(item, pb.AudioChunk):
            return item
        self._exhausted = True
        if item is None:
            raise StopAsyncIteration
        raise item
