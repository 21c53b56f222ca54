"""One logical ``Synthesize`` call: retried before its first chunk, resumed after it, no seq
ever yielded twice (:class:`Synthesis`), and the stream handed to the caller
(:class:`SynthesisStream`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from types import TracebackType
from typing import Self

import grpc.aio

from voicelane.client.failure import remote_error
from voicelane.client.clock import ClockSync, wall_ms
from voicelane.client.pool import ChannelPool, Metadata, Slot, call_cancelled, cancelled_from_outside
from voicelane.client.retry import Retrier
from voicelane.client.stats import Meter, StreamStats
from voicelane.common.errors import RemoteError
from voicelane.common.wire import speech_pb2 as pb


class SynthesisStream(AsyncIterator[pb.AudioChunk]):
    """The chunks of one ``Synthesize`` stream, seq strictly increasing, with its figures.

    Iterate it to the end, or close it (``async with``/``aclose()``) when leaving early: the
    pool slot is held until then.
    """

    def __init__(self, chunks: AsyncGenerator[pb.AudioChunk, None], stats: StreamStats) -> None:
        self._chunks = chunks
        self.stats = stats

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> pb.AudioChunk:
        return await self._chunks.__anext__()

    async def aclose(self) -> None:
        await self._chunks.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class Synthesis:
    """One logical Synthesize call: attempts, retries before the first chunk, resumes after."""

    def __init__(
        self,
        pool: ChannelPool,
        metadata: Metadata,
        request: pb.SynthesizeRequest,
        retrier: Retrier,
        *,
        clock: ClockSync | None = None,
    ) -> None:
        self._pool = pool
        self._metadata = metadata
        self._request = request
        self._retrier = retrier
        self.stats = retrier.stats
        self._meter = Meter(self.stats, clock)
        self._request_id = ""
        self._last_seq: int | None = None
        self._final_seen = False

    async def chunks(self) -> AsyncGenerator[pb.AudioChunk, None]:
        lease = await self._retrier.acquire(self._pool)
        try:
            failures = 0
            while True:
                call = self._start(lease.slot)
                error: grpc.aio.AioRpcError | None = None
                try:
                    async for chunk in call:
                        if self._accept(chunk):
                            failures = 0
                            yield chunk
                except grpc.aio.AioRpcError as exc:
                    error = exc
                except asyncio.CancelledError:
                    if cancelled_from_outside():
                        raise
                    raise call_cancelled() from None
                finally:
                    call.cancel()
                if self._final_seen:  # all audio is here; a trailing error changes nothing
                    return
                failures += 1
                await self._pause(error, failures)
                self._pool.move(lease)
        finally:
            self._meter.finished()
            self._pool.release(lease)

    def _start(self, slot: Slot) -> grpc.aio.UnaryStreamCall[pb.SynthesizeRequest, pb.AudioChunk]:
        request = pb.SynthesizeRequest()
        request.CopyFrom(self._request)
        request.client_ts_ms = int(wall_ms())
        if self._last_seq is not None:
            request.request_id = self._request_id
            request.resume_after_seq = self._last_seq
        timeout_s = self._retrier.remaining_s()
        call = slot.stub.Synthesize(request, timeout=timeout_s, metadata=self._metadata)
        self.stats.attempts += 1
        self._meter.sent()
        return call

    def _accept(self, chunk: pb.AudioChunk) -> bool:
        """Record a chunk; False for one at or below the last seq (a resume's overlap)."""
        if self._last_seq is not None and chunk.seq <= self._last_seq:
            return False
        if self._last_seq is None:
            self._request_id = chunk.request_id
        self._last_seq = chunk.seq
        self._final_seen = self._final_seen or chunk.final
        self._meter.chunk(chunk)
        return True

    async def _pause(self, error: grpc.aio.AioRpcError | None, failures: int) -> None:
        if error is None:
            failure = RemoteError("UNAVAILABLE", "the stream ended without its final chunk")
        else:
            failure = remote_error(error)
        resuming = self._last_seq is not None
        if resuming and failure.status == "NOT_FOUND":
            raise failure.with_message(
                f"the stream cannot be resumed, its output expired: {failure.message}"
            )
        if resuming and not self._request_id and self._retrier.policy.retryable(failure.status):
            raise failure.with_message(
                f"{failure.message} (cannot resume: the server sent no request_id)"
            )
        await self._retrier.pause(failure, failures)
        if resuming:
            self.stats.resumes += 1
        else:
            self.stats.retries += 1
