"""OpenAI's chat completions with audio: an LLM's reply (Ollama) spoken by voicelane.

``POST /v1/chat/completions`` follows OpenAI's chat-with-audio convention, so the official
``openai`` client works unchanged:

* request: ``{"model", "messages": [{"role", "content"}], "modalities": ["text", "audio"],
  "audio": {"voice", "format"}, "stream"?}``; ``content`` is a string or a list of text parts.
  ``model``: an Ollama model name, or an OpenAI one (``gpt-…``, ``o1…``), which means the
  server's configured model (``VOICELANE_LLM__MODEL``). ``audio.voice``: OpenAI's voice names
  (``alloy``, ``echo``, …) map to real voices as on ``/v1/audio/speech``
  (:mod:`voicelane.api.openai_voices`); voicelane voice ids work as they are.
* streamed (``"stream": true``): server-sent events, OpenAI's ``chat.completion.chunk``
  objects: ``delta.audio.data`` carries base64 PCM16 (24 kHz mono little-endian, the only
  format OpenAI streams), ``delta.audio.transcript`` the spoken text as its audio starts;
  the last chunk has ``finish_reason`` and ``usage``; then ``data: [DONE]``. Audio is paced
  just ahead of playback (a live player).
* not streamed: one ``chat.completion`` with ``message.audio.data`` (base64 of the whole reply
  in ``audio.format``: ``wav``, ``mp3``, ``flac``, ``opus`` or ``pcm16``) and
  ``message.audio.transcript``, rendered as fast as the workers can.
* without ``"audio"`` in ``modalities``: the LLM's text only, as OpenAI answers
  (``message.content`` / ``delta.content``).

Quotas: every chat, with audio or without, takes a token of the tenant's request rate
(:class:`voicelane.core.quotas.RequestRate`, 429 with ``Retry-After``) and one of the tenant's
LLM generation slots (:class:`voicelane.api.llm.GenerationSlots`: a bounded queue of its own,
served in turn with the other tenants'); one with audio also one of its open streams. A client
that leaves is noticed at once — while its chat waits for a slot, while the reply is being
written, and between two events of a stream — and its reply is closed (Ollama stops
generating, the slot goes to the next waiter).

Errors are in OpenAI's shape and statuses (:mod:`voicelane.api.openai_compat`: bad input 400
with ``param``, an LLM that does not know the model 404, Ollama unreachable 503); an error
after streaming began ends the stream with an ``{"error": {...}}`` event, the same body
(:func:`voicelane.api.failures.sse_error`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, Literal, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import Receive, Scope, Send

from voicelane.api.chat import ChatAsk, ChatAudio, ChatDone, ChatSummary, chat
from voicelane.api.deps import State, Tenant
from voicelane.api.failures import sse_error
from voicelane.api.llm import ChatTurn, LlmReply, LlmStats
from voicelane.api.openai_compat import OpenAIRoute, openai_body, openai_voice
from voicelane.api.streams import StreamAsk
from voicelane.common.audio.stream import StreamEncoding
from voicelane.common.errors import InvalidInputError

log = logging.getLogger(__name__)
router = APIRouter(tags=["chat"], route_class=OpenAIRoute)
T = TypeVar("T")
CLIENT_CLOSED_REQUEST = 499
"""The status logged for a chat whose client left before its answer (nginx's; never sent)."""

CHAT_FORMATS = {
    "pcm16": StreamEncoding.PCM,
    "wav": StreamEncoding.WAV,
    "mp3": StreamEncoding.MP3,
    "flac": StreamEncoding.FLAC,
    "opus": StreamEncoding.OGG,
}
OPENAI_SAMPLE_RATE_HZ = 24000
OPENAI_MODEL_PREFIXES = ("gpt-", "o1", "o3", "o4", "chatgpt-")


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text"] = "text"
    text: str


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class AudioOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    voice: str = "auto"
    format: str = "wav"


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    modalities: list[str] = Field(default_factory=lambda: ["text"])
    audio: AudioOptions | None = None
    stream: bool = False
    speed: float | None = None
    sample_rate_hz: int | None = None


def _llm_model(name: str | None) -> str | None:
    """An OpenAI model name means the configured model; others are Ollama's names."""
    if not name or name.startswith(OPENAI_MODEL_PREFIXES):
        return None
    return name


@router.post("/v1/chat/completions", summary="OpenAI-compatible chat, with the reply spoken")
async def chat_completions(request: Request, state: State, tenant: Tenant) -> Any:
    body = await openai_body(request, ChatCompletionRequest)
    turns = [ChatTurn(m.role, m.text()) for m in body.messages]
    model = _llm_model(body.model)
    completion = _Completion(body.model or state.llm.settings.model)
    try:
        return await _answer(
            request,
            state=state,
            tenant=tenant,
            body=body,
            completion=completion,
            turns=turns,
            model=model,
        )
    except _ClientLeftError:
        log.info("chat completion %s: the client left before its answer", completion.id)
        return Response(status_code=CLIENT_CLOSED_REQUEST)


async def _answer(
    request: Request,
    *,
    state: State,
    tenant: str,
    body: ChatCompletionRequest,
    completion: _Completion,
    turns: list[ChatTurn],
    model: str | None,
) -> Any:
    if "audio" not in body.modalities:
        await state.streams.rate.take(tenant)
        reply = await _unless_gone(
            request.receive, state.llm.reply(turns, model=model, tenant=tenant)
        )
        if body.stream:
            return _sse(completion.text_stream(reply), release=reply.aclose)
        async with contextlib.aclosing(reply):  # closed even when the client left first
            return JSONResponse(await _unless_gone(request.receive, completion.text_whole(reply)))
    options = body.audio or AudioOptions()
    encoding = CHAT_FORMATS.get(options.format.lower())
    if encoding is None:
        raise InvalidInputError(
            f"audio.format {options.format!r} is not supported; use "
            + ", ".join(sorted(CHAT_FORMATS)),
            field="audio",
        )
    if body.stream and encoding is not StreamEncoding.PCM:
        raise InvalidInputError("a streamed reply's audio.format must be pcm16", field="audio")
    ask = ChatAsk(
        messages=turns,
        model=model,
        speech=StreamAsk(
            voice=await openai_voice(state, options.voice),
            speed=body.speed,
            sample_rate_hz=body.sample_rate_hz or OPENAI_SAMPLE_RATE_HZ,
            encoding=encoding,
            paced=body.stream,
            front="openai",
        ),
    )
    events = chat(state.streams, state.llm, tenant, ask)
    try:
        # request-level errors (model, LLM, admission, quotas) raise here
        first = await _unless_gone(request.receive, anext(events))
    except BaseException:
        await events.aclose()
        raise
    if body.stream:
        return _sse(completion.audio_stream(first, events), release=events.aclose)
    async with contextlib.aclosing(events):  # closed even when the client left first
        whole = await _unless_gone(request.receive, completion.audio_whole(first, events))
    return JSONResponse(whole)


class _ClientLeftError(Exception):
    """The client disconnected before its answer was ready."""


async def _disconnected(receive: Receive) -> None:
    """Returns when the client has disconnected (the request's body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _unless_gone(receive: Receive, work: Awaitable[T]) -> T:
    """``work``'s result, or :class:`_ClientLeftError` once the client disconnects first (``work``
    is cancelled then: a reply waiting for its slot leaves the queue, one being read is
    closed)."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
        await asyncio.wait((task, gone))
    if task.cancelled():
        raise _ClientLeftError
    return task.result()


