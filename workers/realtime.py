"""The real-time consumer: serves the lane's stream requests inside a GPU worker process.

It shares the worker's one batcher with the batch lane and submits at ``realtime``
priority, so a live voice never waits behind a book. One thread claims requests from the
Redis stream (new ones with XREADGROUP, abandoned ones with XAUTOCLAIM), refreshes the
heartbeats of the sessions it serves and reports free slots for the fronts' admission
control; each session runs in its own thread:

1. drop it if its deadline passed (it never reaches a batch) or the voice is unknown;
2. read its text as it arrives and cut it into sentences (``core.text``), sentence by
   sentence as they complete (Converse) or all at once (Synthesize);
3. submit the next sentence to the batcher only while less than ``lookahead_s`` of audio
   is ahead of playback — real-time work stays just ahead of the listener;
4. resample, encode in the request's encoding — 20 ms Opus packets (the first goes out
   alone, then ``frames_per_chunk`` per entry), or the bytes of a file / raw PCM for a front
   that needs those — and append to the request's output stream with contiguous ``seq`` and
   ``pts_ms``, a caption before each sentence's audio, ``end`` last;
5. check the cancel mark between chunks: a cancelled stream stops within one batch step.

A worker that takes over a dead worker's request continues after the last sentence that
had started: the client may hear a gap, never a repeated or reordered ``seq``. (A byte
stream cannot continue mid-file: once part of it was sent, a takeover ends it with
UNAVAILABLE.) Only the request's current owner can append
(``RealtimeWorkerClient.append_output``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from core.audio import FRAME_DURATION_MS, OpusStreamEncoder, StreamResampler
from core.audio.stream import ByteStreamEncoder
from core.errors import (
    CancelledError,
    DeadlineExceededError,
    ShuttingDownError,
    UnavailableError,
    VoicelaneError,
    grpc_status_name,
)
from core.realtime_lane import (
    EventKind,
    InputKind,
    InputPiece,
    OutputEvent,
    RealtimeWorkerClient,
    StreamRequest,
    now_ms,
)
from core.settings import RealtimeSettings
from core.text import Segment, split_sentences
from workers.batcher import Batcher, Priority
from workers.engines import PcmF32, Utterance

log = logging.getLogger(__name__)

_READ_BLOCK_MS = 100
_POLL_S = 0.02
_CANCEL_CHECK_S = 0.05


class _SupersededError(Exception):
    """Another worker owns the request now: stop without writing anything more."""


FIRST_SLICE_S = 0.04
SLICE_S = 0.2


def _slices(pcm: PcmF32, rate_hz: int, started: bool) -> Iterator[PcmF32]:
    """An engine chunk in short pieces, so the first packet is out before the rest is
    resampled and encoded (an engine may hand over a whole sentence at once)."""
    position = 0
    if not started:
        first = int(rate_hz * FIRST_SLICE_S)
        yield pcm[:first]
        position = first
    step = int(rate_hz * SLICE_S)
    for start in range(position, len(pcm), step):
        yield pcm[start : start + step]


class _OpusOutput:
    """Encodes 20 ms Opus packets and groups them into output entries: the very first packet
    alone (time to first audio), then ``frames_per_chunk`` per entry; keeps ``seq``
    contiguous and ``pts_ms``."""

    def __init__(self, session: Session, resume: _Resume, rate_hz: int) -> None:
        settings = session.settings
        self.session = session
        self.encoder = OpusStreamEncoder(rate_hz, bitrate_bps=settings.opus_bitrate_bps)
        self.seq = resume.next_seq
        self.sent_ms = resume.pts_ms
        """pts of the first pending packet."""
        self.pending: list[bytes] = []
        self.frames_per_chunk = settings.frames_per_chunk
        self.first_sent = self.seq > 0

    @property
    def produced_ms(self) -> int:
        return self.sent_ms + FRAME_DURATION_MS * len(self.pending)

    def write(self, pcm: PcmF32, sentence: int) -> None:
        self.pending.extend(self.encoder.encode(pcm))
        self.drain(sentence, final=False)

    def end_sentence(self, sentence: int) -> None:
        self.drain(sentence, final=True)

    def close(self) -> None:
        self.pending.extend(self.encoder.flush())
        self.drain(-1, final=True)

    def drain(self, sentence: int, *, final: bool) -> None:
        while self.pending:
            size = min(self.frames_per_chunk, len(self.pending)) if self.first_sent else 1
            if size < self.frames_per_chunk and self.first_sent and not final:
                return
            self.session.audio(self.seq, self.pending[:size], self.sent_ms, sentence)
            self.seq += 1
            self.sent_ms += FRAME_DURATION_MS * size
            self.pending = self.pending[size:]
            self.first_sent = True


class _ByteOutput:
    """Encodes a byte stream (a file, or raw PCM) and appends its pieces as they are ready;
    ``pts_ms`` of a piece is the audio written before it."""

    def __init__(self, session: Session, rate_hz: int) -> None:
        request = session.request
        self.session = session
        self.rate_hz = rate_hz
        self.encoder = ByteStreamEncoder(
            request.encoding, rate_hz, bitrate_bps=session.settings.opus_bitrate_bps
        )
        self.seq = 0
        self.sent_ms = 0
        self.first_sent = False

    @property
    def produced_ms(self) -> int:
        return self.encoder.samples_in * 1000 // self.rate_hz

    def write(self, pcm: PcmF32, sentence: int) -> None:
        self._send(self.encoder.encode(pcm), sentence)

    def end_sentence(self, sentence: int) -> None:
        pass

    def close(self) -> None:
        self._send(self.encoder.close(), -1)

    def _send(self, data: bytes, sentence: int) -> None:
        if data:
            self.session.audio(self.seq, [data], self.sent_ms, sentence)
            self.seq += 1
            self.first_sent = True
        self.sent_ms = self.produced_ms


@dataclass
class _Resume:
    next_seq: int = 0
    pts_ms: int = 0
    next_sentence: int = 0
    ended: bool = False


@dataclass
class _Sentence:
    index: int
    segment: Segment
    offset: int
    """Offset of the segment's text span in the whole request text."""


