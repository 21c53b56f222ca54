"""A fake real-time worker for testing the fronts: the real lane protocol, synthetic audio.

:class:`FakeRealtimeWorker` talks to Redis through
:class:`voicelane.core.realtime_lane.RealtimeWorkerClient` exactly as a GPU worker does — reports
capacity, claims requests from the consumer group, refreshes the session heartbeat and the
pending entry, reads the input stream, honours cancel marks and deadlines, and writes
``caption`` / ``audio`` / ``end`` / ``error`` events — but instead of an engine it speaks every
sentence as a sine tone encoded with the real Opus encoder
(:class:`voicelane.common.audio.OpusStreamEncoder`), ``frames_per_sentence`` frames of 20 ms each.

Knobs (:class:`FakeWorkerKnobs`) make it slow, hold it at a gate, let it die mid-stream
(stop heartbeating and writing, never acking), emit an error, or never claim anything.
Everything it does is recorded for the tests, which poll those records with a deadline.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from voicelane.common.audio import OpusStreamEncoder, PcmF32
from voicelane.core.realtime_lane import (
    EventKind,
    InputKind,
    OutputEvent,
    RealtimeWorkerClient,
    StreamRequest,
    now_ms,
)
from voicelane.core.settings import RealtimeSettings

log = logging.getLogger(__name__)

_SENTENCE_END = re.compile(r"[.!?。！？]+(\s+|$)")
_GATE_POLL_S = 0.02
_GATE_TIMEOUT_S = 20.0
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
    error_code: str = "INTERNAL"
    error_message: str = "the engine failed"
    trailing_caption: str | None = None
    """Caption (without audio) written just before ``end``."""


@dataclass
class _Session:
    entry_id: str
    request: StreamRequest
    alive: bool = True
    audio_events: int = 0
    next_seq: int = 0
    pts_ms: int = 0
    """Presentation time of the next audio event."""
    text_offset: int = 0
    encoder: OpusStreamEncoder | None = None
    sentence: int = 0


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


class _CancelledError(Exception):
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
        self._stop = threading.Event()
        self._gate = threading.Event()
        self._threads: list[threading.Thread] = []

    # ---- control -------------------------------------------------------------------------

    def start(self) -> FakeRealtimeWorker:
        self.lane.ensure_group()
        self.lane.report_capacity(self.knobs.slots)
        for target in (self._claim_loop, self._heartbeat_loop):
            self._spawn(target)
        return self

    def stop(self) -> None:
        self._stop.set()
        self._gate.set()
        for thread in list(self._threads):
            thread.join(10)
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

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    # ---- the loops -----------------------------------------------------------------------

    def _claim_loop(self) -> None:
        interval_s = self.timings.worker_ttl_s / 4
        last_report = 0.0
        while not self._stop.is_set():
            with self._lock:
                busy = sum(1 for s in self._sessions.values() if s.alive)
            free = max(0, self.knobs.slots - busy)
            if time.monotonic() - last_report >= interval_s:
                self.lane.report_capacity(free)
                last_report = time.monotonic()
            if not self.knobs.claim or free == 0:
                self._stop.wait(0.02)
                continue
            for entry_id, request in self.lane.claim_new(free, block_ms=50):
                session = _Session(entry_id, request)
                with self._lock:
                    self._sessions[request.request_id] = session
                    self.record.claimed.append(request)
                self.lane.session_heartbeat(request.request_id)
                self._spawn(self._serve, session)

    def _heartbeat_loop(self) -> None:
        interval_s = self.timings.heartbeat_ttl_s / 4
        while not self._stop.wait(interval_s):
            with self._lock:
                alive = [s for s in self._sessions.values() if s.alive]
            for session in alive:
                self.lane.session_heartbeat(session.request.request_id)
            self.lane.refresh([s.entry_id for s in alive])

    # ---- one session ---------------------------------------------------------------------

    def _serve(self, session: _Session) -> None:
        request = session.request
        rid = request.request_id
        session.encoder = OpusStreamEncoder(request.sample_rate_hz)
        self.lane.take_ownership(rid)
        try:
            if request.expired:
                self._write(session, _error("DEADLINE_EXCEEDED", "the deadline passed"))
            else:
                self._converse_or_speak(session)
        except _DiedError:
            with self._lock:
                session.alive = False
                self.record.died.append(rid)
            return  # no ack, no more heartbeats: a crash
        except _CancelledError:
            with self._lock:
                self.record.cancelled.append(rid)
        except _FailedError:
            with self._lock:
                self.record.failed.append(rid)
        except Exception:
            log.exception("fake worker failed on %s", rid)
        with self._lock:
            session.alive = False
        self.lane.finish(session.entry_id, rid)
        with self._lock:
            self.record.finished.append(rid)

    def _converse_or_speak(self, session: _Session) -> None:
        rid = session.request.request_id
        after_id = "0-0"
        pending = ""
        while not self._stop.is_set():
            self._check(session)
            for entry_id, piece in self.lane.read_input(rid, after_id, block_ms=50):
                after_id = entry_id
                with self._lock:
                    self.record.inputs.setdefault(rid, []).append((piece.kind.value, piece.text))
                if piece.kind is InputKind.TEXT:
                    pending += piece.text
                    pending = self._speak_complete(session, pending)
                elif piece.kind is InputKind.FLUSH:
                    pending = self._speak(session, pending)
                if piece.kind is InputKind.END:
                    self._speak(session, pending)
                    self._end(session)
                    return

    def _speak_complete(self, session: _Session, pending: str) -> str:
        """Speak every finished sentence of ``pending``; return the unfinished rest."""
        while (match := _SENTENCE_END.search(pending)) is not None:
            pending = self._speak(session, pending[: match.end()]) + pending[match.end() :]
        return pending

    def _speak(self, session: _Session, text: str) -> str:
        """One sentence: its caption, then its audio. Returns ""."""
        spoken = text.strip()
        start = session.text_offset + len(text) - len(text.lstrip())
        session.text_offset += len(text)
        if not spoken:
            return ""
        assert session.encoder is not None
        self._write(
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
        for first in range(0, len(packets), step):
            self._audio(session, packets[first : first + step])
        session.sentence += 1
        return ""

    def _audio(self, session: _Session, packets: list[bytes]) -> None:
        knobs = self.knobs
        self._check(session)
        self._write(
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
            ),
        )
        session.next_seq += 1
        session.pts_ms += 20 * len(packets)
        session.audio_events += 1
        if knobs.event_delay_s:
            self._stop.wait(knobs.event_delay_s)
        count = session.audio_events
        if knobs.error_after_events is not None and count >= knobs.error_after_events:
            self._write(session, _error(knobs.error_code, knobs.error_message))
            raise _FailedError
        if knobs.die_after_events is not None and count >= knobs.die_after_events:
            raise _DiedError
        if knobs.hold_after_events is not None and count >= knobs.hold_after_events:
            self._hold(session)

    def _hold(self, session: _Session) -> None:
        deadline = time.monotonic() + _GATE_TIMEOUT_S
        while not self._gate.wait(_GATE_POLL_S) and time.monotonic() < deadline:
            self._check(session)

    def _end(self, session: _Session) -> None:
        assert session.encoder is not None
        if self.knobs.trailing_caption is not None:
            self._write(
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
        self._write(
            session,
            OutputEvent(
                EventKind.END,
                seq=session.next_seq,
                pts_ms=session.pts_ms,
                sentence=session.sentence,
            ),
        )

    def _check(self, session: _Session) -> None:
        if self.lane.cancelled(session.request.request_id):
            raise _CancelledError
        if self._stop.is_set():
            raise _DiedError

    def _write(self, session: _Session, event: OutputEvent) -> None:
        if not self.lane.append_output(session.request.request_id, event):
            raise _DiedError  # another worker owns the request now


def _error(code: str, message: str) -> OutputEvent:
    return OutputEvent(EventKind.ERROR, code=code, text=message)


def _tone(sample_rate_hz: int, knobs: FakeWorkerKnobs) -> PcmF32:
    samples = sample_rate_hz * 20 // 1000 * knobs.frames_per_sentence
    t = np.arange(samples, dtype=np.float32) / np.float32(sample_rate_hz)
    tone: PcmF32 = (0.3 * np.sin(2 * np.pi * _TONE_HZ * t)).astype(np.float32)
    return tone
