"""One Wyoming connection: its events read (with bounds), answered, and its syntheses run
through the stream gateway — request rules, the tenant's quotas, admission — like every
front's.

Two tasks per connection: the *reader* reads events and answers what needs no synthesis
(``describe``, ``ping``), and queues syntheses; the *worker* runs them one at a time, in
order, relaying their audio as it arrives:

- ``synthesize`` → a stream (:meth:`StreamGateway.synthesize`) → ``audio-start``,
  ``audio-chunk``…, ``audio-stop``;
- ``synthesize-start``, ``synthesize-chunk``…, ``synthesize-stop`` → a conversation
  (:meth:`StreamGateway.converse`) fed with the chunks while its audio is relayed, one
  ``audio-start``/``audio-chunk``…/``audio-stop`` cycle per sentence (as wyoming-piper
  does), then ``synthesize-stopped``. The whole-text ``synthesize`` that Home Assistant sends
  inside a text stream (for servers that do not stream) is ignored there.

Any refusal or failure is an ``error`` event (its text and voicelane's code), after which the
connection ends, as wyoming-piper's does (Home Assistant reads until the connection closes).
The end of the connection — the client gone, mid-synthesis or not — cancels the synthesis
under way (its stream is closed: the worker drops it, the tenant's slot is given back). A
connection with nothing to do for ``idle_timeout_s`` is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import TypeVar

from wyoming.event import Event, Eventable, async_write_event
from wyoming.info import Describe, SelectProgram
from wyoming.ping import Ping, Pong
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

from voicelane.api.failures import client_error
from voicelane.api.front_process import wait_step
from voicelane.api.streams import Conversation, Stream, StreamAsk, StreamChunk, StreamGateway
from voicelane.api.wyoming_events import (
    PROGRAM_NAME,
    PcmFramer,
    error_event,
    requested_voice,
    tts_info,
    wants_ssml,
)
from voicelane.api.wyoming_wire import read_event
from voicelane.common.audio.stream import StreamEncoding, stream_sample_rates
from voicelane.common.defaults import DEFAULT_SAMPLE_RATE_HZ
from voicelane.common.errors import (
    DeadlineExceededError,
    InvalidInputError,
    MalformedRequestError,
    QuotaExceededError,
    TextTooLargeError,
    UnsupportedFormatError,
)
from voicelane.core.rules import shown

log = logging.getLogger(__name__)

E = TypeVar("E", bound=Eventable)

MAX_QUEUED_SYNTHESES = 4
"""Syntheses one connection may have waiting behind the one running."""
LINGER_S = 1.0
LINGER_MAX_BYTES = 1024 * 1024
"""After an error, what the client still sends is read and dropped for this long (this
much at most) before the socket closes: closing with unread input would reset the
connection, and the client could lose the error event itself."""


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """What every connection of a server shares."""

    tenant: str
    """The tenant every Wyoming client acts as (``wyoming_api_key``'s)."""
    max_event_bytes: int
    samples_per_chunk: int
    idle_timeout_s: float
    version: str | None = None


@dataclass(slots=True)
class _Synthesis:
    text: str
    voice: SynthesizeVoice | None
    ssml: bool | None


@dataclass(slots=True)
class _TextStream:
    voice: SynthesizeVoice | None
    texts: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)
    chars: int = 0


