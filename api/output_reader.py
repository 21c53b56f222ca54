"""The front's output reader: every open stream's output through one blocking XREAD per round.

A front relaying hundreds of streams must not hold one blocking XREAD (one Redis connection,
one waiting coroutine) per stream. The :class:`OutputReader` of a front process (one per
:class:`~voicelane.api.streams.StreamGateway`) runs one background task that reads the output
streams of all its subscriptions with a single XREAD per round
(:meth:`voicelane.core.lane.front.RealtimeClient.read_outputs`, blocking up to ``block_ms``) and
hands each stream its entries (:class:`Subscription`). The rules:

* **own connection** — the blocking read runs on its own Redis client
  (:meth:`~voicelane.core.lane.front.RealtimeClient.twin`), never on the pool the rest of the
  front uses;
* **wake** — the read also watches the reader's wake stream: a subscription added while a read
  is pending appends to it (through the front's usual client), which ends the read at once, so
  a new stream's first audio never waits for the end of a block;
* **backpressure** — a subscription holding ``max_buffered`` undelivered entries (its client
  reads slowly) is left out of the reads until its consumer takes them: memory stays bounded
  per stream, and the other streams keep flowing;
* **errors** — a failed read (Redis unreachable, timed out...) is raised to every subscription
  it was reading for, by their next :meth:`Subscription.get` (the same exception the stream's
  own read would have raised: the fronts map it as before, 503 / UNAVAILABLE); the reader goes
  on with the next round (the client reconnects), after a short pause;
* **many keys** — one read covers at most ``max_keys`` streams; past that, more read loops (each
  with its own connection and wake stream) share the subscriptions;
* **lifetime** — the reader starts in the running event loop on the first
  :meth:`OutputReader.subscribe` (again if the loop changed) and stops on :meth:`OutputReader.close`
  (the gateway's shutdown); with no subscriptions it sends nothing to Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
import uuid
from collections import deque

from voicelane.common.errors import ShuttingDownError
from voicelane.core.lane.front import RealtimeClient
from voicelane.core.lane.messages import OutputEvent

log = logging.getLogger(__name__)

DEFAULT_BLOCK_MS = 150
MAX_KEYS_PER_READ = 500
"""Output streams in one XREAD (more: another read loop)."""
MAX_BUFFERED = 256
"""Undelivered entries a subscription may hold before it is left out of the reads."""
READ_COUNT = 64
"""Entries per stream per read."""
MIN_ROUND_S = 0.01
"""Reads that found output are at least this far apart (at most 10 ms more latency per
chunk, far fewer reads naming every stream)."""
ERROR_GRACE_S = 1.0
"""Reads may fail for this long (retried) before the streams they serve are failed."""
RETRY_AFTER_ERROR_S = 0.2
"""Pause after a failed read before the next one."""

Entry = tuple[str, OutputEvent]


def _entry_id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class Subscription:
    """One stream's output as the reader fetches it, from ``after_id`` on.

    :meth:`get` returns what arrived (in order, each entry once) or raises the error of the
    read that failed for it; :meth:`close` ends it (the reader stops reading the stream).
    """

    def __init__(self, loop: _ReadLoop, lane_id: str, after_id: str, max_buffered: int) -> None:
        self.lane_id = lane_id
        self.after_id = after_id
        """The last entry id fetched for this subscription (delivered or buffered)."""
        self.closed = False
        self._loop = loop
        self._max_buffered = max_buffered
        self._entries: deque[Entry] = deque()
        self._error: BaseException | None = None
        self._ready = asyncio.Event()

    @property
    def buffered(self) -> int:
        """Entries fetched and not yet taken by :meth:`get`."""
        return len(self._entries)

    @property
    def full(self) -> bool:
        """Holding its bound of undelivered entries: left out of the reads until drained."""
        return len(self._entries) >= self._max_buffered

    async def get(self, timeout_s: float) -> list[Entry]:
        """Every entry that arrived since the last call, waiting up to ``timeout_s`` for one;
        ``[]`` when none came. Raises the error of a failed read (once), after the entries
        fetched before it."""
        if self.closed:
            raise RuntimeError(f"subscription to {self.lane_id} is closed")
        if not self._entries and self._error is None and timeout_s > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._ready.wait()
        if self._entries:
            was_full = self.full
            entries = list(self._entries)
            self._entries.clear()
            if self._error is None:
                self._ready.clear()
            if was_full:
                self._loop.changed()
            return entries
        if self._error is not None:
            error, self._error = self._error, None
            self._ready.clear()
            raise error
        return []

    def close(self) -> None:
        """Unsubscribe (idempotent): what is buffered is dropped."""
        if not self.closed:
            self.closed = True
            self._entries.clear()
            self._loop.remove(self)

    def _push(self, entries: list[Entry]) -> None:
        after = _entry_id(self.after_id)
        fresh = [entry for entry in entries if _entry_id(entry[0]) > after]
        if fresh:
            self._entries.extend(fresh)
            self.after_id = fresh[-1][0]
            self._ready.set()

    def _fail(self, error: BaseException) -> None:
        self._error = error
        self._ready.set()


class _ReadLoop:
    """One read loop: up to ``max_keys`` streams, one XREAD per round on its own connection."""

    def __init__(self, reader: OutputReader, lane: RealtimeClient) -> None:
        self._reader = reader
        self._lane = lane
        """The front's client: for wakes (never blocked)."""
        self._client = lane.twin()
        """The loop's own client: for the blocking read."""
        self.reader_id = uuid.uuid4().hex
        self._wake_cursor = "0-0"
        self._subscriptions: dict[str, list[Subscription]] = {}
        self._changed = asyncio.Event()
        self._reading = False
        """A read is in flight."""
        self._failing_since: float | None = None
        """When the reads began to fail (None: the last one worked)."""
        self._wake_pending = False
        self._wakes: set[asyncio.Task[None]] = set()
        self._closing = False
        self.rounds = 0
        self._task = asyncio.create_task(self._run(), name=f"output-reader-{self.reader_id}")
        self._task.add_done_callback(self._stopped)

    @property
    def streams(self) -> int:
        return len(self._subscriptions)

    @property
    def done(self) -> bool:
        return self._task.done()

    def holds(self, lane_id: str) -> bool:
        return lane_id in self._subscriptions

    def subscribe(self, lane_id: str, after_id: str) -> Subscription:
        subscription = Subscription(self, lane_id, after_id, self._reader.max_buffered)
        self._subscriptions.setdefault(lane_id, []).append(subscription)
        self._changed.set()
        if self._reading:  # the read in flight does not cover it (from its after_id)
            self._wake()
        return subscription

    def remove(self, subscription: Subscription) -> None:
        subscriptions = self._subscriptions.get(subscription.lane_id, [])
        if subscription in subscriptions:
            subscriptions.remove(subscription)
        if not subscriptions:
            self._subscriptions.pop(subscription.lane_id, None)

    def changed(self) -> None:
        """A subscription was drained: it may be read again."""
        self._changed.set()

    async def close(self, error: BaseException) -> None:
        # Cancelling alone is not enough: redis-py can swallow a cancellation that lands
        # while a command starts (the command then returns empty); the loop also checks.
        self._closing = True
        self._changed.set()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        for task in list(self._wakes):
            task.cancel()
        self._fail_all(error)
        if self._client is not self._lane:
            with contextlib.suppress(Exception):
                await self._client.close()

    def _stopping(self) -> bool:
        """Closing, or cancelled (even if redis-py swallowed the cancellation)."""
        task = asyncio.current_task()
        return self._closing or (task is not None and task.cancelling() > 0)

    def _fail_all(self, error: BaseException) -> None:
        for subscriptions in self._subscriptions.values():
            for subscription in subscriptions:
                subscription._fail(_copy(error))

    def _stopped(self, task: asyncio.Task[None]) -> None:
        """The loop never ends but by :meth:`close`; if a bug ended it, its streams must not
        wait for their deadlines."""
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("output reader %s failed", self.reader_id, exc_info=error)
            self._fail_all(error)

    def _wake(self) -> None:
        """End the pending read early (once per read): a stream it does not cover was added."""
        if self._wake_pending:
            return
        self._wake_pending = True
        task = asyncio.create_task(self._send_wake())
        self._wakes.add(task)
        task.add_done_callback(self._wakes.discard)

    async def _send_wake(self) -> None:
        try:
            await self._lane.wake(self.reader_id)
        except Exception as error:  # the read ends at its block anyway
            log.debug("could not wake output reader %s: %s", self.reader_id, error)

    async def _run(self) -> None:
        block_ms = self._reader.block_ms
        while not self._stopping():
            after: dict[str, str] = {}
            readers: dict[str, list[Subscription]] = {}
            for lane_id, subscriptions in self._subscriptions.items():
                ready = [s for s in subscriptions if not s.full]
                if ready:
                    readers[lane_id] = ready
                    after[lane_id] = min((s.after_id for s in ready), key=_entry_id)
            if not after:
                self._changed.clear()
                if not self._stopping():
                    await self._changed.wait()
                continue
            self._reading = True
            self._wake_pending = False
            self.rounds += 1
            started_s = time.monotonic()
            try:
                found, cursor = await self._client.read_outputs(
                    after,
                    block_ms,
                    wake=(self.reader_id, self._wake_cursor),
                    count=self._reader.count,
                )
            except Exception as error:
                self._reading = False
                if self._stopping():
                    return
                log.warning(
                    "output reader %s: read of %d streams failed: %s",
                    self.reader_id, len(after), " ".join(str(error).split())[:200],
                )  # fmt: skip
                now_s = time.monotonic()
                if self._failing_since is None:
                    self._failing_since = now_s
                if now_s - self._failing_since < ERROR_GRACE_S:
                    # One slow or dropped read (a front or Redis busy for a moment) must not
                    # end every open stream: try again; fail them if it goes on.
                    await asyncio.sleep(RETRY_AFTER_ERROR_S)
                    continue
                for subscriptions in readers.values():
                    for subscription in subscriptions:
                        if not subscription.closed:
                            subscription._fail(_copy(error))
                await asyncio.sleep(RETRY_AFTER_ERROR_S)
                continue
            self._reading = False
            self._failing_since = None
            if self._stopping():
                return
            self._wake_cursor = cursor or self._wake_cursor
            for lane_id, entries in found.items():
                for subscription in readers.get(lane_id, []):
                    if not subscription.closed:
                        subscription._push(entries)
            # Each read names every open stream: with hundreds of them, reading again at once
            # for the one entry that arrived meanwhile costs more than the entries. A short
            # pause lets each read collect the entries of many streams.
            pause_s = MIN_ROUND_S - (time.monotonic() - started_s)
            if found and pause_s > 0:
                await asyncio.sleep(pause_s)


