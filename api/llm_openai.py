"""The OpenAI-compatible backend of the LLM bridge: ``POST {base_url}/chat/completions`` with
``stream: true`` (llama.cpp's server, vLLM, LM Studio, OpenAI itself), read with httpx (the
client under ``ollama``'s, so both backends share its timeouts and transport errors).

* **The window** is the server's (llama.cpp's ``-c``, vLLM's ``--max-model-len``); the bridge
  trims the history to ``VOICELANE_LLM__NUM_CTX`` before sending, so set them alike.
* **The model must exist.** Some servers answer any model name with the one they have
  (llama.cpp); so before a model's first reply the backend reads ``GET {base_url}/models``
  (again on a miss, at most every :data:`MODELS_REFRESH_S`) and refuses a name the server
  does not list with :class:`~voicelane.common.errors.NotFoundError`. A server without that
  listing is trusted.
* **Errors:** 404 → NotFoundError; 400 (say, a prompt over the server's window) →
  :class:`~voicelane.common.errors.InvalidInputError`; 401/403 (the API key), 429, 5xx, an
  error event or a dropped connection mid-reply, a stream that ends without ``[DONE]`` →
  :class:`~voicelane.common.errors.UnavailableError` (429/503 with a retry hint); no byte within
  the read timeout → :class:`~voicelane.common.errors.DeadlineExceededError`.
* **Preload** sends a one-token reply: a local server runs its first inference (allocations,
  caches) then, not for the first user; the model list is read on the way.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncGenerator
from typing import Any

import httpx

from voicelane.api.llm_backend import Delta, LlmBackend, map_transport_error, one_line
from voicelane.api.llm_sse import SseReply, StreamError
from voicelane.common.errors import (
    InvalidInputError,
    NotFoundError,
    UnavailableError,
    VoicelaneError,
)
from voicelane.core.settings import LlmSettings

log = logging.getLogger(__name__)

BUSY_RETRY_AFTER_S = 1.0
MODELS_REFRESH_S = 5.0
"""The model list is read again on a miss at most this often."""
MAX_ERROR_BODY_BYTES = 4096


class HttpStatusError(Exception):
    """The server answered the request with an HTTP error before streaming."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


def _detail(body: bytes) -> str:
    """The message of an error body (OpenAI's ``{"error": {"message": …}}`` or any text)."""
    text = body[:MAX_ERROR_BODY_BYTES].decode("utf-8", "replace")
    try:
        parsed = json.loads(text)
    except ValueError:
        return one_line(text) or "(no body)"
    error = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
    if isinstance(error, dict):
        error = error.get("message", error)
    return one_line(error)


def map_error(error: BaseException, *, label: str, model: str, started: bool) -> VoicelaneError:
    """An error of the OpenAI backend (HTTP status, stream error, httpx) as a typed error."""
    if isinstance(error, VoicelaneError):
        return error
    if isinstance(error, HttpStatusError):
        status, detail = error.status, error.detail
        if status == 404:
            return NotFoundError(f"model {model!r} not found on {label}: {detail}", field="model")
        if status in (400, 413, 422):
            return InvalidInputError(f"{label} refused the request: {detail}")
        if status in (401, 403):
            return UnavailableError(f"{label} refused the API key (HTTP {status}): {detail}")
        retry = BUSY_RETRY_AFTER_S if status in (429, 503) else None
        return UnavailableError(
            f"{label} is unavailable: HTTP {status}: {detail}", retry_after_s=retry
        )
    if isinstance(error, StreamError):
        return UnavailableError(f"{label} failed mid-reply: {error}")
    mapped = map_transport_error(error, label=label, started=started)
    if mapped is not None:
        return mapped
    log.warning("LLM: unexpected error from %s", label, exc_info=error)
    detail = one_line(f"{type(error).__name__}: {error}".rstrip(": "))
    return UnavailableError(f"{label} failed: {detail}")


class OpenAIBackend(LlmBackend):
    """An OpenAI-compatible server at ``settings.base_url``."""

    def __init__(
        self, settings: LlmSettings, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.settings = settings
        self.base_url = (settings.base_url or "").rstrip("/")
        headers = {"Accept": "text/event-stream"}
        if settings.api_key is not None:
            headers["Authorization"] = f"Bearer {settings.api_key.get_secret_value()}"
        self._client = httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(settings.read_timeout_s), transport=transport
        )
        self._models: set[str] | None = None
        """The server's listed models; None: not read yet, or the server lists none."""
        self._models_read_at = -MODELS_REFRESH_S
        self._listing = True
        """False once the server showed it has no model list: then every name is trusted."""

    @property
    def label(self) -> str:
        return f"the LLM at {self.base_url}"

    async def _check_model(self, model: str, client: httpx.AsyncClient) -> None:
        if not self._listing or (self._models is not None and model in self._models):
            return
        if time.monotonic() - self._models_read_at >= MODELS_REFRESH_S:
            self._models_read_at = time.monotonic()
            response = await client.get(f"{self.base_url}/models")
            status = response.status_code
            if status in (401, 403):
                raise HttpStatusError(status, _detail(response.content))
            if status != 200:  # no listing here (404, 405): trust the names; else try later
                self._listing = status not in (404, 405)
                return
            try:
                self._models = {str(entry["id"]) for entry in response.json()["data"]} or None
            except (ValueError, KeyError, TypeError):
                self._models = None
            if self._models is None:
                self._listing = False  # no usable list: trust the names
                return
        if self._models is not None and model not in self._models:
            listed = ", ".join(sorted(self._models)[:5])
            raise HttpStatusError(404, f"the server lists no such model (it has: {listed})")

    def _body(self, model: str, messages: list[dict[str, str]], **extra: Any) -> dict[str, Any]:
        return {"model": model, "messages": messages, **extra}

    async def stream(
        self, model: str, messages: list[dict[str, str]]
    ) -> AsyncGenerator[Delta, None]:
        sent = time.monotonic()
        await self._check_model(model, self._client)
        body = self._body(model, messages, stream=True, stream_options={"include_usage": True})
        if self.settings.max_reply_tokens is not None:
            body["max_tokens"] = self.settings.max_reply_tokens
        reply = SseReply(model)
        async with self._client.stream(
            "POST", f"{self.base_url}/chat/completions", json=body
        ) as response:
            if response.status_code >= 400:
                raise HttpStatusError(response.status_code, _detail(await response.aread()))
            async for line in response.aiter_lines():
                text = reply.feed(line)
                if text is None:
                    continue
                if reply.done:
                    yield Delta("", reply.end((time.monotonic() - sent) * 1000))
                    return
                if text or reply.events == 1:  # the first event: the server accepted
                    yield Delta(text)
        # The ``async with`` closed the HTTP stream, however the generator ended: closing it
        # early (barge-in) drops the connection, and the server stops generating.

    async def preload(self, model: str) -> None:
        async with httpx.AsyncClient(
            headers=self._client.headers, timeout=self.settings.preload_timeout_s
        ) as client:
            try:
                await self._check_model(model, client)
                body = self._body(
                    model, [{"role": "user", "content": "Hi"}], stream=False, max_tokens=1
                )
                response = await client.post(f"{self.base_url}/chat/completions", json=body)
                if response.status_code >= 400:
                    raise HttpStatusError(response.status_code, _detail(response.content))
            except Exception as error:
                raise self.map_error(error, model=model, started=False) from error

    def map_error(self, error: BaseException, *, model: str, started: bool) -> VoicelaneError:
        return map_error(error, label=self.label, model=model, started=started)

    async def close(self) -> None:
        await self._client.aclose()
