"""The real-time consumer: serves the lane's stream requests inside a GPU worker process.

It shares the worker's one batcher with the batch lane and submits at ``realtime``
priority, so a live voice never waits behind a book. Three threads serve any number of
streams:

* "realtime-claims" claims requests from the Redis stream (new ones with XREADGROUP,
  abandoned ones with XAUTOCLAIM) while slots are free;
* "realtime-loop" runs every session as an asyncio task: a session waiting for its
  sentence, for playback to catch up or for more text costs nothing;
* "realtime-io" (:class:`voicelane.workers.realtime_io.LaneIO`) sends all sessions' Redis calls —
  output appends, cancel checks, input reads, heartbeats, the capacity report for the
  fronts' admission control — as one pipeline per round.

A session:

1. drops the request if its deadline passed (it never reaches a batch) or the voice is
   unknown;
2. reads its text as it arrives and cuts it into sentences (``voicelane.core.text``), sentence by
   sentence as they complete (Converse) or all at once (Synthesize); a Synthesize request
   whose text is SSML is read whole, and its segments stream like sentences: a ``break`` is
   exactly its silence (the engine's own silence around it cut,
   :mod:`voicelane.workers.realtime_timing`), ``prosody`` and ``voice`` change the segment's
   utterance and gain (Converse and Chat text is always plain text);
3. live (``paced``, the default): submits the next sentence to the batcher only while less
   than ``lookahead_s`` of audio is ahead of playback, and encodes at most
   ``encode_ahead_s`` ahead — real-time work stays just ahead of the listener. File-style
   (``paced`` false): as fast as the batcher delivers;
4. resamples, time-stretches when the request has a ``tempo`` (a speed beyond the engine's:
   :class:`~voicelane.common.audio.tempo.TempoStretcher`, one filter for the whole stream —
   per sentence in a conversation, whose next text may be long in coming — and every time it
   sends, pts, captions, words and marks, is that of the stretched audio), encodes in the
   request's encoding — 20 ms Opus packets (the first goes out
   alone, then ``frames_per_chunk`` per entry), or the bytes of a file / raw PCM for a front
   that needs those — and appends to the request's output stream with contiguous ``seq`` and
   ``pts_ms``, a caption before each sentence's audio, ``end`` last; the engine's word events
   become word timings of the request's text on the stream's clock, sent with the audio
   (with SSML marks), as soon as the chunk they came with has gone through;
5. stops when its client cancels (the cancel marks are polled for all sessions at once):
   a cancelled stream stops within one batch step.

A worker that takes over a dead worker's request continues after the last sentence that
had started: the client may hear a gap, never a repeated or reordered ``seq``. (A byte
stream cannot continue mid-file: once part of it was sent, a takeover ends it with
UNAVAILABLE.) Only the request's current owner can append
(``WorkerBatch.append_output`` in :mod:`voicelane.core.lane.worker`). An error reaches the
front whole (:meth:`OutputEvent.failure`): its code, field and retry hint, not only its status.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import html
import json
import logging
import math
import re
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field, replace

import redis

from voicelane.common.audio import (
    FRAME_DURATION_MS,
    OpusStreamEncoder,
    StreamResampler,
    apply_gain_db,
    silence,
)
from voicelane.common.audio.stream import ByteStreamEncoder
from voicelane.common.audio.tempo import TempoStretcher
from voicelane.common.errors import (
    DeadlineExceededError,
    ShuttingDownError,
    UnavailableError,
    VoicelaneError,
)
from voicelane.core.lane.messages import (
    EventKind,
    InputKind,
    InputPiece,
    Mode,
    OutputEvent,
    StreamRequest,
    now_ms,
)
from voicelane.core.lane.worker import RealtimeWorkerClient
from voicelane.core.ledger.voices import Voices
from voicelane.core.metrics import count_unspeakable
from voicelane.core.settings import RealtimeSettings
from voicelane.core.speech_text import (
    MAX_WARNINGS,
    PreparedText,
    SpokenSegment,
    TextOptions,
    prepare_text,
)
from voicelane.core.text import Segment, normalize_whitespace, split_sentences
from voicelane.core.text_profiles import TextProfile, profile_for
from voicelane.core.word_timings import MarkTiming, WordTiming
from voicelane.workers.batching import AudioStream, Batcher, Priority, StreamEvent, StreamWords
from voicelane.workers.engines import PcmF32, Utterance
from voicelane.workers.realtime_io import LaneIO
from voicelane.workers.realtime_timing import Edges, SentenceSource, SentenceTimes

log = logging.getLogger(__name__)

_READ_BLOCK_MS = 100
_POLL_S = 0.02


class _SupersededError(Exception):
    """Another worker owns the request now: stop without writing anything more."""


class _Stop(enum.Enum):
    """Why a session's task was cancelled."""

    CLIENT = "the client cancelled"
    SHUTDOWN = "the worker is stopping"


