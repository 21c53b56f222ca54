"""A fake real-time worker for testing the fronts: the worker's own lane I/O, synthetic audio.

:class:`FakeRealtimeWorker` talks to Redis through the very layer a GPU worker uses: it claims
requests with :class:`voicelane.core.lane.worker.RealtimeWorkerClient` and makes every session
call through :class:`voicelane.workers.realtime_io.LaneIO` — the batched rounds of
:class:`~voicelane.core.lane.worker.WorkerBatch` calls (ownership, input, fenced appends, cancel
marks, heartbeats, capacity reports, acks). A change of the worker's protocol is a change of
this fake's, so the fronts' tests cannot pass against a protocol the worker no longer speaks.

What it fakes is the synthesis: instead of a batcher and an engine, every sentence is a sine
tone encoded with the real Opus encoder (:class:`voicelane.common.audio.OpusStreamEncoder`),
``frames_per_sentence`` frames of 20 ms, written ``frames_per_event`` packets per audio entry
after the sentence's caption. Sessions run as asyncio tasks on the fake's own loop, as the
worker's do.

Knobs (:class:`FakeWorkerKnobs`) make it slow, hold it at a gate, let it die mid-stream
(stop heartbeating and writing, never acking), fail with a typed error (which crosses the lane
whole, as the worker's does), or never claim anything. Everything it does is recorded for the
tests, which poll those records with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from voicelane.common.audio import OpusStreamEncoder, PcmF32
from voicelane.common.errors import DeadlineExceededError, EngineError, VoicelaneError
from voicelane.core.lane.messages import (
    EventKind,
    InputKind,
    InputPiece,
    OutputEvent,
    StreamRequest,
    now_ms,
)
from voicelane.core.lane.worker import RealtimeWorkerClient
from voicelane.core.settings import RealtimeSettings
from voicelane.core.word_timings import MarkTiming, WordTiming
from voicelane.workers.realtime_io import LaneIO

log = logging.getLogger(__name__)

_SENTENCE_END = re.compile(r"[.!?。！？]+(\s+|$)")
_GATE_POLL_S = 0.02
_GATE_TIMEOUT_S = 20.0
_CLAIM_BLOCK_MS = 50
_IDLE_POLL_S = 0.02
_TONE_HZ = 220.0


@dataclass
class FakeWorkerKnobs:
    slots: int = 8
    """Free real-time slots reported (0: the worker is registered but full)."""
    claim: bool = True
    """False: report capacity but never claim (nobody picks requests up)."""
    frames_per_sentence: int = 12
    frames_per_event: int = 5
    event_delay_s: float = 0.0
    """Pause after each audio event (a slow worker)."""
    hold_after_events: int | None = None
    """After this many audio events, wait for :meth:`FakeRealtimeWorker.release`."""
    die_after_events: int | None = None
    """After this many audio events, stop heartbeating and writing (a crashed worker)."""
    error_after_events: int | None = None
    error: VoicelaneError = field(default_factory=lambda: EngineError("the engine failed"))
    """What the worker fails with after ``error_after_events`` (sent as the worker sends it)."""
    trailing_caption: str | None = None
    """Caption (without audio) written just before ``end``."""
    words: bool = False
    """Time each word (run of non-spaces) of a sentence evenly over the sentence's audio and
    send them with its first audio entry, as the worker sends an engine's word timings."""
    trailing_marks: tuple[str, ...] = ()
    """SSML marks reported with ``end`` (at the end of the audio)."""


class _Stop(enum.Enum):
    CLIENT = "the client cancelled"
    SHUTDOWN = "the fake worker is stopping"


@dataclass(eq=False)
class _Session:
    entry_id: str
    request: StreamRequest
    audio_events: int = 0
    next_seq: int = 0
    pts_ms: int = 0
    """Presentation time of the next audio event."""
    text_offset: int = 0
    encoder: OpusStreamEncoder | None = None
    sentence: int = 0
    task: asyncio.Task[None] | None = None
    running: bool = False
    stopped: _Stop | None = None


@dataclass
class WorkerRecord:
    claimed: list[StreamRequest] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    died: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    inputs: dict[str, list[tuple[str, str]]] = field(default_factory=dict)


class _DiedError(Exception):
    pass


class _FailedError(Exception):
    pass


