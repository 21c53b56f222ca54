"""The agent protocol's messages (``GET /v1/agent``; ``docs/agent-protocol.md``): the client's,
read and checked, and the server's, built. Pure data: no socket, no Redis.

A client message is one JSON object with a ``type``. What cannot be tied to a context (not
JSON, no ``type``, no or a malformed ``context_id``, a binary message) is a fault of the
connection (:class:`ConnectionFaultError`: the connection's error and a close); what can is a
fault of that context (:class:`ContextFaultError`: an error of the context, which is reclaimed,
and the connection goes on).
"""

from __future__ import annotations

import base64
import bisect
import json
import re
from dataclasses import dataclass, field
from typing import Any

from voicelane.api.streams import StreamChunk
from voicelane.common.audio.stream import StreamEncoding
from voicelane.common.errors import (
    InvalidInputError,
    MalformedRequestError,
    NotFoundError,
    VoicelaneError,
)
from voicelane.core.word_timings import WordTiming

CONTEXT_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
"""A context id: 1-64 characters of ``A-Z a-z 0-9 _ . : -``."""
DEFAULT_SAMPLE_RATE_HZ = 24000
SAMPLE_RATES_HZ = (8000, 16000, 24000, 48000)
"""The rates the ``ready`` message names: the usual ones, each valid for PCM and Opus."""
ENCODINGS = {"pcm": StreamEncoding.PCM, "opus": StreamEncoding.OPUS}
OPTION_FIELDS = ("voice", "sample_rate_hz", "encoding", "speed", "normalize", "lexicons")
"""The options of a context: read from its first ``append``; a later one may repeat them."""
MESSAGE_TYPES = ("append", "flush", "close", "cancel")
PCM_BYTES_PER_SAMPLE = 2
OPUS_PACKET_MS = 20


class TooManyContextsError(VoicelaneError):
    """An ``append`` would open more contexts than a connection may hold open."""

    code = "too_many_contexts"
    http_status = 429
    grpc_status = "RESOURCE_EXHAUSTED"


class UnknownContextError(NotFoundError):
    """A ``flush`` or ``close`` of a context that is not open."""

    code = "unknown_context"


class ConnectionFaultError(MalformedRequestError):
    """A message that cannot be tied to a context: the connection fails."""


@dataclass
class ContextFaultError(Exception):
    """A message of ``context_id`` that is wrong: that context fails."""

    context_id: str
    error: VoicelaneError


# ---- client → server -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContextOptions:
    """How a context speaks, as its first ``append`` said (defaults filled in)."""

    voice: str | None = None
    sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ
    encoding: StreamEncoding = StreamEncoding.PCM
    speed: float | None = None
    normalize: bool = True
    lexicons: tuple[str, ...] | None = None

    @classmethod
    def parse(cls, given: dict[str, Any]) -> ContextOptions:
        """The options named in a message (the others at their defaults); InvalidInputError
        naming the field for a value of the wrong kind."""
        options = cls()
        voice = given.get("voice")
        if voice is not None and not isinstance(voice, str):
            raise InvalidInputError("voice: expected a string", field="voice")
        rate = given.get("sample_rate_hz", DEFAULT_SAMPLE_RATE_HZ)
        if rate is None:
            rate = DEFAULT_SAMPLE_RATE_HZ
        if isinstance(rate, bool) or not isinstance(rate, int):
            raise InvalidInputError("sample_rate_hz: expected an integer", field="sample_rate_hz")
        name = given.get("encoding", "pcm")
        encoding = ENCODINGS.get(name) if isinstance(name, str) else None
        if encoding is None:
            raise InvalidInputError(
                f"encoding: expected one of {', '.join(ENCODINGS)}", field="encoding"
            )
        speed = given.get("speed")
        if speed is not None and (isinstance(speed, bool) or not isinstance(speed, int | float)):
            raise InvalidInputError("speed: expected a number", field="speed")
        normalize = given.get("normalize", True)
        if not isinstance(normalize, bool):
            raise InvalidInputError("normalize: expected true or false", field="normalize")
        lexicons = given.get("lexicons")
        if lexicons is not None and (
            not isinstance(lexicons, list) or not all(isinstance(x, str) for x in lexicons)
        ):
            raise InvalidInputError("lexicons: expected a list of names", field="lexicons")
        return cls(
            voice=voice if voice is not None else options.voice,
            sample_rate_hz=rate,
            encoding=encoding,
            speed=None if speed is None else float(speed),
            normalize=normalize,
            lexicons=None if lexicons is None else tuple(lexicons),
        )

    def check_same(self, given: dict[str, Any]) -> None:
        """A later ``append`` of the context: each option it names must have the value the
        context opened with."""
        later = ContextOptions.parse(given)
        for name in OPTION_FIELDS:
            if name in given and getattr(later, name) != getattr(self, name):
                raise InvalidInputError(
                    f"{name}: a context's options are set by its first append; this one "
                    f"names another {name} (open a new context for it)",
                    field=name,
                )


@dataclass(frozen=True, slots=True)
class ClientMessage:
    type: str
    context_id: str
    text: str = ""
    close: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    """The option fields the message names (``append``), as sent."""


