"""The stream gateway: the one path from every front into the real-time lane.

A stream goes **validate → admit → submit → relay → close**, the same way whichever front
it came through:

1. *validate* — the request rules of :mod:`voicelane.core.rules` against the capabilities the
workers'
   engine published (:class:`~voicelane.api.engines.EngineRegistry`): text, voice, speed, sample
   rate for the encoding asked, request id, deadline; nothing reaches Redis before this passes;
2. *admit* — the tenant's request rate (:mod:`voicelane.core.quotas`) and concurrent streams
   (``tenant_max_streams``), then :class:`Admission`: free real-time slots of live workers
   minus the queue; past any of them the stream is refused at once (``RESOURCE_EXHAUSTED``,
   429 on HTTP) with a retry hint. A resume is admitted the same way, less the workers'
   capacity (its request is queued or served already): a token of the tenant's rate and a
   slot of its open streams while it relays (issue 26: 300 concurrent resumes of one stream
   were all served);
3. *submit* — the stream id, in its tenant's namespace, is reserved for the tenant (checked
   again on resume), and the request queued on the lane
   (:class:`voicelane.core.lane.front.RealtimeClient`) with an absolute deadline (the client's,
   capped at ``max_deadline_s``) and the encoding the front needs (Opus packets, a file, raw
   PCM);
4. *relay* — the request's output stream becomes :class:`StreamChunk` values as it grows
   (read together with the front's other streams by
   :class:`~voicelane.api.output_reader.OutputReader`), with the lane's liveness rules:
   ``UNAVAILABLE`` when no worker picks the request up in time, or when its worker's heartbeat
   lapsed and nobody took over;
5. *close* — a stream that did not reach its end (client gone, error) gets its request
   cancelled: the worker drops it before its next batch; the tenant's slot is given back.
   While the server drains for a shutdown, streams are left running instead, to be resumed.

gRPC (:mod:`voicelane.api.grpc_service`), the WebSocket stream and OpenAI's speech route
(:mod:`voicelane.api.routes.speech`) are thin adapters: each turns its wire format into a
:class:`StreamAsk` and each :class:`StreamChunk` into its wire format. Logs carry request ids
and sizes, never the text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, replace

from redis import RedisError

from voicelane.api.engines import EngineCatalog, ResolvedVoice
from voicelane.api.output_reader import OutputReader, Subscription
from voicelane.api.text_options import TextOptionsResolver
from voicelane.api.voice_options import VoiceResolver
from voicelane.common.audio.stream import StreamEncoding, stream_sample_rates
from voicelane.common.defaults import DEFAULT_SAMPLE_RATE_HZ
from voicelane.common.errors import (
    DeadlineExceededError,
    InvalidInputError,
    NoCapacityError,
    QuotaExceededError,
    StreamExistsError,
    StreamNotFoundError,
    UnavailableError,
    UnknownVoiceError,
    error_from_wire,
)
from voicelane.core import metrics
from voicelane.core.engines import split_voice
from voicelane.core.lane.front import RealtimeClient
from voicelane.core.lane.messages import (
    NO_DETAIL,
    EventKind,
    InputKind,
    InputPiece,
    Mode,
    OutputEvent,
    StreamRequest,
    lane_request_id,
    new_request_id,
    now_ms,
)
from voicelane.core.quotas import RequestRate
from voicelane.core.rules import (
    MIN_USEFUL_DEADLINE_S,
    ConversationText,
    EngineCapabilities,
    check_client_ts_ms,
    check_request_id,
    check_seed,
    check_speech_options,
    check_speech_text,
    check_voice,
    shown,
)
from voicelane.core.settings import ServiceSettings
from voicelane.core.speech_text import TextOptions, prepare_text
from voicelane.core.text_profiles import profile_for
from voicelane.core.word_timings import MarkTiming, WordTiming

log = logging.getLogger(__name__)

DEFAULT_CAPACITY_TTL_S = 0.075
DEFAULT_BLOCK_MS = 150
TENANT_TTL_MARGIN_S = 60
LIVENESS_CHECK_S = 1.0
"""A quiet stream's liveness (heartbeat, clocks) is checked at most this often (less when the
liveness timeouts are shorter than four of it)."""
NO_CAPACITY_RETRY_S = 1.0
"""Retry hint when the lane is full (a slot frees as soon as any stream ends)."""
TENANT_SLOT_RETRY_S = 1.0
MARK_STEP_MS = 1000
"""A stream's read mark is written at most once per this much audio taken (less: a quarter
of ``max_unread_output_s``), so a live stream costs one SET a second."""
RESUME_SLOT_MARK = "~resume-"
"""A resume's slot among its tenant's open streams: ``{lane id}~resume-{random}``, one per
resume, apart from the stream's own (``~`` is not in a request id)."""
"""Retry hint when the tenant holds all its streams (none is known to end sooner)."""
RELEASE_RETRY_S = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0)
"""Waits before each retry of a tenant slot's release that failed (Redis unreachable or timed
out): about a minute in all; a slot still held after that lapses at its stream's deadline."""

