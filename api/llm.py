"""The LLM bridge: a conversation in, the reply's text out as Ollama writes it.

The fronts (API and gRPC processes) ask :class:`LlmBridge` for a reply; it speaks to Ollama
through the official ``ollama.AsyncClient`` (``/api/chat``, streamed), so that whatever Ollama
version the operator runs, the protocol is the client's business. What the bridge adds:

* **validation** — no messages, an unknown role, a last message that is empty or not text:
  :class:`~voicelane.common.errors.InvalidInputError`;
* **the window** — every request carries ``options.num_ctx`` (``VOICELANE_LLM__NUM_CTX``;
  left out, Ollama sizes the context from the card and its KV cache eats the TTS model's
  memory) and ``keep_alive``; the history is trimmed to fit: each message's tokens estimated
  (a CJK character ≈ 1 token, other text ≈ 4 characters per token, 4 per message), the oldest
  non-system messages dropped whole until system + history + ``reply_reserve_tokens`` fit
  ``num_ctx``; a last message that does not fit alone is refused;
* **a cap on generations, shared fairly** — at most ``max_parallel`` in flight (Ollama's
  ``OLLAMA_NUM_PARALLEL``), at most ``tenant_max_parallel`` of them one tenant's (default: all
  but one, so another tenant always finds one). Later replies wait in their tenant's queue
  (first come first served within it; at most ``tenant_max_queued``, one more is refused with
  :class:`~voicelane.common.errors.QuotaExceededError`), and a freed slot goes to the tenants'
  queues in turn (:class:`GenerationSlots`), so one tenant's backlog never holds up another's
  chat by more than one turn. A wait longer than ``max_queue_wait_s`` is
  :class:`~voicelane.common.errors.UnavailableError`; a waiter that is cancelled (its client
  left) leaves the queue. The bridge owns the cap: a front process has one bridge (built from
  its settings' ``llm``, closed with the front), so the cap is the process's, for its one
  Ollama host;
* **the first chunk before returning** — :meth:`LlmBridge.reply` returns once Ollama sent
  its first chunk, so request-level errors (a missing model, Ollama unreachable or busy) are
  raised there, typed, before anything was spoken; errors after that are raised by the
  reply's iterator, after the text that came before them;
* **barge-in** — :meth:`LlmReply.aclose` closes the HTTP stream (Ollama stops generating when
  its client leaves) and frees the slot, from any task, at any time;
* **errors, typed** (:mod:`voicelane.common.errors`, one line each): a model Ollama does not have →
  :class:`~voicelane.common.errors.NotFoundError`; Ollama unreachable, 503 busy, any other 5xx, an
  error line or a dropped connection mid-reply, a reply that ends without ``done`` →
  :class:`~voicelane.common.errors.UnavailableError`; no chunk within ``read_timeout_s`` (at any
  point) →
  :class:`~voicelane.common.errors.DeadlineExceededError`; 400 (a request Ollama refuses) →
  :class:`~voicelane.common.errors.InvalidInputError`;
* **metrics** (:mod:`voicelane.core.metrics`): ``ollama_batch_size{host}``,
  ``ollama_time_to_first_token_seconds{model}``, ``voicelane_llm_replies_total{outcome}``,
  ``voicelane_llm_tokens_total{kind}``, ``voicelane_llm_queue_wait_seconds``.

A reply reads ahead: a task of its own takes Ollama's chunks as they come and queues their
text, so that closing the reply never waits for the consumer, and the consumer never holds
the HTTP stream. Use it with ``contextlib.aclosing`` (or ``async with``) so an abandoned reply
is closed; one that is never closed reads to its end and frees its slot then.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, cast

import httpx
import ollama

from voicelane.common.errors import (
    DeadlineExceededError,
    InvalidInputError,
    NotFoundError,
    QuotaExceededError,
    ShuttingDownError,
    UnavailableError,
    VoicelaneError,
)
from voicelane.core import metrics
from voicelane.core.settings import LlmSettings

log = logging.getLogger(__name__)

ROLES = ("system", "user", "assistant")
TOKENS_PER_MESSAGE = 4
CHARS_PER_TOKEN = 4
BUSY_RETRY_AFTER_S = 1.0
QUEUE_FULL_RETRY_AFTER_S = 1.0
"""The retry hint of a reply refused because its tenant's queue for slots is full."""


