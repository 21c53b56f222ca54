"""Request bodies are bounded while they stream in, never buffered whole first.

:class:`BodyLimit` is ASGI middleware in front of the REST app. Each route has a limit
(:func:`limit_for`): a job may carry ``max_upload_bytes`` (plus room for a multipart
envelope and the other fields), OpenAI's speech route 1 MiB, a lexicon (``PUT
/v1/lexicons/{name}``) 2 MiB, a new voice (``POST /v1/voices``: a reference clip, uploaded or
base64 in JSON) 10 MiB, anything else 64 KiB. A body
that announces more (``Content-Length``) is refused at once with 413 without reading a byte;
one that streams in (chunked) is counted as it arrives and refused the moment it passes the
limit — the route sees :class:`~voicelane.common.errors.TextTooLargeError`, which the app's error
handler turns into its 413 JSON body. The OpenAI routes (:data:`OPENAI_PATHS`) get OpenAI's error
shape either way.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from voicelane.api.failures import http_reply, openai_reply
from voicelane.common.errors import TextTooLargeError

KIB = 1024
OPENAI_PATHS = frozenset(
    {"/v1/audio/speech", "/v1/chat/completions", "/v1/models", "/v1/audio/voices"}
)
"""The OpenAI routes: a body refused here gets OpenAI's error shape
(:mod:`voicelane.api.openai_compat`), as their own refusals do."""
DEFAULT_LIMIT_BYTES = 64 * KIB
"""Bodies of routes that take none or a small JSON object (cancel, lookups)."""
ENVELOPE_BYTES = 64 * KIB
"""Room for a multipart envelope and the fields beside the text of a job."""
LEXICON_BODY_BYTES = 2 * 1024 * KIB
"""A lexicon, JSON or W3C PLS (XML is verbose: a tenant's stored entries are bounded apart,
:data:`voicelane.core.ledger.lexicons.MAX_TENANT_BYTES`)."""
VOICE_BODY_BYTES = 10 * 1024 * KIB
"""A new voice with its reference clip: 30 s of 48 kHz stereo 16-bit WAV (5.5 MiB), base64 in
JSON (a third more), fits; what is stored is bounded apart (``voice_clip_max_bytes``)."""


def route_limits(max_upload_bytes: int, speech_bytes: int) -> Callable[[str, str], int]:
    """The limit of each route of the REST app, by method and path."""

    def limit_for(method: str, path: str) -> int:
        if method == "POST" and path.rstrip("/") == "/v1/jobs":
            return max_upload_bytes + ENVELOPE_BYTES
        if method == "POST" and path.rstrip("/") in (
            "/v1/audio/speech",
            "/v1/chat/completions",
            "/v1/text",
        ):
            return speech_bytes
        if method == "PUT" and _is_lexicon(path):
            return LEXICON_BODY_BYTES
        if method == "POST" and path.rstrip("/") == "/v1/voices":
            return VOICE_BODY_BYTES
        return DEFAULT_LIMIT_BYTES

    return limit_for


def _is_lexicon(path: str) -> bool:
    """``/v1/lexicons/{name}`` (not its ``/default``)."""
    parts = path.strip("/").split("/")
    return len(parts) == 3 and parts[:2] == ["v1", "lexicons"]


class BodyLimit:
    """ASGI middleware: refuse request bodies over their route's limit (413)."""

    def __init__(self, app: ASGIApp, limit_for: Callable[[str, str], int]) -> None:
        self.app = app
        self.limit_for = limit_for

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["method"], scope["path"])
        announced = _content_length(scope)
        if announced is not None and announced > limit:
            message = f"request body of {announced:,} bytes is over {limit:,} bytes"
            await _refuse(send, message, openai=scope["path"].rstrip("/") in OPENAI_PATHS)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise TextTooLargeError(f"request body is over {limit:,} bytes")
            return message

        await self.app(scope, limited, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(send: Send, message: str, *, openai: bool = False) -> None:
    """413 in the app's shape (``openai``: OpenAI's, on the OpenAI routes)."""
    reply = (openai_reply if openai else http_reply)(TextTooLargeError(message))
    body = json.dumps(reply.body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": reply.status_code,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
