"""Admission control and output relay of the gRPC front (the real-time lane, front side).

* :class:`Admission` — may one more stream start? Free real-time slots of live workers minus
  the queue, cached for a few tens of ms, minus the streams this process admitted since:
  a burst cannot overshoot, and a refusal (``RESOURCE_EXHAUSTED``) is immediate.
* :class:`OutputRelay` — a request's output stream turned into ``AudioChunk`` messages as the
  events arrive, with the liveness rules of the lane: ``UNAVAILABLE`` when no worker picks
  the request up in time, or when its worker's heartbeat lapsed and nobody took over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass

from core.errors import DeadlineExceededError, NoCapacityError, UnavailableError, error_for_status
from core.lane import EventKind, LaneClient, OutputEvent, now_ms
from core.wire import speech_pb2 as pb

log = logging.getLogger(__name__)

DEFAULT_CAPACITY_TTL_S = 0.075
DEFAULT_BLOCK_MS = 150


# ------------------------------------------------------------------------ admission


class Admission:
    """Admits a stream while the lane has capacity; see the module docstring."""

    def __init__(self, lane: LaneClient, *, ttl_s: float = DEFAULT_CAPACITY_TTL_S) -> None:
        self._lane = lane
        self._ttl_s = ttl_s
        self._capacity = 0
        self._fetched_at = -float("inf")
        self._in_flight = 0
        """Admitted, not yet in Redis."""
        self._submitted = 0
        """In Redis since the cached capacity was read (maybe counted twice: conservative)."""
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Reserve a slot for one submission (the body submits); NoCapacityError if none."""
        await self._reserve()
        try:
            yield
        finally:
            self._in_flight -= 1
        self._submitted += 1

    async def _reserve(self) -> None:
        async with self._lock:
            if time.monotonic() - self._fetched_at >= self._ttl_s:
                self._submitted = 0
                self._capacity = await self._lane.capacity()
                self._fetched_at = time.monotonic()
            if self._capacity - self._in_flight - self._submitted <= 0:
                raise NoCapacityError("no real-time capacity; retry shortly")
            self._in_flight += 1


# ------------------------------------------------------------------------ relay


class Liveness:
    """Is anyone working on the request? Raises UnavailableError when not."""

    def __init__(
        self,
        lane: LaneClient,
        request_id: str,
        *,
        claim_timeout_s: float,
        unavailable_after_s: float,
        picked_up: bool,
    ) -> None:
        self._lane = lane
        self._request_id = request_id
        self._claim_timeout_s = claim_timeout_s
        self._unavailable_after_s = unavailable_after_s
        self._picked_up = picked_up
        self._started = time.monotonic()
        self._last_alive = self._started

    def output_seen(self) -> None:
        self._picked_up = True
        self._last_alive = time.monotonic()

    async def check_idle(self) -> None:
        """Called when no output came: look at the heartbeat and the clocks."""
        if await self._lane.heartbeat_alive(self._request_id):
            self.output_seen()
            return
        now = time.monotonic()
        if self._picked_up and now - self._last_alive >= self._unavailable_after_s:
            raise UnavailableError(
                f"the worker serving the stream stopped (no heartbeat for "
                f"{self._unavailable_after_s:g} s) and no other worker took over"
            )
        if not self._picked_up and now - self._started >= self._claim_timeout_s:
            raise UnavailableError(
                f"no worker picked up the request within {self._claim_timeout_s:g} s"
            )


@dataclass(frozen=True, slots=True)
class ChunkDefaults:
    """What a chunk carries when the worker's event leaves it out."""

    sample_rate_hz: int
    client_ts_ms: int


class OutputRelay:
    """One request's output stream as ``AudioChunk`` messages; see the module docstring.

    ``after_seq`` drops audio with ``seq <= after_seq`` and the captions attached to it
    (resume). Audio never goes out twice or backwards, even if a worker that took over
    repeats a seq. Captions ride on the next chunk; a caption just before ``end`` rides on
    the final chunk.
    """

    def __init__(
        self,
        lane: LaneClient,
        request_id: str,
        *,
        deadline_ms: int,
        liveness: Liveness,
        defaults: ChunkDefaults,
        after_seq: int = -1,
        block_ms: int = DEFAULT_BLOCK_MS,
        client_gone: Callable[[], bool] = lambda: False,
    ) -> None:
        self._lane = lane
        self.request_id = request_id
        self._deadline_ms = deadline_ms
        self._liveness = liveness
        self._defaults = defaults
        self._block_ms = block_ms
        self._client_gone = client_gone
        self._last_seq = after_seq
        self._captions: list[OutputEvent] = []
        self.finished = False
        self.abandoned = False
        """The client left (the chunks stop; the front cancels the request)."""
        self.closed = False
        """The front is done with it (cancelled it if it did not finish)."""
        self.chunks_sent = 0

    async def chunks(self) -> AsyncGenerator[pb.AudioChunk, None]:
        after_id = "0-0"
        while True:
            if self._client_gone():
                # grpc.aio cancels a handler whose client left, but can lose that
                # cancellation (see api.grpc_front._client_gone): never outlive the client.
                self.abandoned = True
                return
            if now_ms() >= self._deadline_ms:
                raise DeadlineExceededError("the stream's deadline passed")
            block_ms = max(1, min(self._block_ms, self._deadline_ms - now_ms()))
            entries = await self._lane.read_output(self.request_id, after_id, block_ms)
            if not entries:
                await self._liveness.check_idle()
                continue
            self._liveness.output_seen()
            for entry_id, event in entries:
                after_id = entry_id
                chunk = self._accept(event)
                if chunk is not None:
                    self.chunks_sent += 1
                    yield chunk
                if self.finished:
                    return

    def _accept(self, event: OutputEvent) -> pb.AudioChunk | None:
        if event.kind is EventKind.AUDIO:
            if event.seq <= self._last_seq:  # resumed past it, or repeated after a takeover
                self._captions = [c for c in self._captions if c.seq > event.seq]
                return None
            self._last_seq = event.seq
            return self._chunk(event, event.seq, final=False)
        if event.kind is EventKind.CAPTION:
            if event.seq > self._last_seq:
                self._captions.append(event)
            return None
        if event.kind is EventKind.END:
            self.finished = True
            return self._chunk(event, max(event.seq, self._last_seq + 1), final=True)
        raise error_for_status(event.code or "INTERNAL", event.text)

    def _chunk(self, event: OutputEvent, seq: int, *, final: bool) -> pb.AudioChunk:
        captions = [caption_message(c) for c in self._captions]
        self._captions = []
        return pb.AudioChunk(
            request_id=self.request_id,
            seq=seq,
            opus_packets=list(event.packets),
            pts_ms=max(0, event.pts_ms),
            sample_rate_hz=event.sample_rate_hz or self._defaults.sample_rate_hz,
            server_ts_ms=event.server_ts_ms or now_ms(),
            client_ts_ms=event.client_ts_ms or self._defaults.client_ts_ms,
            final=final,
            captions=captions,
        )


def caption_message(event: OutputEvent) -> pb.Caption:
    return pb.Caption(
        text=event.text,
        start=max(0, event.start),
        end=max(0, event.end),
        pts_ms=max(0, event.pts_ms),
        sentence=max(0, event.sentence),
    )
