"""The LLM bridge: a conversation in, the reply's text out as the LLM writes it.

The fronts (API and gRPC processes) ask :class:`LlmBridge` for a reply; it speaks to the LLM
server through a backend (:mod:`voicelane.api.llm_backend`, ``VOICELANE_LLM__BACKEND``):
Ollama through the official ``ollama.AsyncClient`` (:mod:`voicelane.api.llm_ollama`), or an
OpenAI-compatible server's streamed ``/chat/completions`` (:mod:`voicelane.api.llm_openai`:
llama.cpp's server, vLLM, LM Studio, OpenAI). What the bridge adds, whichever the backend:

* **validation** — no messages, an unknown role, a last message that is empty or not text:
  :class:`~voicelane.common.errors.InvalidInputError`;
* **the window** — the history is trimmed to ``VOICELANE_LLM__NUM_CTX`` (Ollama also gets it
  as ``options.num_ctx``, with ``keep_alive``): each message's tokens estimated
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
* **errors, typed** (:mod:`voicelane.common.errors`, one line each; each backend maps its
  own, :mod:`voicelane.api.llm_openai` for the OpenAI one): a model Ollama does not have →
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
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from voicelane.api.llm_backend import LlmBackend, ReplyEnd
from voicelane.api.llm_ollama import OllamaBackend, map_error
from voicelane.api.llm_openai import OpenAIBackend
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
        backend: LlmBackend,
        host: str,
        model: str,
        messages: list[dict[str, str]],
        trimmed_messages: int,
        release: Callable[[], None],
    ) -> None:
        self.trimmed_messages = trimmed_messages
        """History messages dropped to fit ``num_ctx``."""
        self.stats: LlmStats | None = None
        """Set once the stream ended with ``done: true``."""
        self.model = model
        self.host = host
        self._backend = backend
        self._messages = messages
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
            stream = self._backend.stream(self.model, self._messages)
            try:
                async for delta in stream:
                    if not started:
                        started = True
                        self._first_chunk.set_result(None)
                    if delta.text:
                        if first_text_at is None:
                            first_text_at = time.monotonic()
                            metrics.OLLAMA_TIME_TO_FIRST_TOKEN_S.labels(model=self.model).observe(
                                first_text_at - sent
                            )
                        self._queue.put_nowait(delta.text)
                    if delta.end is not None:
                        ended = time.monotonic()
                        self.stats = _stats(delta.end, ((first_text_at or ended) - sent) * 1000)
                        metrics.LLM_TOKENS.labels(kind="prompt").inc(self.stats.prompt_tokens)
                        metrics.LLM_TOKENS.labels(kind="reply").inc(self.stats.reply_tokens)
                        return
            finally:
                await stream.aclose()  # closes the HTTP stream: the server stops generating
            raise UnavailableError(f"{self._backend.label} ended the reply without done")
        except Exception as error:
            mapped = self._backend.map_error(error, model=self.model, started=started)
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
                    f"the reply of {self._backend.label} was closed before it started"
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


def _stats(end: ReplyEnd, ttft_ms: float) -> LlmStats:
    return LlmStats(
        model=end.model,
        prompt_tokens=end.prompt_tokens,
        reply_tokens=end.reply_tokens,
        prompt_eval_ms=end.prompt_eval_ms,
        eval_ms=end.eval_ms,
        total_ms=end.total_ms,
        load_ms=end.load_ms,
        done_reason=end.done_reason,
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
        metrics.LLM_WAITING.inc()
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
            metrics.LLM_WAITING.dec()
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
                metrics.LLM_WAITING.dec()
            if not queue:
                del self._waiting[tenant]
                self._turns.popleft()
                continue
            if self.held(tenant) >= self._cap(tenant):
                self._turns.rotate(-1)
                skipped += 1
                continue
            waiter = queue.popleft()
            metrics.LLM_WAITING.dec()
            self._take(tenant)
            waiter.set_result(None)
            self._turns.popleft()
            if queue:
                self._turns.append(tenant)
            else:
                del self._waiting[tenant]
            skipped = 0


def backend_for(settings: LlmSettings) -> LlmBackend:
    """The backend ``settings.backend`` names, with a new HTTP client (of the running loop)."""
    if settings.backend == "openai":
        return OpenAIBackend(settings)
    return OllamaBackend(settings)


# ---- the bridge -------------------------------------------------------------------------------


class LlmBridge:
    """Replies from Ollama for the fronts, at most ``settings.max_parallel`` at once (the
    bridge's generation slots, shared fairly by tenants: :class:`GenerationSlots`). Use it
    from one event loop (the front's): the HTTP client and the slots belong to the loop that
    first used them (a later loop, as in tests, gets fresh ones)."""

    def __init__(self, settings: LlmSettings) -> None:
        self.settings = settings
        self._backend: LlmBackend | None = None
        self._slots = self._new_slots()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._replies: weakref.WeakSet[LlmReply] = weakref.WeakSet()

    @property
    def host(self) -> str:
        """The LLM server's address (Ollama's host, or the OpenAI-compatible base URL)."""
        return self.settings.address

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

    def _bind_loop(self) -> tuple[LlmBackend, GenerationSlots]:
        """The backend (its HTTP client) and the generation slots of the running loop."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._slots = self._new_slots()
            self._backend = None  # the last loop's, unusable here
            self._loop = loop
        if self._backend is None:
            self._backend = backend_for(self.settings)
        return self._backend, self._slots

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
        backend, slots = self._bind_loop()
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
            backend=backend,
            host=settings.address,
            model=model,
            messages=wire,
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
        """Load the model (Ollama: an empty request with the replies' ``keep_alive`` and
        ``num_ctx``; OpenAI: a one-token reply), so the first user does not pay the cold
        start. Typed errors as for :meth:`reply`."""
        backend = backend_for(self.settings)
        try:
            await backend.preload(model or self.settings.model)
        finally:
            await backend.close()

    async def close(self) -> None:
        """Close every reply still open and the HTTP client."""
        for reply in list(self._replies):
            await reply.aclose()
        backend, self._backend = self._backend, None
        if backend is not None and self._loop is asyncio.get_running_loop():
            await backend.close()


__all__ = [
    "ChatTurn",
    "GenerationSlots",
    "LlmBridge",
    "LlmReply",
    "LlmStats",
    "backend_for",
    "estimate_tokens",
    "map_error",
    "prepare_messages",
]