FIRST_SLICE_S = 0.04
SLICE_S = 0.4


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


_TAG = re.compile(r"<[^>]*>")


def ssml_caption(document: str, segment: SpokenSegment) -> str:
    """The words of the document a segment speaks, as written: its span with the markup
    left out and entities read (``<emphasis>Hi</emphasis> &amp; bye`` → ``Hi & bye``)."""
    return normalize_whitespace(html.unescape(_TAG.sub(" ", document[segment.start : segment.end])))


@dataclass(frozen=True, slots=True)
class _Audio:
    """One output entry's audio: its seq, pieces (Opus packets or file bytes) and pts."""

    seq: int
    data: tuple[bytes, ...]
    pts_ms: int
    sentence: int


class _OpusOutput:
    """Encodes 20 ms Opus packets and groups them into output entries: the very first packet
    alone (time to first audio), then ``frames_per_chunk`` per entry; keeps ``seq``
    contiguous and ``pts_ms``."""

    def __init__(self, settings: RealtimeSettings, resume: _Resume, rate_hz: int) -> None:
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

    def write(self, pcm: PcmF32, sentence: int) -> list[_Audio]:
        self.pending.extend(self.encoder.encode(pcm))
        return self.drain(sentence, final=False)

    def end_sentence(self, sentence: int) -> list[_Audio]:
        return self.drain(sentence, final=True)

    def close(self) -> list[_Audio]:
        self.pending.extend(self.encoder.flush())
        return self.drain(-1, final=True)

    def drain(self, sentence: int, *, final: bool) -> list[_Audio]:
        out: list[_Audio] = []
        while self.pending:
            size = min(self.frames_per_chunk, len(self.pending)) if self.first_sent else 1
            if size < self.frames_per_chunk and self.first_sent and not final:
                break
            out.append(_Audio(self.seq, tuple(self.pending[:size]), self.sent_ms, sentence))
            self.seq += 1
            self.sent_ms += FRAME_DURATION_MS * size
            self.pending = self.pending[size:]
            self.first_sent = True
        return out


class _ByteOutput:
    """Encodes a byte stream (a file, or raw PCM) and appends its pieces as they are ready;
    ``pts_ms`` of a piece is the audio written before it."""

    def __init__(self, request: StreamRequest, settings: RealtimeSettings) -> None:
        self.rate_hz = request.sample_rate_hz
        self.encoder = ByteStreamEncoder(
            request.encoding, self.rate_hz, bitrate_bps=settings.opus_bitrate_bps
        )
        self.seq = 0
        self.sent_ms = 0
        self.first_sent = False

    @property
    def produced_ms(self) -> int:
        return self.encoder.samples_in * 1000 // self.rate_hz

    def write(self, pcm: PcmF32, sentence: int) -> list[_Audio]:
        return self._send(self.encoder.encode(pcm), sentence)

    def end_sentence(self, sentence: int) -> list[_Audio]:
        return []

    def close(self) -> list[_Audio]:
        return self._send(self.encoder.close(), -1)

    def _send(self, data: bytes, sentence: int) -> list[_Audio]:
        out = []
        if data:
            out.append(_Audio(self.seq, (data,), self.sent_ms, sentence))
            self.seq += 1
            self.first_sent = True
        self.sent_ms = self.produced_ms
        return out


@dataclass
class _Resume:
    next_seq: int = 0
    pts_ms: int = 0
    next_sentence: int = 0