class _EventStream(StreamingResponse):
    """Server-sent events that stop as soon as the client leaves, not at the next event
    (whatever the server's ASGI version: with 2.4 Starlette notices only when a send fails):
    a reply waiting for its next token holds a generation slot. ``release`` (the reply's or
    the chat's close) is awaited however the response ends, even one never started."""

    def __init__(
        self, content: AsyncIterator[bytes], *, release: Callable[[], Awaitable[None]]
    ) -> None:
        super().__init__(content, media_type="text/event-stream")
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream = asyncio.ensure_future(self.stream_response(send))
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait((stream, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (stream, gone):
                task.cancel()
            await asyncio.wait((stream, gone))
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()
            await self._release()
        error = None if stream.cancelled() else stream.exception()
        if error is not None and not isinstance(error, OSError):  # OSError: the client left
            raise error


def _sse(
    events: AsyncIterator[dict[str, Any]], *, release: Callable[[], Awaitable[None]]
) -> StreamingResponse:
    async def lines() -> AsyncIterator[bytes]:
        try:
            async for event in events:
                yield _sse_event(event)
            yield b"data: [DONE]\n\n"
        except Exception as error:
            yield _sse_event(sse_error(error, where="chat completion stream"))

    return _EventStream(lines(), release=release)


def _sse_event(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"


class _Completion:
    """OpenAI's response objects for one completion."""

    def __init__(self, model: str) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.audio_id = f"audio_{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.expires_at = self.created + 3600

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }  # fmt: skip

    def _whole(self, message: dict[str, Any], usage: dict[str, int], finish: str) -> dict[str, Any]:
        return {
            "id": self.id, "object": "chat.completion", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }  # fmt: skip

    def _audio(self, data: bytes, transcript: str) -> dict[str, Any]:
        return {
            "id": self.audio_id,
            "data": base64.b64encode(data).decode(),
            "transcript": transcript,
            "expires_at": self.expires_at,
        }

    async def audio_stream(
        self, first: object, events: AsyncIterator[object]
    ) -> AsyncIterator[dict[str, Any]]:
        async with contextlib.aclosing(_chain(first, events)) as all_events:
            yield self._chunk({"role": "assistant", "content": None})
            async for event in all_events:
                if isinstance(event, ChatAudio):
                    chunk = event.chunk
                    transcript = "".join(caption.text for caption in chunk.captions)
                    if chunk.data or transcript:
                        audio = self._audio(b"".join(chunk.data), transcript)
                        yield self._chunk({"audio": audio})
                elif isinstance(event, ChatDone):
                    summary = event.summary
                    final = self._chunk({}, _finish(summary))
                    final["usage"] = _usage(summary)
                    yield final

    async def audio_whole(self, first: object, events: AsyncIterator[object]) -> dict[str, Any]:
        data: list[bytes] = []
        summary: ChatSummary | None = None
        async with contextlib.aclosing(_chain(first, events)) as all_events:
            async for event in all_events:
                if isinstance(event, ChatAudio):
                    data.extend(event.chunk.data)
                elif isinstance(event, ChatDone):
                    summary = event.summary
        assert summary is not None
        message = {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "audio": self._audio(b"".join(data), summary.spoken_text),
        }
        return self._whole(message, _usage(summary), _finish(summary))

    async def text_stream(self, reply: LlmReply) -> AsyncIterator[dict[str, Any]]:
        async with contextlib.aclosing(reply):
            yield self._chunk({"role": "assistant", "content": ""})
            async for delta in reply:
                yield self._chunk({"content": delta})
            stats = reply.stats
            final = self._chunk({}, stats.done_reason if stats else "stop")
            final["usage"] = _token_usage(stats)
            yield final

    async def text_whole(self, reply: LlmReply) -> dict[str, Any]:
        async with contextlib.aclosing(reply):
            text = "".join([delta async for delta in reply])
        stats = reply.stats
        message = {"role": "assistant", "content": text, "refusal": None}
        return self._whole(message, _token_usage(stats), stats.done_reason if stats else "stop")


async def _chain(first: object, rest: AsyncIterator[object]) -> AsyncGenerator[object, None]:
    try:
        yield first
        async for item in rest:
            yield item
    finally:
        aclose = getattr(rest, "aclose", None)
        if aclose is not None:
            await aclose()


def _finish(summary: ChatSummary) -> str:
    reason = summary.llm.done_reason if summary.llm else "stop"
    return "length" if reason == "length" else "stop"


def _usage(summary: ChatSummary) -> dict[str, int]:
    return _token_usage(summary.llm)


def _token_usage(stats: LlmStats | None) -> dict[str, int]:
    prompt = int(stats.prompt_tokens) if stats else 0
    reply = int(stats.reply_tokens) if stats else 0
    return {"prompt_tokens": prompt, "completion_tokens": reply, "total_tokens": prompt + reply}
