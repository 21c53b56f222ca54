"""The real-time sessions' one path to Redis: every session's lane calls, batched per round.

A worker serving hundreds of live streams would otherwise make hundreds of small round
trips a second per stream kind (appends, cancel checks, input reads, heartbeats), each
waking a thread and taking the GIL. :class:`LaneIO` runs one thread ("realtime-io") that,
each round, sends everything the sessions asked for since the last round as one pipeline
(:class:`voicelane.core.lane.worker.WorkerBatch`) and hands each session its answer:

* calls a session awaits — ``begin_session``, ``append``, ``finish``, ``output_events`` —
  go out in the next round (the thread wakes as soon as one is queued), in the order they
  were queued, so one session's appends land in order;
* ``read_input`` (a conversation waiting for more text): all waiting sessions' input
  streams in one non-blocking XREAD every ``INPUT_POLL_S``; a wait ends empty after
  ``INPUT_WAIT_S`` so the session can look at its deadline;
* cancel marks of every session: one MGET every ``CANCEL_POLL_S``; a cancelled session is
  told through ``on_cancelled`` (it stops within one batch step, as before);
* ``wait_read`` (a session ahead of its client by more than ``max_unread_output_s``): the
  read marks of all waiting sessions in one MGET — at the next round for a new wait, then
  every ``READ_POLL_S``; a wait ends when the mark reached what it waits for, or empty after
  ``READ_WAIT_S`` so the session can look at its deadline;
* heartbeats (XCLAIM JUSTID + session heartbeat keys) and the capacity report every
  ``beat_every_s``, and the capacity report as soon as it changed;
* the request stream's trim at most once a second, after requests finished.

Answers reach the sessions' event loop in one ``call_soon_threadsafe`` per round. A Redis
failure fails that round's calls (each session handles it as it handled a failed call
before); the polls try again next round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from voicelane.core.lane.messages import InputPiece, OutputEvent
from voicelane.core.lane.worker import RealtimeWorkerClient, WorkerBatch
from voicelane.core.settings import RealtimeSettings

log = logging.getLogger(__name__)

INPUT_POLL_S = 0.02
"""How often waiting conversations' input streams are read (one XREAD for all)."""
INPUT_WAIT_S = 0.1
"""A ``read_input`` with nothing new answers empty after this long."""
CANCEL_POLL_S = 0.05
"""How often the cancel marks of all sessions are read (one MGET for all)."""
READ_POLL_S = 0.05
"""How often the read marks of sessions waiting for their clients are read (one MGET)."""
READ_WAIT_S = 0.5
"""A ``wait_read`` whose mark did not get there answers after this long."""
TRIM_EVERY_S = 1.0
MIN_ROUND_S = 0.003
"""Rounds start at least this far apart, so each carries many sessions' calls."""
RETRY_AFTER_ERROR_S = 0.2

Pieces = list[tuple[str, InputPiece]]


@dataclass(slots=True)
class _Call:
    add: Callable[[WorkerBatch], None]
    future: asyncio.Future[Any]


@dataclass(slots=True)
class _ReadWait:
    need_ms: int
    future: asyncio.Future[int | None]
    since: float = field(default_factory=time.monotonic)
    polled: bool = False


@dataclass(slots=True)
class _InputWait:
    after_id: str
    future: asyncio.Future[Pieces]
    since: float = field(default_factory=time.monotonic)


