"""The real-time lane on the REST app: a WebSocket stream and OpenAI's speech API.

Both are thin adapters over the stream gateway (:mod:`voicelane.api.streams`), like the gRPC front:
the same request rules, admission, relay with its liveness rules, and a cancel mark when
the client leaves early.

``GET /v1/stream`` (WebSocket)
    Authenticate with ``Authorization: Bearer KEY`` on the upgrade request (or, for browsers,
    ``"api_key"`` in the first message), and send the request within
    ``websocket_auth_timeout_s`` (5 s) of connecting, or the socket is closed; an address
    holds at most ``websocket_max_per_address`` open sockets per API process, and the process
    ``websocket_max_connections``. Send one JSON text message ``{"text", "voice"?,
    "sample_rate_hz"?, "speed"?, "client_ts_ms"?, "pace"?, "normalize"?, "ssml"?,
    "lexicons"?}`` (``normalize``, ``ssml``, ``lexicons``: how the text is read, as every
    front reads them: :mod:`voicelane.api.text_options`; ``pace``: true, the default,
    synthesises just ahead of playback; false renders as fast as it can). The server answers
    ``{"type": "start", "request_id"}``; then per chunk a JSON ``{"type": "audio", "seq",
    "pts_ms", "packets": N, "server_ts_ms", "client_ts_ms", "captions": [...], "words":
    [...], "marks": [...]}`` followed by N binary messages, one 20 ms Opus packet each; then
    ``{"type": "end", "seq", "pts_ms", "captions", "words", "marks"}`` (what rode on the final
    chunk) and a normal close (:mod:`voicelane.api.ws_messages`; ``docs/api.md``, WebSocket
    messages). **Chat** (an LLM's reply, spoken): send ``{"messages": [{"role",
    "content"}, ...], "model"?, "system"?, "voice"?, ...}`` instead of ``text``; the server
    answers ``start``, then ``{"type": "text", "delta"}`` as the LLM writes (markup included),
    audio messages as above (captions of the spoken text), ``{"type": "stats", ...}`` (the
    LLM's token counts and timings, time to first token and to first audio) and ``end``.
    Errors: ``{"type": "error", "code", "error_code", "message", "field"?, "retry_after_s"?}``
    (``code`` the gRPC status name, ``error_code`` the error's own, as REST's) and a close
    (1008 for bad input or auth, 1013 when over capacity, 1011 otherwise):
    :func:`voicelane.api.failures.websocket_reply`. Closing the socket early cancels the
    stream.

``POST /v1/audio/speech`` (OpenAI-compatible)
    JSON ``{"input", "voice", "response_format"?: opus|mp3|wav|flac|pcm, "speed"?,
    "model"?}``, plus voicelane's ``normalize``, ``ssml``, ``lexicons`` (as on the
    WebSocket), ``sample_rate_hz`` (default 24000, OpenAI's rate) and
    ``pace`` (default false: rendered as fast as the workers can, like a file download —
    true paces it just ahead of playback, for a live player); the audio streams back as it
    is produced (chunked). ``opus`` is Ogg Opus; ``pcm`` is raw
    16-bit little-endian mono, as OpenAI's. The worker encodes the asked format itself: this
    route only relays bytes. OpenAI's voice names (``alloy``, ``echo``...) map to ``auto``;
    voicelane voice ids work as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TypeVar

from fastapi import APIRouter, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from voicelane.api.chat import ChatAsk, ChatAudio, ChatDone, ChatStarted, ChatText, chat
from voicelane.api.deps import State, Tenant, json_body
from voicelane.api.failures import websocket_reply
from voicelane.api.llm import ChatTurn
from voicelane.api.streams import Stream, StreamAsk, StreamChunk
from voicelane.api.ws_messages import audio_message, end_message
from voicelane.common.audio.stream import StreamEncoding
from voicelane.common.errors import (
    DeadlineExceededError,
    InvalidInputError,
    MalformedRequestError,
    NoCapacityError,
    TextTooLargeError,
)
from voicelane.core.text_input import check_strings_encodable

log = logging.getLogger(__name__)

router = APIRouter(tags=["speech"])
Body = TypeVar("Body", bound=BaseModel)

OPENAI_VOICES = frozenset({"alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova",
                           "sage", "shimmer", "verse"})  # fmt: skip
"""OpenAI's voice names; each speaks as voicelane's ``auto`` voice."""
OPENAI_FORMATS = {
    "opus": StreamEncoding.OGG,
    "mp3": StreamEncoding.MP3,
    "wav": StreamEncoding.WAV,
    "flac": StreamEncoding.FLAC,
    "pcm": StreamEncoding.PCM,
}
MAX_SPEECH_BODY_BYTES = 1024 * 1024
"""OpenAI caps ``input`` at 4,096 characters; a body over 1 MiB is never a speech request."""


async def openai_body(request: Request, model: type[Body]) -> Body:
    """An OpenAI route's JSON body: over ``MAX_SPEECH_BODY_BYTES`` 413; not JSON 400, not the
    model's shape 422 naming the field at fault (pydantic's error, which the app answers as
    every front does: :func:`voicelane.api.failures.invalid_input`)."""
    raw = await request.body()  # bounded while it streams in (voicelane.api.body_limit)
    if len(raw) > MAX_SPEECH_BODY_BYTES:
        raise TextTooLargeError(f"request body is over {MAX_SPEECH_BODY_BYTES} bytes")
    try:
        return model.model_validate_json(raw)
    except ValidationError as error:
        if any(e.get("type") == "json_invalid" for e in error.errors()):
            # Not JSON to pydantic's parser, which refuses a lone surrogate (``"\ud800"``)
            # there: if the standard parser takes it, say which field and where, as REST does.
            check_strings_encodable(json_body(raw))
        raise


# ---- WebSocket -----------------------------------------------------------------------------


class ChatMessageBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: str
    content: str


class WebSocketRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str | None = None
    messages: list[ChatMessageBody] | None = None
    """A chat request (instead of ``text``): the LLM's reply is spoken."""
    model: str | None = None
    system: str | None = None
    voice: str | None = None
    sample_rate_hz: int | None = None
    speed: float | None = None
    client_ts_ms: int = 0
    pace: bool = True
    api_key: str | None = None
    normalize: bool = True
    ssml: bool | None = None
    lexicons: list[str] | None = None
    seed: int | None = None
    """The sampling seed (ChatTTS): the same voice, text and seed give the same audio."""