class FakeRealtimeWorker:
    """See the module docstring. ``start()`` / ``stop()``; use as a context manager."""

    def __init__(
        self,
        redis_url: str,
        timings: RealtimeSettings,
        knobs: FakeWorkerKnobs | None = None,
        *,
        name: str = "fake-rt",
    ) -> None:
        self.knobs = knobs or FakeWorkerKnobs()
        self.timings = timings
        self.lane = RealtimeWorkerClient.from_url(redis_url, name, timings)
        self.record = WorkerRecord()
        self._lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        """The sessions being served (heartbeats, cancel polls), by request id."""
        self._stop = threading.Event()
        self._gate = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.io = LaneIO(
            self.lane,
            timings,
            self.loop,
            sessions=self._serving,
            free_slots=self._free_slots,
            on_cancelled=self._cancelled,
        )
        self._loop_thread = threading.Thread(
            target=self._run_loop, name="fake-rt-loop", daemon=True
        )
        self._claim_thread = threading.Thread(
            target=self._claim_loop, name="fake-rt-claims", daemon=True
        )

    # ---- control -------------------------------------------------------------------------

    def start(self) -> FakeRealtimeWorker:
        self.lane.ensure_group()
        self.lane.report_capacity(self.knobs.slots)
        self._loop_thread.start()
        self.io.start()
        self._claim_thread.start()
        return self

    def stop(self) -> None:
        """Stop as a worker stops: sessions left unacknowledged, the capacity withdrawn."""
        self._stop.set()
        self._gate.set()
        self._claim_thread.join(10)
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(self._stop_sessions(), self.loop).result(10)
        self.io.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._loop_thread.join(10)
        self.lane.withdraw()
        self.lane.redis.close()

    def release(self) -> None:
        """Open the gate of ``hold_after_events``."""
        self._gate.set()

    def __enter__(self) -> FakeRealtimeWorker:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def snapshot(self) -> WorkerRecord:
        with self._lock:
            return WorkerRecord(
                claimed=list(self.record.claimed),
                finished=list(self.record.finished),
                cancelled=list(self.record.cancelled),
                died=list(self.record.died),
                failed=list(self.record.failed),
                inputs={k: list(v) for k, v in self.record.inputs.items()},
            )

    # ---- what LaneIO asks (its thread) -----------------------------------------------------

    def _serving(self) -> tuple[tuple[str, str], ...]:
        with self._lock:
            return tuple((s.entry_id, rid) for rid, s in self._sessions.items())

    def _free_slots(self) -> int:
        with self._lock:
            return max(0, self.knobs.slots - len(self._sessions))

    def _cancelled(self, request_ids: set[str]) -> None:
        with self._lock:
            sessions = [s for rid, s in self._sessions.items() if rid in request_ids]
        for session in sessions:
            with contextlib.suppress(RuntimeError):  # the loop closed
                self.loop.call_soon_threadsafe(self._stop_session, session, _Stop.CLIENT)

    # ---- threads ---------------------------------------------------------------------------

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def _claim_loop(self) -> None:
        while not self._stop.is_set():
            free = self._free_slots()
            if not self.knobs.claim or free == 0:
                self._stop.wait(_IDLE_POLL_S)
                continue
            for entry_id, request in self.lane.claim_new(free, block_ms=_CLAIM_BLOCK_MS):
                session = _Session(entry_id, request)
                with self._lock:
                    self._sessions[request.request_id] = session
                    self.record.claimed.append(request)
                self.loop.call_soon_threadsafe(self._spawn, session)
                self.io.poke()

    # ---- sessions (the loop) ---------------------------------------------------------------

    def _spawn(self, session: _Session) -> None:
        session.task = self.loop.create_task(self._serve(session))

    def _stop_session(self, session: _Session, reason: _Stop) -> None:
        if session.stopped is not None:
            return
        session.stopped = reason
        if session.task is not None and session.running:
            session.task.cancel()
        # Not running yet: _serve sees ``stopped`` first thing.

    async def _stop_sessions(self) -> None:
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            self._stop_session(session, _Stop.SHUTDOWN)
        tasks = [s.task for s in sessions if s.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)

    def _leave(self, session: _Session, into: list[str] | None = None) -> None:
        """The session is no longer served (no more heartbeats, its slot free again)."""
        with self._lock:
            self._sessions.pop(session.request.request_id, None)
            if into is not None:
                into.append(session.request.request_id)
        self.io.poke()

    async def _serve(self, session: _Session) -> None:
        request = session.request
        rid = request.request_id
        session.running = True
        session.encoder = OpusStreamEncoder(request.sample_rate_hz)
        try:
            if session.stopped is not None:
                raise asyncio.CancelledError
            pieces = await self.io.begin_session(rid)
            if pieces is None:  # another worker had finished it: acknowledge, as the real one
                pass
            elif request.expired:
                expired = DeadlineExceededError("the deadline passed")
                await self._write(session, OutputEvent.failure(expired))
            else:
                await self._converse_or_speak(session, pieces)
        except _DiedError:
            self._leave(session, self.record.died)
            return  # no ack, no more heartbeats: a crash
        except asyncio.CancelledError:
            if session.stopped is not _Stop.CLIENT:
                self._leave(session, self.record.died)
                return  # stopping: left pending, as a worker that stops leaves it
            with self._lock:
                self.record.cancelled.append(rid)
        except _FailedError:
            with self._lock:
                self.record.failed.append(rid)
        except Exception:
            log.exception("fake worker failed on %s", rid)
        self._leave(session)
        try:
            await self.io.finish(session.entry_id, rid)
        except Exception:
            log.exception("fake worker could not acknowledge %s", rid)
            return
        with self._lock:
            self.record.finished.append(rid)

    async def _converse_or_speak(
        self, session: _Session, pieces: Sequence[tuple[str, InputPiece]]
    ) -> None:
        rid = session.request.request_id
        after_id = "0-0"
        pending = ""
        while True:
            for entry_id, piece in pieces:
                after_id = entry_id
                with self._lock:
                    self.record.inputs.setdefault(rid, []).append((piece.kind.value, piece.text))
                if piece.kind is InputKind.TEXT:
                    pending += piece.text
                    pending = await self._speak_complete(session, pending)
                elif piece.kind is InputKind.FLUSH:
                    pending = await self._speak(session, pending)
                if piece.kind is InputKind.END:
                    await self._speak(session, pending)
                    await self._end(session)
                    return
            pieces = await self.io.read_input(rid, after_id)

    async def _speak_complete(self, session: _Session, pending: str) -> str:
        """Speak every finished sentence of ``pending``; return the unfinished rest."""
        while (match := _SENTENCE_END.search(pending)) is not None:
            pending = await self._speak(session, pending[: match.end()]) + pending[match.end() :]
        return pending

    async def _speak(self, session: _Session, text: str) -> str:
        """One sentence: its caption, then its audio. Returns ""."""
        spoken = text.strip()
        start = session.text_offset + len(text) - len(text.lstrip())
        session.text_offset += len(text)
        if not spoken:
            return ""
        assert session.encoder is not None
        await self._write(
            session,
            OutputEvent(
                EventKind.CAPTION,
                seq=session.next_seq,
                pts_ms=session.pts_ms,
                sentence=session.sentence,
                text=spoken,
                start=start,
                end=start + len(spoken),
            ),
        )
        packets = session.encoder.encode(_tone(session.request.sample_rate_hz, self.knobs))
        packets += session.encoder.flush()
        step = self.knobs.frames_per_event
        words = _words(spoken, start, session.pts_ms, 20 * len(packets)) if self.knobs.words else ()
        for first in range(0, len(packets), step):
            await self._audio(session, packets[first : first + step], words if first == 0 else ())
        session.sentence += 1
        return ""

    async def _audio(
        self, session: _Session, packets: list[bytes], words: tuple[WordTiming, ...] = ()
    ) -> None:
        knobs = self.knobs
        await self._write(
            session,
            OutputEvent(
                EventKind.AUDIO,
                seq=session.next_seq,
                data=tuple(packets),
                pts_ms=session.pts_ms,
                sample_rate_hz=session.request.sample_rate_hz,
                server_ts_ms=now_ms(),
                client_ts_ms=session.request.client_ts_ms,
                sentence=session.sentence,
                words=words,
            ),
        )
        session.next_seq += 1
        session.pts_ms += 20 * len(packets)
        session.audio_events += 1
        if knobs.event_delay_s:
            await asyncio.sleep(knobs.event_delay_s)
        count = session.audio_events
        if knobs.error_after_events is not None and count >= knobs.error_after_events:
            await self._write(session, OutputEvent.failure(knobs.error))
            raise _FailedError
        if knobs.die_after_events is not None and count >= knobs.die_after_events:
            raise _DiedError
        if knobs.hold_after_events is not None and count >= knobs.hold_after_events:
            await self._hold()

    async def _hold(self) -> None:
        """Wait at the gate (a cancel or a stop ends the wait: the task is cancelled)."""
        deadline = time.monotonic() + _GATE_TIMEOUT_S
        while not self._gate.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(_GATE_POLL_S)

    async def _end(self, session: _Session) -> None:
        if self.knobs.trailing_caption is not None:
            await self._write(
                session,
                OutputEvent(
                    EventKind.CAPTION,
                    seq=session.next_seq,
                    pts_ms=session.pts_ms,
                    sentence=session.sentence,
                    text=self.knobs.trailing_caption,
                    start=session.text_offset,
                    end=session.text_offset,
                ),
            )
        await self._write(
            session,
            OutputEvent(
                EventKind.END,
                seq=session.next_seq,
                pts_ms=session.pts_ms,
                sentence=session.sentence,
                marks=tuple(MarkTiming(name, session.pts_ms) for name in self.knobs.trailing_marks),
            ),
        )

    async def _write(self, session: _Session, event: OutputEvent) -> None:
        if not await self.io.append(session.request.request_id, [event]):
            raise _DiedError  # another worker owns the request now


def _tone(sample_rate_hz: int, knobs: FakeWorkerKnobs) -> PcmF32:
    samples = sample_rate_hz * 20 // 1000 * knobs.frames_per_sentence
    t = np.arange(samples, dtype=np.float32) / np.float32(sample_rate_hz)
    tone: PcmF32 = (0.3 * np.sin(2 * np.pi * _TONE_HZ * t)).astype(np.float32)
    return tone


def _words(sentence: str, start: int, pts_ms: int, duration_ms: int) -> tuple[WordTiming, ...]:
    """The sentence's words (runs of non-spaces; spans in the whole text) over its audio."""
    found = list(re.finditer(r"\S+", sentence))
    each_ms = duration_ms // max(1, len(found))
    return tuple(
        WordTiming(
            m.group(),
            pts_ms + i * each_ms,
            pts_ms + (i + 1) * each_ms,
            start + m.start(),
            start + m.end(),
        )
        for i, m in enumerate(found)
    )
