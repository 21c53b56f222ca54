"""One agent-protocol connection's contexts (``GET /v1/agent``; ``docs/agent-protocol.md``).

Each context is one conversation of the stream gateway (:meth:`StreamGateway.converse`, front
``agent``): the same rules, quotas and admission as every front. A context runs as two tasks:
its *feeder* opens the conversation (``started``) and applies the client's messages in order
(``append`` → :meth:`Conversation.send`, ``flush``, ``close`` → :meth:`Conversation.end`);
its *relay* turns the conversation's chunks into ``words``, ``audio`` and ``done`` messages
through the connection's one writer (:class:`~voicelane.api.agent_outbox.Outbox`).

:meth:`AgentSession.handle` is synchronous: a ``cancel`` is answered (``cancelled``, queued
ahead of other messages) before any Redis call, the context is silenced in the writer (none
of its messages follow) and reclaimed at once; its conversation is closed in the background
(the cancel mark, the tenant's slot given back). A context also ends with its ``done`` or an
error of its own (reclaimed; the connection goes on); closing the socket cancels them all
(:meth:`AgentSession.close_all`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from voicelane.api.agent_outbox import Outbox, Owner
from voicelane.api.agent_wire import (
    ClientMessage,
    ContextOptions,
    TextSpans,
    TooManyContextsError,
    UnknownContextError,
    audio_duration_ms,
    audio_message,
    cancelled_message,
    done_message,
    started_message,
    words_message,
)
from voicelane.api.failures import websocket_reply
from voicelane.api.streams import Conversation, StreamAsk, StreamGateway
from voicelane.common.errors import InvalidInputError, VoicelaneError

log = logging.getLogger(__name__)

FRONT = "agent"
CANCEL_RETRY_S = 0.25
"""A context's task that is still running this long after its cancel is cancelled again."""


@dataclass(eq=False)
class AgentContext:
    """One open context: its options, text, conversation and tasks."""

    id: str
    options: ContextOptions
    owner: Owner
    spans: TextSpans = field(default_factory=TextSpans)
    inbox: asyncio.Queue[ClientMessage] = field(default_factory=asyncio.Queue)
    feeder: asyncio.Task[None] | None = None
    relay: asyncio.Task[None] | None = None
    opening: asyncio.Task[Conversation] | None = None
    conversation: Conversation | None = None
    closed_by_client: bool = False
    ended: bool = False
    end_ms: float = 0.0
    """The end of the audio sent so far, on the context's clock."""