class WyomingSession:
    """One client connection (module docstring). :meth:`run` returns when it is over."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        gateway: StreamGateway,
        config: SessionConfig,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.gateway = gateway
        self.config = config
        self._jobs: asyncio.Queue[_Synthesis | _TextStream] = asyncio.Queue(MAX_QUEUED_SYNTHESES)
        self._open_text: _TextStream | None = None
        """The text stream between ``synthesize-start`` and ``synthesize-stop``."""
        self._busy = False
        self._gone = False
        self._failed = False
        self._write_lock = asyncio.Lock()
        self.syntheses = 0
        """Syntheses finished on this connection."""

    async def run(self) -> None:
        reading = asyncio.create_task(self._read_loop())
        working = asyncio.create_task(self._work())
        try:
            await asyncio.wait({reading, working}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._gone = True
            for task in (reading, working):
                task.cancel()
            await asyncio.gather(reading, working, return_exceptions=True)
            if self._failed:
                await _linger(self.reader, self.writer)
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    # ---- the reader ----------------------------------------------------------------------

    async def _read_loop(self) -> None:
        try:
            while True:
                event = await self._next_event()
                if event is None:
                    return  # the client is gone (or closed its side): nothing more to do
                await self._dispatch(event)
        except Exception as error:
            await self._fail(error)

    async def _next_event(self) -> Event | None:
        """The next event; DeadlineExceededError when idle for ``idle_timeout_s`` (time
        spent synthesizing does not count)."""
        read = asyncio.ensure_future(
            read_event(self.reader, max_event_bytes=self.config.max_event_bytes)
        )
        try:
            while True:
                done, _ = await asyncio.wait({read}, timeout=self.config.idle_timeout_s)
                if done:
                    return read.result()
                if not self._busy and self._jobs.empty() and self._open_text is None:
                    raise DeadlineExceededError(
                        f"no event for {self.config.idle_timeout_s:g} s; connection closed"
                    )
        finally:
            if not read.done():
                read.cancel()
                await asyncio.gather(read, return_exceptions=True)

    async def _dispatch(self, event: Event) -> None:
        kind = event.type
        if Describe.is_type(kind):
            engines = await self.gateway.engines.published()
            await self._send(tts_info(engines, version=self.config.version).event())
        elif Ping.is_type(kind):
            await self._send(Pong(text=_parse(Ping, event).text).event())
        elif Synthesize.is_type(kind):
            if self._open_text is not None:
                return  # the whole text again, inside a text stream: for servers that do not stream
            synthesize = _parse(Synthesize, event)
            _check_voice(synthesize.voice)
            if not isinstance(synthesize.text, str):
                raise MalformedRequestError("synthesize: text must be a string", field="text")
            ssml = wants_ssml(synthesize.text_format)
            self._enqueue(_Synthesis(synthesize.text, synthesize.voice, ssml))
        elif SynthesizeStart.is_type(kind):
            if self._open_text is not None:
                raise InvalidInputError(
                    "synthesize-start: a text stream is open already (send synthesize-stop)",
                    field="event",
                )
            start = _parse(SynthesizeStart, event)
            _check_voice(start.voice)
            if wants_ssml(start.text_format):
                raise UnsupportedFormatError(
                    "text_format: a text stream is plain text (SSML: send one synthesize)",
                    field="text_format",
                )
            self._open_text = _TextStream(start.voice)
            self._enqueue(self._open_text)
        elif SynthesizeChunk.is_type(kind):
            text = self._open_text
            if text is None:
                raise InvalidInputError(
                    "synthesize-chunk outside synthesize-start … synthesize-stop", field="event"
                )
            chunk = _parse(SynthesizeChunk, event)
            if not isinstance(chunk.text, str):
                raise MalformedRequestError("synthesize-chunk: text must be a string", field="text")
            text.chars += len(chunk.text)
            limit = self.gateway.settings.max_stream_text_chars
            if text.chars > limit:
                raise TextTooLargeError(
                    f"text: a text stream may send up to {limit} characters", field="text"
                )
            if chunk.text:  # empty ones would only fill the queue
                text.texts.put_nowait(chunk.text)
        elif SynthesizeStop.is_type(kind):
            if self._open_text is None:
                raise InvalidInputError("synthesize-stop without synthesize-start", field="event")
            self._open_text.texts.put_nowait(None)
            self._open_text = None
        elif SelectProgram.is_type(kind):
            name = _parse(SelectProgram, event).name
            if name != PROGRAM_NAME:
                raise InvalidInputError(
                    f"program {shown(str(name))} is not served here ({PROGRAM_NAME})",
                    field="name",
                )
        else:
            log.debug("wyoming: %s event ignored", shown(kind))

    def _enqueue(self, job: _Synthesis | _TextStream) -> None:
        try:
            self._jobs.put_nowait(job)
        except asyncio.QueueFull:
            raise QuotaExceededError(
                f"over {MAX_QUEUED_SYNTHESES} syntheses waiting on this connection"
            ) from None

    # ---- the worker ----------------------------------------------------------------------

    async def _work(self) -> None:
        try:
            while True:
                job = await self._jobs.get()
                self._busy = True
                if isinstance(job, _Synthesis):
                    await self._synthesize(job)
                else:
                    await self._stream(job)
                self.syntheses += 1
                self._busy = False
        except Exception as error:
            await self._fail(error)

    async def _synthesize(self, job: _Synthesis) -> None:
        ask = await self._ask(job.voice, text=job.text, ssml=job.ssml)
        stream = await self.gateway.synthesize(
            self.config.tenant, job.text, ask, client_gone=self._client_gone
        )
        async with stream:
            sent = await self._relay(stream, per_sentence=False)
        log.info("wyoming synthesis %s: %d bytes of PCM", stream.request_id, sent)

    async def _stream(self, job: _TextStream) -> None:
        ask = await self._ask(job.voice, text="", ssml=False)
        conversation = await self.gateway.converse(
            self.config.tenant, ask, client_gone=self._client_gone
        )
        async with conversation:
            feeder = asyncio.create_task(_feed(conversation, job.texts))
            try:
                sent = await self._relay(conversation, per_sentence=True, feeder=feeder)
            finally:
                feeder.cancel()
                await asyncio.gather(feeder, return_exceptions=True)
        await self._send(SynthesizeStopped().event())
        log.info("wyoming text stream %s: %d bytes of PCM", conversation.request_id, sent)

    async def _ask(
        self, voice: SynthesizeVoice | None, *, text: str, ssml: bool | None
    ) -> StreamAsk:
        """Raw PCM at the voice's own rate (no resampling), unpaced: a Wyoming client
        buffers and plays, as fast as the lane renders."""
        engines = await self.gateway.engines.published()
        name = requested_voice(voice, engines)
        resolved = await self.gateway.resolve_voice(self.config.tenant, name, text=text)
        rate = resolved.caps.sample_rate_hz
        if rate not in stream_sample_rates(StreamEncoding.PCM):
            rate = DEFAULT_SAMPLE_RATE_HZ
        return StreamAsk(
            voice=name,
            sample_rate_hz=rate,
            encoding=StreamEncoding.PCM,
            paced=False,
            front="wyoming",
            ssml=ssml,
        )

    async def _relay(
        self, stream: Stream, *, per_sentence: bool, feeder: asyncio.Task[None] | None = None
    ) -> int:
        """The stream's audio as Wyoming audio events; returns the PCM bytes sent."""
        framer: PcmFramer | None = None
        cycle_open = False
        chunks = stream.chunks()
        step: asyncio.Future[StreamChunk] | None = None
        try:
            while True:
                step = asyncio.ensure_future(anext(chunks))
                await wait_step(step, feeder)
                try:
                    chunk = step.result()
                except StopAsyncIteration:
                    break
                data = b"".join(chunk.data)
                if framer is None:
                    framer = PcmFramer(chunk.sample_rate_hz, self.config.samples_per_chunk)
                events: list[Event] = []
                if per_sentence and cycle_open and chunk.captions and data:
                    events += [*framer.flush(), framer.stop()]  # a new sentence starts here
                    cycle_open = False
                if data or not per_sentence:
                    if not cycle_open:
                        events.append(framer.start())
                        cycle_open = True
                    events += framer.feed(data)
                await self._send(*events)
            if framer is not None and cycle_open:
                await self._send(*framer.flush(), framer.stop())
            return framer.bytes_out if framer is not None else 0
        finally:
            if step is not None and not step.done():
                step.cancel()
                await asyncio.gather(step, return_exceptions=True)
            await chunks.aclose()

    # ---- both ----------------------------------------------------------------------------

    def _client_gone(self) -> bool:
        return self._gone

    async def _send(self, *events: Event) -> None:
        """Events written whole and in order, whichever task writes."""
        if not events:
            return
        async with self._write_lock:
            try:
                for event in events:
                    await async_write_event(event, self.writer)
            except ConnectionError:
                self._gone = True  # the client left: the caller ends quietly (no error to send)
                raise

    async def _fail(self, error: Exception) -> None:
        """The error event (the client's error, as every front maps it); the connection then
        ends (the caller returns)."""
        if self._gone:
            return
        self._failed = True
        failure = client_error(error, where="wyoming connection")
        log.info("wyoming: %s: %s", failure.code, failure.message)
        with contextlib.suppress(Exception):
            await self._send(error_event(failure))


