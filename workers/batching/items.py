"""What the batcher queues: one utterance to render (:class:`Item`), for a future (whole
utterance: its PCM, or a :class:`~voicelane.workers.engines.base.TimedAudio` with its word
events) or an :class:`AudioStream` (chunks as the engine makes them, and its words), in a
priority class.

Everything about one item's lifecycle is here — start, deliver, complete, fail, end when it
is gone, reset for a retry — so that the static loop and the step loop treat an item the
same way.
"""

from __future__ import annotations

import enum
import queue
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from voicelane.common.errors import CancelledError, DeadlineExceededError
from voicelane.workers.engines.base import PcmF32, TimedAudio, Utterance, WordEvent

_EMPTY = np.zeros(0, dtype=np.float32)


class Priority(enum.StrEnum):
    REALTIME = "realtime"
    BATCH = "batch"


@dataclass(frozen=True, slots=True)
class StreamWords:
    """Word events of a streamed utterance (read with :meth:`AudioStream.read_event`): the
    words that start in the audio delivered with or before the next chunk. Sample positions
    count from the start of the utterance (not of a chunk)."""

    words: tuple[WordEvent, ...]


StreamEvent = PcmF32 | StreamWords
"""What :meth:`AudioStream.read_event` returns: a chunk of audio, or word events."""


