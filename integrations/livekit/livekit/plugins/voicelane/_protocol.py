"""voicelane's agent protocol (``GET /v1/agent``) as the plugin speaks it: the URL, the
client messages, the server's errors as LiveKit's API errors, and the words of a context as
LiveKit's aligned transcript. Nothing here does I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from livekit.agents import APIConnectionError, APIError, APIStatusError
from livekit.agents.voice.io import TimedString

SAMPLE_RATES_HZ = (8000, 16000, 24000, 48000)
"""The rates the server renders PCM at (its ``ready`` message names them too)."""

_STATUS_OF_CODE = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "RESOURCE_EXHAUSTED": 429,
    "CANCELLED": 499,
    "UNIMPLEMENTED": 501,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
"""The gRPC status names of the protocol's ``error`` messages as HTTP statuses (what LiveKit's
``APIStatusError`` carries; it decides from them whether a failure is retried)."""

_STATUS_OF_CLOSE = {1008: 400, 1013: 503, 1011: 500}
"""WebSocket close codes the server uses (bad input or auth, over capacity, otherwise)."""


def agent_url(base_url: str) -> str:
    """``ws(s)://HOST/v1/agent`` from the server's base URL (with or without ``/v1``)."""
    base = base_url.rstrip("/")
    base = base.removesuffix("/v1")
    if base.startswith("https://"):
        base = "wss://" + base.removeprefix("https://")
    elif base.startswith("http://"):
        base = "ws://" + base.removeprefix("http://")
    return f"{base}/v1/agent"


@dataclass(frozen=True)
class ContextOptions:
    """What the first ``append`` of a context carries (the server reads options only then)."""

    sample_rate_hz: int
    voice: str | None = None
    speed: float | None = None
    normalize: bool | None = None
    lexicons: tuple[str, ...] = ()

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sample_rate_hz": self.sample_rate_hz, "encoding": "pcm"}
        if self.voice is not None:
            out["voice"] = self.voice
        if self.speed is not None:
            out["speed"] = self.speed
        if self.normalize is not None:
            out["normalize"] = self.normalize
        if self.lexicons:
            out["lexicons"] = list(self.lexicons)
        return out


def append_message(
    context_id: str, text: str, options: ContextOptions | None, *, close: bool = False
) -> dict[str, Any]:
    """An ``append``; ``options`` only on the context's first one."""
    message: dict[str, Any] = {"type": "append", "context_id": context_id, "text": text}
    if options is not None:
        message.update(options.fields())
    if close:
        message["close"] = True
    return message


def control_message(kind: str, context_id: str) -> dict[str, Any]:
    """``flush``, ``close`` or ``cancel`` of one context."""
    return {"type": kind, "context_id": context_id}


def error_from_message(message: dict[str, Any], request_id: str | None = None) -> APIStatusError:
    """The server's ``error`` message as LiveKit's ``APIStatusError`` (its status decides
    whether LiveKit retries: 4xx other than 408/429/499 are not retried)."""
    code = str(message.get("code") or "UNKNOWN")
    status = _STATUS_OF_CODE.get(code, 500)
    text = str(message.get("message") or code)
    error_code = message.get("error_code")
    return APIStatusError(
        f"voicelane: {text}" + (f" ({error_code})" if error_code else ""),
        status_code=status,
        request_id=request_id,
        body=message,
    )


def error_from_close(close_code: int | None, request_id: str | None = None) -> APIError:
    """The socket closed under a context: a status for the codes the server uses, else a
    connection error (retryable)."""
    if close_code in _STATUS_OF_CLOSE:
        return APIStatusError(
            f"voicelane closed the connection ({close_code})",
            status_code=_STATUS_OF_CLOSE[close_code],
            request_id=request_id,
            body={"close_code": close_code},
        )
    return APIConnectionError(f"voicelane closed the connection ({close_code})")


@dataclass
class TranscriptAligner:
    """A context's text as appended, turned into LiveKit's aligned transcript: each word the
    server times becomes a ``TimedString`` of the text from the end of the previous one to the
    end of this one (so the pieces, joined, give back the text as sent, with its spaces and
    punctuation), timed in seconds on the context's clock (0 = its first sample)."""

    text: str = ""
    _cursor: int = 0
    _last_start_s: float = 0.0

    def append(self, text: str) -> None:
        self.text += text

    def words(self, words: list[dict[str, Any]]) -> list[TimedString]:
        """The ``words`` of one message; a word at or before what was handed out is skipped."""
        out: list[TimedString] = []
        for word in words:
            char_end = min(int(word["char_end"]), len(self.text))
            if char_end <= self._cursor:
                continue
            start_s = max(float(word["start_ms"]) / 1000, self._last_start_s)
            end_s = max(float(word["end_ms"]) / 1000, start_s)
            out.append(TimedString(self.text[self._cursor : char_end], start_s, end_s))
            self._cursor = char_end
            self._last_start_s = start_s
        return out

    def tail(self, duration_s: float) -> TimedString | None:
        """What follows the last timed word (closing punctuation, spaces), at the end."""
        if self._cursor >= len(self.text):
            return None
        piece = self.text[self._cursor :]
        self._cursor = len(self.text)
        at_s = max(duration_s, self._last_start_s)
        return TimedString(piece, at_s, at_s)
