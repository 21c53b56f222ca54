"""``GET /v1/agent`` (WebSocket): the agent streaming protocol (``docs/agent-protocol.md``).

Text in as an LLM writes it, audio and word timings out, on several contexts per connection,
each flushed, closed or cancelled on its own. The connection's rules are the WebSocket
stream's (:mod:`voicelane.api.routes.speech`): ``Authorization: Bearer KEY`` on the upgrade,
or ``{"type": "auth", "api_key"}`` as the first message within ``websocket_auth_timeout_s``
(read under ``websocket_preauth_max_bytes``); ``websocket_max_per_address`` and
``websocket_max_connections``; errors as :func:`voicelane.api.failures.websocket_reply` has
them. The contexts: :mod:`voicelane.api.agent_session`; the messages:
:mod:`voicelane.api.agent_wire`; the one writer: :mod:`voicelane.api.agent_outbox`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from voicelane.api.agent_outbox import Outbox
from voicelane.api.agent_session import AgentSession
from voicelane.api.agent_wire import (
    ConnectionFaultError,
    ContextFaultError,
    auth_key,
    parse_client_message,
    ready_message,
)
from voicelane.api.deps import State
from voicelane.api.failures import websocket_reply
from voicelane.api.ws_limits import MESSAGE_TOO_BIG, PreAuthTooLargeError, check_preauth_size
from voicelane.common.errors import AuthError, DeadlineExceededError, NoCapacityError

log = logging.getLogger(__name__)

router = APIRouter(tags=["agent"])

ERROR_FLUSH_S = 2.0
"""How long a failing connection's last messages (its error) may take to go out."""


@router.websocket("/v1/agent")
async def agent_socket(socket: WebSocket, state: State) -> None:
    await socket.accept()
    address = socket.client.host if socket.client else "-"
    if not state.websockets.enter(address):
        await _fail(socket, NoCapacityError("too many open WebSockets; retry later"))
        return
    try:
        await _serve(socket, state)
    finally:
        state.websockets.leave(address)


async def _authenticate(socket: WebSocket, state: State) -> str:
    """The tenant: by the header now, else by the first message (an ``auth`` message)
    within ``websocket_auth_timeout_s``."""
    header = socket.headers.get("authorization")
    if header:
        return state.keys.tenant_for_header(header)
    settings = state.settings
    try:
        first = await asyncio.wait_for(_receive(socket), settings.websocket_auth_timeout_s)
    except TimeoutError:
        raise DeadlineExceededError(
            f"no auth message within {settings.websocket_auth_timeout_s:g} s of connecting"
        ) from None
    if first is not None and isinstance(first, str):
        check_preauth_size(first, settings.websocket_preauth_max_bytes)
    key = auth_key(first)
    if key is None:
        raise AuthError(
            'send Authorization: Bearer <API key> on connecting, or {"type": "auth", '
            '"api_key": "..."} as the first message'
        )
    return state.keys.tenant_for(key)


async def _receive(socket: WebSocket) -> str | bytes | None:
    """The next message's text (or bytes); WebSocketDisconnect when the client left."""
    message = await socket.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    text = message.get("text")
    if text is not None:
        return str(text)
    data = message.get("bytes")
    return bytes(data) if data is not None else None


async def _serve(socket: WebSocket, state: State) -> None:
    outbox = Outbox()
    sender: asyncio.Task[None] | None = None
    session: AgentSession | None = None
    try:
        tenant = await _authenticate(socket, state)
        sender = asyncio.create_task(outbox.run(socket.send_text), name="agent-sender")
        max_contexts = state.settings.agent_max_contexts
        outbox.put(ready_message(max_contexts))
        session = AgentSession(state.streams, tenant, outbox, max_contexts=max_contexts)
        while not sender.done():
            raw = await _receive(socket)
            if auth_key(raw) is not None:
                raise ConnectionFaultError(
                    "auth: the connection is already authenticated (auth is the first message "
                    "of a connection without an Authorization header)",
                    field="type",
                )
            try:
                session.handle(parse_client_message(raw))
            except ContextFaultError as fault:
                session.fault(fault.context_id, fault.error)
    except WebSocketDisconnect:
        log.debug("agent socket: the client left")
    except PreAuthTooLargeError as error:
        await _fail(socket, error, close_code=MESSAGE_TOO_BIG)
    except Exception as error:
        if sender is None or sender.done():
            await _fail(socket, error)
        else:  # the error goes out after what is queued, through the one writer
            reply = websocket_reply(error, where="agent socket")
            if session is not None:
                await session.close_all()
            outbox.put(reply.message)
            outbox.finish()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(sender), ERROR_FLUSH_S)
            with contextlib.suppress(Exception):
                await socket.close(reply.close_code)
    finally:
        if session is not None:
            await session.close_all()
        outbox.close()
        if sender is not None:
            sender.cancel()
            with contextlib.suppress(BaseException):
                await sender


async def _fail(socket: WebSocket, error: Exception, close_code: int | None = None) -> None:
    """The connection's error message and the close; a socket already gone gets neither."""
    reply = websocket_reply(error, where="agent socket")
    with contextlib.suppress(Exception):
        await socket.send_json(reply.message)
        await socket.close(close_code or reply.close_code)