def parse_client_message(raw: str | bytes | None) -> ClientMessage:
    """One client message, checked: ConnectionFaultError when it cannot be tied to a context,
    ContextFaultError when it can (see the module docstring)."""
    if not isinstance(raw, str):
        raise ConnectionFaultError("every message must be one JSON text message, not binary")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as error:
        raise ConnectionFaultError(f"malformed JSON: {str(error)[:120]}") from None
    if not isinstance(body, dict):
        raise ConnectionFaultError("a message must be a JSON object with a type")
    kind = body.get("type")
    context_id = body.get("context_id")
    if context_id is None:
        raise ConnectionFaultError(
            f"a {kind!s:.20} message must name its context_id"
            if isinstance(kind, str)
            else "a message must have a type and a context_id",
            field="context_id",
        )
    if not isinstance(context_id, str) or not CONTEXT_ID.fullmatch(context_id):
        raise ConnectionFaultError(
            "context_id: 1-64 characters of A-Z a-z 0-9 _ . : -", field="context_id"
        )
    if kind not in MESSAGE_TYPES:
        raise ContextFaultError(
            context_id,
            InvalidInputError(
                f"type: {kind!s:.20} is not a message type here; use " + ", ".join(MESSAGE_TYPES),
                field="type",
            ),
        )
    allowed = {"type", "context_id"}
    if kind == "append":
        allowed |= {"text", "close", *OPTION_FIELDS}
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise ContextFaultError(
            context_id,
            InvalidInputError(
                f"{unknown[0]}: not a field of a {kind} message", field=unknown[0][:64]
            ),
        )
    if kind != "append":
        return ClientMessage(kind, context_id)
    text = body.get("text", "")
    close = body.get("close", False)
    if not isinstance(text, str):
        raise ContextFaultError(
            context_id, InvalidInputError("text: expected a string", field="text")
        )
    if not isinstance(close, bool):
        raise ContextFaultError(
            context_id, InvalidInputError("close: expected true or false", field="close")
        )
    options = {name: body[name] for name in OPTION_FIELDS if name in body}
    return ClientMessage(kind, context_id, text, close, options)


def auth_key(raw: str | bytes | None) -> str | None:
    """The key of an ``{"type": "auth", "api_key"}`` message; None for any other message."""
    if not isinstance(raw, str):
        return None
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict) or body.get("type") != "auth":
        return None
    key = body.get("api_key")
    if not isinstance(key, str) or not key:
        raise ConnectionFaultError("auth: api_key must be a non-empty string", field="api_key")
    return key


# ---- the context's text ------------------------------------------------------------------------


class TextSpans:
    """A context's text as appended, and the map from offsets into what was spoken (each
    append's text less what the stream's rules removed: a leading BOM, control characters)
    to offsets into it: word timings' spans are offsets into the spoken text."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self.length = 0
        self._spoken = 0
        self._removed: list[int] = []
        """For each appended character left out of the spoken text, the spoken offset it
        sits before (ascending)."""

    @property
    def text(self) -> str:
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def append(self, appended: str) -> None:
        """One append's text, as the client sent it (before it is sent on: a word of it may
        come back before :meth:`spoken` is told what was spoken of it)."""
        self._parts.append(appended)
        self.length += len(appended)

    def spoken(self, appended: str, spoken: str) -> None:
        """What was spoken of the last append: ``appended`` with some characters left out."""
        if len(spoken) != len(appended):
            matched = 0
            for char in appended:
                if matched < len(spoken) and spoken[matched] == char:
                    matched += 1
                else:
                    self._removed.append(self._spoken + matched)
        self._spoken += len(spoken)

    def span(self, start: int, end: int) -> tuple[int, int]:
        """``[start, end)`` of the spoken text as offsets into the appended text."""
        first = start + bisect.bisect_right(self._removed, start)
        if end <= start:
            return first, first
        last = end - 1 + bisect.bisect_right(self._removed, end - 1)
        return first, min(self.length, last + 1)

    def word(self, timing: WordTiming) -> dict[str, Any]:
        """A word timing as the ``words`` message has it: span and text of the appended text."""
        start, end = self.span(timing.char_start, timing.char_end)
        return {
            "text": self.text[start:end],
            "start_ms": timing.start_ms,
            "end_ms": timing.end_ms,
            "char_start": start,
            "char_end": end,
        }


# ---- server → client ---------------------------------------------------------------------------


def ready_message(max_contexts: int) -> dict[str, Any]:
    return {"type": "ready", "max_contexts": max_contexts, "sample_rates_hz": list(SAMPLE_RATES_HZ)}


def started_message(context_id: str, request_id: str, options: ContextOptions) -> dict[str, Any]:
    return {
        "type": "started",
        "context_id": context_id,
        "request_id": request_id,
        "sample_rate_hz": options.sample_rate_hz,
        "encoding": options.encoding.value,
    }


def audio_duration_ms(chunk: StreamChunk, encoding: StreamEncoding) -> float:
    """How much audio a chunk carries."""
    if encoding is StreamEncoding.OPUS:
        return float(OPUS_PACKET_MS * len(chunk.data))
    samples = sum(len(piece) for piece in chunk.data) // PCM_BYTES_PER_SAMPLE
    return samples * 1000 / chunk.sample_rate_hz


def audio_message(context_id: str, chunk: StreamChunk, encoding: StreamEncoding) -> dict[str, Any]:
    message: dict[str, Any] = {
        "type": "audio",
        "context_id": context_id,
        "seq": chunk.seq,
        "pts_ms": chunk.pts_ms,
        "duration_ms": round(audio_duration_ms(chunk, encoding), 3),
    }
    if encoding is StreamEncoding.OPUS:
        message["packets"] = [base64.b64encode(packet).decode("ascii") for packet in chunk.data]
    else:
        message["audio"] = base64.b64encode(b"".join(chunk.data)).decode("ascii")
    return message


def words_message(context_id: str, words: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "words", "context_id": context_id, "words": words}


def done_message(context_id: str, duration_ms: float) -> dict[str, Any]:
    return {"type": "done", "context_id": context_id, "duration_ms": round(duration_ms, 3)}


def cancelled_message(context_id: str) -> dict[str, Any]:
    return {"type": "cancelled", "context_id": context_id}