@dataclass
class _Sentence:
    index: int
    segment: SpokenSegment
    source: SentenceSource
    """What the segment's spans point into (a sentence of the input, or the whole SSML
    document) and its offset in the whole request text."""
    caption: str
    """The words of the input it speaks (whitespace normalized, markup left out)."""


@dataclass
class SentenceCutter:
    """Cut text arriving in pieces into sentences, as soon as each one is complete."""

    max_chars: int = 300
    buffer: str = ""
    base: int = 0
    """Offset of ``buffer[0]`` in the whole text."""
    emitted: int = 0
    _pending: list[tuple[Segment, int]] = field(default_factory=list)
    _last_buffer: str = ""

    def feed(self, text: str) -> list[tuple[Segment, int]]:
        self.buffer += text
        return self._cut(final=False)

    def flush(self) -> list[tuple[Segment, int]]:
        return self._cut(final=True)

    def raw(self, segment: Segment) -> str:
        """The input text of a segment :meth:`feed` or :meth:`flush` just returned (before
        the next call): its span, as written."""
        return self._last_buffer[segment.start : segment.end]

    def _cut(self, *, final: bool) -> list[tuple[Segment, int]]:
        self._last_buffer = self.buffer
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
    """One stream request, served as an asyncio task on the consumer's loop."""

    def __init__(
        self,
        consumer: RealtimeConsumer,
        entry_id: str,
        request: StreamRequest,
        *,
        takeover: bool,
    ) -> None:
        self.consumer = consumer
        self.io = consumer.io
        self.entry_id = entry_id
        self.request = request
        self.takeover = takeover
        self.settings = consumer.settings
        self.batcher = consumer.batcher
        self._started_at: float | None = None
        self._held: list[OutputEvent] = []
        self._warnings: list[dict[str, object]] = []
        self._words: list[WordTiming] = []
        self._marks: list[MarkTiming] = []
        """Word timings and marks not sent yet: they ride on the next audio entry (or the
        end)."""
        self._trailing_marks: tuple[str, ...] = ()
        """An SSML document's marks after its last word: reported at the end."""
        self._base_ms = 0.0
        self._samples_out = 0
        """The stream's clock: ``_base_ms`` (where this worker took over) plus the samples it
        delivered to the encoder (at the request's rate) — before any time-stretch: what is
        heard is at that time / ``tempo`` (:meth:`_heard_ms`)."""
        self._tempo: TempoStretcher | None = None
        """The time-stretch between the resampler and the encoder (``request.tempo`` not 1);
        None at tempo 1: no filter, nothing scaled."""
        self._first_input: list[tuple[str, InputPiece]] = []
        self._read_ms = 0
        """How far the client has taken the output (the front's read mark, last seen)."""
        self._unbounded = False
        """The request has no read mark (its front writes none): no backpressure."""
        self.task: asyncio.Task[None] | None = None
        self.stopped: _Stop | None = None
        self._running = False
        self.done = threading.Event()

    def stop(self, reason: _Stop) -> None:
        """Cancel the session's task (on the loop): it stops at its next await."""
        if self.stopped is not None:
            return
        self.stopped = reason
        if self.task is not None and self._running:
            self.task.cancel()
        # Not running yet: run() sees ``stopped`` first thing (a task cancelled before its
        # first step would never run its cleanup).

    # ------------------------------------------------------------------ entry point
    async def run(self) -> None:
        rid = self.request.request_id
        acknowledge = True
        self._running = True
        try:
            if self.stopped is not None:
                raise asyncio.CancelledError
            await self._serve()
        except asyncio.CancelledError:
            if self.stopped is _Stop.CLIENT:
                log.info("request %s cancelled by its client", rid)
            else:
                log.info("request %s left for another worker (shutting down)", rid)
                acknowledge = False  # pending: another worker reclaims it
        except _SupersededError:
            log.info("request %s: another worker took it over", rid)
            acknowledge = False  # its new owner acknowledges it
        except ShuttingDownError:
            log.info("request %s left for another worker (shutting down)", rid)
            acknowledge = False
        except VoicelaneError as error:
            await self._error(error)
        except redis.RedisError as error:  # Redis went away mid-stream (restart, timeout)
            log.warning("request %s: the lane's Redis failed: %s", rid, error)
            await self._error(UnavailableError("the lane's store (Redis) failed; retry shortly"))
        except Exception as error:
            log.exception("request %s failed", rid)
            await self._error(VoicelaneError(f"{type(error).__name__}: {error}"))
        try:
            if acknowledge:
                await self.io.finish(self.entry_id, rid)
        except Exception as error:
            log.warning("request %s: could not acknowledge it: %s", rid, error)
        finally:
            self.done.set()
            self.consumer.session_ended(self)

    async def _error(self, error: VoicelaneError) -> None:
        """Tell the front: the error goes whole (code, message, status, field, retry hint)."""
        with contextlib.suppress(_SupersededError, asyncio.CancelledError, Exception):
            await self._append([OutputEvent.failure(error)])

    async def _append(self, events: list[OutputEvent]) -> None:
        """Append ``events`` (and any held captions before them) in one round."""
        if not events:
            return
        events = [*self._held, *events]
        self._held = []
        if not await self.io.append(self.request.request_id, events):
            raise _SupersededError

    def _hold(self, event: OutputEvent) -> None:
        """A caption waits for its sentence's first audio: one append, not two."""
        self._held.append(event)

    # ------------------------------------------------------------------ serving
    async def _serve(self) -> None:
        request = self.request
        rid = request.request_id
        first_input = await self.io.begin_session(rid)
        if first_input is None:  # its previous owner had finished it, not yet acknowledged
            log.info("request %s had already ended: acknowledged", rid)
            return
        self._first_input = first_input
        # Taken, so its output had not ended, and only this worker writes it from now on.
        resume = await self._resume_point() if self.takeover else _Resume()
        if request.expired:
            await self._append([OutputEvent.failure(DeadlineExceededError("deadline passed"))])
            return
        engine = self.batcher.engine
        engine.validate(Utterance("check", request.voice, request.speed, speaker=request.speaker))
        out: _OpusOutput | _ByteOutput
        if request.encoding.packets:
            out = _OpusOutput(self.settings, resume, request.sample_rate_hz)
        elif resume.next_seq:
            raise UnavailableError(
                "the worker serving this stream stopped mid-file; request it again"
            )
        else:
            out = _ByteOutput(request, self.settings)
        resampler = StreamResampler(engine.sample_rate_hz, request.sample_rate_hz)
        if request.tempo != 1.0:
            self._tempo = TempoStretcher(request.sample_rate_hz, request.tempo)
        self._base_ms = resume.pts_ms * request.tempo  # on the unstretched clock
        after_break = False
        async for sentence in self._sentences():
            seg = sentence.segment
            if sentence.index < resume.next_sentence:
                after_break = seg.pause_after_ms is not None
                continue
            await self._pace(out.produced_ms, self.settings.lookahead_s)
            caption_ms = out.produced_ms if self._tempo is None else self._heard_ms()
            self._hold(
                OutputEvent(
                    EventKind.CAPTION,
                    seq=out.seq,
                    text=sentence.caption,
                    start=sentence.source.offset + seg.start,
                    end=sentence.source.offset + seg.end,
                    pts_ms=caption_ms,
                    sentence=sentence.index,
                )
            )
            await self._say(sentence, out, resampler, after_break=after_break)
            after_break = seg.pause_after_ms is not None
            await self._encode(out, resampler.flush(), sentence.index)
            if request.mode is Mode.CONVERSE:
                # The next text may be long in coming: the sentence's tail must not wait for
                # it in the filter (a sentence ends in silence: a fresh filter leaves no seam).
                await self._end_stretch(out, sentence.index, restart=True)
            await self._send(out.end_sentence(sentence.index))
        await self._end_stretch(out, -1, restart=False)
        await self._send(out.close())
        end_ms = self._heard_ms()  # marks after the last word: on the final chunk
        self._marks.extend(MarkTiming(name, end_ms) for name in self._trailing_marks)
        details = json.dumps({"warnings": self._warnings}) if self._warnings else ""
        words, self._words = tuple(self._words), []
        marks, self._marks = tuple(self._marks), []
        end = OutputEvent(
            EventKind.END,
            seq=out.seq,
            pts_ms=out.produced_ms,
            details=details,
            words=words,
            marks=marks,
        )
        await self._append([end])
        log.info("request %s done: %d chunks, %.1f s", rid, out.seq, out.produced_ms / 1000)

    async def _say(
        self,
        sentence: _Sentence,
        out: _OpusOutput | _ByteOutput,
        resampler: StreamResampler,
        *,
        after_break: bool,
    ) -> None:
        """One segment's audio, then its break's silence: the engine's own silence cut
        around a break (:class:`Edges`), the SSML volume applied, its words and marks timed
        on the stream's clock (:class:`SentenceTimes`) as soon as the chunk they came with has
        gone through: they ride on that chunk's first audio entry."""
        seg = sentence.segment
        rate_hz = self.batcher.engine.sample_rate_hz
        edges = Edges(rate_hz, trim_lead=after_break, trim_tail=seg.pause_after_ms is not None)
        times = SentenceTimes(
            seg, sentence.source, start_ms=self._stream_ms(), sample_rate_hz=rate_hz
        )
        gain_db = seg.voicing.volume_db
        async with contextlib.aclosing(self._speak(self._utterance(seg))) as pieces:
            async for piece in pieces:
                if isinstance(piece, StreamWords):
                    times.add(piece.words)
                    continue
                pcm = edges.take(piece)
                self._timed(*times.take(edges))  # they ride with this audio
                await self._deliver(out, resampler, pcm, sentence.index, gain_db=gain_db)
        tail = edges.finish()
        self._timed(*times.finish(edges))
        await self._deliver(out, resampler, tail, sentence.index, gain_db=gain_db)
        if seg.pause_after_ms is not None:
            pause = silence(seg.pause_after_ms / 1000, rate_hz)
            await self._deliver(out, resampler, pause, sentence.index)

    def _timed(self, words: list[WordTiming], marks: list[MarkTiming]) -> None:
        """Words and marks go out with the next audio entry (their times those of the audio
        heard: the unstretched ones / tempo)."""
        tempo = self.request.tempo
        if self._tempo is not None:
            words = [
                replace(w, start_ms=round(w.start_ms / tempo), end_ms=round(w.end_ms / tempo))
                for w in words
            ]
            marks = [replace(m, time_ms=round(m.time_ms / tempo)) for m in marks]
        self._words.extend(words)
        self._marks.extend(marks)

    def _utterance(self, seg: SpokenSegment) -> Utterance:
        """What the engine is asked for one segment: the request's voice and speed, changed
        by the segment's SSML voicing (a voice, a rate within the engine's range, a pitch on
        engines that render pitch)."""
        request = self.request
        engine = self.batcher.engine
        voicing = seg.voicing
        speed = request.speed
        if voicing.rate != 1.0:
            caps = engine.capabilities()
            speed = min(max(speed * voicing.rate, caps.min_speed), caps.max_speed)
        params: tuple[tuple[str, float | int | str], ...] = ()
        if voicing.pitch_semitones and profile_for(engine.name).pitch:
            params = (("pitch_semitones", voicing.pitch_semitones),)
        seed = request.seed
        if voicing.voice:
            return Utterance(seg.text, voicing.voice, speed, seed=seed, params=params)
        return Utterance(
            seg.text, request.voice, speed, seed=seed, params=params, speaker=request.speaker
        )

    def _stream_ms(self) -> float:
        """Where the next sample delivered will be, on the stream's clock before any
        time-stretch (the engine's time)."""
        return self._base_ms + self._samples_out * 1000 / self.request.sample_rate_hz

    def _heard_ms(self) -> int:
        """Where the next sample delivered will be heard: :meth:`_stream_ms` / tempo."""
        return round(self._stream_ms() / self.request.tempo)

    async def _deliver(
        self,
        out: _OpusOutput | _ByteOutput,
        resampler: StreamResampler,
        pcm: PcmF32,
        sentence: int,
        *,
        gain_db: float = 0.0,
    ) -> None:
        """Audio at the engine's rate to the encoder, in short slices paced to playback."""
        if gain_db:
            pcm = apply_gain_db(pcm, gain_db)
        for piece in _slices(pcm, self.batcher.engine.sample_rate_hz, out.first_sent):
            # Encode just ahead of playback: leaves the CPU to other streams' first packets
            # instead of encoding a whole sentence nobody hears yet.
            await self._pace(out.produced_ms, self.settings.encode_ahead_s)
            await self._encode(out, resampler.process(piece), sentence)

    async def _encode(self, out: _OpusOutput | _ByteOutput, pcm: PcmF32, sentence: int) -> None:
        """Audio at the request's rate to the encoder (the stream's clock advances), through
        the time-stretch when there is one."""
        self._samples_out += len(pcm)
        if self._tempo is not None:
            pcm = self._tempo.process(pcm)
        await self._send(out.write(pcm, sentence))

    async def _end_stretch(
        self, out: _OpusOutput | _ByteOutput, sentence: int, *, restart: bool
    ) -> None:
        """What the time-stretch holds, to the encoder (at the end, or, ``restart``, at a
        sentence's end with a fresh filter for what follows)."""
        if self._tempo is None:
            return
        tail = self._tempo.flush()
        if restart:
            self._tempo = TempoStretcher(self.request.sample_rate_hz, self.request.tempo)
        await self._send(out.write(tail, sentence))

    async def _send(self, pieces: list[_Audio]) -> None:
        if not pieces:
            return
        await self._await_reader(pieces[-1].pts_ms)
        request = self.request
        words, self._words = tuple(self._words), []
        marks, self._marks = tuple(self._marks), []
        await self._append(
            [
                OutputEvent(
                    EventKind.AUDIO,
                    seq=piece.seq,
                    data=piece.data,
                    pts_ms=piece.pts_ms,
                    sample_rate_hz=request.sample_rate_hz,
                    server_ts_ms=now_ms(),
                    client_ts_ms=request.client_ts_ms,
                    sentence=piece.sentence,
                    words=words if index == 0 else (),
                    marks=marks if index == 0 else (),
                )
                for index, piece in enumerate(pieces)
            ]
        )
        if self._started_at is None:
            self._started_at = time.monotonic()

    async def _await_reader(self, pts_ms: int) -> None:
        """Backpressure: before writing audio that starts at ``pts_ms``, wait while more than
        ``max_unread_output_s`` of the stream's audio is unread by its client (the front's
        read mark) — the stream's output in Redis stays within what its client took plus
        the window, however long the text. Only this session waits (its next sentence is not
        submitted meanwhile); the others go on. Gives up at the stream's deadline."""
        window_ms = self.settings.max_unread_output_s * 1000
        while not self._unbounded and pts_ms - self._read_ms > window_ms:
            if self.request.expired:
                raise DeadlineExceededError(
                    "the deadline passed while the client was not taking the audio"
                )
            mark = await self.io.wait_read(self.request.request_id, math.ceil(pts_ms - window_ms))
            if mark is None:  # no read mark: a front of the previous release
                self._unbounded = True
            else:
                self._read_ms = max(self._read_ms, mark)

    async def _speak(self, utterance: Utterance) -> AsyncGenerator[StreamEvent, None]:
        """The utterance's audio as the batcher streams it, with the engine's word events
        (before the chunk they belong with); cancelling the session's task (or leaving
        early) cancels the utterance in the batcher."""
        deadline_s = time.monotonic() + (self.request.deadline_ms - now_ms()) / 1000
        stream = self.batcher.submit_stream(
            utterance, priority=Priority.REALTIME, deadline_s=deadline_s
        )
        ready = asyncio.Event()
        stream.listen(_waker(asyncio.get_running_loop(), ready))
        try:
            while (event := await _next_event(stream, ready)) is not None:
                yield event
        finally:
            stream.cancel()

    async def _pace(self, produced_pts_ms: int, ahead_s: float) -> None:
        """Live: wait while more than ``ahead_s`` of audio is ahead of playback (1x from the
        first packet). Either way, let the other sessions run."""
        if self.request.paced and self._started_at is not None:
            played_ms = (time.monotonic() - self._started_at) * 1000
            excess_s = (produced_pts_ms - played_ms) / 1000 - ahead_s
            if excess_s > 0:
                await asyncio.sleep(excess_s + 0.001)
                return
        await asyncio.sleep(0)

    async def _sentences(self) -> AsyncIterator[_Sentence]:
        """Sentences as the request's text arrives: complete ones first, the rest at the end.
        Each cut sentence is prepared for the engine as it is cut (:func:`prepare_text`:
        normalization, lexicons, the engine's alphabet) as plain text. A Synthesize request
        whose text is SSML (:meth:`TextOptions.reads_as_ssml`) is prepared whole once all of it has
        arrived; its segments then stream like sentences. A conversation's text is always
        plain text (it arrives in pieces: no document to read)."""
        options = self.request.text_options
        profile = profile_for(self.batcher.engine.name)
        plain = replace(options, ssml=False)
        cutter = SentenceCutter()
        after = "0"
        index = 0
        document: str | None = None
        """The SSML document so far; None while the text is read as plain text."""
        decided = self.request.mode is not Mode.SYNTHESIZE or options.ssml is not None
        if self.request.mode is Mode.SYNTHESIZE and options.ssml:
            document = ""
        while True:
            if self._first_input:
                pieces, self._first_input = self._first_input, []
            else:
                if self.request.expired:
                    raise DeadlineExceededError("deadline passed")
                pieces = await self.io.read_input(self.request.request_id, after)
            for entry_id, piece in pieces:
                after = entry_id
                text_piece = piece.kind is InputKind.TEXT
                if not decided and text_piece and piece.text.strip():
                    decided = True  # the first text says whether it is a document
                    if options.reads_as_ssml(piece.text):
                        document = ""
                if document is not None:
                    if text_piece:
                        document += piece.text
                    if piece.kind is InputKind.END:
                        for sentence in self._document(document, profile, options):
                            yield sentence
                        return
                    continue
                ready = cutter.feed(piece.text) if text_piece else cutter.flush()
                for cut, base in ready:
                    raw = cutter.raw(cut)
                    prepared = prepare_text(raw, profile=profile, options=plain)
                    self._report(prepared)
                    source = SentenceSource(raw, base + cut.start)
                    for spoken in prepared.segments:
                        caption = normalize_whitespace(raw[spoken.start : spoken.end])
                        yield _Sentence(index, spoken, source, caption)
                        index += 1
                if piece.kind is InputKind.END:
                    return

    def _document(
        self, document: str, profile: TextProfile, options: TextOptions
    ) -> list[_Sentence]:
        """An SSML document's segments, checked before any of them is spoken: every voice
        and rate they ask of the engine (a refusal names the field, as the request's own
        voice does)."""
        prepared = prepare_text(document, profile=profile, options=replace(options, ssml=True))
        self._report(prepared)
        self._trailing_marks = prepared.trailing_marks
        source = SentenceSource(document, 0)
        sentences = [
            _Sentence(index, segment, source, ssml_caption(document, segment))
            for index, segment in enumerate(prepared.segments)
        ]
        for sentence in sentences:
            self.batcher.engine.validate(self._utterance(sentence.segment))
        return sentences

    def _report(self, prepared: PreparedText) -> None:
        """Count what the engine cannot speak; the warnings go to the stream's end."""
        count_unspeakable(self.batcher.engine.name, prepared.unspeakable_chars)
        room = MAX_WARNINGS - len(self._warnings)
        self._warnings.extend(prepared.warnings_json()[: max(0, room)])

    async def _resume_point(self) -> _Resume:
        """Where a takeover continues: after the last sentence that had started."""
        events = await self.io.output_events(self.request.request_id)
        resume = _Resume()
        for event in events:
            if event.kind is EventKind.AUDIO:
                resume.next_seq = event.seq + 1
                resume.pts_ms = event.pts_ms + FRAME_DURATION_MS * len(event.data)
            if event.sentence >= 0:
                resume.next_sentence = max(resume.next_sentence, event.sentence + 1)
        return resume