def _copy(error: BaseException) -> BaseException:
    """A copy of ``error`` for each subscriber (one exception object raised in many tasks
    would collect all their tracebacks)."""
    try:
        return copy.copy(error)
    except Exception:
        return error


class OutputReader:
    """The output streams of a front's open streams, read together; see the module docstring.

    ``block_ms`` must stay well below the lane client's socket timeout (a read blocked longer
    would fail as a timeout); ``close`` may wait for the read in flight (up to ``block_ms``).
    """

    def __init__(
        self,
        lane: RealtimeClient,
        *,
        block_ms: int = DEFAULT_BLOCK_MS,
        max_keys: int = MAX_KEYS_PER_READ,
        max_buffered: int = MAX_BUFFERED,
        count: int = READ_COUNT,
    ) -> None:
        self.lane = lane
        self.block_ms = block_ms
        self.max_keys = max_keys
        self.max_buffered = max_buffered
        self.count = count
        self._loops: list[_ReadLoop] = []
        self._event_loop: asyncio.AbstractEventLoop | None = None

    @property
    def rounds(self) -> int:
        """Reads sent so far (each one XREAD), over all read loops."""
        return sum(loop.rounds for loop in self._loops)

    @property
    def streams(self) -> int:
        """Streams subscribed to now."""
        return sum(loop.streams for loop in self._loops)

    def subscribe(self, lane_id: str, after_id: str = "0-0") -> Subscription:
        """Read the output of the request ``lane_id`` after entry ``after_id`` (call from the
        event loop that serves the stream; the reader starts there if it is not running)."""
        running = asyncio.get_running_loop()
        if self._event_loop is not running:
            self._loops = []  # another loop's (a test's): its tasks died with it
            self._event_loop = running
        self._loops = [lp for lp in self._loops if not lp.done]
        loop = next((lp for lp in self._loops if lp.holds(lane_id)), None)
        if loop is None:
            loop = min(self._loops, key=lambda lp: lp.streams, default=None)
            if loop is None or loop.streams >= self.max_keys:
                loop = _ReadLoop(self, self.lane)
                self._loops.append(loop)
        return loop.subscribe(lane_id, after_id)

    async def close(self) -> None:
        """Stop reading; subscriptions still open get ShuttingDownError (UNAVAILABLE)."""
        loops, self._loops = self._loops, []
        if self._event_loop is not asyncio.get_running_loop():
            self._event_loop = None
            return
        self._event_loop = None
        error = ShuttingDownError("the front is shutting down; retry shortly", retry_after_s=1.0)
        started = time.monotonic()
        await asyncio.gather(*(loop.close(error) for loop in loops))
        if loops:
            log.info(
                "output reader stopped (%d read loops, %.0f ms)",
                len(loops), (time.monotonic() - started) * 1000,
            )  # fmt: skip