@dataclass(frozen=True, slots=True)
class ChatTurn:
    """One message of a conversation."""

    role: str
    """``system``, ``user`` or ``assistant``."""
    content: str


@dataclass(frozen=True, slots=True)
class LlmStats:
    """A finished reply's numbers, from Ollama's final chunk (ms; tokens as Ollama counts)."""

    model: str
    prompt_tokens: int
    reply_tokens: int
    prompt_eval_ms: float
    eval_ms: float
    total_ms: float
    load_ms: float
    done_reason: str
    time_to_first_token_ms: float
    """Request sent → the reply's first text (the wait for a slot not included)."""


# ---- validation and the window ----------------------------------------------------------------


def _is_cjk(char: str) -> bool:
    code = ord(char)
    return (
        0x2E80 <= code <= 0x9FFF  # radicals, CJK punctuation, kana, ext. A, unified ideographs
        or 0xAC00 <= code <= 0xD7AF  # Hangul syllables
        or 0xF900 <= code <= 0xFAFF  # compatibility ideographs
        or 0xFF00 <= code <= 0xFFEF  # full-width forms
        or 0x20000 <= code <= 0x3FFFF  # extensions B and later
    )


def estimate_tokens(text: str) -> int:
    """A message's tokens as the window counts them: CJK characters 1 each, other text one
    per 4 characters (rounded up), plus 4 for the message's framing."""
    cjk = sum(1 for char in text if _is_cjk(char))
    other = len(text) - cjk
    return cjk + -(-other // CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE


def _check_text(content: object, what: str, field: str) -> str:
    if not isinstance(content, str):
        raise InvalidInputError(f"{what} must be text, not {type(content).__name__}", field=field)
    if any(ord(c) < 32 and c not in "\t\n\r" for c in content):
        raise InvalidInputError(f"{what} holds control characters (binary data?)", field=field)
    return content


def prepare_messages(
    messages: Sequence[ChatTurn], system: str, *, num_ctx: int, reserve_tokens: int
) -> tuple[list[dict[str, str]], int]:
    """The messages as Ollama takes them (the system prompt first when there is one) and how
    many history messages were dropped to fit ``num_ctx``; :class:`InvalidInputError` for bad
    input or a last message that does not fit alone."""
    if not messages:
        raise InvalidInputError("messages: at least one message is needed", field="messages")
    checked: list[tuple[str, str]] = []
    for index, turn in enumerate(messages):
        role = getattr(turn, "role", None)
        if role not in ROLES:
            raise InvalidInputError(
                f"messages[{index}].role must be one of {', '.join(ROLES)}, not {role!r}",
                field="messages",
            )
        content = getattr(turn, "content", None)
        checked.append((role, _check_text(content, f"messages[{index}].content", "messages")))
    if not checked[-1][1].strip():
        raise InvalidInputError("messages: the last message is empty", field="messages")
    system = _check_text(system, "system", "system") if system else ""

    budget = num_ctx - reserve_tokens
    fixed = estimate_tokens(system) if system else 0
    cost = [estimate_tokens(content) for _, content in checked]
    last = len(checked) - 1
    # The last message and the history's system messages are never dropped.
    kept_cost = (
        fixed + cost[last] + sum(c for i, c in enumerate(cost[:last]) if checked[i][0] == "system")
    )
    if kept_cost > budget:
        others = kept_cost - cost[last]
        raise InvalidInputError(
            f"messages: the last message (about {cost[last]} tokens) does not fit the LLM's "
            f"window of {num_ctx} tokens with {reserve_tokens} kept for the reply"
            + (f" and {others} for system messages" if others else ""),
            field="messages",
        )
    total = fixed + sum(cost)
    dropped: set[int] = set()
    for index in range(last):  # oldest first
        if total <= budget:
            break
        if checked[index][0] == "system":
            continue
        dropped.add(index)
        total -= cost[index]
    wire = [{"role": "system", "content": system}] if system else []
    wire.extend(
        {"role": role, "content": content}
        for index, (role, content) in enumerate(checked)
        if index not in dropped
    )
    return wire, len(dropped)


# ---- errors -----------------------------------------------------------------------------------


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _outcome(error: BaseException | None) -> str:
    if error is None:
        return "ok"
    if isinstance(error, NotFoundError):
        return "not_found"
    if isinstance(error, DeadlineExceededError):
        return "timeout"
    if isinstance(error, InvalidInputError):
        return "invalid"
    return "unavailable"


def map_error(error: BaseException, *, host: str, model: str, started: bool) -> VoicelaneError:
    """An error of the ``ollama`` client (or of httpx under it) as voicelane's typed error.
    ``started``: the reply's first chunk had arrived (a mid-reply failure)."""
    if isinstance(error, VoicelaneError):
        return error
    if isinstance(error, ollama.ResponseError):
        status, detail = error.status_code, _one_line(error.error)
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
    if isinstance(error, httpx.TimeoutException) and not isinstance(error, httpx.ConnectTimeout):
        return DeadlineExceededError(
            f"ollama at {host} sent nothing for longer than the read timeout "
            f"({'mid-reply' if started else 'before the first token'})"
        )
    detail = _one_line(f"{type(error).__name__}: {error}".rstrip(": "))
    if isinstance(error, httpx.TransportError | ConnectionError) and not started:
        return UnavailableError(f"ollama at {host} is unreachable: {detail}")
    if isinstance(error, httpx.TransportError):
        return UnavailableError(f"ollama at {host} dropped the connection mid-reply: {detail}")
    if isinstance(error, ValueError):  # json.JSONDecodeError, pydantic's ValidationError
        return UnavailableError(f"ollama at {host} sent a malformed reply: {detail}")
    log.warning("LLM: unexpected error from ollama at %s", host, exc_info=error)
    return UnavailableError(f"ollama at {host} failed: {detail}")


# ---- a reply ----------------------------------------------------------------------------------

_END = object()


class LlmReply:
    """The reply's text deltas as Ollama writes them: an async iterator of ``str``.

    Iterate it once. Errors after the first chunk are raised by the iterator, after the text
    that came before them. :meth:`aclose` stops the generation (barge-in): a consumer waiting
    in another task sees the end of the iteration."""

    def __init__(
        self,
        *,
        client: ollama.AsyncClient,
        host: str,
        model: str,
        messages: list[dict[str, str]],
        options: Mapping[str, Any],
        keep_alive: str,
        trimmed_messages: int,
        release: Callable[[], None],
    ) -> None:
        self.trimmed_messages = trimmed_messages
        """History messages dropped to fit ``num_ctx``."""
        self.stats: LlmStats | None = None
        """Set once the stream ended with ``done: true``."""
        self.model = model
        self.host = host
        self._client = client
        self._messages = messages
        self._options = dict(options)
        self._keep_alive = keep_alive
        self._release = release
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._first_chunk: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._error: VoicelaneError | None = None
        self._finished = False
        metrics.OLLAMA_BATCH_SIZE.labels(host=host).inc()
        self._task = asyncio.create_task(self._pump(), name=f"llm-reply {model}")
        self._task.add_done_callback(self._ended)

    # -- the reading task

    async def _pump(self) -> None:
        sent = time.monotonic()
        first_text_at: float | None = None
        started = False
        try:
            chunks = await self._client.chat(
                model=self.model,
                messages=self._messages,
                stream=True,
                options=self._options,
                keep_alive=self._keep_alive,
            )
            stream = cast(AsyncGenerator[ollama.ChatResponse, None], chunks)
            try:
                async for part in stream:
                    if not started:
                        started = True
                        self._first_chunk.set_result(None)
                    text = part.message.content or ""
                    if text:
                        if first_text_at is None:
                            first_text_at = time.monotonic()
                            metrics.OLLAMA_TIME_TO_FIRST_TOKEN_S.labels(model=self.model).observe(
                                first_text_at - sent
                            )
                        self._queue.put_nowait(text)
                    if part.done:
                        ended = time.monotonic()
                        self.stats = _stats(
                            part, self.model, ((first_text_at or ended) - sent) * 1000
                        )
                        metrics.LLM_TOKENS.labels(kind="prompt").inc(self.stats.prompt_tokens)
                        metrics.LLM_TOKENS.labels(kind="reply").inc(self.stats.reply_tokens)
                        return
            finally:
                await stream.aclose()  # closes the HTTP stream: Ollama stops generating
            raise UnavailableError(f"ollama at {self.host} ended the reply without done")
        except Exception as error:
            mapped = map_error(error, host=self.host, model=self.model, started=started)
            if mapped is not error:
                mapped.__cause__ = error
            self._error = mapped

    def _ended(self, task: asyncio.Task[None]) -> None:
        """Always runs, even for a task cancelled before it started: frees the slot, counts
        the outcome, ends the iteration."""
        self._release()
        metrics.OLLAMA_BATCH_SIZE.labels(host=self.host).dec()
        if self.stats is not None:
            outcome = "ok"
        elif self._error is not None:
            outcome = _outcome(self._error)
        else:
            outcome = "cancelled"
        metrics.LLM_REPLIES.labels(outcome=outcome).inc()
        if not self._first_chunk.done():
            if self._error is not None:
                self._first_chunk.set_exception(self._error)
                self._error = None
            elif task.cancelled() or self.stats is None:
                self._first_chunk.cancel()
            else:
                self._first_chunk.set_result(None)
        if self._error is not None:
            self._queue.put_nowait(self._error)
        self._queue.put_nowait(_END)

    async def _started(self) -> None:
        """Wait for the first chunk; the request's error, typed, if it failed before."""
        try:
            await asyncio.shield(self._first_chunk)
        except asyncio.CancelledError:
            if self._first_chunk.cancelled() and not _current_task_cancelling():
                # The reply was closed (not this task cancelled) before its first chunk.
                raise ShuttingDownError(
                    f"the reply of ollama at {self.host} was closed before it started"
                ) from None
            raise

    # -- the consumer's side

    def __aiter__(self) -> AsyncIterator[str]:
        return self

    async def __anext__(self) -> str:
        if self._finished:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is _END:
            self._finished = True
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self._finished = True
            raise item
        assert isinstance(item, str)
        return item

    @property
    def done(self) -> bool:
        """The stream is over (finished, failed or closed); the iterator may still hold text."""
        return self._task.done()

    async def aclose(self) -> None:
        """Stop the reply: close the HTTP stream (Ollama stops generating) and free the slot.
        Safe from any task, at any time, more than once."""
        if not self._task.done():
            self._task.cancel()
            await asyncio.wait([self._task])
        self._finished = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _current_task_cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _ns_to_ms(value: int | None) -> float:
    return (value or 0) / 1e6


def _stats(part: ollama.ChatResponse, model: str, ttft_ms: float) -> LlmStats:
    return LlmStats(
        model=part.model or model,
        prompt_tokens=part.prompt_eval_count or 0,
        reply_tokens=part.eval_count or 0,
        prompt_eval_ms=_ns_to_ms(part.prompt_eval_duration),
        eval_ms=_ns_to_ms(part.eval_duration),
        total_ms=_ns_to_ms(part.total_duration),
        load_ms=_ns_to_ms(part.load_duration),
        done_reason=part.done_reason or "",
        time_to_first_token_ms=ttft_ms,
    )


# ---- the generation slots ---------------------------------------------------------------------


class GenerationSlots:
    """``total`` generation slots shared by tenants: at most ``per_tenant`` held by one
    tenant, at most ``max_queued`` of one tenant's requests waiting; a freed slot goes to the
    next tenant in turn that has a waiter and room under its cap (round robin), first come
    first served within a tenant. A request of no tenant (``None``: the bridge's own users,
    never a front's) is bound by ``total`` only. One event loop's (asyncio, no locks)."""

    def __init__(self, total: int, *, per_tenant: int, max_queued: int) -> None:
        self.total = total
        self.per_tenant = min(per_tenant, total)
        self.max_queued = max_queued
        self._free = total
        self._held: dict[str | None, int] = {}
        self._waiting: dict[str | None, deque[asyncio.Future[None]]] = {}
        self._turns: deque[str | None] = deque()
        """Tenants with waiters, in the order they are served next."""

    def held(self, tenant: str | None) -> int:
        return self._held.get(tenant, 0)

    def waiting(self, tenant: str | None) -> int:
        return len(self._waiting.get(tenant, ()))

    def _cap(self, tenant: str | None) -> int:
        return self.total if tenant is None else self.per_tenant

    async def acquire(self, tenant: str | None, *, timeout_s: float) -> None:
        """A slot for ``tenant``: at once when one is free (and the tenant is under its cap
        with no one of its own ahead), else after its turn; QuotaExceededError when the
        tenant's queue is full, UnavailableError after ``timeout_s``."""
        if self._free > 0 and self.held(tenant) < self._cap(tenant) and not self.waiting(tenant):
            self._take(tenant)
            return
        queue = self._waiting.get(tenant)
        if queue is None:
            queue = self._waiting[tenant] = deque()
        if tenant is not None and len(queue) >= self.max_queued:
            raise QuotaExceededError(
                f"tenant {tenant!r} already has {len(queue)} replies waiting for the LLM "
                f"(at most {self.max_queued}); retry when one has finished",
                retry_after_s=QUEUE_FULL_RETRY_AFTER_S,
            )
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(waiter)
        if tenant not in self._turns:
            self._turns.append(tenant)
        try:
            async with asyncio.timeout(timeout_s):
                await waiter
        except BaseException as error:
            if waiter.done() and not waiter.cancelled():
                self.release(tenant)  # granted as it was cancelled: hand the slot on
            else:
                waiter.cancel()
                self._forget(tenant, waiter)
            if isinstance(error, TimeoutError):
                raise UnavailableError(
                    f"no LLM generation slot came free within {timeout_s:g} s",
                    retry_after_s=BUSY_RETRY_AFTER_S,
                ) from None
            raise

    def release(self, tenant: str | None) -> None:
        """Give one of ``tenant``'s slots back; the next waiter in turn gets it."""
        held = self._held.get(tenant, 0) - 1
        if held > 0:
            self._held[tenant] = held
        else:
            self._held.pop(tenant, None)
        self._free += 1
        self._hand_out()

    def _take(self, tenant: str | None) -> None:
        self._free -= 1
        self._held[tenant] = self.held(tenant) + 1

    def _forget(self, tenant: str | None, waiter: asyncio.Future[None]) -> None:
        queue = self._waiting.get(tenant)
        if queue is None:
            return
        if waiter in queue:
            queue.remove(waiter)
        if not queue:
            del self._waiting[tenant]
            if tenant in self._turns:
                self._turns.remove(tenant)
        self._hand_out()  # a capped tenant's waiter leaving may let nobody in; cheap anyway

    def _hand_out(self) -> None:
        """Free slots to waiters: tenants in turn, each served goes to the back."""
        skipped = 0
        while self._free > 0 and self._turns and skipped < len(self._turns):
            tenant = self._turns[0]
            queue = self._waiting[tenant]
            while queue and queue[0].done():  # cancelled; its task has not left the queue yet
                queue.popleft()
            if not queue:
                del self._waiting[tenant]
                self._turns.popleft()
                continue
            if self.held(tenant) >= self._cap(tenant):
                self._turns.rotate(-1)
                skipped += 1
                continue
            waiter = queue.popleft()
            self._take(tenant)
            waiter.set_result(None)
            self._turns.popleft()
            if queue:
                self._turns.append(tenant)
            else:
                del self._waiting[tenant]
            skipped = 0


# ---- the bridge -------------------------------------------------------------------------------


class LlmBridge:
    """Replies from Ollama for the fronts, at most ``settings.max_parallel`` at once (the
    bridge's generation slots, shared fairly by tenants: :class:`GenerationSlots`). Use it
    from one event loop (the front's): the HTTP client and the slots belong to the loop that
    first used them (a later loop, as in tests, gets fresh ones)."""

    def __init__(self, settings: LlmSettings) -> None:
        self.settings = settings
        self._client: ollama.AsyncClient | None = None
        self._slots = self._new_slots()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._replies: weakref.WeakSet[LlmReply] = weakref.WeakSet()

    @property
    def host(self) -> str:
        return self.settings.host

    def _new_slots(self) -> GenerationSlots:
        settings = self.settings
        return GenerationSlots(
            settings.max_parallel,
            per_tenant=settings.tenant_parallel,
            max_queued=settings.tenant_max_queued,
        )

    @property
    def slots(self) -> GenerationSlots:
        """The generation slots (of the loop last used)."""
        return self._slots

    def _bind_loop(self) -> tuple[ollama.AsyncClient, GenerationSlots]:
        """The HTTP client and the generation slots of the running loop."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._slots = self._new_slots()
            self._client = None  # the last loop's, unusable here
            self._loop = loop
        if self._client is None:
            self._client = ollama.AsyncClient(
                host=self.settings.host, timeout=self.settings.read_timeout_s
            )
        return self._client, self._slots

    def _options(self) -> dict[str, Any]:
        return {"num_ctx": self.settings.num_ctx}

    async def reply(
        self,
        messages: Sequence[ChatTurn],
        *,
        model: str | None = None,
        system: str | None = None,
        tenant: str | None = None,
    ) -> LlmReply:
        """Validate, trim, wait for one of ``tenant``'s generation slots (in its queue, in
        turn with the other tenants'; QuotaExceededError when its queue is full), start the
        stream and wait for its first chunk (so request-level errors raise here, typed), then
        return; iterating yields the first delta and the rest. Cancelling the caller while it
        waits leaves the queue; closing the reply frees the slot. Every front names the
        tenant; ``None`` (the bridge's own users, tests) is bound by ``max_parallel`` only."""
        settings = self.settings
        model = model or settings.model
        try:
            wire, trimmed = prepare_messages(
                messages,
                settings.system if system is None else system,
                num_ctx=settings.num_ctx,
                reserve_tokens=settings.reply_reserve_tokens,
            )
        except InvalidInputError:
            metrics.LLM_REPLIES.labels(outcome="invalid").inc()
            raise
        client, slots = self._bind_loop()
        queued = time.monotonic()
        try:
            await slots.acquire(tenant, timeout_s=settings.max_queue_wait_s)
        except asyncio.CancelledError:
            metrics.LLM_REPLIES.labels(outcome="cancelled").inc()
            raise
        except QuotaExceededError:
            metrics.LLM_REPLIES.labels(outcome="queue_full").inc()
            raise
        except UnavailableError:
            metrics.LLM_REPLIES.labels(outcome="queue_timeout").inc()
            raise
        metrics.LLM_QUEUE_WAIT_S.observe(time.monotonic() - queued)
        # From here the reply owns the slot: its reading task frees it however it ends.
        reply = LlmReply(
            client=client,
            host=settings.host,
            model=model,
            messages=wire,
            options=self._options(),
            keep_alive=settings.keep_alive,
            trimmed_messages=trimmed,
            release=lambda: slots.release(tenant),
        )
        self._replies.add(reply)
        try:
            await reply._started()
        except BaseException:
            await reply.aclose()
            raise
        return reply

    async def preload(self, model: str | None = None) -> None:
        """Load the model with an empty request (``keep_alive``, and the ``num_ctx`` replies
        use: another one would make Ollama load it again), so the first user does not pay the
        cold start. Typed errors as for :meth:`reply`."""
        model = model or self.settings.model
        host = self.settings.host
        async with ollama.AsyncClient(host=host, timeout=self.settings.preload_timeout_s) as client:
            try:
                await client.chat(
                    model=model,
                    messages=[],
                    stream=False,
                    options=self._options(),
                    keep_alive=self.settings.keep_alive,
                )
            except Exception as error:
                raise map_error(error, host=host, model=model, started=False) from error

    async def close(self) -> None:
        """Close every reply still open and the HTTP client."""
        for reply in list(self._replies):
            await reply.aclose()
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await client.close()  # type: ignore[no-untyped-call]


__all__ = [
    "ChatTurn",
    "GenerationSlots",
    "LlmBridge",
    "LlmReply",
    "LlmStats",
    "estimate_tokens",
    "map_error",
    "prepare_messages",
]
