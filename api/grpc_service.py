"""``voicelane.v1.Speech`` over the real-time lane: the servicer of the gRPC front.

A call is authenticated (:mod:`api.grpc_auth`), validated (:mod:`api.grpc_params`) before
anything reaches Redis, given an absolute deadline, admitted or refused at once
(:class:`~api.grpc_relay.Admission`), queued on the lane (:class:`core.lane.LaneClient`), and
its output stream relayed as it grows (:class:`~api.grpc_relay.OutputRelay`). A stream that
does not reach its end (client gone, error, liveness verdict) gets its request cancelled: the
worker drops it before its next batch. Logs carry request ids and sizes, never the text.
``docs/grpc.md`` is the contract in prose; :mod:`api.grpc_front` runs the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Never, TypeAlias, cast

import grpc
import grpc.aio
import redis

from api.grpc_auth import current_tenant
from api.grpc_params import (
    DEFAULT_SAMPLE_RATE_HZ,
    MIN_USEFUL_DEADLINE_S,
    TextFeed,
    VoiceParams,
    absolute_deadline_ms,
    check_request_id,
    check_voice_params,
)
from api.grpc_relay import (
    Admission,
    ChunkDefaults,
    Liveness,
    OutputRelay,
)
from api.voices import VoiceRegistry
from core.errors import (
    DeadlineExceededError,
    InvalidInputError,
    StreamExistsError,
    StreamNotFoundError,
    VoicelaneError,
    grpc_status_name,
)
from core.lane import (
    PREFIX,
    InputKind,
    InputPiece,
    LaneClient,
    Mode,
    StreamRequest,
    input_key,
    new_request_id,
    now_ms,
    output_key,
    owner_key,
)
from core.settings import GrpcSettings
from core.text_input import check_text
from core.wire import speech_pb2 as pb
from core.wire import speech_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["Speech"].full_name
TENANT_TTL_MARGIN_S = 60

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"  # generic only in the stubs


def tenant_key(request_id: str) -> str:
    """Which tenant a stream belongs to: reserves the id, checked on resume. (Not
    ``core.lane.owner_key``: that one names the worker serving the request.)"""
    return f"{PREFIX}tenant:{request_id}"


def status_code(error: BaseException) -> grpc.StatusCode:
    """The gRPC status of ``error``: ``core.errors`` decides, a worker's error names its own,
    an unreachable Redis is UNAVAILABLE (transient), anything else INTERNAL."""
    if isinstance(error, redis.RedisError):
        return grpc.StatusCode.UNAVAILABLE
    name = grpc_status_name(error)
    code = grpc.StatusCode.__members__.get(name, grpc.StatusCode.INTERNAL)
    return grpc.StatusCode.INTERNAL if code is grpc.StatusCode.OK else code


class SpeechService(pb_grpc.SpeechServicer):
    """``voicelane.v1.Speech`` over the real-time lane."""

    def __init__(
        self,
        settings: GrpcSettings,
        lane: LaneClient,
        voices: VoiceRegistry,
        *,
        admission: Admission | None = None,
        block_ms: int = 150,
        min_deadline_s: float = MIN_USEFUL_DEADLINE_S,
    ) -> None:
        self.settings = settings
        self.lane = lane
        self.voices = voices
        self.admission = admission or Admission(lane)
        self.block_ms = block_ms
        self.min_deadline_s = min_deadline_s
        self.draining = False
        """Shutting down: streams cut by the shutdown are left running, to be resumed."""
        self._background: set[asyncio.Task[None]] = set()

    # ---- RPCs ----------------------------------------------------------------------------

    async def Synthesize(  # noqa: N802 - the generated servicer's name
        self, request: pb.SynthesizeRequest, context: Context
    ) -> AsyncIterator[pb.AudioChunk]:
        relay: OutputRelay | None = None
        try:
            relay = await self._start_synthesis(request, context)
            async with contextlib.aclosing(relay.chunks()) as chunks:
                async for chunk in chunks:
                    yield chunk
            _log_end("stream", relay)
        except Exception as error:
            await self._close(relay)  # before the client hears the status
            await self._abort(context, relay.request_id if relay else request.request_id, error)
        finally:
            await self._close(relay)

    async def Converse(  # noqa: N802 - the generated servicer's name
        self, request_iterator: AsyncIterator[pb.ConverseRequest], context: Context
    ) -> AsyncIterator[pb.ConverseResponse]:
        relay: OutputRelay | None = None
        try:
            relay = await self._start_conversation(request_iterator, context)
            responses = self._converse(relay, request_iterator)
            async with contextlib.aclosing(responses) as stream:
                async for response in stream:
                    yield response
            _log_end("conversation", relay)
        except Exception as error:
            await self._close(relay)  # before the client hears the status
            await self._abort(context, relay.request_id if relay else None, error)
        finally:
            await self._close(relay)

    async def ListVoices(  # noqa: N802 - the generated servicer's name
        self, request: pb.ListVoicesRequest, context: Context
    ) -> pb.ListVoicesResponse:
        try:
            voices = await self.voices.voices()
        except Exception as error:
            await self._abort(context, None, error)
        return pb.ListVoicesResponse(
            engine=self.voices.engine,
            voices=[pb.Voice(id=v.id, name=v.name, languages=list(v.languages)) for v in voices],
        )

    # ---- Synthesize ----------------------------------------------------------------------

    async def _start_synthesis(
        self, request: pb.SynthesizeRequest, context: Context
    ) -> OutputRelay:
        tenant = current_tenant()
        if request.HasField("resume_after_seq"):
            return await self._resume(request, context, tenant)
        limit = self.settings.max_stream_text_chars
        text = check_text(request.text, max_chars=limit, source="SynthesizeRequest.text")
        params = await self._voice_params(request.voice, request.sample_rate_hz, request.speed)
        chosen_id = bool(request.request_id)
        request_id = check_request_id(request.request_id) if chosen_id else new_request_id()
        stream = self._stream_request(
            request_id=request_id,
            tenant=tenant,
            params=params,
            mode=Mode.SYNTHESIZE,
            client_ts_ms=request.client_ts_ms,
            context=context,
        )
        if chosen_id and await self._stream_exists(request_id):
            raise StreamExistsError(f"a stream with request_id {request_id} already exists")
        await self._submit(stream, text)
        log.info(
            "stream %s submitted: tenant=%s voice=%s rate=%d Hz speed=%g chars=%d",
            request_id, tenant, params.voice, params.sample_rate_hz, params.speed, len(text),
        )  # fmt: skip
        return self._relay(stream, context, picked_up=False)

    async def _resume(
        self, request: pb.SynthesizeRequest, context: Context, tenant: str
    ) -> OutputRelay:
        if not request.request_id:
            raise InvalidInputError("resume_after_seq needs the request_id of the stream")
        request_id = check_request_id(request.request_id)
        deadline_ms = self._deadline_ms(context)
        owner = cast(bytes | None, await self.lane.redis.get(tenant_key(request_id)))
        has_output = bool(await self.lane.redis.exists(output_key(request_id)))
        queued = bool(await self.lane.redis.exists(input_key(request_id)))
        if owner is None or owner.decode() != tenant or not (has_output or queued):
            raise StreamNotFoundError(
                f"no stream {request_id} to resume (unknown, expired or another tenant's)"
            )
        after_seq = request.resume_after_seq
        log.info("stream %s resumed after seq %d: tenant=%s", request_id, after_seq, tenant)
        defaults = ChunkDefaults(
            request.sample_rate_hz or DEFAULT_SAMPLE_RATE_HZ, request.client_ts_ms
        )
        return self._new_relay(
            request_id,
            deadline_ms,
            defaults,
            context,
            picked_up=has_output,
            after_seq=after_seq,
        )

    # ---- Converse ------------------------------------------------------------------------

    async def _start_conversation(
        self, requests: AsyncIterator[pb.ConverseRequest], context: Context
    ) -> OutputRelay:
        tenant = current_tenant()
        deadline_ms = self._deadline_ms(context)
        start = await _first_start(requests, deadline_ms)
        params = await self._voice_params(start.voice, start.sample_rate_hz, start.speed)
        stream = self._stream_request(
            request_id=new_request_id(),
            tenant=tenant,
            params=params,
            mode=Mode.CONVERSE,
            client_ts_ms=start.client_ts_ms,
            context=context,
        )
        await self._submit(stream, None)
        log.info(
            "conversation %s submitted: tenant=%s voice=%s rate=%d Hz speed=%g",
            stream.request_id, tenant, params.voice, params.sample_rate_hz, params.speed,
        )  # fmt: skip
        return self._relay(stream, context, picked_up=False)

    async def _converse(
        self, relay: OutputRelay, requests: AsyncIterator[pb.ConverseRequest]
    ) -> AsyncGenerator[pb.ConverseResponse, None]:
        """The relay's chunks, while a second task feeds the client's text to the lane."""
        feeder = asyncio.create_task(self._feed(relay.request_id, requests))
        chunks = relay.chunks()
        step: asyncio.Future[pb.AudioChunk] | None = None
        try:
            while True:
                step = asyncio.ensure_future(anext(chunks))
                await _wait_step(step, feeder)
                try:
                    chunk = step.result()
                except StopAsyncIteration:
                    return
                yield pb.ConverseResponse(audio=chunk)
        finally:
            await _cancel_tasks(feeder, step)
            await chunks.aclose()

    async def _feed(self, request_id: str, requests: AsyncIterator[pb.ConverseRequest]) -> None:
        """The client's messages after ``start`` → the request's input stream."""
        feed = TextFeed(self.settings.max_stream_text_chars)
        ended = False
        async for message in requests:
            if ended:
                raise InvalidInputError("nothing may follow end in a conversation")
            piece = _input_piece(message, feed)
            if piece is not None:
                await self.lane.send_input(request_id, piece)
                ended = piece.kind is InputKind.END
        if not ended:  # the client closed its side without an end: that is the end
            await self.lane.send_input(request_id, InputPiece(InputKind.END))

    # ---- shared --------------------------------------------------------------------------

    async def _voice_params(self, voice: str, sample_rate_hz: int, speed: float) -> VoiceParams:
        known = await self.voices.voice_ids()
        return check_voice_params(voice, sample_rate_hz, speed, known_voices=known)

    def _deadline_ms(self, context: Context) -> int:
        default_s = self.settings.realtime.default_deadline_s
        return absolute_deadline_ms(
            context.time_remaining(), default_s, now_ms(), min_remaining_s=self.min_deadline_s
        )

    def _stream_request(
        self,
        *,
        request_id: str,
        tenant: str,
        params: VoiceParams,
        mode: Mode,
        client_ts_ms: int,
        context: Context,
    ) -> StreamRequest:
        return StreamRequest(
            request_id=request_id,
            tenant=tenant,
            voice=params.voice,
            sample_rate_hz=params.sample_rate_hz,
            deadline_ms=self._deadline_ms(context),
            mode=mode,
            speed=params.speed,
            client_ts_ms=client_ts_ms,
        )

    async def _stream_exists(self, request_id: str) -> bool:
        keys = (
            tenant_key(request_id),
            owner_key(request_id),
            output_key(request_id),
            input_key(request_id),
        )
        return bool(await self.lane.redis.exists(*keys))

    async def _submit(self, stream: StreamRequest, text: str | None) -> None:
        """Admit, reserve the id for the tenant, queue. Nothing is written unless admitted."""
        rt = self.settings.realtime
        remaining_s = max(0.0, (stream.deadline_ms - now_ms()) / 1000)
        tenant_ttl_s = math.ceil(remaining_s + rt.output_ttl_s) + TENANT_TTL_MARGIN_S
        async with self.admission.slot():
            key = tenant_key(stream.request_id)
            if not await self.lane.redis.set(key, stream.tenant, nx=True, ex=tenant_ttl_s):
                raise StreamExistsError(
                    f"a stream with request_id {stream.request_id} already exists"
                )
            await self.lane.submit(stream, text)

    def _relay(self, stream: StreamRequest, context: Context, *, picked_up: bool) -> OutputRelay:
        defaults = ChunkDefaults(stream.sample_rate_hz, stream.client_ts_ms)
        return self._new_relay(
            stream.request_id, stream.deadline_ms, defaults, context, picked_up=picked_up
        )

    def _new_relay(
        self,
        request_id: str,
        deadline_ms: int,
        defaults: ChunkDefaults,
        context: Context,
        *,
        picked_up: bool,
        after_seq: int = -1,
    ) -> OutputRelay:
        rt = self.settings.realtime
        liveness = Liveness(
            self.lane,
            request_id,
            claim_timeout_s=rt.claim_timeout_s,
            unavailable_after_s=rt.unavailable_after_s,
            picked_up=picked_up,
        )
        return OutputRelay(
            self.lane,
            request_id,
            deadline_ms=deadline_ms,
            liveness=liveness,
            defaults=defaults,
            after_seq=after_seq,
            block_ms=self.block_ms,
            client_gone=_client_gone(context),
        )

    async def _abort(self, context: Context, request_id: str | None, error: Exception) -> Never:
        code = status_code(error)
        rid = request_id or "-"
        if isinstance(error, VoicelaneError):
            message = error.message
            log.info("stream %s ended: %s: %s", rid, code.name, message)
        elif isinstance(error, redis.RedisError):
            message = "the real-time lane is unreachable; retry shortly"
            log.warning("stream %s ended: Redis: %s", rid, " ".join(str(error).split())[:200])
        else:
            message = "internal error"
            log.exception("stream %s failed", rid)
        await context.abort(code, message)

    async def _close(self, relay: OutputRelay | None) -> None:
        """A stream that did not reach its end is cancelled (unless the server is stopping)."""
        if relay is None or relay.finished or relay.closed or self.draining:
            return
        relay.closed = True
        task = asyncio.create_task(self.lane.cancel(relay.request_id))
        self._background.add(task)
        task.add_done_callback(self._cancel_done(relay.request_id))
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.shield(task)

    def _cancel_done(self, request_id: str) -> Callable[[asyncio.Task[None]], None]:
        def done(task: asyncio.Task[None]) -> None:
            self._background.discard(task)
            error = None if task.cancelled() else task.exception()
            if task.cancelled() or error is not None:
                log.warning("could not cancel stream %s: %s", request_id, error or "cancelled")
            else:
                log.info("stream %s cancelled", request_id)

        return done

    async def wait_background(self) -> None:
        """Let the cancel marks of the last streams reach Redis."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)


