"""Voice replies from an LLM: the reply spoken sentence by sentence while it is being written.

One path for every front (gRPC ``Chat``, the WebSocket's chat request, OpenAI's
``/v1/chat/completions`` with audio): :func:`chat` opens a real-time conversation through the
stream gateway (:mod:`voicelane.api.streams`: the same request rules, admission, relay and close as
any stream), asks the LLM (:mod:`voicelane.api.llm`: Ollama or an OpenAI-compatible server), and
runs two tasks:

* the **feeder** reads the LLM's text deltas, hands each to the front as it arrives
  (:class:`ChatText`), cleans it for speech (:mod:`voicelane.core.speakable`: markdown, emoji and
  code dropped, the fast first fragment flushed) and sends it into the conversation, so the first
  sentence is being synthesised while the LLM writes the second; at the reply's end it ends
  the conversation;
* the **relay** reads the conversation's audio (:class:`ChatAudio`, captions of the spoken
  text included).

The last event is :class:`ChatDone`: the LLM's token counts and timings, time to first token,
time to first audio. Quotas: the conversation takes a token of the tenant's request rate and
one of its open streams (:meth:`StreamGateway.converse`), the reply one of the tenant's
generation slots (:class:`voicelane.api.llm.GenerationSlots`: its own queue, bounded, served
in turn with the other tenants'). Errors: the LLM's before the reply starts (model not found,
the LLM server unreachable) end the chat before any audio; an error mid-reply ends the
conversation with what was already sent, lets its audio play out, then raises. Leaving early
(barge-in) closes the LLM stream (the LLM server stops generating) and cancels the
conversation: the worker drops its pending sentences before its next batch step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass

from voicelane.api.llm import ChatTurn, LlmBridge, LlmReply, LlmStats
from voicelane.api.streams import ClientGone, Conversation, StreamAsk, StreamChunk, StreamGateway
from voicelane.core import metrics
from voicelane.core.speakable import SpeakableStream

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ChatAsk:
    """What a front asks for: the conversation so far and how to speak the reply."""

    messages: Sequence[ChatTurn]
    speech: StreamAsk
    model: str | None = None
    system: str | None = None


@dataclass(frozen=True, slots=True)
class ChatStarted:
    """First: the LLM accepted the request (no error before the reply can happen any more)."""

    request_id: str


@dataclass(frozen=True, slots=True)
class ChatText:
    """The LLM's text as it arrives (markup included)."""

    delta: str


@dataclass(frozen=True, slots=True)
class ChatAudio:
    chunk: StreamChunk


@dataclass(frozen=True, slots=True)
class ChatSummary:
    """The reply's numbers: the LLM's (from the server's final chunk) and the chat's own."""

    llm: LlmStats | None
    request_id: str
    time_to_first_token_ms: float
    time_to_first_audio_ms: float | None
    trimmed_messages: int
    spoken_text: str

    def fields(self) -> dict[str, str | int | float | None]:
        """The stats every front reports, by the names of ``voicelane.v1.ChatStats``: the
        chat's own figures, then the LLM's (when its final chunk came) — one list for gRPC and
        the WebSocket."""
        out: dict[str, str | int | float | None] = {
            "time_to_first_token_ms": self.time_to_first_token_ms,
            "time_to_first_audio_ms": self.time_to_first_audio_ms,
            "trimmed_messages": self.trimmed_messages,
            "spoken_text": self.spoken_text,
        }
        llm = self.llm
        if llm is not None:
            out.update(
                model=llm.model, prompt_tokens=llm.prompt_tokens, reply_tokens=llm.reply_tokens,
                prompt_eval_ms=llm.prompt_eval_ms, eval_ms=llm.eval_ms, total_ms=llm.total_ms,
                load_ms=llm.load_ms, done_reason=llm.done_reason,
            )  # fmt: skip
        return out


@dataclass(frozen=True, slots=True)
class ChatDone:
    summary: ChatSummary


ChatEvent = ChatStarted | ChatText | ChatAudio | ChatDone
_END = object()