@router.websocket("/v1/stream")
async def websocket_stream(socket: WebSocket, state: State) -> None:
    await socket.accept()
    address = socket.client.host if socket.client else "-"
    if not state.websockets.enter(address):
        await _ws_fail(socket, NoCapacityError("too many open WebSockets; retry later"))
        return
    try:
        await _serve_websocket(socket, state)
    finally:
        state.websockets.leave(address)


async def _serve_websocket(socket: WebSocket, state: State) -> None:
    """Authenticate (header now, or the request's key), read the request within the time
    allowed, stream; every failure is an error message and a close."""
    stream: Stream | None = None
    settings = state.settings
    try:
        header = socket.headers.get("authorization")
        tenant = state.keys.tenant_for_header(header) if header else None
        try:
            first = await asyncio.wait_for(
                _first_message(socket), settings.websocket_auth_timeout_s
            )
        except TimeoutError:
            raise DeadlineExceededError(
                f"no request within {settings.websocket_auth_timeout_s:g} s of connecting"
            ) from None
        if tenant is None:
            _check_preauth_size(first, settings.websocket_preauth_max_bytes)
        body = WebSocketRequest.model_validate_json(first)
        if tenant is None:
            tenant = (
                state.keys.tenant_for(body.api_key)
                if body.api_key
                else state.keys.tenant_for_header(None)
            )
        ask = StreamAsk(
            voice=body.voice,
            speed=body.speed,
            sample_rate_hz=body.sample_rate_hz,
            client_ts_ms=body.client_ts_ms,
            paced=body.pace,
            front="websocket",
            normalize=body.normalize,
            ssml=body.ssml,
            lexicons=None if body.lexicons is None else tuple(body.lexicons),
            seed=body.seed,
        )
        if (body.text is None) == (body.messages is None):
            raise InvalidInputError("send either text or messages (a chat)", field="text")
        if body.messages is not None:
            await _serve_chat(socket, state, tenant, body, ask)
            return
        assert body.text is not None
        stream = await state.streams.synthesize(tenant, body.text, ask)
        await socket.send_json({"type": "start", "request_id": stream.request_id})
        async with contextlib.aclosing(stream.chunks()) as chunks:
            async for chunk in chunks:
                if chunk.data or not chunk.final:
                    await _send_chunk(socket, chunk)
                if chunk.final:
                    await socket.send_json(end_message(chunk))
        await socket.close(1000)
    except WebSocketDisconnect:
        log.info("websocket client left stream %s", stream.request_id if stream else "-")
    except PreAuthTooLargeError as error:
        await _ws_fail(socket, error, close_code=MESSAGE_TOO_BIG)
    except Exception as error:
        await _ws_fail(socket, error, stream.request_id if stream else "-")
    finally:
        if stream is not None:
            await stream.close()


