"""``voicelane.v1.Speech``: the gRPC adapter over the stream gateway.

Each RPC turns its messages into a :class:`~voicelane.api.streams.StreamAsk`, lets the gateway
(:mod:`voicelane.api.streams`) validate, admit, submit and relay, and turns each
:class:`~voicelane.api.streams.StreamChunk` into an ``AudioChunk``. The caller's tenant comes from
the API-key interceptor (:mod:`voicelane.api.grpc_auth`); the call's deadline becomes the stream's.
Errors end the call as :func:`voicelane.api.failures.grpc_reply` says (the status, its details and
the ``error-code`` / ``error-field`` / ``retry-after-ms`` trailers); a stream that does not reach
its end is closed (cancelled) before the client hears the status.
``docs/grpc.md`` is the contract in prose; :mod:`voicelane.api.grpc_front` runs the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Never, TypeAlias

import grpc
from google.protobuf import json_format

from voicelane.api.chat import (
    ChatAsk,
    ChatAudio,
    ChatDone,
    ChatStarted,
    ChatSummary,
    ChatText,
    chat,
)
from voicelane.api.failures import grpc_reply
from voicelane.api.front_process import wait_step
from voicelane.api.grpc_auth import current_tenant
from voicelane.api.grpc_errors import Context, abort, status_code
from voicelane.api.llm import ChatTurn, LlmBridge
from voicelane.api.refusal_log import RefusalLog
from voicelane.api.streams import Conversation, Stream, StreamAsk, StreamChunk, StreamGateway
from voicelane.common.errors import DeadlineExceededError, InvalidInputError, UnavailableError
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core import metrics
from voicelane.core.engines import qualified
from voicelane.core.lane.messages import now_ms

log = logging.getLogger(__name__)

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["Speech"].full_name

DEFAULT_START_TIMEOUT_S = 5.0
"""``GrpcSettings.converse_start_timeout_s``'s default."""

SpeechAsking: TypeAlias = pb.SynthesizeRequest | pb.ConverseStart | pb.ChatRequest
"""The messages that carry a stream's speech options."""


def stream_ask(
    message: SpeechAsking, *, request_id: str | None = None, paced: bool = True
) -> StreamAsk:
    """The speech options a message carries (proto3's zero, an unset field, means the
    default); ``request_id`` and ``paced`` only a SynthesizeRequest has."""
    return StreamAsk(
        voice=message.voice or None,
        speed=message.speed or None,
        sample_rate_hz=message.sample_rate_hz or None,
        client_ts_ms=message.client_ts_ms,
        request_id=request_id,
        paced=paced,
        normalize=message.normalize if message.HasField("normalize") else True,
        ssml=(
            message.ssml
            if isinstance(message, pb.SynthesizeRequest) and message.HasField("ssml")
            else None
        ),
        lexicons=tuple(message.lexicons.names) if message.HasField("lexicons") else None,
        seed=(
            message.seed
            if isinstance(message, pb.SynthesizeRequest) and message.HasField("seed")
            else None
        ),
    )


def audio_chunk(chunk: StreamChunk) -> pb.AudioChunk:
    return pb.AudioChunk(
        request_id=chunk.request_id,
        seq=chunk.seq,
        opus_packets=list(chunk.data),
        pts_ms=chunk.pts_ms,
        sample_rate_hz=chunk.sample_rate_hz,
        server_ts_ms=chunk.server_ts_ms,
        client_ts_ms=chunk.client_ts_ms,
        final=chunk.final,
        captions=[
            pb.Caption(text=c.text, start=c.start, end=c.end, pts_ms=c.pts_ms, sentence=c.sentence)
            for c in chunk.captions
        ],
        words=[
            pb.Word(
                text=w.text,
                char_start=w.char_start,
                char_end=w.char_end,
                start_ms=max(0, w.start_ms),
                end_ms=max(0, w.end_ms),
            )
            for w in chunk.words
        ],
        marks=[pb.MarkReached(name=m.name, time_ms=max(0, m.time_ms)) for m in chunk.marks],
    )


def chat_stats(summary: ChatSummary) -> pb.ChatStats:
    """A missing figure (no audio, no final chunk from Ollama) is the field's zero."""
    fields = {name: value for name, value in summary.fields().items() if value is not None}
    return json_format.ParseDict(fields, pb.ChatStats())


def client_gone(context: Context) -> Callable[[], bool]:
    """Has the client left? grpc.aio cancels the handler's task, but a cancellation that
    lands while it sends a message can be swallowed (the task's ``cancelling()`` stays set,
    ``context.cancelled()`` stays False): both count. Call from the handler's task."""
    task = asyncio.current_task()

    def gone() -> bool:
        return context.cancelled() or (task is not None and task.cancelling() > 0)

    return gone


