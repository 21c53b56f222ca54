"""voicelane's TTS for LiveKit Agents.

Both ``synthesize()`` and ``stream()`` speak voicelane's agent protocol (``GET /v1/agent``,
docs/agent-protocol.md): one WebSocket per concurrent stream, kept in a pool per ``TTS``
instance (LiveKit's ``ConnectionPool``, as its Cartesia plugin does), and one protocol
*context* per segment. ``push_text`` is an ``append`` (the server speaks a sentence as soon as
it completes, so no sentence tokenizer runs here), ``flush`` a ``flush``, ``end_input`` a
``close``; the audio is 16-bit mono PCM at ``sample_rate``; the server's word timings become
the aligned transcript (``TimedString``, seconds on the segment's clock). An interruption
(the stream's ``aclose()``, as LiveKit's agent session does) sends ``cancel``: the server
acknowledges within 50 ms and sends nothing more of that context, and the socket goes back
to the pool for the next segment.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import weakref
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
from livekit.agents import (
    APIConnectionError,
    APIConnectOptions,
    APIError,
    APIStatusError,
    APITimeoutError,
    tts,
    utils,
)
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, NOT_GIVEN, NotGivenOr
from livekit.agents.utils import is_given

from ._protocol import (
    SAMPLE_RATES_HZ,
    ContextOptions,
    TranscriptAligner,
    agent_url,
    append_message,
    control_message,
    error_from_close,
    error_from_message,
)
from .log import logger

DEFAULT_BASE_URL = "http://localhost:8000"


@dataclass
class _TTSOptions:
    base_url: str
    api_key: str
    sample_rate: int
    voice: str | None
    speed: float | None
    normalize: bool | None
    lexicons: tuple[str, ...]

    def context_options(self) -> ContextOptions:
        return ContextOptions(
            sample_rate_hz=self.sample_rate,
            voice=self.voice,
            speed=self.speed,
            normalize=self.normalize,
            lexicons=self.lexicons,
        )


class _Flush:
    """A ``flush`` in a context's input."""


_FLUSH = _Flush()


