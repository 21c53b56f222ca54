"""The real-time lane on the REST app: the WebSocket stream.

A thin adapter over the stream gateway (:mod:`voicelane.api.streams`), like the gRPC front:
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

OpenAI's speech API, ``POST /v1/audio/speech``, is :mod:`voicelane.api.routes.openai_speech`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ConfigDict

from voicelane.api.chat import ChatAsk, ChatAudio, ChatDone, ChatStarted, ChatText, chat
from voicelane.api.deps import State
from voicelane.api.failures import websocket_reply
from voicelane.api.llm import ChatTurn
from voicelane.api.streams import Stream, StreamAsk, StreamChunk
from voicelane.api.ws_limits import MESSAGE_TOO_BIG, PreAuthTooLargeError, check_preauth_size
from voicelane.api.ws_messages import audio_message, end_message
from voicelane.common.errors import (
    DeadlineExceededError,
    InvalidInputError,
    MalformedRequestError,
    NoCapacityError,
)

log = logging.getLogger(__name__)

router = APIRouter(tags=["speech"])


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
            check_preauth_size(first, settings.websocket_preauth_max_bytes)
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
