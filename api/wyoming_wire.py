"""Wyoming's framing, read with bounds: an event is a JSON header line, then ``data_length``
bytes of JSON data merged into the header's ``data``, then ``payload_length`` bytes of
payload (``wyoming.event``).

The ``wyoming`` package's own reader trusts the lengths a client declares (``readexactly`` of
whatever ``data_length`` says) and turns every malformed event into a silent end of the
connection; a server without authentication cannot afford either. :func:`read_event` refuses
an event over ``max_event_bytes`` before reading its body, and says what was wrong
(:class:`~voicelane.common.errors.MalformedRequestError`), so the client gets an ``error``
event instead of a closed socket. Events are written with the package's own writer.

:func:`wyoming_serving` is the readiness probe of ``voicelane up`` and the tests: a
``describe`` answered with ``info`` (plain sockets, no event loop).
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

from wyoming.event import Event

from voicelane.common.errors import MalformedRequestError

MAX_HEADER_BYTES = 16 * 1024
"""Longest header line (the type and lengths; a client's ``data`` normally travels after it,
but the line may carry it too, within this)."""


async def read_event(reader: asyncio.StreamReader, *, max_event_bytes: int) -> Event | None:
    """The next event, or None at the end of the connection (also mid-event: the client is
    gone). MalformedRequestError for anything that is not a Wyoming event within bounds."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError:
        raise MalformedRequestError(
            f"event header line over {MAX_HEADER_BYTES} bytes", field="event"
        ) from None
    if len(line) > min(MAX_HEADER_BYTES, max_event_bytes):
        raise MalformedRequestError(f"event header line over {MAX_HEADER_BYTES} bytes")
    header = _json_object(line, "the event header")
    kind = header.get("type")
    if not isinstance(kind, str) or not kind:
        raise MalformedRequestError("an event needs a type (a non-empty string)", field="type")
    data = header.get("data", {})
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise MalformedRequestError("an event's data must be a JSON object", field="data")
    data_length = _length(header, "data_length")
    payload_length = _length(header, "payload_length")
    if len(line) + data_length + payload_length > max_event_bytes:
        raise MalformedRequestError(
            f"event {kind!r} is over {max_event_bytes} bytes", field="event"
        )
    try:
        if data_length:
            data.update(_json_object(await reader.readexactly(data_length), "the event data"))
        payload = await reader.readexactly(payload_length) if payload_length else None
    except asyncio.IncompleteReadError:
        return None
    return Event(type=kind, data=data, payload=payload)


def _length(header: dict[str, Any], name: str) -> int:
    value = header.get(name)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MalformedRequestError(f"{name} must be a byte count", field=name)
    return value


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        raise MalformedRequestError(f"{what} is not JSON", field="event") from None
    if not isinstance(value, dict):
        raise MalformedRequestError(f"{what} is not a JSON object", field="event")
    return value


def wyoming_serving(host: str, port: int, *, timeout_s: float = 1.0) -> bool:
    """Whether a Wyoming server at ``host:port`` answers ``describe`` with ``info``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as connection:
            connection.sendall(b'{"type": "describe"}\n')
            with connection.makefile("rb") as stream:
                header = json.loads(stream.readline(MAX_HEADER_BYTES))
    except (OSError, ValueError):
        return False
    return isinstance(header, dict) and header.get("type") == "info"