@dataclass
class SentenceCutter:
    """Cut text arriving in pieces into sentences, as soon as each one is complete."""

    max_chars: int = 300
    buffer: str = ""
    base: int = 0
    """Offset of ``buffer[0]`` in the whole text."""
    emitted: int = 0
    _pending: list[tuple[Segment, int]] = field(default_factory=list)

    def feed(self, text: str) -> list[tuple[Segment, int]]:
        self.buffer += text
        return self._cut(final=False)

    def flush(self) -> list[tuple[Segment, int]]:
        return self._cut(final=True)

    def _cut(self, *, final: bool) -> list[tuple[Segment, int]]:
        segments = split_sentences(self.buffer, self.max_chars) if self.buffer.strip() else []
        # The last segment may still grow, unless the text is final or ends a paragraph/line.
        complete = segments if final else segments[:-1]
        if not complete:
            if final:
                self.base += len(self.buffer)
                self.buffer = ""
            return []
        out = [(segment, self.base) for segment in complete]
        consumed = len(self.buffer) if final else complete[-1].end
        self.base += consumed
        self.buffer = self.buffer[consumed:]
        self.emitted += len(out)
        return out


class Session:
    """One stream request, served on its own thread."""

    def __init__(
        self,
        consumer: RealtimeConsumer,
        entry_id: str,
        request: StreamRequest,
        *,
        takeover: bool,
    ) -> None:
        self.consumer = consumer
        self.lane = consumer.lane
        self.entry_id = entry_id
        self.request = request
        self.takeover = takeover
        self.settings = consumer.settings
        self.batcher = consumer.batcher
        self._started_at: float | None = None
        self._held: list[OutputEvent] = []
        self._first_input: list[tuple[str, InputPiece]] = []
        self.done = threading.Event()

    # ------------------------------------------------------------------ entry point
    def run(self) -> None:
        rid = self.request.request_id
        acknowledge = True
        try:
            self._serve()
        except _SupersededError:
            log.info("request %s: another worker took it over", rid)
            acknowledge = False  # its new owner acknowledges it
        except ShuttingDownError:
            log.info("request %s left for another worker (shutting down)", rid)
            acknowledge = False  # pending: another worker reclaims it
        except CancelledError:
            log.info("request %s cancelled by its client", rid)
        except VoicelaneError as error:
            self._error(grpc_status_name(error), error.message)
        except Exception as error:
            log.exception("request %s failed", rid)
            self._error("INTERNAL", f"{type(error).__name__}: {error}")
        finally:
            self.done.set()
            self.consumer.session_ended(self)
        if acknowledge:
            self.lane.finish(self.entry_id, rid)

    def _error(self, code: str, message: str) -> None:
        with contextlib.suppress(_SupersededError):
            self._append(OutputEvent(EventKind.ERROR, code=code, text=message))

    def _append(self, event: OutputEvent) -> None:
        """Append ``event`` (and any held captions before it, in the same round trip)."""
        events = [*self._held, event]
        self._held = []
        if not self.lane.append_output(self.request.request_id, *events):
            raise _SupersededError

    def _hold(self, event: OutputEvent) -> None:
        """A caption waits for its sentence's first audio: one round trip, not two."""
        self._held.append(event)

    # ------------------------------------------------------------------ serving
    def _serve(self) -> None:
        request = self.request
        rid = request.request_id
        self._first_input = self.lane.begin_session(rid)
        resume = self._resume_point() if self.takeover else _Resume()
        if resume.ended:
            return
        if request.expired:
            self._append(
                OutputEvent(EventKind.ERROR, code="DEADLINE_EXCEEDED", text="deadline passed")
            )
            return
        self.batcher.engine.validate(Utterance("check", request.voice, request.speed))
        out: _OpusOutput | _ByteOutput
        if request.encoding.packets:
            out = _OpusOutput(self, resume, request.sample_rate_hz)
        elif resume.next_seq:
            raise UnavailableError(
                "the worker serving this stream stopped mid-file; request it again"
            )
        else:
            out = _ByteOutput(self, request.sample_rate_hz)
        resampler = StreamResampler(self.batcher.engine.sample_rate_hz, request.sample_rate_hz)
        for sentence in self._sentences():
            if sentence.index < resume.next_sentence:
                continue
            self._pace(out.produced_ms, self.settings.lookahead_s)
            seg = sentence.segment
            self._hold(
                OutputEvent(
                    EventKind.CAPTION,
                    seq=out.seq,
                    text=seg.text,
                    start=sentence.offset + seg.start,
                    end=sentence.offset + seg.end,
                    pts_ms=out.produced_ms,
                    sentence=sentence.index,
                )
            )
            for pcm in self._speak(seg.text):
                for piece in _slices(pcm, self.batcher.engine.sample_rate_hz, out.first_sent):
                    # Encode just ahead of playback: leaves the CPU to other streams' first
                    # packets instead of encoding a whole sentence nobody hears yet.
                    self._pace(out.produced_ms, self.settings.encode_ahead_s)
                    out.write(resampler.process(piece), sentence.index)
            out.write(resampler.flush(), sentence.index)
            out.end_sentence(sentence.index)
        out.close()
        self._append(OutputEvent(EventKind.END, seq=out.seq, pts_ms=out.produced_ms))
        log.info("request %s done: %d chunks, %.1f s", rid, out.seq, out.produced_ms / 1000)

    def audio(self, seq: int, packets: list[bytes], pts_ms: int, sentence: int) -> None:
        self._append(
            OutputEvent(
                EventKind.AUDIO,
                seq=seq,
                data=tuple(packets),
                pts_ms=pts_ms,
                sample_rate_hz=self.request.sample_rate_hz,
                server_ts_ms=now_ms(),
                client_ts_ms=self.request.client_ts_ms,
                sentence=sentence,
            )
        )
        if self._started_at is None:
            self._started_at = time.monotonic()

    def _speak(self, text: str) -> Iterator[PcmF32]:
        """The sentence's PCM as the batcher streams it; stops on cancel or deadline."""
        deadline_s = time.monotonic() + (self.request.deadline_ms - now_ms()) / 1000
        stream = self.batcher.submit_stream(
            Utterance(text, self.request.voice, self.request.speed),
            priority=Priority.REALTIME,
            deadline_s=deadline_s,
        )
        try:
            while True:
                self._check_cancelled()
                try:
                    chunk = stream.read(timeout_s=0.05)
                except TimeoutError:
                    continue
                if chunk is None:
                    self._check_cancelled()
                    return
                yield chunk
        finally:
            stream.cancel()

    def _check_cancelled(self) -> None:
        if self.consumer.closing.is_set():
            raise ShuttingDownError("worker stopping")
        if self.lane.cancelled(self.request.request_id):
            raise CancelledError("cancelled by the client")

    def _pace(self, produced_pts_ms: int, ahead_s: float) -> None:
        """Wait while more than ``ahead_s`` of audio is ahead of playback (1x from the first
        packet), checking the cancel mark at least every ``_CANCEL_CHECK_S``."""
        if self._started_at is None:
            return
        while True:
            played_ms = (time.monotonic() - self._started_at) * 1000
            excess_s = (produced_pts_ms - played_ms) / 1000 - ahead_s
            if excess_s < 0:
                return
            self._check_cancelled()
            time.sleep(min(excess_s + 0.001, _CANCEL_CHECK_S))

    def _sentences(self) -> Iterator[_Sentence]:
        """Sentences as the request's text arrives: complete ones first, the rest at the end."""
        cutter = SentenceCutter()
        after = "0"
        index = 0
        while True:
            if self._first_input:
                pieces, self._first_input = self._first_input, []
            else:
                self._check_cancelled()
                if self.request.expired:
                    raise DeadlineExceededError("deadline passed")
                pieces = self.lane.read_input(self.request.request_id, after, _READ_BLOCK_MS)
            for entry_id, piece in pieces:
                after = entry_id
                text_piece = piece.kind is InputKind.TEXT
                ready = cutter.feed(piece.text) if text_piece else cutter.flush()
                for segment, base in ready:
                    yield _Sentence(index, segment, base)
                    index += 1
                if piece.kind is InputKind.END:
                    return

    def _resume_point(self) -> _Resume:
        """Where a takeover continues: after the last sentence that had started."""
        events = self.lane.output_events(self.request.request_id)
        resume = _Resume()
        for event in events:
            if event.kind in (EventKind.END, EventKind.ERROR):
                resume.ended = True
            if event.kind is EventKind.AUDIO:
                resume.next_seq = event.seq + 1
                resume.pts_ms = event.pts_ms + FRAME_DURATION_MS * len(event.data)
            if event.sentence >= 0:
                resume.next_sentence = max(resume.next_sentence, event.sentence + 1)
        return resume