ClientGone = Callable[[], bool]


# ---- what goes in and what comes out -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamAsk:
    """What a front asks for, as its client said it; ``None`` means the default."""

    voice: str | None = None
    speed: float | None = None
    sample_rate_hz: int | None = None
    encoding: StreamEncoding = StreamEncoding.OPUS
    client_ts_ms: int = 0
    request_id: str | None = None
    """An id the client chose (it can resume with it); None: the gateway makes one."""
    paced: bool = True
    """Live: synthesised just ahead of playback. False: file-style, as fast as possible."""
    front: str = "grpc"
    """Which front asked (``grpc``, ``websocket``, ``openai``): a label of its metrics."""
    normalize: bool = True
    ssml: bool | None = None
    """None: SSML when the text starts with ``<speak`` (:mod:`voicelane.api.text_options`)."""
    lexicons: tuple[str, ...] | None = None
    """The tenant's lexicons to apply; None: its default lexicon, if any."""
    seed: int | None = None
    """The sampling seed (engines that sample); None: a fresh draw."""
    stretch_speed: bool = False
    """Take any speed from 0.25 to 4 (:data:`~voicelane.core.rules.STRETCH_MIN_SPEED` to
    :data:`~voicelane.core.rules.STRETCH_MAX_SPEED`), whatever the engine: it renders the
    nearest speed it can and the worker time-stretches the audio by the rest (the request's
    ``tempo``). False: the engine's own range only (a speed beyond it is refused)."""


@dataclass(frozen=True, slots=True)
class Caption:
    """A sentence as spoken, its span in the request's text and when its audio starts."""

    text: str
    start: int
    end: int
    pts_ms: int
    sentence: int


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """A piece of a stream's output, whatever the front."""

    request_id: str
    seq: int
    data: tuple[bytes, ...]
    """20 ms Opus packets, or consecutive pieces of a byte stream (file, raw PCM)."""
    pts_ms: int
    sample_rate_hz: int
    server_ts_ms: int
    client_ts_ms: int
    final: bool
    captions: tuple[Caption, ...]
    words: tuple[WordTiming, ...] = ()
    """Word timings the worker sent with this chunk (spans in the request's text, times on
    the stream's clock), in order; for espeak, a sentence's words ride with its caption."""
    marks: tuple[MarkTiming, ...] = ()
    """SSML marks reached, with their times; the final chunk carries those after the last
    word."""


# ---- admission -----------------------------------------------------------------------------


