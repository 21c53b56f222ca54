"""An in-process fake of the gRPC Speech front, for the client SDK's tests.

:class:`FakeSpeechServer` is a real ``grpc.aio`` server on a free loopback port implementing
``Synthesize``, ``Converse`` and ``ListVoices`` from the generated base class. Audio is a sine
encoded to real Opus packets with :class:`voicelane.common.audio.OpusStreamEncoder`; the first chunk
carries one packet, later ones ``packets_per_chunk``, and the last one is ``final``. Every
call must carry ``authorization: Bearer <api_key>`` (else ``UNAUTHENTICATED``); empty text is
``INVALID_ARGUMENT``.

Knobs (attributes of :class:`FakeSpeechServer`, set before or during a test):

* ``fail_first_calls`` / ``fail_code`` — the next N calls (of any method) fail at once;
* ``drop_after_chunks`` / ``drops`` / ``drop_code`` — a Synthesize attempt ends with
  ``drop_code`` (``UNAVAILABLE``; ``None``: ends cleanly, without its final chunk) after
  sending that many chunks, for the first ``drops`` attempts that get that far;
* ``resume_overlap`` — a resume re-sends that many chunks at or below ``resume_after_seq``
  (a misbehaving server; the client must drop them);
* ``expire_outputs`` — resumes answer ``NOT_FOUND``;
* ``lost_seqs`` — chunks never sent (audio lost in a worker takeover: a pts gap);
* ``chunk_delay_s`` — pause between chunks (pacing, not synchronization);
* ``hold`` — an :class:`asyncio.Event` every stream waits on before its first chunk;
* ``pause_after_chunks`` — a Synthesize attempt that sent that many chunks sets ``paused``
  and waits for ``unpause``;
* ``converse_fail_after_text`` — a Converse call ends with ``UNAVAILABLE`` as soon as its
  first text arrives.

Observations: ``synthesize_requests``, ``converse_starts``, ``converse_samples``, ``calls``
(per method), ``peers``, ``active_streams``, ``peak_streams``; :meth:`wait_until` waits for a
condition on them; ``state.rendered`` holds what each Synthesize request was encoded from.

:class:`DropProxy` is a TCP proxy in front of a server whose :meth:`DropProxy.drop` cuts
every connection at once: a dropped connection as the client sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import grpc
import grpc.aio
import numpy as np

from voicelane.common.audio.opus import FRAME_DURATION_MS, OpusStreamEncoder
from voicelane.common.audio.pcm import PcmF32
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc

API_KEY = "test-key-0001"
DEFAULT_RATE_HZ = 24000
SINE_HZ = 440.0
SINE_AMPLITUDE = 0.5
VOICES = (
    pb.Voice(id="auto", name="Automatic", languages=["en", "zh"]),
    pb.Voice(id="en-1", name="English one", languages=["en"]),
)
ENGINE = "fake"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?])$")

ServicerContext = grpc.aio.ServicerContext[object, object]


def sine(samples: int, sample_rate_hz: int) -> PcmF32:
    t = np.arange(samples, dtype=np.float64) / sample_rate_hz
    return (SINE_AMPLITUDE * np.sin(2 * math.pi * SINE_HZ * t)).astype(np.float32)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Rendered:
    """What the server encoded for one request, and the chunks it streams."""

    request_id: str
    pcm: PcmF32
    sample_rate_hz: int
    chunks: list[pb.AudioChunk]

    @property
    def packets(self) -> int:
        return sum(len(c.opus_packets) for c in self.chunks)


@dataclass
class ServerState:
    """What survives a restart of the server (a new instance on the same port)."""

    rendered: dict[str, Rendered] = field(default_factory=dict)
    next_id: int = 0


def group_packets(packets: list[bytes], first: int, per_chunk: int) -> list[list[bytes]]:
    if not packets:
        return [[]]
    groups = [packets[:first]]
    groups += [packets[i : i + per_chunk] for i in range(first, len(packets), per_chunk)]
    return groups


class FakeSpeechServer(pb_grpc.SpeechServicer):
    """See the module docstring. ``async with FakeSpeechServer() as server: server.target``."""

    def __init__(
        self,
        *,
        api_key: str = API_KEY,
        samples_per_char: int = 240,
        fixed_samples: int | None = None,
        packets_per_chunk: int = 5,
        port: int = 0,
        state: ServerState | None = None,
    ) -> None:
        self.api_key = api_key
        self.samples_per_char = samples_per_char
        self.fixed_samples = fixed_samples
        self.packets_per_chunk = packets_per_chunk
        self.state = state or ServerState()
        self._requested_port = port
        self.port = 0
        self._server: grpc.aio.Server | None = None
        # knobs
        self.chat_requests: list[pb.ChatRequest] = []
        self.fail_first_calls = 0
        self.fail_code = grpc.StatusCode.UNAVAILABLE
        self.fail_trailers: tuple[tuple[str, str], ...] = ()
        """Trailing metadata of the fail-first knob's failures (a real front's error-code...)."""
        self.drop_after_chunks: int | None = None
        self.drops = 0
        self.drop_code: grpc.StatusCode | None = grpc.StatusCode.UNAVAILABLE
        self.resume_overlap = 0
        self.expire_outputs = False
        self.lost_seqs: frozenset[int] = frozenset()
        self.chunk_delay_s = 0.0
        self.hold: asyncio.Event | None = None
        self.pause_after_chunks: int | None = None
        self.paused = asyncio.Event()
        self.unpause = asyncio.Event()
        self.converse_fail_after_text = False
        # observations
        self.synthesize_requests: list[pb.SynthesizeRequest] = []
        self.converse_starts: list[pb.ConverseStart] = []
        self.converse_samples: list[int] = []
        """Samples encoded by each conversation that ended."""
        self.calls: Counter[str] = Counter()
        self.peers: list[str] = []
        self.active_streams = 0
        self.peak_streams = 0
        self._changed = asyncio.Condition()

    # -- lifecycle

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = grpc.aio.server()
        pb_grpc.add_SpeechServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port(f"127.0.0.1:{self._requested_port}")
        await self._server.start()

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def wait_until(
        self, condition: Callable[[FakeSpeechServer], bool], timeout_s: float = 10.0
    ) -> None:
        """Block until ``condition(self)`` holds after some stream or call event."""
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(lambda: condition(self))

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- common checks

    async def _admit(self, method: str, context: ServicerContext) -> None:
        """Auth, call counting and the fail-first knob; aborts the call when it says so."""
        self.calls[method] += 1
        self.peers.append(context.peer())
        await self._notify()
        metadata = dict(context.invocation_metadata() or ())
        if metadata.get("authorization") != f"Bearer {self.api_key}":
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong API key")
        if self.fail_first_calls > 0:
            self.fail_first_calls -= 1
            await context.abort(
                self.fail_code,
                f"fake failure of {method} (knob)",
                trailing_metadata=self.fail_trailers,
            )

    @contextlib.asynccontextmanager
    async def _stream(self) -> AsyncIterator[None]:
        self.active_streams += 1
        self.peak_streams = max(self.peak_streams, self.active_streams)
        await self._notify()
        try:
            if self.hold is not None:
                await self.hold.wait()
            yield
        finally:
            self.active_streams -= 1
            await self._notify()

    def samples_for(self, text: str) -> int:
        return (
            self.fixed_samples
            if self.fixed_samples is not None
            else len(text) * (self.samples_per_char)
        )

    # -- Synthesize

    def _render(self, request: pb.SynthesizeRequest) -> Rendered:
        self.state.next_id += 1
        request_id = f"req-{self.state.next_id}"
        rate_hz = request.sample_rate_hz or DEFAULT_RATE_HZ
        pcm = sine(self.samples_for(request.text), rate_hz)
        encoder = OpusStreamEncoder(rate_hz)
        packets = encoder.encode(pcm) + encoder.flush()
        groups = group_packets(packets, 1, self.packets_per_chunk)
        caption = pb.Caption(text=request.text, start=0, end=len(request.text), sentence=0)
        chunks: list[pb.AudioChunk] = []
        sent = 0
        for seq, group in enumerate(groups):
            chunks.append(
                pb.AudioChunk(
                    request_id=request_id,
                    seq=seq,
                    opus_packets=group,
                    pts_ms=sent * FRAME_DURATION_MS,
                    sample_rate_hz=rate_hz,
                    final=seq == len(groups) - 1,
                    captions=[caption] if seq == 0 else [],
                )
            )
            sent += len(group)
        rendered = Rendered(request_id, pcm, rate_hz, chunks)
        self.state.rendered[request_id] = rendered
        return rendered

    async def _chunks_to_send(
        self, request: pb.SynthesizeRequest, context: ServicerContext
    ) -> list[pb.AudioChunk]:
        if not request.request_id:
            if not request.text:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "text is empty")
            return self._render(request).chunks
        rendered = self.state.rendered.get(request.request_id)
        if rendered is None or self.expire_outputs:
            await context.abort(grpc.StatusCode.NOT_FOUND, "the stream's output expired")
        after = request.resume_after_seq if request.HasField("resume_after_seq") else -1
        return [c for c in rendered.chunks if c.seq > after - self.resume_overlap]

    def _lose(self, chunks: list[pb.AudioChunk]) -> list[pb.AudioChunk]:
        return [c for c in chunks if c.seq not in self.lost_seqs]

    async def Synthesize(  # noqa: N802  (the generated interface)
        self, request: pb.SynthesizeRequest, context: ServicerContext
    ) -> AsyncIterator[pb.AudioChunk]:
        self.synthesize_requests.append(request)
        await self._admit("Synthesize", context)
        chunks = self._lose(await self._chunks_to_send(request, context))
        async with self._stream():
            for sent, template in enumerate(chunks):
                if await self._stop_before_chunk(sent, context):
                    return
                chunk = pb.AudioChunk()
                chunk.CopyFrom(template)
                chunk.client_ts_ms = request.client_ts_ms
                chunk.server_ts_ms = now_ms()
                yield chunk

    async def _stop_before_chunk(self, sent: int, context: ServicerContext) -> bool:
        """Pacing, pausing and dropping between the chunks of one attempt; True: stop."""
        if sent and self.chunk_delay_s:
            await asyncio.sleep(self.chunk_delay_s)
        if sent == self.pause_after_chunks:
            self.paused.set()
            await self.unpause.wait()
        if sent == self.drop_after_chunks and self.drops > 0:
            self.drops -= 1
            if self.drop_code is None:
                return True
            await context.abort(self.drop_code, "fake stream drop (knob)")
        return False

    # -- Converse

    async def Converse(  # noqa: N802
        self, request_iterator: AsyncIterator[pb.ConverseRequest], context: ServicerContext
    ) -> AsyncIterator[pb.ConverseResponse]:
        await self._admit("Converse", context)
        async with self._stream():
            first = await anext(request_iterator)
            if first.WhichOneof("event") != "start":
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "start must come first")
            self.converse_starts.append(first.start)
            speaker = _Speaker(self, first.start)
            async for request in request_iterator:
                for chunk in await speaker.handle(request, context):
                    yield pb.ConverseResponse(audio=chunk)
                if speaker.ended:
                    self.converse_samples.append(speaker.samples_encoded)
                    return

    # -- Chat

    async def Chat(  # noqa: N802
        self, request: pb.ChatRequest, context: ServicerContext
    ) -> AsyncIterator[pb.ChatResponse]:
        """A canned reply (``You said: <last message>.``): its text in two deltas, its audio
        as Synthesize renders it, then stats."""
        await self._admit("Chat", context)
        self.chat_requests.append(request)
        last = request.messages[-1].content if request.messages else ""
        reply = f"You said: {last}."
        async with self._stream():
            half = len(reply) // 2
            for delta in (reply[:half], reply[half:]):
                yield pb.ChatResponse(text_delta=delta)
            speak = pb.SynthesizeRequest(text=reply, sample_rate_hz=request.sample_rate_hz)
            for template in self._render(speak).chunks:
                chunk = pb.AudioChunk()
                chunk.CopyFrom(template)
                chunk.client_ts_ms = request.client_ts_ms
                chunk.server_ts_ms = now_ms()
                yield pb.ChatResponse(audio=chunk)
            yield pb.ChatResponse(
                stats=pb.ChatStats(
                    reply_tokens=len(reply.split()), done_reason="stop", spoken_text=reply
                )
            )

    # -- Clock

    async def Clock(  # noqa: N802
        self, request: pb.ClockRequest, context: ServicerContext
    ) -> pb.ClockResponse:
        await self._admit("Clock", context)
        return pb.ClockResponse(
            client_ts_ms=request.client_ts_ms, server_ts_us=time.time_ns() // 1000
        )

    # -- ListVoices

    async def ListVoices(  # noqa: N802
        self, request: pb.ListVoicesRequest, context: ServicerContext
    ) -> pb.ListVoicesResponse:
        await self._admit("ListVoices", context)
        return pb.ListVoicesResponse(engine=ENGINE, voices=list(VOICES))


class _Speaker:
    """One conversation: text arrives in deltas, complete sentences are spoken."""

    def __init__(self, server: FakeSpeechServer, start: pb.ConverseStart) -> None:
        self._server = server
        self.sample_rate_hz = start.sample_rate_hz or DEFAULT_RATE_HZ
        self._client_ts_ms = start.client_ts_ms
        self._encoder = OpusStreamEncoder(self.sample_rate_hz)
        self._pending = ""
        self._offset = 0
        self._sentence = 0
        self._seq = 0
        self._packets_sent = 0
        self.samples_encoded = 0
        self.ended = False

    async def handle(
        self, request: pb.ConverseRequest, context: ServicerContext
    ) -> list[pb.AudioChunk]:
        event = request.WhichOneof("event")
        if event == "text_delta":
            if self._server.converse_fail_after_text:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "fake drop after text (knob)")
            self._pending += request.text_delta
            return self._speak(complete_only=True)
        if event == "flush":
            return self._speak(complete_only=False)
        if event == "end":
            self.ended = True
            chunks = self._speak(complete_only=False)
            return [*chunks, self._chunk(self._encoder.flush(), [], final=True)]
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unexpected {event}")

    def _speak(self, *, complete_only: bool) -> list[pb.AudioChunk]:
        parts = _SENTENCE_END.split(self._pending)
        ready, self._pending = (parts[:-1], parts[-1]) if complete_only else (parts, "")
        chunks: list[pb.AudioChunk] = []
        for sentence in (s for s in ready if s.strip()):
            chunks += self._sentence_chunks(sentence)
        return chunks

    def _sentence_chunks(self, sentence: str) -> list[pb.AudioChunk]:
        start = self._offset
        self._offset += len(sentence)
        samples = self._server.samples_for(sentence)
        self.samples_encoded += samples
        caption = pb.Caption(
            text=sentence,
            start=start,
            end=self._offset,
            pts_ms=self._packets_sent * FRAME_DURATION_MS,
            sentence=self._sentence,
        )
        self._sentence += 1
        packets = self._encoder.encode(sine(samples, self.sample_rate_hz))
        groups = group_packets(
            packets, self._server.packets_per_chunk, self._server.packets_per_chunk
        )
        return [
            self._chunk(group, [caption] if i == 0 else [], final=False)
            for i, group in enumerate(groups)
        ]

    def _chunk(
        self, packets: list[bytes], captions: list[pb.Caption], *, final: bool
    ) -> pb.AudioChunk:
        chunk = pb.AudioChunk(
            request_id="conv-1",
            seq=self._seq,
            opus_packets=packets,
            pts_ms=self._packets_sent * FRAME_DURATION_MS,
            sample_rate_hz=self.sample_rate_hz,
            server_ts_ms=now_ms(),
            client_ts_ms=self._client_ts_ms,
            final=final,
            captions=captions,
        )
        self._seq += 1
        self._packets_sent += len(packets)
        return chunk


# ---- a connection cutter -------------------------------------------------------------------


class DropProxy:
    """A loopback TCP proxy to ``upstream_port``; :meth:`drop` resets every connection."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._pipes: set[asyncio.Task[None]] = set()
        self.connections = 0

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.drop()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self._writers += [writer, up_writer]
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(_pipe(source, sink))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    def drop(self) -> None:
        """Reset every connection (RST): both the client's and the server's side."""
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