class TTS(tts.TTS):  # type: ignore[type-arg]  # generic in its events, as LiveKit subclasses it
    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        voice: str | None = None,
        sample_rate: int = 24000,
        speed: float | None = None,
        normalize: bool | None = None,
        lexicons: Sequence[str] = (),
        http_session: aiohttp.ClientSession | None = None,
    ) -> None:
        """voicelane TTS.

        Args:
            base_url: the server (``http://host:8000``; a trailing ``/v1`` is accepted);
                default ``VOICELANE_BASE_URL`` or ``http://localhost:8000``.
            api_key: the tenant's key; default ``VOICELANE_API_KEY``.
            voice: a voice id the server knows (``GET /v1/voices``); None: the server's
                default.
            sample_rate: PCM rate in Hz, one of 8000, 16000, 24000, 48000.
            speed, normalize, lexicons: as the protocol's context options.
            http_session: an aiohttp session; default: the job's (``utils.http_context``).
        """
        if sample_rate not in SAMPLE_RATES_HZ:
            raise ValueError(f"sample_rate must be one of {SAMPLE_RATES_HZ}, not {sample_rate}")
        key = api_key or os.environ.get("VOICELANE_API_KEY")
        if not key:
            raise ValueError("voicelane API key is required: api_key= or VOICELANE_API_KEY")
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=True, aligned_transcript=True),
            sample_rate=sample_rate,
            num_channels=1,
        )
        self._opts = _TTSOptions(
            base_url=base_url or os.environ.get("VOICELANE_BASE_URL") or DEFAULT_BASE_URL,
            api_key=key,
            sample_rate=sample_rate,
            voice=voice,
            speed=speed,
            normalize=normalize,
            lexicons=tuple(lexicons),
        )
        self._session = http_session
        self._pool = utils.ConnectionPool[aiohttp.ClientWebSocketResponse](
            connect_cb=self._connect_ws,
            close_cb=self._close_ws,
            max_session_duration=300,
            mark_refreshed_on_get=True,
        )
        self._streams = weakref.WeakSet[SynthesizeStream]()
        self._closing: set[asyncio.Task[bool]] = set()

    @property
    def model(self) -> str:
        return "voicelane"

    @property
    def provider(self) -> str:
        return "voicelane"

    def update_options(
        self,
        *,
        voice: NotGivenOr[str | None] = NOT_GIVEN,
        speed: NotGivenOr[float | None] = NOT_GIVEN,
    ) -> None:
        """Voice and speed of the segments started from now on."""
        if is_given(voice):
            self._opts.voice = voice
        if is_given(speed):
            self._opts.speed = speed

    def _ensure_session(self) -> aiohttp.ClientSession:
        if not self._session:
            self._session = utils.http_context.http_session()
        return self._session

    async def _connect_ws(self, timeout: float) -> aiohttp.ClientWebSocketResponse:
        """A socket whose key the server checked (its ``ready`` came)."""
        session = self._ensure_session()
        try:
            ws = await asyncio.wait_for(
                session.ws_connect(
                    agent_url(self._opts.base_url),
                    headers={"Authorization": f"Bearer {self._opts.api_key}"},
                ),
                timeout,
            )
        except asyncio.TimeoutError:
            raise APITimeoutError() from None
        except aiohttp.WSServerHandshakeError as e:
            raise APIStatusError(
                f"voicelane refused the connection: {e.message}",
                status_code=e.status,
                request_id=None,
                body=None,
            ) from None
        except Exception as e:
            raise APIConnectionError(f"voicelane: cannot connect ({type(e).__name__})") from e
        try:
            msg = await ws.receive(timeout=timeout)
        except asyncio.TimeoutError:
            await ws.close()
            raise APITimeoutError("voicelane: no ready message") from None
        if msg.type == aiohttp.WSMsgType.TEXT:
            data = json.loads(msg.data)
            if data.get("type") == "ready":
                return ws
            await ws.close()
            if data.get("type") == "error":
                raise error_from_message(data)
            raise APIConnectionError(f"voicelane: unexpected first message {data.get('type')!r}")
        await ws.close()
        raise error_from_close(ws.close_code)

    async def _close_ws(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        await ws.close()

    async def _acquire(self, timeout: float) -> aiohttp.ClientWebSocketResponse:
        """A pooled socket that is still open (the server may have closed an idle one)."""
        while True:
            ws = await self._pool.get(timeout=timeout)
            if not ws.closed:
                return ws
            self._pool.remove(ws)

    async def _speak(
        self,
        context_id: str,
        opts: _TTSOptions,
        inputs: AsyncIterator[str | _Flush],
        output_emitter: tts.AudioEmitter,
        conn_options: APIConnectOptions,
    ) -> None:
        """One context on a pooled socket, from its first ``append`` to its ``done``. Cancelled
        (an interruption), it sends ``cancel`` and returns the socket to the pool."""
        ws = await self._acquire(conn_options.timeout)
        context = _Context(ws, context_id, opts, output_emitter, conn_options.timeout)
        reusable = False
        try:
            await context.run(inputs)
            reusable = True
        except asyncio.CancelledError:
            reusable = await asyncio.shield(context.cancel())
            raise
        except APIError as e:
            # an error of the context only leaves the socket as good as it was
            reusable = context.context_failed and not ws.closed
            if not isinstance(e, APIStatusError):
                reusable = False
            raise
        except Exception as e:  # transport failures, a message that does not parse
            raise APIConnectionError(f"voicelane: {type(e).__name__}") from e
        finally:
            if reusable:
                self._pool.put(ws)
            else:
                # closed now, not at the pool's next drain: closing the socket cancels its
                # contexts on the server (one that failed to send ``cancel``, or timed out)
                self._pool.remove(ws)
                closing = asyncio.create_task(ws.close())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)

    def synthesize(
        self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> ChunkedStream:
        return ChunkedStream(tts=self, input_text=text, conn_options=conn_options)

    def stream(
        self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> SynthesizeStream:
        stream = SynthesizeStream(tts=self, conn_options=conn_options)
        self._streams.add(stream)
        return stream

    def prewarm(self) -> None:
        self._pool.prewarm()

    async def aclose(self) -> None:
        for stream in list(self._streams):
            await stream.aclose()
        self._streams.clear()
        await self._pool.aclose()
        await asyncio.gather(*self._closing, return_exceptions=True)


class _Context:
    """One protocol context on a socket this stream holds alone: a task sends the input
    (``append``/``flush``/``close``), another reads the server's messages of this context into
    the emitter (messages of other contexts — one an interrupted segment left — are skipped)."""

    def __init__(
        self,
        ws: aiohttp.ClientWebSocketResponse,
        context_id: str,
        opts: _TTSOptions,
        output_emitter: tts.AudioEmitter,
        timeout_s: float,
    ) -> None:
        self._ws = ws
        self._id = context_id
        self._options = opts.context_options()
        self._emitter = output_emitter
        self._timeout_s = timeout_s
        self._aligner = TranscriptAligner()
        self._opened = False
        self._closed = False  # ``close`` sent
        self._finished = False  # ``done``, ``cancelled`` or ``error`` came
        self._input_over = asyncio.Event()
        self._first_sent = asyncio.Event()
        self._request_id: str | None = None
        self.context_failed = False  # an ``error`` of this context (the socket goes on)

    async def run(self, inputs: AsyncIterator[str | _Flush]) -> None:
        send = asyncio.create_task(self._send(inputs), name="voicelane.send")
        recv = asyncio.create_task(self._recv(), name="voicelane.recv")
        try:
            done, _ = await asyncio.wait({send, recv}, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # raises the first failure
            await recv
            await send
        finally:
            await utils.aio.gracefully_cancel(send, recv)

    async def cancel(self) -> bool:
        """``cancel`` an open context; whether the socket can be used again."""
        if self._ws.closed:
            return False
        if not self._opened or self._finished:
            return True
        try:
            await asyncio.wait_for(self._send_json(control_message("cancel", self._id)), 1.0)
        except Exception:
            logger.warning("voicelane: could not send cancel", extra={"context_id": self._id})
            return False
        self._finished = True
        return True

    async def _send_json(self, message: dict[str, Any]) -> None:
        await self._ws.send_str(json.dumps(message))

    async def _send(self, inputs: AsyncIterator[str | _Flush]) -> None:
        held = ""  # leading whitespace: a context opens with something to say
        async for item in inputs:
            if isinstance(item, _Flush):
                if self._opened:
                    await self._send_json(control_message("flush", self._id))
                continue
            held += item
            if not held or not (self._opened or held.strip()):
                continue
            self._aligner.append(held)
            options = None if self._opened else self._options
            await self._send_json(append_message(self._id, held, options))
            held = ""
            self._opened = True
            self._first_sent.set()
        if self._opened:
            await self._send_json(control_message("close", self._id))
            self._closed = True
        self._input_over.set()

    async def _recv(self) -> None:
        first = asyncio.create_task(self._first_sent.wait())
        over = asyncio.create_task(self._input_over.wait())
        try:
            await asyncio.wait({first, over}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            first.cancel()
            over.cancel()
        if not self._opened:
            return  # no text at all: no context was opened
        while True:
            try:
                msg = await self._ws.receive(timeout=self._timeout_s)
            except asyncio.TimeoutError:
                if self._closed:
                    raise APITimeoutError("voicelane: no answer after close") from None
                continue  # the LLM is slow: nothing to say yet
            if msg.type in (
                aiohttp.WSMsgType.CLOSE,
                aiohttp.WSMsgType.CLOSED,
                aiohttp.WSMsgType.CLOSING,
                aiohttp.WSMsgType.ERROR,
            ):
                raise error_from_close(self._ws.close_code, self._request_id)
            if msg.type != aiohttp.WSMsgType.TEXT:
                raise APIConnectionError(f"voicelane: unexpected {msg.type.name} message")
            data = json.loads(msg.data)
            kind = data.get("type")
            if kind == "error" and "context_id" not in data:
                raise error_from_message(data, self._request_id)
            if data.get("context_id") != self._id:
                continue
            if self._handle(kind, data):
                return

    def _handle(self, kind: str | None, data: dict[str, Any]) -> bool:
        """One message of this context; whether it ended the context."""
        if kind == "audio":
            self._emitter.push(base64.b64decode(data["audio"]))
        elif kind == "words":
            words = self._aligner.words(data.get("words") or [])
            if words:
                self._emitter.push_timed_transcript(words)
        elif kind == "started":
            self._request_id = data.get("request_id")
            if data.get("sample_rate_hz", self._options.sample_rate_hz) != (
                self._options.sample_rate_hz
            ):
                raise APIError(
                    f"voicelane answered {data.get('sample_rate_hz')} Hz", body=data, retryable=False
                )
        elif kind == "done":
            self._finished = True
            tail = self._aligner.tail(float(data.get("duration_ms") or 0) / 1000)
            if tail is not None:
                self._emitter.push_timed_transcript(tail)
            return True
        elif kind == "cancelled":
            self._finished = True
            return True
        elif kind == "error":
            self._finished = True
            self.context_failed = True
            raise error_from_message(data, self._request_id)
        return False


class ChunkedStream(tts.ChunkedStream):
    """``synthesize(text)``: one context (``append`` + ``close``) on a pooled socket; the
    aligned transcript comes with the frames as in a stream."""

    def __init__(self, *, tts: TTS, input_text: str, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, input_text=input_text, conn_options=conn_options)
        self._tts: TTS = tts
        self._opts = replace(tts._opts)

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        context_id = utils.shortuuid("vl_")
        output_emitter.initialize(
            request_id=context_id,
            sample_rate=self._opts.sample_rate,
            num_channels=1,
            mime_type="audio/pcm",
        )

        async def inputs() -> AsyncIterator[str | _Flush]:
            yield self._input_text

        await self._tts._speak(context_id, self._opts, inputs(), output_emitter, self._conn_options)
        output_emitter.flush()


class SynthesizeStream(tts.SynthesizeStream):
    """``stream()``: one segment, one context; see the module's docstring."""

    def __init__(self, *, tts: TTS, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, conn_options=conn_options)
        self._tts: TTS = tts
        self._opts = replace(tts._opts)

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        context_id = utils.shortuuid("vl_")
        output_emitter.initialize(
            request_id=context_id,
            sample_rate=self._opts.sample_rate,
            num_channels=1,
            mime_type="audio/pcm",
            stream=True,
        )
        output_emitter.start_segment(segment_id=context_id)

        async def inputs() -> AsyncIterator[str | _Flush]:
            async for data in self._input_ch:
                if isinstance(data, self._FlushSentinel):
                    yield _FLUSH
                else:
                    self._mark_started()
                    yield data

        await self._tts._speak(context_id, self._opts, inputs(), output_emitter, self._conn_options)