def _client_gone(context: Context) -> Callable[[], bool]:
    """Has the client left? grpc.aio cancels the handler's task, but a cancellation that
    lands while it sends a message can be swallowed (the task's ``cancelling()`` stays set,
    ``context.cancelled()`` stays False): both count. Call from the handler's task."""
    task = asyncio.current_task()

    def gone() -> bool:
        return context.cancelled() or (task is not None and task.cancelling() > 0)

    return gone


def _log_end(kind: str, relay: OutputRelay) -> None:
    outcome = "done" if relay.finished else "left by its client"
    log.info("%s %s %s: %d chunks", kind, relay.request_id, outcome, relay.chunks_sent)


async def _first_start(
    requests: AsyncIterator[pb.ConverseRequest], deadline_ms: int
) -> pb.ConverseStart:
    timeout_s = max(0.0, (deadline_ms - now_ms()) / 1000)
    try:
        first = await asyncio.wait_for(anext(requests), timeout_s)
    except StopAsyncIteration:
        raise InvalidInputError("the conversation ended before its start message") from None
    except TimeoutError:
        raise DeadlineExceededError("no start message before the deadline") from None
    if first.WhichOneof("event") != "start":
        raise InvalidInputError("the first message of a conversation must be start")
    return first.start


def _input_piece(message: pb.ConverseRequest, feed: TextFeed) -> InputPiece | None:
    kind = message.WhichOneof("event")
    if kind == "text_delta":
        text = feed.accept(message.text_delta)
        return InputPiece(InputKind.TEXT, text) if text else None
    if kind == "flush":
        return InputPiece(InputKind.FLUSH)
    if kind == "end":
        return InputPiece(InputKind.END)
    if kind == "start":
        raise InvalidInputError("start may only be the first message of a conversation")
    raise InvalidInputError("a ConverseRequest must set start, text_delta, flush or end")


async def _wait_step(step: asyncio.Future[Any], feeder: asyncio.Task[None]) -> None:
    """Wait for ``step``; raise the feeder's error as soon as it fails (even if it failed
    while the previous chunk was being sent)."""
    while True:
        if feeder.done() and not feeder.cancelled() and (error := feeder.exception()):
            raise error
        if step.done():
            return
        waiting: set[asyncio.Future[Any]] = {step} if feeder.done() else {step, feeder}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)


async def _cancel_tasks(*tasks: asyncio.Future[Any] | None) -> None:
    pending = [t for t in tasks if t is not None]
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