async def _serve_chat(
    socket: WebSocket, state: State, tenant: str, body: WebSocketRequest, ask: StreamAsk
) -> None:
    """A chat over the socket: text deltas, audio, stats, end (see the module docstring)."""
    chat_ask = ChatAsk(
        messages=[ChatTurn(m.role, m.content) for m in body.messages or ()],
        model=body.model,
        system=body.system,
        speech=ask,
    )
    final: StreamChunk | None = None
    async with contextlib.aclosing(chat(state.streams, state.llm, tenant, chat_ask)) as events:
        async for event in events:
            if isinstance(event, ChatStarted):
                await socket.send_json({"type": "start", "request_id": event.request_id})
            elif isinstance(event, ChatText):
                await socket.send_json({"type": "text", "delta": event.delta})
            elif isinstance(event, ChatAudio):
                chunk = event.chunk
                if chunk.data or not chunk.final:
                    await _send_chunk(socket, chunk)
                if chunk.final:
                    final = chunk
            elif isinstance(event, ChatDone):
                stats = {"request_id": event.summary.request_id, **event.summary.fields()}
                await socket.send_json({"type": "stats", **stats})
    if final is not None:
        await socket.send_json(end_message(final))
    await socket.close(1000)


async def _first_message(socket: WebSocket) -> str:
    """The request: one JSON text message (a binary one is bad input)."""
    message = await socket.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    text = message.get("text")
    if text is None:
        raise MalformedRequestError("the request must be one JSON text message, not binary")
    return str(text)


async def _send_chunk(socket: WebSocket, chunk: StreamChunk) -> None:
    await socket.send_json(audio_message(chunk))
    for packet in chunk.data:
        await socket.send_bytes(packet)


async def _ws_fail(
    socket: WebSocket, error: Exception, request_id: str = "-", close_code: int | None = None
) -> None:
    """The error message and the close (:func:`voicelane.api.failures.websocket_reply`;
    ``close_code``: another than its own); a socket that is already gone gets neither."""
    reply = websocket_reply(error, where=f"websocket stream {request_id}")
    with contextlib.suppress(Exception):
        await socket.send_json(reply.message)
        await socket.close(close_code or reply.close_code)


MESSAGE_TOO_BIG = 1009
"""The WebSocket close code of a message over the size allowed (RFC 6455)."""


