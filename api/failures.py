"""Any exception a front meets, as the one error its client sees — and that error on each wire.

:func:`client_error` is the one mapping, for every front (gRPC, the WebSocket stream, REST jobs,
the OpenAI routes):

- a :class:`~voicelane.common.errors.VoicelaneError` → that error, as it is;
- Redis unreachable or timed out (``redis.ConnectionError``, ``redis.TimeoutError``) →
  :class:`~voicelane.common.errors.UnavailableError` (503 / UNAVAILABLE), retry after 1 s;
- Redis at its ``maxmemory`` (``redis.exceptions.OutOfMemoryError``: it refuses new writes,
  nothing is evicted; or a ``ResponseError`` carrying that refusal, as a Lua script re-raises
  it) → :class:`~voicelane.common.errors.StoreFullError` (503 /
  RESOURCE_EXHAUSTED), retry after 30 s;
- a request that is not its model's shape (pydantic's ``ValidationError``) →
  :class:`~voicelane.common.errors.InvalidInputError` (422 / INVALID_ARGUMENT) naming its
  field, or :class:`~voicelane.common.errors.MalformedRequestError` (400) for JSON that does
  not parse;
- anything else (a bug) → "internal error" (500 / INTERNAL), logged with its traceback.

**The field rule** (:func:`invalid_input`): ``field`` is the top-level request field of the
first error (``messages`` for ``messages[0].role``, ``speed``, ``cursor``; none for a body that
is missing or not an object); the message lists up to three errors as ``path: what is wrong``,
``path`` dotted (``messages.0.role``), so it starts with the field — as every hand-raised
field error's does.

The renderers, one per wire, each fed by :func:`client_error`: :func:`grpc_reply` (status,
details, trailing metadata), :func:`http_reply` (status, JSON body, headers) for REST,
:func:`openai_reply` for the OpenAI routes (OpenAI's error shape and statuses: the OpenAI
flavour below), :func:`sse_error` for an OpenAI stream that already began, and
:func:`websocket_reply` (error message, close code).

**The OpenAI flavour** (``/v1/audio/speech``, ``/v1/chat/completions``, ``/v1/models``,
``/v1/audio/voices``): ``{"error": {"message", "type", "param", "code"}}`` — ``param`` the
field (or null), ``code`` voicelane's error code, ``type`` OpenAI's class of error by status
(:data:`OPENAI_TYPES`) — with OpenAI's statuses: bad input 400 (a body over its size limit
413, a content type not taken 415), a missing or wrong key 401, a tenant's quota *and* the
lane's capacity 429 (OpenAI's clients back off and retry on it), the rest as REST's.

The forms an error takes on gRPC and HTTP
are shared with the SDK (:mod:`voicelane.common.error_wire`). Pure data: no gRPC or web
framework here; the fronts send what these return.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from pydantic import ValidationError

from voicelane.common.error_wire import grpc_trailers, http_body, retry_after_header
from voicelane.common.errors import (
    AuthError,
    InvalidInputError,
    MalformedRequestError,
    NoCapacityError,
    StoreFullError,
    TextTooLargeError,
    UnavailableError,
    UnsupportedMediaTypeError,
    VoicelaneError,
)

log = logging.getLogger(__name__)

UNREACHABLE_RETRY_S = 1.0
FULL_RETRY_S = 30.0
INTERNAL_MESSAGE = "internal error"
"""All a client reads of a bug; the traceback goes to the log."""
KNOWN_FAILURES: tuple[type[Exception], ...] = (VoicelaneError, redis.RedisError, ValidationError)
"""The exception classes :func:`client_error` maps to an error of their own (every other one
is internal): a web framework routes these to the front's handler."""
REQUEST_PARTS = frozenset({"body", "query", "path", "header", "cookie"})
"""Where in an HTTP request FastAPI locates a validation error: the first part of its ``loc``,
not a field."""
MAX_LISTED_ERRORS = 3
WEBSOCKET_CLOSE_CODES = {
    "INVALID_ARGUMENT": 1008,
    "UNAUTHENTICATED": 1008,
    "DEADLINE_EXCEEDED": 1008,
    "RESOURCE_EXHAUSTED": 1013,
}
"""The close code after an error message, by gRPC status: 1008 (policy violation) for bad
input or auth, 1013 (try again later) when over capacity, 1011 (internal error) otherwise."""
WEBSOCKET_CLOSE_OTHERWISE = 1011