class Admission:
    """May one more stream start? Free real-time slots of live workers minus the queue,
    cached for a few tens of ms, minus the streams this process admitted since: a burst
    cannot overshoot, and a refusal (``RESOURCE_EXHAUSTED``) is immediate."""

    def __init__(
        self, lane: RealtimeClient, engine: str, *, ttl_s: float = DEFAULT_CAPACITY_TTL_S
    ) -> None:
        self._lane = lane
        self._engine = engine
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

    def refuse_if_full(self) -> None:
        """Refuse now, without a Redis call, when the capacity read in the last ``ttl_s`` is
        used up: past capacity a refusal must cost next to nothing (a full lane sees many
        more requests than it serves, and each one's Redis calls would slow the streams it
        serves)."""
        if self.known_full():
            raise _no_capacity()

    def known_full(self) -> bool:
        """The capacity read in the last ``ttl_s`` is used up."""
        return time.monotonic() - self._fetched_at < self._ttl_s and self._used_up()

    async def _reserve(self) -> None:
        async with self._lock:
            if time.monotonic() - self._fetched_at >= self._ttl_s:
                self._submitted = 0
                self._capacity = await self._lane.capacity(self._engine)
                self._fetched_at = time.monotonic()
            if self._used_up():
                raise _no_capacity()
            self._in_flight += 1

    def _used_up(self) -> bool:
        """The cached capacity is used up (by streams admitted since it was read)."""
        return self._capacity - self._in_flight - self._submitted <= 0


def _no_capacity() -> NoCapacityError:
    return NoCapacityError(
        "no real-time capacity; retry shortly", retry_after_s=NO_CAPACITY_RETRY_S
    )


# ---- relay ---------------------------------------------------------------------------------