async def chat(
    gateway: StreamGateway,
    bridge: LlmBridge,
    tenant: str,
    ask: ChatAsk,
    *,
    time_remaining_s: float | None = None,
    client_gone: ClientGone = lambda: False,
) -> AsyncGenerator[ChatEvent, None]:
    """The chat's events, in order of arrival (see the module docstring). Close the generator
    (``contextlib.aclosing``) to stop early: everything is released."""
    started = time.monotonic()
    conversation = await gateway.converse(
        tenant, ask.speech, time_remaining_s=time_remaining_s, client_gone=client_gone
    )
    run = _ChatRun(conversation, started)
    try:
        reply = await bridge.reply(ask.messages, model=ask.model, system=ask.system, tenant=tenant)
    except BaseException:
        await conversation.close()
        metrics.CONVERSATIONS.labels(outcome="refused").inc()
        raise
    outcome = "cancelled"
    try:
        yield ChatStarted(conversation.request_id)
        async for event in run.events(reply):
            yield event
        outcome = "ok"
    except Exception:
        outcome = "failed"
        raise
    finally:
        metrics.CONVERSATIONS.labels(outcome=outcome).inc()
        await run.close(reply)


class _ChatRun:
    """The feeder and the relay of one chat, merged into one queue of events."""

    def __init__(self, conversation: Conversation, started_s: float) -> None:
        self.conversation = conversation
        self._started_s = started_s
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._speakable = SpeakableStream()
        self._first_token_s: float | None = None
        self._first_audio_s: float | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def events(self, reply: LlmReply) -> AsyncGenerator[ChatEvent, None]:
        feeder = asyncio.create_task(self._feed(reply), name="chat-feeder")
        relay = asyncio.create_task(self._relay(), name="chat-relay")
        self._tasks = [feeder, relay]
        relay_done = False
        while not relay_done:
            item = await self._queue.get()
            if item is _END:
                relay_done = True
                continue
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, ChatText | ChatAudio)
            yield item
        # The audio is all out; the feeder ended before the conversation could end.
        error = feeder.exception() if feeder.done() else None
        if error is not None:
            raise error
        yield ChatDone(self._summary(reply))

    async def _feed(self, reply: LlmReply) -> None:
        """LLM deltas → the front and, cleaned, the conversation; an LLM error mid-reply ends
        the conversation with what was sent (its audio plays out) and is raised after it."""
        conversation = self.conversation
        try:
            async for delta in reply:
                if self._first_token_s is None:
                    self._first_token_s = time.monotonic()
                self._queue.put_nowait(ChatText(delta))
                cut = self._speakable.feed(delta)
                if cut.text:
                    await conversation.send(cut.text)
                if cut.flush:
                    await conversation.flush()
            rest = self._speakable.end()
            if rest.text:
                await conversation.send(rest.text)
        finally:
            with contextlib.suppress(Exception):
                await conversation.end()

    async def _relay(self) -> None:
        try:
            async with contextlib.aclosing(self.conversation.chunks()) as chunks:
                async for chunk in chunks:
                    if chunk.data and self._first_audio_s is None:
                        self._first_audio_s = time.monotonic()
                    self._queue.put_nowait(ChatAudio(chunk))
        except Exception as error:
            self._queue.put_nowait(error)
        finally:
            self._queue.put_nowait(_END)

    def _summary(self, reply: LlmReply) -> ChatSummary:
        def since_start_ms(at: float | None) -> float | None:
            return None if at is None else (at - self._started_s) * 1000

        return ChatSummary(
            llm=reply.stats,
            request_id=self.conversation.request_id,
            time_to_first_token_ms=since_start_ms(self._first_token_s) or 0.0,
            time_to_first_audio_ms=since_start_ms(self._first_audio_s),
            trimmed_messages=reply.trimmed_messages,
            spoken_text=self._speakable.spoken,
        )

    async def close(self, reply: LlmReply) -> None:
        """Stop the LLM stream (the server stops generating) and the tasks; cancel the
        conversation unless it reached its end."""
        await reply.aclose()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        await self.conversation.close()