class AudioStream:
    """The chunks of one streamed utterance, in order, as the engine produces them.

    Iterate it, or call :meth:`read`. It ends (``read`` returns None, iteration stops) when
    the utterance is complete or after :meth:`cancel`; an engine failure is raised from
    ``read``.

    Word events (engines that know them: ``Engine.word_timings``) come in order with the
    audio, each batch of them just before the chunk they belong with. :meth:`read` and
    iteration return chunks only and collect the words on the way in :attr:`words`; a reader
    that wants them as they come calls :meth:`read_event` / :meth:`read_event_nowait`.
    """

    _END: object = object()

    def __init__(self, on_cancel: Callable[[], None]) -> None:
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._on_cancel = on_cancel
        self._cancelled = threading.Event()
        self._finished = False
        self._listener: Callable[[], None] | None = None
        self.words: list[WordEvent] = []
        """Every word event read so far (by any of the read methods)."""

    def listen(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the batcher's thread; keep it short) whenever something new
        can be read: for a reader that is not a thread, e.g. an asyncio task."""
        self._listener = callback
        if not self._queue.empty():
            callback()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Stop this utterance: queued, it never runs; running, it gets no more audio."""
        if not self._cancelled.is_set():
            self._cancelled.set()
            self._offer(self._END)
            self._on_cancel()

    def read(self, timeout_s: float | None = None) -> PcmF32 | None:
        """The next chunk, or None at the end. Raises TimeoutError after ``timeout_s``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                event = self.read_event(left)
            except TimeoutError:
                raise TimeoutError(f"no audio within {timeout_s} s") from None
            if not isinstance(event, StreamWords):
                return event

    def read_nowait(self) -> PcmF32 | None:
        """The next chunk, or None at the end; BlockingIOError when none is ready yet."""
        while True:
            event = self.read_event_nowait()
            if not isinstance(event, StreamWords):
                return event

    def read_event(self, timeout_s: float | None = None) -> StreamEvent | None:
        """The next chunk or word events, or None at the end. Raises TimeoutError after
        ``timeout_s``."""
        if self._finished:
            return None
        try:
            entry = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError(f"no audio within {timeout_s} s") from None
        return self._take(entry)

    def read_event_nowait(self) -> StreamEvent | None:
        """The next chunk or word events, or None at the end; BlockingIOError when nothing
        is ready yet."""
        if self._finished:
            return None
        try:
            entry = self._queue.get_nowait()
        except queue.Empty:
            raise BlockingIOError("no audio ready") from None
        return self._take(entry)

    def _take(self, entry: object) -> StreamEvent | None:
        if entry is self._END:
            self._finished = True
            return None
        if isinstance(entry, BaseException):
            self._finished = True
            raise entry
        if isinstance(entry, StreamWords):
            self.words.extend(entry.words)
            return entry
        assert isinstance(entry, np.ndarray)
        return entry

    def __iter__(self) -> Iterator[PcmF32]:
        while (chunk := self.read()) is not None:
            yield chunk

    # -- the scheduler's side, through Item only --
    def _put(self, entry: PcmF32 | StreamWords) -> None:
        if not self._cancelled.is_set():
            self._offer(entry)

    def _end(self, error: BaseException | None = None) -> None:
        self._offer(error if error is not None else self._END)

    def _offer(self, entry: object) -> None:
        self._queue.put(entry)
        listener = self._listener
        if listener is not None:
            listener()


@dataclass(eq=False, slots=True)
class Item:
    """One queued utterance and whoever waits for it (a future or a stream)."""

    utterance: Utterance
    priority: Priority
    key: Hashable
    """The engine's batch key: only items with the same key share a static batch."""
    cost: int
    """Its share of ``max_batch_cost`` (its text's length)."""
    submitted_at: float
    deadline_s: float | None
    group: str = ""
    """Who the item is for (the tenant): batch-class heads go round the groups."""
    future: Future[Any] | None = None
    """Answered with the PCM, or with a :class:`TimedAudio` when :attr:`timed`."""
    timed: bool = False
    stream: AudioStream | None = None
    chunks: list[PcmF32] = field(default_factory=list)
    words: list[WordEvent] = field(default_factory=list)
    delivered: bool = False
    """True once any audio went out to a stream (it can no longer be rendered again)."""
    samples: int = 0
    """Audio produced so far (for the real-time factor)."""

    @property
    def cancelled(self) -> bool:
        if self.stream is not None:
            return self.stream.cancelled
        assert self.future is not None
        return self.future.cancelled()

    def expired(self, now: float) -> bool:
        return self.deadline_s is not None and now >= self.deadline_s

    def gone(self, now: float) -> bool:
        """Cancelled, or past its deadline: nobody will use more of its audio."""
        return self.cancelled or self.expired(now)

    def start(self) -> bool:
        """Mark running; False if the caller cancelled first."""
        if self.stream is not None:
            return not self.stream.cancelled
        assert self.future is not None
        return self.future.running() or self.future.set_running_or_notify_cancel()

    def fail(self, error: BaseException) -> None:
        if self.stream is not None:
            self.stream._end(error)
            return
        future = self.future
        assert future is not None
        if future.done():
            return
        if future.running() or future.set_running_or_notify_cancel():
            future.set_exception(error)

    def end_gone(self) -> None:
        """End an item that is :meth:`gone` while it renders: a cancelled stream just ends,
        a cancelled future fails with CancelledError, an expired item with
        DeadlineExceededError."""
        if self.stream is not None and self.stream.cancelled:
            self.stream._end()
        elif self.cancelled:
            self.fail(CancelledError("cancelled while rendering"))
        else:
            self.fail(DeadlineExceededError("deadline passed while rendering"))

    def deliver(self, chunk: PcmF32, words: tuple[WordEvent, ...] = ()) -> None:
        """The next piece of the utterance's audio, and the word events that came with it
        (samples from the utterance's start): a stream gets the words first, then the
        chunk."""
        if words:
            if self.stream is not None:
                self.stream._put(StreamWords(words))
                self.delivered = True
            else:
                self.words.extend(words)
        if chunk.size == 0:
            return
        self.samples += chunk.size
        if self.stream is not None:
            self.stream._put(chunk)
            self.delivered = True
        else:
            self.chunks.append(chunk)

    def complete(self) -> None:
        if self.stream is not None:
            self.stream._end()
        elif self.future is not None and not self.future.done():
            audio = np.concatenate(self.chunks) if self.chunks else _EMPTY.copy()
            pcm = audio.astype(np.float32, copy=False)
            self.future.set_result(TimedAudio(pcm, tuple(self.words)) if self.timed else pcm)

    def reset(self) -> None:
        """Forget the audio made so far, to render the item again from its start (after an
        out-of-memory or a preemption; only for an item that :attr:`delivered` nothing)."""
        assert not self.delivered, "an item that streamed audio cannot be rendered again"
        self.chunks.clear()
        self.words.clear()
        self.samples = 0