class PreAuthTooLargeError(TextTooLargeError):
    """The request of a socket without an ``Authorization`` header is over
    ``websocket_preauth_max_bytes``."""


def _check_preauth_size(request: str, max_bytes: int) -> None:
    """Refuse, unparsed, a request read before its key was checked that is over
    ``max_bytes`` (UTF-8). The API's WebSocket protocol cuts such a message while it arrives
    (:mod:`voicelane.api.ws_protocol`); this is the same bound for other servers."""
    if len(request) > max_bytes or len(request.encode("utf-8", "surrogatepass")) > max_bytes:
        raise PreAuthTooLargeError(
            f"a request without an Authorization header may be at most {max_bytes} bytes "
            "(its key is checked after it is read): send the key in the header",
            field="api_key",
        )


# ---- OpenAI --------------------------------------------------------------------------------


class SpeechRequest(BaseModel):
    """OpenAI's ``POST /v1/audio/speech`` body (and voicelane's ``sample_rate_hz``)."""

    model_config = ConfigDict(extra="ignore")

    input: str = Field(description="The text to speak.")
    voice: str = Field("auto", description="A voicelane voice id; OpenAI's names map to auto.")
    response_format: str = Field("mp3", description="opus, mp3, wav, flac or pcm.")
    speed: float | None = Field(None, description="Within the engine's range; 1.0 if unset.")
    model: str | None = Field(None, description="Ignored: the workers' engine speaks.")
    sample_rate_hz: int | None = Field(
        None, description="voicelane extension: output rate (24000, OpenAI's, if unset)."
    )
    pace: bool = Field(
        False,
        description="voicelane extension: true paces synthesis just ahead of playback (a "
        "live player); false (default) renders as fast as the workers can, like a file.",
    )
    normalize: bool = Field(
        True,
        description="voicelane extension: numbers, dates, symbols... read as words (default) "
        "or, false, as written.",
    )
    ssml: bool | None = Field(
        None,
        description="voicelane extension: the input is SSML (true), plain text (false) or, "
        "unset, SSML when it starts with <speak.",
    )
    lexicons: list[str] | None = Field(
        None,
        description="voicelane extension: the tenant's pronunciation lexicons to apply; "
        "unset: its default lexicon; []: none.",
    )
    seed: int | None = Field(
        None,
        description="voicelane extension: the sampling seed (ChatTTS): the same voice, text "
        "and seed give the same audio; unset: a fresh draw.",
    )


@router.post(
    "/v1/audio/speech",
    summary="OpenAI-compatible speech: audio streams back as it is produced",
    response_class=StreamingResponse,
)
async def openai_speech(request: Request, state: State, tenant: Tenant) -> StreamingResponse:
    body = await openai_body(request, SpeechRequest)
    encoding = OPENAI_FORMATS.get(body.response_format.lower())
    if encoding is None:
        raise InvalidInputError(
            f"response_format {body.response_format!r} is not supported; use "
            + ", ".join(sorted(OPENAI_FORMATS)),
            field="response_format",
        )
    ask = StreamAsk(
        voice="auto" if body.voice in OPENAI_VOICES else body.voice,
        speed=body.speed,
        sample_rate_hz=body.sample_rate_hz,
        encoding=encoding,
        paced=body.pace,
        front="openai",
        normalize=body.normalize,
        ssml=body.ssml,
        lexicons=None if body.lexicons is None else tuple(body.lexicons),
        seed=body.seed,
    )
    stream = await state.streams.synthesize(tenant, body.input, ask, text_field="input")
    return StreamingResponse(
        _relay_bytes(stream),
        media_type=encoding.media_type,
        headers={"X-Request-Id": stream.request_id},
    )


async def _relay_bytes(stream: Stream) -> AsyncIterator[bytes]:
    try:
        async with contextlib.aclosing(stream.chunks()) as chunks:
            async for chunk in chunks:
                if chunk.data:
                    yield b"".join(chunk.data)
    finally:
        await stream.close()