class SpeechService(pb_grpc.SpeechServicer):
    """``voicelane.v1.Speech`` over the stream gateway."""

    def __init__(
        self,
        gateway: StreamGateway,
        llm: LlmBridge | None = None,
        *,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
    ) -> None:
        self.gateway = gateway
        self.llm = llm
        self.start_timeout_s = start_timeout_s
        """How long a Converse call may take to send its ``start``."""
        self.refusals = RefusalLog(log)
        """Capacity and quota refusals in the log: a line per burst, not per call."""

    async def _abort(
        self, context: Context, request_id: str | None, error: Exception, *, method: str
    ) -> Never:
        rid = request_id or "-"
        reply = grpc_reply(error, where=f"{method} stream {rid}")
        code = status_code(reply)
        metrics.GRPC_STREAM_ERRORS.labels(method=method, code=code.name).inc()
        line = f"stream {rid} ended: {code.name}: {reply.error.code}: {reply.details}"
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            self.refusals.refused(method, code.name, line)
        else:
            log.info("%s", line)
        await abort(context, reply)

    async def Synthesize(  # noqa: N802 - the generated servicer's name
        self, request: pb.SynthesizeRequest, context: Context
    ) -> AsyncIterator[pb.AudioChunk]:
        stream: Stream | None = None
        try:
            stream = await self._open(request, context)
            async with contextlib.aclosing(stream.chunks()) as chunks:
                async for chunk in chunks:
                    yield audio_chunk(chunk)
            _log_end("stream", stream)
        except Exception as error:
            await _close(stream)  # before the client hears the status
            await self._abort(
                context,
                stream.request_id if stream else request.request_id,
                error,
                method="Synthesize",
            )
        finally:
            await _close(stream)

    async def Converse(  # noqa: N802 - the generated servicer's name
        self, request_iterator: AsyncIterator[pb.ConverseRequest], context: Context
    ) -> AsyncIterator[pb.ConverseResponse]:
        conversation: Conversation | None = None
        try:
            deadline_ms = self.gateway.deadline_ms(context.time_remaining())
            start = await _first_start(request_iterator, deadline_ms, self.start_timeout_s)
            conversation = await self.gateway.converse(
                current_tenant(),
                stream_ask(start),
                time_remaining_s=context.time_remaining(),
                client_gone=client_gone(context),
            )
            responses = _converse(conversation, request_iterator)
            async with contextlib.aclosing(responses) as stream:
                async for response in stream:
                    yield response
            _log_end("conversation", conversation)
        except Exception as error:
            await _close(conversation)  # before the client hears the status
            await self._abort(
                context,
                conversation.request_id if conversation else None,
                error,
                method="Converse",
            )
        finally:
            await _close(conversation)

    async def ListVoices(  # noqa: N802 - the generated servicer's name
        self, request: pb.ListVoicesRequest, context: Context
    ) -> pb.ListVoicesResponse:
        try:
            default = await self.gateway.capabilities()
            engines = await self.gateway.engines.published()
        except Exception as error:
            await self._abort(context, None, error, method="ListVoices")
        voices = [
            pb.Voice(
                id=v.id if caps.engine == default.engine else qualified(caps.engine, v.id),
                name=v.name,
                languages=list(v.languages),
                engine=caps.engine,
            )
            for caps in sorted(engines, key=lambda c: c.engine != default.engine)
            for v in caps.voices
        ]
        return pb.ListVoicesResponse(engine=default.engine, voices=voices)

    async def Chat(  # noqa: N802 - the generated servicer's name
        self, request: pb.ChatRequest, context: Context
    ) -> AsyncIterator[pb.ChatResponse]:
        """The LLM's reply (:mod:`voicelane.api.chat`): text deltas, audio with captions, stats
        last."""
        request_id: str | None = None
        try:
            if self.llm is None:
                raise UnavailableError("this server has no LLM configured (VOICELANE_LLM__*)")
            ask = ChatAsk(
                messages=[ChatTurn(m.role, m.content) for m in request.messages],
                model=request.model or None,
                system=request.system or None,
                speech=stream_ask(request),
            )
            events = chat(
                self.gateway,
                self.llm,
                current_tenant(),
                ask,
                time_remaining_s=context.time_remaining(),
                client_gone=client_gone(context),
            )
            async with contextlib.aclosing(events) as replies:
                async for event in replies:
                    if isinstance(event, ChatText):
                        yield pb.ChatResponse(text_delta=event.delta)
                    elif isinstance(event, ChatAudio):
                        yield pb.ChatResponse(audio=audio_chunk(event.chunk))
                    elif isinstance(event, ChatStarted):
                        request_id = event.request_id
                    elif isinstance(event, ChatDone):
                        yield pb.ChatResponse(stats=chat_stats(event.summary))
        except Exception as error:
            await self._abort(context, request_id, error, method="Chat")

    async def Clock(  # noqa: N802 - the generated servicer's name
        self, request: pb.ClockRequest, context: Context
    ) -> pb.ClockResponse:
        """The server's wall clock (µs), echoing the client's: one NTP-style sample."""
        return pb.ClockResponse(
            client_ts_ms=request.client_ts_ms, server_ts_us=time.time_ns() // 1000
        )

    async def _open(self, request: pb.SynthesizeRequest, context: Context) -> Stream:
        tenant = current_tenant()
        if request.HasField("resume_after_seq"):
            if not request.request_id:
                raise InvalidInputError(
                    "resume_after_seq needs the request_id of the stream", field="request_id"
                )
            return await self.gateway.resume(
                tenant,
                request.request_id,
                request.resume_after_seq,
                sample_rate_hz=request.sample_rate_hz or None,
                client_ts_ms=request.client_ts_ms,
                time_remaining_s=context.time_remaining(),
                client_gone=client_gone(context),
            )
        ask = stream_ask(
            request,
            request_id=request.request_id or None,
            paced=request.pace if request.HasField("pace") else True,
        )
        return await self.gateway.synthesize(
            tenant,
            request.text,
            ask,
            time_remaining_s=context.time_remaining(),
            client_gone=client_gone(context),
        )


