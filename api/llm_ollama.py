"""The Ollama backend of the LLM bridge: ``/api/chat``, streamed, through the official
``ollama.AsyncClient`` (whatever Ollama version the operator runs, the protocol is the
client's business).

Every request carries ``options.num_ctx`` (``VOICELANE_LLM__NUM_CTX``; left out, Ollama sizes
the context from the card and its KV cache eats the TTS model's memory) and ``keep_alive``.
Errors: a model Ollama does not have → :class:`~voicelane.common.errors.NotFoundError`;
unreachable, 503 busy, any other 5xx, an error line or a dropped connection mid-reply →
:class:`~voicelane.common.errors.UnavailableError`; no chunk within the read timeout →
:class:`~voicelane.common.errors.DeadlineExceededError`; 400 →
:class:`~voicelane.common.errors.InvalidInputError`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from typing import Any, cast

import ollama

from voicelane.api.llm_backend import Delta, LlmBackend, ReplyEnd, map_transport_error, one_line
from voicelane.common.errors import (
    InvalidInputError,
    NotFoundError,
    UnavailableError,
    VoicelaneError,
)
from voicelane.core.settings import LlmSettings

log = logging.getLogger(__name__)

BUSY_RETRY_AFTER_S = 1.0


def map_error(error: BaseException, *, host: str, model: str, started: bool) -> VoicelaneError:
    """An error of the ``ollama`` client (or of httpx under it) as voicelane's typed error.
    ``started``: the reply's first chunk had arrived (a mid-reply failure)."""
    if isinstance(error, VoicelaneError):
        return error
    if isinstance(error, ollama.ResponseError):
        status, detail = error.status_code, one_line(error.error)
        if status == 404:
            said = "" if model in detail else f": {detail}"
            return NotFoundError(
                f"model {model!r} not found on ollama at {host}{said}", field="model"
            )
        if status == -1:
            return UnavailableError(f"ollama at {host} failed mid-reply: {detail}")
        if status == 400:
            return InvalidInputError(f"ollama at {host} refused the request: {detail}")
        retry = BUSY_RETRY_AFTER_S if status in (429, 503) else None
        return UnavailableError(
            f"ollama at {host} is unavailable: HTTP {status}: {detail}", retry_after_s=retry
        )
    mapped = map_transport_error(error, label=f"ollama at {host}", started=started)
    if mapped is not None:
        return mapped
    log.warning("LLM: unexpected error from ollama at %s", host, exc_info=error)
    detail = one_line(f"{type(error).__name__}: {error}".rstrip(": "))
    return UnavailableError(f"ollama at {host} failed: {detail}")


def _ns_to_ms(value: int | None) -> float:
    return (value or 0) / 1e6


def _end(part: ollama.ChatResponse, model: str) -> ReplyEnd:
    return ReplyEnd(
        model=part.model or model,
        prompt_tokens=part.prompt_eval_count or 0,
        reply_tokens=part.eval_count or 0,
        prompt_eval_ms=_ns_to_ms(part.prompt_eval_duration),
        eval_ms=_ns_to_ms(part.eval_duration),
        total_ms=_ns_to_ms(part.total_duration),
        load_ms=_ns_to_ms(part.load_duration),
        done_reason=part.done_reason or "",
    )


class OllamaBackend(LlmBackend):
    """Ollama at ``settings.host``."""

    def __init__(self, settings: LlmSettings) -> None:
        self.settings = settings
        self.host = settings.host
        self._client = ollama.AsyncClient(host=settings.host, timeout=settings.read_timeout_s)

    @property
    def label(self) -> str:
        return f"ollama at {self.host}"

    def _options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"num_ctx": self.settings.num_ctx}
        if self.settings.max_reply_tokens is not None:
            options["num_predict"] = self.settings.max_reply_tokens
        return options

    async def stream(
        self, model: str, messages: list[dict[str, str]]
    ) -> AsyncGenerator[Delta, None]:
        chunks = await self._client.chat(
            model=model,
            messages=messages,
            stream=True,
            options=self._options(),
            keep_alive=self.settings.keep_alive,
        )
        stream = cast(AsyncGenerator[ollama.ChatResponse, None], chunks)
        try:
            async for part in stream:
                yield Delta(part.message.content or "", _end(part, model) if part.done else None)
                if part.done:
                    return
        finally:
            await stream.aclose()  # closes the HTTP stream: Ollama stops generating

    async def preload(self, model: str) -> None:
        """An empty request (``keep_alive``, and the ``num_ctx`` replies use: another one
        would make Ollama load the model again)."""
        settings = self.settings
        async with ollama.AsyncClient(host=self.host, timeout=settings.preload_timeout_s) as client:
            try:
                await client.chat(
                    model=model,
                    messages=[],
                    stream=False,
                    options=self._options(),
                    keep_alive=settings.keep_alive,
                )
            except Exception as error:
                raise self.map_error(error, model=model, started=False) from error

    def map_error(self, error: BaseException, *, model: str, started: bool) -> VoicelaneError:
        return map_error(error, host=self.host, model=model, started=started)

    async def close(self) -> None:
        await self._client.close()  # type: ignore[no-untyped-call]