def client_error(error: BaseException, *, where: str = "request") -> VoicelaneError:
    """The error the client sees for ``error`` (the table above). ``where`` names what failed
    in the log line of a service failure or a bug (``stream {id}``, ``POST /v1/jobs``)."""
    if isinstance(error, VoicelaneError):
        return error
    if isinstance(error, ValidationError):
        return invalid_input(error.errors())
    known = service_error(error)
    if known is not None:
        log.warning("%s: %s: %s", where, known.code, " ".join(str(error).split())[:200])
        return known
    log.error("%s failed", where, exc_info=error)
    return VoicelaneError(INTERNAL_MESSAGE)


def service_error(error: BaseException) -> VoicelaneError | None:
    """The client-facing error for a failure of a service behind the front (Redis), or None."""
    if _store_full(error):
        return StoreFullError(
            "the service is at its memory limit and takes no new work; retry later",
            retry_after_s=FULL_RETRY_S,
        )
    if isinstance(error, redis.ConnectionError | redis.TimeoutError):
        return UnavailableError(
            "the service's store (Redis) is unreachable; retry shortly",
            retry_after_s=UNREACHABLE_RETRY_S,
        )
    return None


OOM_MARKS = ("OOM command not allowed", "command not allowed when used memory")
"""Redis's refusal at ``maxmemory`` inside another error's text: a Lua script that caught it
(``redis.pcall``) and raised its own, which redis-py parses as a plain ``ResponseError``."""


def _store_full(error: BaseException) -> bool:
    """Redis at its ``maxmemory``: by class (redis-py's parser maps an ``-OOM`` reply to
    ``OutOfMemoryError``, whose text — redis-py 8 — no longer starts with ``OOM``), or a
    ``ResponseError`` that carries the refusal inside its text."""
    if isinstance(error, redis.exceptions.OutOfMemoryError):
        return True
    return isinstance(error, redis.ResponseError) and any(mark in str(error) for mark in OOM_MARKS)


def invalid_input(
    errors: Sequence[Mapping[str, Any]], *, located: bool = False
) -> InvalidInputError:
    """A request that does not fit its model, from pydantic's error list (the field rule
    above). ``located``: each ``loc`` starts with the part of the HTTP request it is in
    (FastAPI's ``RequestValidationError``), which is dropped."""
    unparsed = [e for e in errors if e.get("type") == "json_invalid"]
    if unparsed:
        detail = (unparsed[0].get("ctx") or {}).get("error") or unparsed[0].get("msg", "")
        return MalformedRequestError(f"malformed JSON: {detail}")
    paths = [_path(e, located=located) for e in errors]
    message = "; ".join(
        f"{'.'.join(path) or 'body'}: {e.get('msg', 'invalid')}"
        for path, e in zip(paths[:MAX_LISTED_ERRORS], errors, strict=False)
    )
    field = paths[0][0] if paths and paths[0] else None
    return InvalidInputError(message or "the request is invalid", field=field)


def _path(error: Mapping[str, Any], *, located: bool) -> list[str]:
    location = [str(part) for part in error.get("loc", ())]
    if located and location and location[0] in REQUEST_PARTS:
        location = location[1:]
    return location


# ---- the renderers ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GrpcReply:
    """How a gRPC call ends: the status (by name), its details and the trailing metadata."""

    status: str
    details: str
    trailers: tuple[tuple[str, str], ...]
    error: VoicelaneError
    """The error the client sees (:func:`client_error`)."""


def grpc_reply(error: BaseException, *, where: str = "call") -> GrpcReply:
    known = client_error(error, where=where)
    wire = known.to_wire()
    return GrpcReply(wire.status, wire.message, grpc_trailers(wire), known)


