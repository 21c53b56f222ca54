"""The API's WebSocket protocol: a socket without a key in its headers gets a small message cap.

A WebSocket may carry its key in its request (``api_key``, for browsers, which cannot set
headers on a WebSocket), so that request is read before anyone knows who sent it. uvicorn
reads a whole message — inflating a per-message-deflate one — before the application sees it,
up to ``ws_max_size`` (16 MiB by default): 96 keyless sockets took an API from 188 to 1,699 MiB
(issue 26). :func:`guarded_protocol` is uvicorn's own protocol (``websockets-sansio``, what
``--ws auto`` picks) with the cap at ``websocket_preauth_max_bytes`` (64 KiB) from the first
byte, raised to ``websocket_max_message_bytes`` (1 MiB) once a handshake with an
``Authorization`` header is read (the route refuses a bad header key before it reads the
request, so such a socket buffers at most that): a bigger message of a keyless socket — its
inflated size counts — is cut by the protocol while it arrives, with close code 1009 (message
too big), never buffered whole nor parsed. The route checks the same bound again
(:mod:`voicelane.api.ws_limits`), for servers that do not use this protocol. The agent
protocol's socket (:data:`UNCOMPRESSED_PATHS`) is never compressed.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.http11 import Request

UNCOMPRESSED_PATHS = frozenset({"/v1/agent"})
"""Sockets that never negotiate per-message-deflate: the agent protocol's messages are mostly
base64 audio, which deflate barely shrinks, at a cost that dominated the API's CPU under load
(48% of its busy samples at 50 connections x 4 contexts, ahead of everything else), and which
delayed ``cancelled`` behind it. Clients that offer the extension get plain frames."""


def guarded_protocol(preauth_max_bytes: int) -> type[WebSocketsSansIOProtocol]:
    """uvicorn's WebSocket protocol, capping the messages of a socket without an
    ``Authorization`` header at ``preauth_max_bytes`` (inflated)."""

    class GuardedWebSocketProtocol(WebSocketsSansIOProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # From the first byte: frames a client pipelines behind its handshake are parsed
            # before the handshake is handled.
            self.conn.max_message_size = _lower(self.conn.max_message_size, preauth_max_bytes)

        def handle_connect(self, event: Request) -> None:
            if "authorization" in event.headers:  # checked by the route before it reads
                self.conn.max_message_size = self.config.ws_max_size
            if event.path.partition("?")[0] in UNCOMPRESSED_PATHS:
                self.conn.available_extensions = []  # per-message-deflate not negotiated
            super().handle_connect(event)

    return GuardedWebSocketProtocol


def _lower(limit: int | None, cap: int) -> int:
    return cap if limit is None else min(limit, cap)