class LaneIO:
    """Batches the real-time sessions' Redis calls; see the module docstring.

    The awaitable methods are called from the sessions' event loop (``loop``); everything
    else about Redis happens on this object's thread.
    """

    def __init__(
        self,
        lane: RealtimeWorkerClient,
        settings: RealtimeSettings,
        loop: asyncio.AbstractEventLoop,
        *,
        sessions: Callable[[], Sequence[tuple[str, str]]],
        free_slots: Callable[[], int],
        on_cancelled: Callable[[set[str]], None],
    ) -> None:
        self.lane = lane
        self.loop = loop
        self._sessions = sessions
        self._free_slots = free_slots
        self._on_cancelled = on_cancelled
        self._beat_every_s = min(settings.heartbeat_ttl_s, settings.reclaim_idle_s) / 3
        self._calls: deque[_Call] = deque()
        self._inputs: dict[str, _InputWait] = {}
        self._reads: dict[str, _ReadWait] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="realtime-io", daemon=True)
        self._reported_free: int | None = None
        self._finished_since_trim = False
        self.rounds = 0
        """Round trips made (for tests and benchmarks)."""

    def start(self) -> LaneIO:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Send what is queued, then stop the thread."""
        self._stopping.set()
        self._wake.set()
        self._thread.join(timeout_s)

    def poke(self) -> None:
        """Something changed (a session started or ended): report capacity this round."""
        self._wakeup()

    # ---- what sessions await (called on the loop) ----------------------------------------

    def begin_session(self, request_id: str) -> asyncio.Future[Pieces | None]:
        """Take ownership, beat once, read the input so far; None when the request's output
        had already ended (nothing taken)."""
        return self._call(lambda batch: batch.begin_session(request_id))

    def append(self, request_id: str, events: Sequence[OutputEvent]) -> asyncio.Future[bool]:
        """Append output events; False when another worker owns the request now."""
        return self._call(lambda batch: batch.append_output(request_id, *events))

    def finish(self, entry_id: str, request_id: str) -> asyncio.Future[None]:
        """Acknowledge the request and drop its session keys."""
        self._finished_since_trim = True
        return self._call(lambda batch: batch.finish(entry_id, request_id))

    def output_events(self, request_id: str) -> asyncio.Future[list[OutputEvent]]:
        return self._call(lambda batch: batch.output_events(request_id))

    def read_input(self, request_id: str, after_id: str) -> asyncio.Future[Pieces]:
        """Input after ``after_id``; empty after ``INPUT_WAIT_S`` without any."""
        future: asyncio.Future[Pieces] = self.loop.create_future()
        with self._lock:
            previous = self._inputs.get(request_id)
            if previous is not None:
                previous.future.cancel()
            self._inputs[request_id] = _InputWait(after_id, future)
        self._wakeup()
        return future

    def wait_read(self, request_id: str, need_ms: int) -> asyncio.Future[int | None]:
        """The request's read mark once it reached ``need_ms`` — or what it is after
        ``READ_WAIT_S`` (-1 when it could not be read); None when the request has none (a
        front of the previous release: no backpressure)."""
        future: asyncio.Future[int | None] = self.loop.create_future()
        with self._lock:
            previous = self._reads.get(request_id)
            if previous is not None:
                previous.future.cancel()
            self._reads[request_id] = _ReadWait(need_ms, future)
        self._wakeup()
        return future

    def _call(self, add: Callable[[WorkerBatch], None]) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = self.loop.create_future()
        with self._lock:
            self._calls.append(_Call(add, future))
        self._wakeup()
        return future

    def _wakeup(self) -> None:
        if not self._wake.is_set():  # set() takes a lock and notifies even when set
            self._wake.set()

    # ---- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        now = time.monotonic()
        next_input = next_cancel = next_read = now
        next_beat = now + self._beat_every_s
        last_trim = last_round = 0.0
        while True:
            now = time.monotonic()
            due = next_beat
            if self._inputs:
                due = min(due, next_input)
            if self._reads:
                due = min(due, next_read)
            if self._sessions():
                due = min(due, next_cancel)
            if not self._calls and not self._stopping.is_set():
                self._wake.wait(max(0.0, due - now))
            # Let a round collect the calls of many sessions: one round trip and one wake-up
            # of the loop for all of them, at most MIN_ROUND_S more latency per call.
            pause_s = MIN_ROUND_S - (time.monotonic() - last_round)
            if pause_s > 0 and not self._stopping.is_set():
                time.sleep(pause_s)
            last_round = time.monotonic()
            self._wake.clear()
            stopping = self._stopping.is_set()
            with self._lock:
                calls = list(self._calls)
                self._calls.clear()
            now = time.monotonic()
            batch = self.lane.batch()
            answers: list[tuple[asyncio.Future[Any], int]] = []
            for call in calls:
                call.add(batch)
                answers.append((call.future, len(batch) - 1))
            polls: dict[str, int] = {}
            if self._inputs and now >= next_input:
                with self._lock:
                    after_ids = {rid: wait.after_id for rid, wait in self._inputs.items()}
                batch.read_inputs(after_ids)
                polls["input"] = len(batch) - 1
                next_input = now + INPUT_POLL_S
            with self._lock:
                fresh_read = any(not wait.polled for wait in self._reads.values())
                if self._reads and (fresh_read or now >= next_read):
                    for wait in self._reads.values():
                        wait.polled = True
                    batch.read_marks(list(self._reads))
                    polls["read"] = len(batch) - 1
                    next_read = now + READ_POLL_S
            sessions = self._sessions()
            if sessions and now >= next_cancel:
                batch.cancelled([request_id for _, request_id in sessions])
                polls["cancel"] = len(batch) - 1
                next_cancel = now + CANCEL_POLL_S
            free = self._free_slots()
            if now >= next_beat:
                batch.heartbeat(sessions, free)
                polls["beat"] = len(batch) - 1
                next_beat = now + self._beat_every_s
            elif free != self._reported_free:
                batch.report_capacity(free)
                polls["beat"] = len(batch) - 1
            if len(batch):
                self._execute(batch, answers, polls, free)
            if self._finished_since_trim and now - last_trim >= TRIM_EVERY_S:
                self._finished_since_trim = False
                last_trim = now
                try:
                    self.lane.trim()
                except Exception as error:
                    log.warning("could not trim the request stream: %s", error)
            if stopping and not self._calls:
                return

    def _execute(
        self,
        batch: WorkerBatch,
        answers: list[tuple[asyncio.Future[Any], int]],
        polls: dict[str, int],
        free: int,
    ) -> None:
        try:
            results = batch.execute()
        except Exception as error:
            log.warning("real-time lane round failed: %s", error)
            self._deliver([(future, error) for future, _ in answers], {}, {})
            time.sleep(RETRY_AFTER_ERROR_S)
            return
        self.rounds += 1
        if "beat" in polls and not isinstance(results[polls["beat"]], Exception):
            self._reported_free = free
        inputs: dict[str, Pieces] = {}
        if "input" in polls and not isinstance(results[polls["input"]], Exception):
            inputs = results[polls["input"]]
        marks: dict[str, int | None] = {}
        if "read" in polls:
            read = results[polls["read"]]
            if isinstance(read, Exception):
                log.warning("could not read the read marks: %s", read)
            else:
                marks = read
        if "cancel" in polls:
            cancelled = results[polls["cancel"]]
            if isinstance(cancelled, Exception):
                log.warning("could not read cancel marks: %s", cancelled)
            elif cancelled:
                self._on_cancelled(cancelled)
        self._deliver([(future, results[i]) for future, i in answers], inputs, marks)

    def _deliver(
        self,
        answers: list[tuple[asyncio.Future[Any], Any]],
        inputs: dict[str, Pieces],
        marks: dict[str, int | None],
    ) -> None:
        """Settle this round's futures on the loop: one wake-up for all of them."""
        now = time.monotonic()
        ready: list[tuple[asyncio.Future[Any], Any]] = list(answers)
        with self._lock:
            for rid, read in list(self._reads.items()):
                if read.future.done():
                    del self._reads[rid]
                    continue
                timed_out = now - read.since >= READ_WAIT_S
                if rid not in marks:  # not read this round (or the read failed)
                    if timed_out:
                        del self._reads[rid]
                        ready.append((read.future, -1))
                    continue
                mark = marks[rid]
                if mark is None or mark >= read.need_ms or timed_out:
                    del self._reads[rid]
                    ready.append((read.future, mark))
            for rid, wait in list(self._inputs.items()):
                pieces = inputs.get(rid)
                if pieces or now - wait.since >= INPUT_WAIT_S or wait.future.done():
                    del self._inputs[rid]
                    ready.append((wait.future, pieces or []))
        if not ready:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self.loop.call_soon_threadsafe(_settle, ready)


def _settle(answers: list[tuple[asyncio.Future[Any], Any]]) -> None:
    for future, result in answers:
        if future.done():
            continue
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)
