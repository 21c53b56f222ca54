"""Chat: an LLM's reply, spoken (``voicelane.v1.Speech/Chat``, docs/llm.md).

:func:`chat_events` is the call as it streams (the LLM's text as it arrives, audio chunks,
stats last); :func:`chat_pcm` collects it into a :class:`ChatResult`. A chat is **not
retried**: asking the LLM again gives another reply, so a failed call is the caller's to
repeat. Cancelling the call (leaving the ``async for``, closing the generator) is barge-in:
the server stops the LLM and the speech at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc
import grpc.aio

from voicelane.common.errors import InvalidInputError, RemoteError
from voicelane.common.wire import speech_pb2 as pb

from .audio import PcmAssembler, SynthesisResult
from .clock import ClockSync, wall_ms
from .failure import remote_error
from .stats import Meter, StreamStats

if TYPE_CHECKING:
    from voicelane.common.wire.speech_pb2_grpc import SpeechAsyncStub

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True, slots=True)
class ChatResult:
    """A spoken reply: the LLM's text (markup included), the audio (decoded, with captions of
    the spoken text) and the server's stats (token counts, timings)."""

    text: str
    audio: SynthesisResult
    stats: pb.ChatStats

    @property
    def spoken_text(self) -> str:
        return "".join(caption.text for caption in self.audio.captions)


def chat_request(
    messages: Sequence[tuple[str, str]],
    *,
    model: str = "",
    voice: str = "",
    system: str = "",
    sample_rate_hz: int = 24000,
    speed: float = 1.0,
) -> pb.ChatRequest:
    """The request for ``messages``: (role, content) pairs, oldest first."""
    if not messages:
        raise InvalidInputError("a chat needs at least one message")
    for role, _content in messages:
        if role not in ROLES:
            raise InvalidInputError(f"unknown role {role!r}; use one of {', '.join(ROLES)}")
    return pb.ChatRequest(
        messages=[pb.ChatMessage(role=role, content=content) for role, content in messages],
        model=model,
        voice=voice,
        system=system,
        sample_rate_hz=sample_rate_hz,
        speed=speed,
    )


async def chat_events(
    stub: SpeechAsyncStub,
    request: pb.ChatRequest,
    *,
    metadata: Sequence[tuple[str, str]] = (),
    timeout_s: float | None = None,
    stats: StreamStats | None = None,
    clock: ClockSync | None = None,
) -> AsyncGenerator[pb.ChatResponse, None]:
    """The call's responses as they arrive; a failure is a :class:`RemoteError`."""
    meter = Meter(stats or StreamStats(), clock=clock)
    request.client_ts_ms = int(wall_ms())
    call = stub.Chat(request, metadata=tuple(metadata), timeout=timeout_s)
    meter.sent()
    try:
        async for response in call:
            if response.WhichOneof("event") == "audio":
                meter.chunk(response.audio)
            yield response
        meter.finished()
    except grpc.aio.AioRpcError as error:
        raise remote_error(error) from None
    finally:
        call.cancel()


async def chat_pcm(
    stub: SpeechAsyncStub,
    request: pb.ChatRequest,
    *,
    metadata: Sequence[tuple[str, str]] = (),
    timeout_s: float | None = None,
    clock: ClockSync | None = None,
) -> ChatResult:
    """The whole reply: text, decoded audio, stats."""
    stats = StreamStats()
    assembler = PcmAssembler(request.sample_rate_hz or 24000)
    text: list[str] = []
    final = pb.ChatStats()
    events = chat_events(
        stub, request, metadata=metadata, timeout_s=timeout_s, stats=stats, clock=clock
    )
    async with contextlib.aclosing(events) as responses:
        async for response in responses:
            kind = response.WhichOneof("event")
            if kind == "text_delta":
                text.append(response.text_delta)
            elif kind == "audio":
                assembler.add(response.audio)
            elif kind == "stats":
                final = response.stats
    return ChatResult("".join(text), assembler.result(stats), final)
