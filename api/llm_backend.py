"""The wire side of the LLM bridge: one protocol, one implementation per kind of LLM server.

:class:`voicelane.api.llm.LlmBridge` owns what every backend shares (validation, the window,
the generation slots, the reading task, barge-in, metrics); a backend only speaks its
server's protocol: it streams one reply as :class:`Delta` s, preloads a model, and says what
its client's errors mean (:class:`voicelane.common.errors` types). Two implement it:
:class:`voicelane.api.llm_ollama.OllamaBackend` (Ollama's ``/api/chat``) and
:class:`voicelane.api.llm_openai.OpenAIBackend` (``/chat/completions`` of an OpenAI-compatible
server). :func:`voicelane.api.llm.backend_for` picks one (``VOICELANE_LLM__BACKEND``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Protocol

import httpx

from voicelane.common.errors import (
    DeadlineExceededError,
    UnavailableError,
    VoicelaneError,
)


@dataclass(frozen=True, slots=True)
class ReplyEnd:
    """A finished reply's numbers as the server reports them (ms; tokens as it counts them;
    0 where it reports nothing)."""

    model: str
    prompt_tokens: int
    reply_tokens: int
    prompt_eval_ms: float
    eval_ms: float
    total_ms: float
    load_ms: float
    done_reason: str


@dataclass(frozen=True, slots=True)
class Delta:
    """One piece of a streamed reply: its text (may be empty: the server's first chunk, a
    role header) and, on the last one, the reply's numbers."""

    text: str
    end: ReplyEnd | None = None


class LlmBackend(Protocol):
    """A kind of LLM server, bound to one event loop (its HTTP client is that loop's)."""

    @property
    def label(self) -> str:
        """How errors name the server: ``ollama at http://…``, ``the LLM at http://…``."""
        ...

    async def stream(
        self, model: str, messages: list[dict[str, str]]
    ) -> AsyncGenerator[Delta, None]:
        """The reply, as it is written: the first :class:`Delta` as soon as the server
        accepted the request, the last one carrying :attr:`Delta.end`. Closing the generator
        closes the HTTP stream (the server stops generating). Errors are the client's own;
        :meth:`map_error` types them."""
        yield Delta("")  # (a protocol: the body is never run)

    async def preload(self, model: str) -> None:
        """Load (or check) ``model`` so that the first user does not pay for it; typed
        errors."""
        ...

    def map_error(self, error: BaseException, *, model: str, started: bool) -> VoicelaneError:
        """An error of :meth:`stream` as voicelane's typed error; ``started``: the reply's
        first chunk had arrived (a mid-reply failure)."""
        ...

    async def close(self) -> None:
        """Close the HTTP client."""
        ...


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def map_transport_error(
    error: BaseException, *, label: str, started: bool
) -> VoicelaneError | None:
    """httpx's timeouts and transport errors (under any backend's client) as typed errors;
    None for any other error."""
    if isinstance(error, httpx.TimeoutException) and not isinstance(error, httpx.ConnectTimeout):
        return DeadlineExceededError(
            f"{label} sent nothing for longer than the read timeout "
            f"({'mid-reply' if started else 'before the first token'})"
        )
    detail = one_line(f"{type(error).__name__}: {error}".rstrip(": "))
    if isinstance(error, httpx.TransportError | ConnectionError) and not started:
        return UnavailableError(f"{label} is unreachable: {detail}")
    if isinstance(error, httpx.TransportError):
        return UnavailableError(f"{label} dropped the connection mid-reply: {detail}")
    if isinstance(error, ValueError):  # json.JSONDecodeError, pydantic's ValidationError
        return UnavailableError(f"{label} sent a malformed reply: {detail}")
    return None