def _parse(kind: type[E], event: Event) -> E:
    """``kind.from_event``, a malformed event refused instead of raising whatever."""
    try:
        parsed = kind.from_event(event)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise MalformedRequestError(f"malformed {shown(event.type)} event", field="event") from None
    assert isinstance(parsed, kind)
    return parsed


def _check_voice(voice: SynthesizeVoice | None) -> None:
    if voice is None:
        return
    for name in ("name", "language", "speaker"):
        value = getattr(voice, name)
        if value is not None and not isinstance(value, str):
            raise MalformedRequestError(f"voice.{name} must be a string", field="voice")


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Our side closed (the client reads the error, then the end), the client's input read
    and dropped until it closes its side, for :data:`LINGER_S` at most."""

    async def drain() -> None:
        taken = 0
        while taken < LINGER_MAX_BYTES and (data := await reader.read(64 * 1024)):
            taken += len(data)

    with contextlib.suppress(Exception):
        if writer.can_write_eof():
            writer.write_eof()
        await asyncio.wait_for(drain(), LINGER_S)


async def _feed(conversation: Conversation, texts: asyncio.Queue[str | None]) -> None:
    """The text stream's chunks into the conversation, then its end."""
    while (text := await texts.get()) is not None:
        await conversation.send(text)
    await conversation.end()


__all__ = ["SessionConfig", "WyomingSession"]