@dataclass(frozen=True, slots=True)
class HttpReply:
    """An HTTP error response: status, JSON body and headers."""

    status_code: int
    body: dict[str, Any]
    headers: dict[str, str]


def http_reply(error: BaseException, *, where: str = "request") -> HttpReply:
    """REST: the error class's status, ``{"error": {"code", "message",
    "field"?}}``, ``Retry-After`` for a retry hint, ``WWW-Authenticate`` for a missing key."""
    known = client_error(error, where=where)
    wire = known.to_wire()
    headers: dict[str, str] = {}
    if isinstance(known, AuthError):
        headers["WWW-Authenticate"] = "Bearer"
    if (retry_after := retry_after_header(wire)) is not None:
        headers["Retry-After"] = retry_after
    return HttpReply(known.http_status, http_body(wire), headers)


OPENAI_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}
"""OpenAI's error ``type`` by status; other 4xx: ``invalid_request_error``, 5xx:
``server_error``."""


def openai_status(known: VoicelaneError) -> int:
    """The status an OpenAI route answers ``known`` with (the OpenAI flavour above)."""
    if isinstance(known, UnsupportedMediaTypeError):
        return 415
    if isinstance(known, TextTooLargeError) and known.field is None:
        return 413  # the body as a whole; a text over its limit is bad input like any
    if isinstance(known, InvalidInputError):
        return 400
    if isinstance(known, NoCapacityError):
        return 429
    return known.http_status


def openai_error(known: VoicelaneError, status: int) -> dict[str, Any]:
    """OpenAI's error object: ``{"message", "type", "param", "code"}``."""
    error_type = OPENAI_TYPES.get(status)
    if error_type is None:
        error_type = "server_error" if status >= 500 else "invalid_request_error"
    return {
        "message": known.message or known.code,
        "type": error_type,
        "param": known.field,
        "code": known.code,
    }


def openai_reply(error: BaseException, *, where: str = "request") -> HttpReply:
    """An OpenAI route's error response: OpenAI's status and body (the OpenAI flavour), with
    ``Retry-After`` and ``WWW-Authenticate`` as :func:`http_reply` sends them."""
    known = client_error(error, where=where)
    status = openai_status(known)
    headers: dict[str, str] = {}
    if isinstance(known, AuthError):
        headers["WWW-Authenticate"] = "Bearer"
    if (retry_after := retry_after_header(known.to_wire())) is not None:
        headers["Retry-After"] = retry_after
    return HttpReply(status, {"error": openai_error(known, status)}, headers)


def sse_error(error: BaseException, *, where: str = "stream") -> dict[str, Any]:
    """The last event of an OpenAI stream (server-sent events) that failed after it began:
    ``{"error": {...}}``, the body :func:`openai_reply` would have sent."""
    return openai_reply(error, where=where).body


@dataclass(frozen=True, slots=True)
class WebSocketReply:
    """The error message a WebSocket gets, and the code its close carries."""

    message: dict[str, Any]
    close_code: int


def websocket_reply(error: BaseException, *, where: str = "websocket") -> WebSocketReply:
    """``{"type": "error", "code": STATUS, "error_code", "message", "field"?,
    "retry_after_s"?}`` (``code``: the gRPC status name; ``error_code``: the error's own code,
    as REST's ``error.code``) and its close code (:data:`WEBSOCKET_CLOSE_CODES`)."""
    wire = client_error(error, where=where).to_wire()
    message: dict[str, Any] = {
        "type": "error",
        "code": wire.status,
        "error_code": wire.code,
        "message": wire.message or wire.status,
    }
    if wire.field:
        message["field"] = wire.field
    if wire.retry_after_s is not None:
        message["retry_after_s"] = wire.retry_after_s
    close_code = WEBSOCKET_CLOSE_CODES.get(wire.status, WEBSOCKET_CLOSE_OTHERWISE)
    return WebSocketReply(message, close_code)