class AgentSession:
    def __init__(
        self, streams: StreamGateway, tenant: str, outbox: Outbox, *, max_contexts: int
    ) -> None:
        self.streams = streams
        self.tenant = tenant
        self.outbox = outbox
        self.max_contexts = max_contexts
        self.contexts: dict[str, AgentContext] = {}
        """The open contexts by id (reclaimed as each ends)."""
        self._cleanups: set[asyncio.Task[None]] = set()

    # ---- the client's messages ---------------------------------------------------------------

    def handle(self, message: ClientMessage) -> None:
        """One checked client message; never awaits (see the module docstring)."""
        context = self.contexts.get(message.context_id)
        if message.type == "cancel":
            if context is not None:
                self._end(context, cancelled_message(context.id), urgent=True, silence=True)
            else:  # unknown or finished: answered all the same
                self.outbox.put(cancelled_message(message.context_id), urgent=True)
            return
        if context is None:
            context = self._open(message)
            if context is None:
                return
        elif message.type == "append":
            try:
                context.options.check_same(message.options)
            except VoicelaneError as error:
                self._end(context, self._error(context.id, error), silence=True)
                return
        context.inbox.put_nowait(message)

    def fault(self, context_id: str, error: VoicelaneError) -> None:
        """A bad message of ``context_id``: that context fails (if open) with ``error``."""
        context = self.contexts.get(context_id)
        if context is None:
            self.outbox.put(self._error(context_id, error))
        else:
            self._end(context, self._error(context_id, error), silence=True)

    async def close_all(self) -> None:
        """The socket closed: every open context is cancelled (no message goes out), and
        this waits until their conversations are closed (their tenant slots given back)."""
        for context in list(self.contexts.values()):
            self._end(context, None, silence=True)
        while self._cleanups:
            await asyncio.gather(*list(self._cleanups), return_exceptions=True)

    # ---- a context's life ----------------------------------------------------------------------

    def _open(self, message: ClientMessage) -> AgentContext | None:
        """A new context for ``message`` (an ``append``), or None after its error."""
        context_id = message.context_id
        if message.type != "append":
            what = "flush" if message.type == "flush" else "close"
            self.outbox.put(
                self._error(
                    context_id,
                    UnknownContextError(
                        f"context {context_id} is not open (an append opens it); nothing to {what}",
                        field="context_id",
                    ),
                )
            )
            return None
        if len(self.contexts) >= self.max_contexts:
            self.outbox.put(
                self._error(
                    context_id,
                    TooManyContextsError(
                        f"this connection already has {self.max_contexts} open contexts; "
                        "close or cancel one first",
                        field="context_id",
                    ),
                )
            )
            return None
        try:
            options = ContextOptions.parse(message.options)
        except VoicelaneError as error:
            self.outbox.put(self._error(context_id, error))
            return None
        context = AgentContext(context_id, options, Owner(context_id))
        self.contexts[context_id] = context
        context.feeder = asyncio.create_task(self._feed(context), name=f"agent-feed-{context_id}")
        return context

    async def _feed(self, context: AgentContext) -> None:
        """Open the conversation, then apply the client's messages to it in order."""
        options = context.options
        ask = StreamAsk(
            voice=options.voice,
            speed=options.speed,
            sample_rate_hz=options.sample_rate_hz,
            encoding=options.encoding,
            front=FRONT,
            normalize=options.normalize,
            lexicons=options.lexicons,
        )
        try:
            # Shielded: a cancel while it is being admitted must not lose the conversation
            # (its tenant slot); the context's cleanup closes it once it exists.
            context.opening = asyncio.create_task(
                self.streams.converse(self.tenant, ask, client_gone=lambda: context.ended)
            )
            conversation = await asyncio.shield(context.opening)
            conversation.text_field = "text"
            context.conversation = conversation
            self.outbox.put(
                started_message(context.id, conversation.request_id, options), owner=context.owner
            )
            context.relay = asyncio.create_task(
                self._relay(context, conversation), name=f"agent-relay-{context.id}"
            )
            while True:
                message = await context.inbox.get()
                if message.type == "append":
                    if message.text:
                        if context.closed_by_client:
                            raise InvalidInputError(
                                "text: the context was closed; open a new context for more text",
                                field="text",
                            )
                        context.spans.append(message.text)
                        spoken = await conversation.send(message.text)
                        context.spans.spoken(message.text, spoken)
                    if message.close:
                        context.closed_by_client = True
                        await conversation.end()
                elif message.type == "flush":
                    await conversation.flush()
                elif message.type == "close":
                    context.closed_by_client = True
                    await conversation.end()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self._end(context, self._error(context.id, error), silence=True)

    async def _relay(self, context: AgentContext, conversation: Conversation) -> None:
        """The conversation's chunks as messages: words before the audio they fall in, then
        the audio (waiting until it went out: backpressure), ``done`` after the last."""
        encoding = context.options.encoding
        owner = context.owner
        try:
            async with contextlib.aclosing(conversation.chunks()) as chunks:
                async for chunk in chunks:
                    if chunk.words:
                        words = [context.spans.word(w) for w in chunk.words]
                        self.outbox.put(words_message(context.id, words), owner=owner)
                    if chunk.data:
                        duration_ms = audio_duration_ms(chunk, encoding)
                        context.end_ms = max(context.end_ms, chunk.pts_ms + duration_ms)
                        await self.outbox.put(
                            audio_message(context.id, chunk, encoding), owner=owner
                        )
                    if chunk.final:
                        self.outbox.put(done_message(context.id, context.end_ms), owner=owner)
                        self._end(context, None)
                        return
            raise VoicelaneError("the stream ended without its end")  # pragma: no cover
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self._end(context, self._error(context.id, error), silence=True)

    def _end(
        self,
        context: AgentContext,
        reply: dict[str, Any] | None,
        *,
        urgent: bool = False,
        silence: bool = False,
    ) -> None:
        """The context is over: reclaimed now (its id free again), ``silence``: none of its
        messages goes out any more; ``reply`` (``cancelled``, an error) is sent; its tasks are
        stopped and its conversation closed in the background."""
        if context.ended:
            return
        context.ended = True
        if self.contexts.get(context.id) is context:
            del self.contexts[context.id]
        if silence:
            context.owner.silenced = True
        if reply is not None:
            self.outbox.put(reply, urgent=urgent)
        current = asyncio.current_task()
        for task in (context.feeder, context.relay):
            if task is not None and task is not current:
                task.cancel()
        cleanup = asyncio.create_task(self._close(context), name=f"agent-close-{context.id}")
        self._cleanups.add(cleanup)
        cleanup.add_done_callback(self._cleanups.discard)

    async def _close(self, context: AgentContext) -> None:
        """After a context ended: its tasks stopped, its conversation closed (cancelled unless
        it finished: the cancel mark; the tenant's slot given back)."""
        for task in (context.feeder, context.relay):
            # A cancel can be lost (one racing an ``asyncio.timeout`` that expires in the same
            # step is swallowed on Python 3.11): cancelled again until it ends. The relay also
            # stops by itself within a read block (its stream's ``client_gone``).
            while task is not None and not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=CANCEL_RETRY_S)
        conversation = context.conversation
        if conversation is None and context.opening is not None:
            try:
                conversation = await context.opening
            except Exception:  # refused or failed: nothing was opened
                conversation = None
        if conversation is not None:
            await conversation.close()

    def _error(self, context_id: str, error: BaseException) -> dict[str, Any]:
        message = websocket_reply(error, where=f"agent context {context_id}").message
        return {"type": "error", "context_id": context_id, **_without_type(message)}


def _without_type(message: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in message.items() if key != "type"}