def _waker(loop: asyncio.AbstractEventLoop, ready: asyncio.Event) -> Callable[[], None]:
    def wake() -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(ready.set)

    return wake


async def _next_event(stream: AudioStream, ready: asyncio.Event) -> StreamEvent | None:
    """The stream's next chunk or word events (None at its end), waiting on ``ready``
    without a thread."""
    while True:
        try:
            return stream.read_event_nowait()
        except BlockingIOError:
            pass
        ready.clear()
        try:  # something may have come between the read and the clear
            return stream.read_event_nowait()
        except BlockingIOError:
            await ready.wait()


class RealtimeConsumer:
    """Claims stream requests for this worker and runs a :class:`Session` for each."""

    def __init__(
        self, batcher: Batcher, lane: RealtimeWorkerClient, settings: RealtimeSettings
    ) -> None:
        self.batcher = batcher
        self.lane = lane
        self.settings = settings
        self.voices = Voices(lane.redis)
        """The tenants' voices: where a clip voice's reference clip is fetched from."""
        self.closing = threading.Event()
        self._sessions: dict[str, Session] = {}
        self._alive_cache: tuple[tuple[str, str], ...] | None = None
        self._lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(
            target=self._run_loop, name="realtime-loop", daemon=True
        )
        self.io = LaneIO(
            lane,
            settings,
            self.loop,
            sessions=self._alive,
            free_slots=lambda: self.free_slots,
            on_cancelled=self._cancelled,
        )
        self._thread = threading.Thread(target=self._run, name="realtime-claims", daemon=True)

    @property
    def free_slots(self) -> int:
        with self._lock:
            return self.settings.slots_per_worker - len(self._sessions)

    def start(self) -> RealtimeConsumer:
        self._loop_thread.start()
        self.lane.ensure_group()
        self.lane.report_capacity(self.free_slots)
        self.io.start()
        self._thread.start()
        return self

    def close(self, timeout_s: float = 10.0) -> None:
        self.closing.set()
        self._thread.join(timeout_s)
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            self._on_loop(session.stop, _Stop.SHUTDOWN)
        for session in sessions:
            session.done.wait(timeout_s)
        self.io.stop()
        self._on_loop(self.loop.stop)
        self._loop_thread.join(timeout_s)
        try:
            self.lane.withdraw()
        except Exception:
            log.warning("could not withdraw the capacity report")

    def session_ended(self, session: Session) -> None:
        with self._lock:
            self._sessions.pop(session.entry_id, None)
            self._alive_cache = None
        self.io.poke()

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def _on_loop(self, callback: Callable[..., object], *args: object) -> None:
        with contextlib.suppress(RuntimeError):  # loop closed
            self.loop.call_soon_threadsafe(callback, *args)

    def _alive(self) -> tuple[tuple[str, str], ...]:
        """(entry id, request id) of every session; rebuilt only when sessions came or went
        (the IO thread asks every round)."""
        with self._lock:
            if self._alive_cache is None:
                self._alive_cache = tuple(
                    (s.entry_id, s.request.request_id) for s in self._sessions.values()
                )
            return self._alive_cache

    def _cancelled(self, request_ids: set[str]) -> None:
        """Called by the IO thread with the requests whose client cancelled them."""
        with self._lock:
            sessions = [s for s in self._sessions.values() if s.request.request_id in request_ids]
        for session in sessions:
            self._on_loop(session.stop, _Stop.CLIENT)

    def _start_session(self, entry_id: str, request: StreamRequest, *, takeover: bool) -> None:
        session = Session(self, entry_id, request, takeover=takeover)
        with self._lock:
            if entry_id in self._sessions:
                return
            self._sessions[entry_id] = session
            self._alive_cache = None
        self._on_loop(self._spawn, session)
        self.io.poke()

    def _spawn(self, session: Session) -> None:
        session.task = self.loop.create_task(session.run(), name=session.request.request_id)

    def _run(self) -> None:
        reclaim_every_s = self.settings.reclaim_idle_s / 2
        last_reclaim = 0.0
        while not self.closing.is_set():
            try:
                now = time.monotonic()
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
