"""An error's forms on the wire: what a voicelane front writes and what the SDK reads back.

Both sides take them from here, so that an error crosses server → client whole — its status,
message, :attr:`~voicelane.common.errors.VoicelaneError.code`, ``field`` and retry hint — as a
:class:`~voicelane.common.errors.WireError`:

- **gRPC**: the status and its details (the message), and trailing metadata ``error-code``
  (always), ``error-field`` and ``retry-after-ms`` (when there is one);
- **HTTP**: the JSON body ``{"error": {"code", "message", "field"?}}`` with the status the
  error class maps to, and ``Retry-After`` (whole seconds, at least 1) for a retry hint.

Pure data, no gRPC or HTTP library: the fronts (:mod:`voicelane.api.failures`) and the SDK
(:mod:`voicelane.client.failure`, :mod:`voicelane.client.jobs`) wrap these in their own calls.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from voicelane.common.errors import WireError, status_for_http

CODE_KEY = "error-code"
"""gRPC trailing metadata: the error's code (``unknown_voice``, ``quota_exceeded``...)."""
FIELD_KEY = "error-field"
"""gRPC trailing metadata: the request field the error is about (``speed``, ``voice``...)."""
RETRY_AFTER_MS_KEY = "retry-after-ms"
"""gRPC trailing metadata: when retrying may succeed, in milliseconds."""


def grpc_trailers(wire: WireError) -> tuple[tuple[str, str], ...]:
    """The trailing metadata that carries what the status and its details cannot."""
    trailers = [(CODE_KEY, wire.code)]
    if wire.field:
        trailers.append((FIELD_KEY, wire.field))
    if wire.retry_after_s is not None:
        trailers.append((RETRY_AFTER_MS_KEY, str(round(wire.retry_after_s * 1000))))
    return tuple(trailers)


def from_grpc(
    status: str, details: str, trailers: Iterable[tuple[str, str | bytes]] | None
) -> WireError:
    """The error a call ended with: its status name, details and trailing metadata (code
    ``""`` when the peer sent none: an older server, or gRPC's own failure)."""
    values = {key: _text(value) for key, value in trailers or ()}
    retry_ms = _number(values.get(RETRY_AFTER_MS_KEY))
    return WireError(
        code=values.get(CODE_KEY, ""),
        message=details,
        status=status,
        field=values.get(FIELD_KEY) or None,
        retry_after_s=None if retry_ms is None else retry_ms / 1000,
    )


def http_body(wire: WireError) -> dict[str, Any]:
    """The JSON body of an HTTP error response."""
    body: dict[str, Any] = {"code": wire.code, "message": wire.message or wire.code}
    if wire.field:
        body["field"] = wire.field
    return {"error": body}


def retry_after_header(wire: WireError) -> str | None:
    """``Retry-After``: whole seconds, rounded up, at least 1; None without a retry hint."""
    if wire.retry_after_s is None:
        return None
    return str(max(1, math.ceil(wire.retry_after_s)))


def from_http(status_code: int, body: object, retry_after: str | None) -> WireError:
    """The error an HTTP response carries: its status, JSON body (parsed, or anything else
    for a body that is not voicelane's: code ``""``) and ``Retry-After`` header."""
    error = body.get("error") if isinstance(body, dict) else None
    fields: dict[str, Any] = error if isinstance(error, dict) else {}
    message = fields.get("message")
    field = fields.get("field")
    code = fields.get("code")
    return WireError(
        code=code if isinstance(code, str) else "",
        message=message if isinstance(message, str) else "",
        status=status_for_http(status_code),
        field=field if isinstance(field, str) and field else None,
        retry_after_s=_number(retry_after),
    )


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _number(value: str | None) -> float | None:
    """A non-negative number of a header or metadata value; None for anything else (an HTTP
    date in ``Retry-After`` included)."""
    try:
        number = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None