class Liveness:
    """Is anyone working on the request? Raises UnavailableError when not."""

    def __init__(
        self,
        lane: RealtimeClient,
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


class Stream:
    """One admitted stream: its chunks as they are produced, then its end.

    ``after_seq`` drops audio with ``seq <= after_seq`` and the captions attached to it
    (resume). Audio never goes out twice or backwards, even if a worker that took over
    repeats a seq. Captions ride on the next chunk; a caption just before ``end`` rides on
    the final chunk. Word timings and marks ride on the chunk whose entry carried them (or
    with the caption that carried them), and are dropped with it on resume. Use as
    ``async with``: leaving early cancels the request.
    """

    def __init__(
        self,
        gateway: StreamGateway,
        tenant: str,
        request_id: str,
        *,
        deadline_ms: int,
        sample_rate_hz: int,
        client_ts_ms: int,
        picked_up: bool,
        after_seq: int = -1,
        client_gone: ClientGone = lambda: False,
        front: str | None = None,
        engine: str = "",
        slot_id: str | None = None,
    ) -> None:
        rt = gateway.settings.realtime
        self._front = front
        self.engine = engine
        """The engine serving the stream ("" for a resumed one: not known here)."""
        """Set for a new stream: its first audio is timed for ``chattts_stream_latency_ms``."""
        self._opened_s = time.monotonic()
        self._gateway = gateway
        self._lane = gateway.lane
        self.tenant = tenant
        self.request_id = request_id
        """The id the client knows."""
        self.lane_id = lane_request_id(tenant, request_id)
        """The id in the lane (the client's, in its tenant's namespace)."""
        self.slot_id = slot_id or self.lane_id
        """Its slot among the tenant's open streams (a resume has one of its own)."""
        self._deadline_ms = deadline_ms
        self._sample_rate_hz = sample_rate_hz
        self._client_ts_ms = client_ts_ms
        self._liveness = Liveness(
            gateway.lane,
            self.lane_id,
            claim_timeout_s=rt.claim_timeout_s,
            unavailable_after_s=rt.unavailable_after_s,
            picked_up=picked_up,
        )
        self._block_ms = gateway.block_ms
        self._check_every_s = min(
            LIVENESS_CHECK_S, rt.claim_timeout_s / 4, rt.unavailable_after_s / 4
        )
        self._subscription: Subscription | None = None
        """The stream's output, through the gateway's reader (while :meth:`chunks` runs)."""
        self._client_gone = client_gone
        self._marked_ms = 0
        """The read mark last written (submission wrote 0)."""
        self._mark_step_ms = min(MARK_STEP_MS, round(rt.max_unread_output_s * 1000 / 4))
        self._last_seq = after_seq
        self._captions: list[OutputEvent] = []
        self.finished = False
        self.closed = False
        self.chunks_sent = 0

    async def __aenter__(self) -> Stream:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def chunks(self) -> AsyncGenerator[StreamChunk, None]:
        """The output as it arrives, through the gateway's output reader (one XREAD per round
        for all the front's streams); when nothing came for ``block_ms``, the liveness rules
        decide whether to go on waiting."""
        subscription = self._subscription = self._gateway.reader.subscribe(self.lane_id)
        last_check = time.monotonic()
        try:
            while True:
                if self._client_gone():
                    # grpc.aio cancels a handler whose client left, but can lose that
                    # cancellation (see voicelane.api.grpc_service.client_gone): never outlive the
                    # client; the adapter's close() then cancels the request.
                    return
                if now_ms() >= self._deadline_ms:
                    raise DeadlineExceededError("the stream's deadline passed")
                block_ms = max(1, min(self._block_ms, self._deadline_ms - now_ms()))
                entries = await subscription.get(block_ms / 1000)
                if not entries:
                    # Heartbeat and clocks, a few times per liveness period: not after every
                    # quiet block (a live stream is quiet between its chunks).
                    now = time.monotonic()
                    if now - last_check >= self._check_every_s:
                        last_check = now
                        await self._liveness.check_idle()
                    continue
                last_check = time.monotonic()
                self._liveness.output_seen()
                for _, event in entries:
                    chunk = self._accept(event)
                    if chunk is not None:
                        if self._front is not None and chunk.data:
                            self._first_audio(self._front)
                        self.chunks_sent += 1
                        yield chunk
                        if chunk.data:  # the client took it (its front asked for more)
                            await self._taken(chunk.pts_ms)
                    if self.finished:
                        return
        finally:
            subscription.close()

    async def _taken(self, pts_ms: int) -> None:
        """The client has taken the output up to ``pts_ms``: the read mark the worker renders
        at most ``max_unread_output_s`` beyond (backpressure). Written once per
        ``_mark_step_ms`` of audio; a failed write is tried again with a later chunk (the
        worker only waits a little longer)."""
        if pts_ms - self._marked_ms < self._mark_step_ms:
            return
        try:
            await self._lane.mark_read(self.lane_id, pts_ms, self._deadline_ms)
        except (RedisError, OSError) as error:
            log.debug("stream %s: could not mark its output read: %s", self.lane_id, error)
            return
        self._marked_ms = pts_ms

    async def close(self) -> None:
        """Cancel the request unless it reached its end, and give the tenant's slot back
        (neither while the server drains: the stream goes on, to be resumed)."""
        if self._subscription is not None:
            self._subscription.close()
        if self.closed or self._gateway.draining:
            return
        self.closed = True
        await self._gateway.end(
            self.tenant, self.lane_id, cancel=not self.finished, slot_id=self.slot_id
        )

    def _first_audio(self, front: str) -> None:
        latency_ms = (time.monotonic() - self._opened_s) * 1000
        metrics.STREAM_LATENCY_MS.labels(front=front, engine=self.engine).observe(latency_ms)
        self._front = None

    def _accept(self, event: OutputEvent) -> StreamChunk | None:
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
        raise error_from_wire(event.error or NO_DETAIL)  # the worker's error, whole

    def _chunk(self, event: OutputEvent, seq: int, *, final: bool) -> StreamChunk:
        held = self._captions
        captions = tuple(
            Caption(c.text, max(0, c.start), max(0, c.end), max(0, c.pts_ms), max(0, c.sentence))
            for c in held
        )
        self._captions = []
        return StreamChunk(
            request_id=self.request_id,
            seq=seq,
            data=event.data,
            pts_ms=max(0, event.pts_ms),
            sample_rate_hz=event.sample_rate_hz or self._sample_rate_hz,
            server_ts_ms=event.server_ts_ms or now_ms(),
            client_ts_ms=event.client_ts_ms or self._client_ts_ms,
            final=final,
            captions=captions,
            words=(*(w for c in held for w in c.words), *event.words),
            marks=(*(m for c in held for m in c.marks), *event.marks),
        )


class Conversation(Stream):
    """A stream whose text arrives in pieces: :meth:`send` deltas, :meth:`flush`, :meth:`end`
    (the request rules apply to everything received so far)."""

    ended = False
    text_field = "text_delta"
    """The field a refusal of the text names (the front's name for its deltas)."""
    _text: ConversationText | None = None
    _unflushed = False
    """Text was sent since the last flush: only then does a flush do (and cost) anything."""

    async def send(self, delta: str) -> str:
        """Send ``delta``; returns what was sent of it (a BOM at the very start and control
        characters removed): word timings' spans are offsets into those texts joined."""
        if self._text is None:
            self._text = ConversationText(
                self._gateway.settings.max_stream_text_chars, field=self.text_field
            )
        text = self._text.accept(delta)
        if text:
            await self._lane.send_input(self.lane_id, InputPiece(InputKind.TEXT, text))
            self._unflushed = True
        return text

    async def flush(self) -> None:
        """Speak what was sent so far. A flush with no text since the last (or before any) has
        nothing to flush and is dropped: flushes are then bounded by the text's own limit
        (each would be an entry in Redis until the conversation ends)."""
        if not self._unflushed:
            return
        self._unflushed = False
        await self._lane.send_input(self.lane_id, InputPiece(InputKind.FLUSH))

    async def end(self) -> None:
        if not self.ended:
            self.ended = True
            await self._lane.send_input(self.lane_id, InputPiece(InputKind.END))


# ---- the gateway ---------------------------------------------------------------------------


class StreamGateway:
    """Opens, resumes and closes streams for every front; see the module docstring."""

    def __init__(
        self,
        settings: ServiceSettings,
        lane: RealtimeClient,
        engines: EngineCatalog,
        *,
        rate: RequestRate | None = None,
        block_ms: int = DEFAULT_BLOCK_MS,
        min_deadline_s: float = MIN_USEFUL_DEADLINE_S,
        text_options: TextOptionsResolver | None = None,
        voices: VoiceResolver | None = None,
    ) -> None:
        self.settings = settings
        self.text_options = text_options or TextOptionsResolver(None)
        """Resolves each request's text options (its tenant's lexicons)."""
        self.voices = voices or VoiceResolver(None)
        """Resolves a request's voice that is the tenant's own or a mix."""
        self.lane = lane
        self.engines = engines
        self._admissions: dict[str, Admission] = {}
        self.rate = rate or RequestRate(
            lane.redis, per_s=settings.tenant_requests_per_s, burst=settings.tenant_request_burst
        )
        self.block_ms = block_ms
        self.min_deadline_s = min_deadline_s
        self.draining = False
        """Shutting down: streams cut by the shutdown are left running, to be resumed."""
        self.reader = OutputReader(lane, block_ms=block_ms)
        """Reads every open stream's output (one XREAD per round); stopped by :meth:`close`."""
        self._background: set[asyncio.Task[None]] = set()
        self._release_retries: set[asyncio.Task[None]] = set()
        """Tenant slots whose release failed, retried (:data:`RELEASE_RETRY_S`) apart from
        :attr:`_background`: a front shutting down does not wait for them."""

    async def capabilities(self, engine: str | None = None) -> EngineCapabilities:
        return await self.engines.capabilities(engine)

    def admission(self, engine: str) -> Admission:
        """Admission to ``engine``'s workers (each engine has its own capacity)."""
        admission = self._admissions.get(engine)
        if admission is None:
            admission = self._admissions[engine] = Admission(self.lane, engine)
        return admission

    def refuse_if_every_engine_full(self) -> None:
        """Refuse a new stream before any work on it (its text, its voice, its options) when
        every served engine's admission knows it is full: a refusal must cost next to
        nothing, and past capacity most requests are refused (a retry storm)."""
        admissions = [self._admissions.get(engine) for engine in self.engines.engines]
        if all(admission is not None and admission.known_full() for admission in admissions):
            raise _no_capacity()

    def deadline_ms(self, time_remaining_s: float | None) -> int:
        """The stream's absolute deadline (unix ms): the client's, else the default; never
        more than ``max_deadline_s`` away."""
        rt = self.settings.realtime
        if time_remaining_s is None:
            time_remaining_s = rt.default_deadline_s
        elif time_remaining_s < self.min_deadline_s:
            raise DeadlineExceededError("the call's deadline has passed before it could start")
        return now_ms() + round(min(time_remaining_s, rt.max_deadline_s) * 1000)

    async def synthesize(
        self,
        tenant: str,
        text: str,
        ask: StreamAsk,
        *,
        text_field: str = "text",
        time_remaining_s: float | None = None,
        client_gone: ClientGone = lambda: False,
    ) -> Stream:
        """A stream speaking ``text`` (checked, admitted, queued)."""
        self.refuse_if_every_engine_full()
        text = check_speech_text(
            text, max_chars=self.settings.max_stream_text_chars, field=text_field
        )
        text_options = await self._text_options(tenant, ask)
        voice = await self.resolve_voice(tenant, ask.voice, text=text)
        caps = voice.caps
        # Refused now what the worker could not speak: nothing left for this engine, SSML
        # that cannot be read, a voice it does not have.
        prepared = prepare_text(
            text, profile=profile_for(caps.engine), options=text_options, field=text_field
        )
        prepared.check(caps, field=text_field)
        request = await self._request(
            tenant, ask, voice, Mode.SYNTHESIZE, time_remaining_s, text_options=text_options
        )
        await self._submit(request, text, chosen_id=ask.request_id is not None)
        log.info(
            "stream %s submitted: tenant=%s voice=%s rate=%d Hz speed=%g tempo=%g encoding=%s "
            "chars=%d",
            request.request_id, tenant, request.voice, request.sample_rate_hz, request.speed,
            request.tempo, request.encoding.value, len(text),
        )  # fmt: skip
        return self._stream(Stream, request, client_gone, ask.front)

    async def converse(
        self,
        tenant: str,
        ask: StreamAsk,
        *,
        time_remaining_s: float | None = None,
        client_gone: ClientGone = lambda: False,
    ) -> Conversation:
        """A stream whose text the caller sends as it arrives."""
        self.refuse_if_every_engine_full()
        text_options = replace(await self._text_options(tenant, ask), ssml=False)
        voice = await self.resolve_voice(tenant, ask.voice, text="")
        request = await self._request(
            tenant, ask, voice, Mode.CONVERSE, time_remaining_s, text_options=text_options
        )
        await self._submit(request, None, chosen_id=ask.request_id is not None)
        log.info(
            "conversation %s submitted: tenant=%s voice=%s rate=%d Hz speed=%g tempo=%g",
            request.request_id, tenant, request.voice, request.sample_rate_hz, request.speed,
            request.tempo,
        )  # fmt: skip
        conversation = self._stream(Conversation, request, client_gone, ask.front)
        assert isinstance(conversation, Conversation)
        return conversation

    async def resume(
        self,
        tenant: str,
        request_id: str,
        after_seq: int,
        *,
        sample_rate_hz: int | None = None,
        client_ts_ms: int = 0,
        time_remaining_s: float | None = None,
        client_gone: ClientGone = lambda: False,
    ) -> Stream:
        """The rest of the tenant's stream after ``after_seq``: one request of the tenant's
        rate, and one of its open streams while it relays (a slot of its own, given back when
        it closes: each reader of a stream counts, the first one as much as a resume)."""
        request_id = check_request_id(request_id)
        client_ts_ms = check_client_ts_ms(client_ts_ms)
        deadline_ms = self.deadline_ms(time_remaining_s)
        lane_id = lane_request_id(tenant, request_id)
        await self.rate.take(tenant)
        resumable, has_output = await self.lane.resumable(lane_id, tenant)
        if not resumable:
            raise StreamNotFoundError(
                f"no stream {request_id} to resume (unknown, expired or another tenant's)"
            )
        slot_id = f"{lane_id}{RESUME_SLOT_MARK}{secrets.token_hex(6)}"
        await self._hold_tenant_slot(tenant, slot_id, deadline_ms)
        log.info("stream %s resumed after seq %d: tenant=%s", request_id, after_seq, tenant)
        return Stream(
            self,
            tenant,
            request_id,
            deadline_ms=deadline_ms,
            sample_rate_hz=sample_rate_hz or DEFAULT_SAMPLE_RATE_HZ,
            client_ts_ms=client_ts_ms,
            picked_up=has_output,
            after_seq=after_seq,
            client_gone=client_gone,
            slot_id=slot_id,
        )

    async def end(
        self, tenant: str, lane_id: str, *, cancel: bool, slot_id: str | None = None
    ) -> None:
        """A stream is over for its front: set its cancel mark (if it did not finish) and give
        its tenant's slot back (``slot_id``: a resume's own, else the stream's); survives the
        caller's own cancellation."""
        task = asyncio.create_task(self._end(tenant, lane_id, cancel=cancel, slot_id=slot_id))
        self._background.add(task)
        task.add_done_callback(self._end_done(lane_id, cancelled=cancel))
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.shield(task)

    async def _end(
        self, tenant: str, lane_id: str, *, cancel: bool, slot_id: str | None = None
    ) -> None:
        """The cancel mark, then the slot's release (``slot_id``: a resume's own slot; else
        the stream's) — which happens even when the mark could not be written (Redis at its
        ``maxmemory`` refuses the mark but not the release), and is retried in the background
        when it fails itself."""
        slot = slot_id or lane_id
        cancel_error: Exception | None = None
        if cancel:
            try:
                await self.lane.cancel(lane_id)
            except Exception as error:
                cancel_error = error
        try:
            await self.lane.release_tenant_slot(tenant, slot)
        except Exception:
            task = asyncio.create_task(self._release_later(tenant, slot))
            self._release_retries.add(task)
            task.add_done_callback(self._release_retries.discard)
            raise
        if cancel_error is not None:
            raise cancel_error

    async def _release_later(self, tenant: str, slot_id: str) -> None:
        for wait_s in RELEASE_RETRY_S:
            await asyncio.sleep(wait_s)
            try:
                await self.lane.release_tenant_slot(tenant, slot_id)
            except Exception as error:
                log.debug("slot %s: release failed again: %s", slot_id, error)
                continue
            log.info("slot %s: its tenant's slot released on a retry", slot_id)
            return
        log.warning("slot %s: not released; it lapses at the stream's deadline", slot_id)

    async def _hold_tenant_slot(self, tenant: str, slot_id: str, until_ms: int) -> None:
        """One of the tenant's open streams for ``slot_id`` until ``until_ms``, or
        QuotaExceededError."""
        limit = self.settings.tenant_max_streams
        if not await self.lane.hold_tenant_slot(tenant, slot_id, until_ms=until_ms, limit=limit):
            raise QuotaExceededError(
                f"tenant {tenant!r} already has {limit} open streams; close one first",
                retry_after_s=TENANT_SLOT_RETRY_S,
            )

    async def wait_background(self) -> None:
        """Let the cancel marks of the last streams reach Redis."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    async def close(self) -> None:
        """The front stops: stop the output reader (the lane is its owner's to close) and the
        slot releases still being retried (those slots lapse at their deadlines)."""
        await self.reader.close()
        for task in list(self._release_retries):
            task.cancel()

    # ---- internals ---------------------------------------------------------------------------

    async def _text_options(self, tenant: str, ask: StreamAsk) -> TextOptions:
        return await self.text_options.resolve(
            tenant, normalize=ask.normalize, ssml=ask.ssml, lexicons=ask.lexicons
        )

    async def resolve_voice(self, tenant: str, voice: str | None, *, text: str) -> ResolvedVoice:
        """The engine and voice a request's ``voice`` names: one of the tenant's voices or a
        mix (its speaker, for an engine that makes such voices), else an engine's own voice
        (:meth:`EngineCatalog.resolve`). Every front and the jobs route resolve here."""
        custom = await self.voices.resolve(tenant, voice) if voice else None
        if custom is None:
            return await self.engines.resolve(voice, text=text)
        assert voice is not None
        engine = custom.engine
        if engine is None:  # a mix of engine voice ids only: their engine
            parts = [await self.engines.resolve(v, text=text) for v in custom.engine_voices]
            engines = sorted({part.engine for part in parts})
            if len(engines) != 1:
                raise InvalidInputError(
                    f"voice: a mix is of one engine's voices (this one names {', '.join(engines)})",
                    field="voice",
                )
            engine = engines[0]
            custom = await self.voices.resolve(tenant, voice, engine=engine) or custom
        caps = await self.engines.capabilities(self.engines.served(engine, voice=voice))
        if not caps.voice_kinds:
            raise UnknownVoiceError(
                f"voice {shown(voice)}: the {engine} engine speaks only its own voices",
                field="voice",
            )
        for part in custom.engine_voices:
            check_voice(split_voice(part)[1], caps)
        speaker = custom.speaker
        return ResolvedVoice(caps, f"custom:{speaker.digest}", speaker=speaker, requested=voice)

    async def _request(
        self,
        tenant: str,
        ask: StreamAsk,
        voice: ResolvedVoice,
        mode: Mode,
        time_remaining_s: float | None,
        *,
        text_options: TextOptions,
    ) -> StreamRequest:
        options = check_speech_options(
            voice.caps,
            voice=voice.voice,
            speed=ask.speed,
            sample_rate_hz=ask.sample_rate_hz,
            allowed_rates=stream_sample_rates(ask.encoding),
            encoding=ask.encoding.value,
            custom_voice=voice.speaker is not None,
            stretch_speed=ask.stretch_speed,
        )
        client_ts_ms = check_client_ts_ms(ask.client_ts_ms)
        request_id = (
            check_request_id(ask.request_id) if ask.request_id is not None else new_request_id()
        )
        return StreamRequest(
            request_id=lane_request_id(tenant, request_id),
            tenant=tenant,
            voice=options.voice,
            sample_rate_hz=options.sample_rate_hz,
            deadline_ms=self.deadline_ms(time_remaining_s),
            mode=mode,
            speed=options.speed,
            client_ts_ms=client_ts_ms,
            encoding=ask.encoding,
            paced=ask.paced,
            text_options=text_options,
            engine=voice.engine,
            speaker=voice.speaker,
            seed=check_seed(ask.seed),
            tempo=options.tempo,
        )

    async def _submit(self, request: StreamRequest, text: str | None, *, chosen_id: bool) -> None:
        """Quotas, admission, the id reserved for the tenant, queue. Nothing is written to the
        lane unless every check passed; a refusal after the tenant's slot was taken gives it
        back."""
        tenant, lane_id = request.tenant, request.request_id
        public_id = lane_id.removeprefix(f"{tenant}.")
        exists = StreamExistsError(
            f"request_id: a stream {public_id} already exists", field="request_id"
        )
        admission = self.admission(request.engine)
        admission.refuse_if_full()
        if chosen_id and await self.lane.exists(lane_id):
            raise exists
        await self.rate.take(tenant)
        remaining_s = max(0.0, (request.deadline_ms - now_ms()) / 1000)
        ttl_s = math.ceil(remaining_s + self.settings.realtime.output_ttl_s) + TENANT_TTL_MARGIN_S
        async with admission.slot():
            await self._hold_tenant_slot(tenant, lane_id, request.deadline_ms)
            try:
                if not await self.lane.reserve(lane_id, tenant, ttl_s):
                    raise exists
                await self.lane.submit(request, text, backpressure=True)
            except BaseException:
                await self.lane.release_tenant_slot(tenant, lane_id)
                raise

    def _stream(
        self, kind: type[Stream], request: StreamRequest, client_gone: ClientGone, front: str
    ) -> Stream:
        return kind(
            self,
            request.tenant,
            request.request_id.removeprefix(f"{request.tenant}."),
            deadline_ms=request.deadline_ms,
            sample_rate_hz=request.sample_rate_hz,
            client_ts_ms=request.client_ts_ms,
            picked_up=False,
            client_gone=client_gone,
            front=front,
            engine=request.engine,
        )

    def _end_done(self, lane_id: str, *, cancelled: bool) -> Callable[[asyncio.Task[None]], None]:
        def done(task: asyncio.Task[None]) -> None:
            self._background.discard(task)
            error = None if task.cancelled() else task.exception()
            if task.cancelled() or error is not None:
                log.warning("could not end stream %s: %s", lane_id, error or "cancelled")
            elif cancelled:
                log.info("stream %s cancelled", lane_id)

        return done