class RealtimeConsumer:
    """Claims stream requests for this worker and runs a :class:`Session` for each."""

    def __init__(
        self, batcher: Batcher, lane: RealtimeWorkerClient, settings: RealtimeSettings
    ) -> None:
        self.batcher = batcher
        self.lane = lane
        self.settings = settings
        self.closing = threading.Event()
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="realtime-claims", daemon=True)
        # Threads made up front: starting a thread waits for it to get the GIL once, which
        # under load costs milliseconds per new session.
        self._pool = ThreadPoolExecutor(settings.slots_per_worker, thread_name_prefix="rt")

    @property
    def free_slots(self) -> int:
        with self._lock:
            return self.settings.slots_per_worker - len(self._sessions)

    def start(self) -> RealtimeConsumer:
        ready = threading.Barrier(self.settings.slots_per_worker + 1)
        for _ in range(self.settings.slots_per_worker):
            self._pool.submit(ready.wait)
        ready.wait()
        self.lane.ensure_group()
        self.lane.report_capacity(self.free_slots)
        self._thread.start()
        return self

    def close(self, timeout_s: float = 10.0) -> None:
        self.closing.set()
        self._thread.join(timeout_s)
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            session.done.wait(timeout_s)
        self._pool.shutdown(wait=False, cancel_futures=True)
        try:
            self.lane.withdraw()
        except Exception:
            log.warning("could not withdraw the capacity report")

    def session_ended(self, session: Session) -> None:
        with self._lock:
            self._sessions.pop(session.entry_id, None)
        try:
            self.lane.report_capacity(self.free_slots)
        except Exception:
            log.warning("could not report capacity")

    def _start_session(self, entry_id: str, request: StreamRequest, *, takeover: bool) -> None:
        session = Session(self, entry_id, request, takeover=takeover)
        with self._lock:
            if entry_id in self._sessions:
                return
            self._sessions[entry_id] = session
        self._pool.submit(session.run)

    def _run(self) -> None:
        settings = self.settings
        beat_every_s = min(settings.heartbeat_ttl_s, settings.reclaim_idle_s) / 3
        reclaim_every_s = settings.reclaim_idle_s / 2
        last_beat = last_reclaim = 0.0
        while not self.closing.is_set():
            try:
                now = time.monotonic()
                if now - last_beat >= beat_every_s:
                    self._heartbeat()
                    last_beat = now
                free = self.free_slots
                if free > 0 and now - last_reclaim >= reclaim_every_s:
                    for entry_id, request in self.lane.claim_abandoned(free):
                        if entry_id not in self._sessions:
                            log.info("taking over request %s", request.request_id)
                            self._start_session(entry_id, request, takeover=True)
                    last_reclaim = now
                    free = self.free_slots
                if free <= 0:
                    self.closing.wait(_POLL_S)
                    continue
                for entry_id, request in self.lane.claim_new(free, _READ_BLOCK_MS):
                    self._start_session(entry_id, request, takeover=False)
            except Exception:
                log.exception("real-time claim loop error; retrying")
                self.closing.wait(0.5)

    def _heartbeat(self) -> None:
        with self._lock:
            alive = [(s.entry_id, s.request.request_id) for s in self._sessions.values()]
        self.lane.heartbeat(alive, self.free_slots)