async def _close(stream: Stream | None) -> None:
    if stream is not None:
        await stream.close()


def _log_end(kind: str, stream: Stream) -> None:
    outcome = "done" if stream.finished else "left by its client"
    log.info("%s %s %s: %d chunks", kind, stream.request_id, outcome, stream.chunks_sent)


async def _first_start(
    requests: AsyncIterator[pb.ConverseRequest], deadline_ms: int, start_timeout_s: float
) -> pb.ConverseStart:
    """The conversation's ``start``: within ``start_timeout_s`` (a call that has not said
    what it wants must not hold its place) and before the call's deadline."""
    deadline_s = max(0.0, (deadline_ms - now_ms()) / 1000)
    try:
        first = await asyncio.wait_for(anext(requests), min(deadline_s, start_timeout_s))
    except StopAsyncIteration:
        raise InvalidInputError("the conversation ended before its start message") from None
    except TimeoutError:
        if start_timeout_s < deadline_s:
            raise DeadlineExceededError(
                f"no start message within {start_timeout_s:g} s of the call's start"
            ) from None
        raise DeadlineExceededError("no start message before the deadline") from None
    if first.WhichOneof("event") != "start":
        raise InvalidInputError("the first message of a conversation must be start")
    return first.start


async def _converse(
    conversation: Conversation, requests: AsyncIterator[pb.ConverseRequest]
) -> AsyncGenerator[pb.ConverseResponse, None]:
    """The conversation's chunks, while a second task feeds the client's text to it."""
    feeder = asyncio.create_task(_feed(conversation, requests))
    chunks = conversation.chunks()
    step: asyncio.Future[StreamChunk] | None = None
    try:
        while True:
            step = asyncio.ensure_future(anext(chunks))
            await wait_step(step, feeder)
            try:
                chunk = step.result()
            except StopAsyncIteration:
                return
            yield pb.ConverseResponse(audio=audio_chunk(chunk))
    finally:
        await _cancel_tasks(feeder, step)
        await chunks.aclose()


async def _feed(conversation: Conversation, requests: AsyncIterator[pb.ConverseRequest]) -> None:
    """The client's messages after ``start`` → the conversation's text."""
    async for message in requests:
        if conversation.ended:
            raise InvalidInputError("nothing may follow end in a conversation")
        kind = message.WhichOneof("event")
        if kind == "text_delta":
            await conversation.send(message.text_delta)
        elif kind == "flush":
            await conversation.flush()
        elif kind == "end":
            await conversation.end()
        elif kind == "start":
            raise InvalidInputError("start may only be the first message of a conversation")
        else:
            raise InvalidInputError("a ConverseRequest must set start, text_delta, flush or end")
    await conversation.end()  # the client closed its side: that is the end


async def _cancel_tasks(*tasks: asyncio.Future[Any] | None) -> None:
    pending = [t for t in tasks if t is not None]
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
