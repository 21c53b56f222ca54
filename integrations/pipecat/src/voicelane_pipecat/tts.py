"""Pipecat TTS service over voicelane's agent streaming protocol (``GET /v1/agent``).

One WebSocket per service; one agent context per Pipecat context id (a turn, or a
``TTSSpeakFrame``): text goes out as ``append``, a sentence boundary (sentence aggregation)
as ``flush``, the end of the turn as ``close``; an interruption sends ``cancel`` for each
interrupted context and drops whatever of its audio is still on the way. Audio comes back as
16-bit PCM at the pipeline's output rate (requested from the server, or resampled from the
nearest rate it offers), words as word timestamps, so Pipecat emits word-aligned
``TTSTextFrame``s and keeps only what was heard in the conversation.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from loguru import logger
from pipecat.audio.resamplers.base_audio_resampler import BaseAudioResampler
from pipecat.audio.utils import create_stream_resampler
from pipecat.frames.frames import ErrorFrame, Frame, TTSAudioRawFrame, TTSStoppedFrame
from pipecat.processors.frame_processor import FrameProcessorSetup
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TextAggregationMode, WebsocketTTSService
from pipecat.utils.errors import ErrorCategory
from pipecat.utils.types import NOT_GIVEN, NotGiven, is_given
from websockets.protocol import State

#: Settings fixed for a context's life: changing one moves the turn to a new context.
CONTEXT_FIELDS = frozenset({"voice", "speed", "normalize", "lexicons"})

#: The rates the protocol offers when the server's ``ready`` has not said otherwise.
DEFAULT_SAMPLE_RATES_HZ = (8000, 16000, 24000, 48000)


def agent_url(url: str) -> str:
    """The ``/v1/agent`` WebSocket URL of a server given as a base URL (``http://host:8000``,
    ``https://host/v1``) or as the WebSocket URL itself."""
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if scheme not in ("ws", "wss"):
        raise ValueError(f"voicelane url must be http(s):// or ws(s)://, not {url!r}")
    path = parts.path.rstrip("/")
    if not path.endswith("/v1/agent"):
        path += "/agent" if path.endswith("/v1") else "/v1/agent"
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


class RefusedError(ConnectionError):
    """The server answered the connection with an ``error`` instead of ``ready``."""

    def __init__(self, message: Mapping[str, Any]) -> None:
        super().__init__(describe_error(message))
        self.code = str(message.get("code") or "")


def error_category(error: Exception) -> ErrorCategory | None:
    """Pipecat's category for a failed connection: a refused key is permanent (retrying
    will not help); anything else is left to Pipecat's own classification."""
    if isinstance(error, RefusedError):
        if error.code == "UNAUTHENTICATED":
            return ErrorCategory.AUTHENTICATION
        if error.code == "PERMISSION_DENIED":
            return ErrorCategory.AUTHORIZATION
    return None


def wire_sample_rate(wanted_hz: int, offered_hz: Sequence[int]) -> int:
    """The rate to ask the server for: ``wanted_hz`` itself if offered, else the lowest
    offered rate above it (resampled down losslessly enough), else the highest offered."""
    if wanted_hz in offered_hz:
        return wanted_hz
    above = [rate for rate in offered_hz if rate > wanted_hz]
    return min(above) if above else max(offered_hz)


@dataclass
class VoicelaneTTSSettings(TTSSettings):
    """Settings of :class:`VoicelaneTTSService` (read when a context opens).

    Parameters:
        speed: Speaking rate (1.0 normal; the engine's range applies).
        normalize: Whether the server normalizes text (numbers, dates, units...); None:
            the server's default (on).
        lexicons: Names of the tenant's pronunciation lexicons to apply.
    """

    speed: float | NotGiven | None = field(default_factory=lambda: NOT_GIVEN)
    normalize: bool | NotGiven | None = field(default_factory=lambda: NOT_GIVEN)
    lexicons: list[str] | NotGiven | None = field(default_factory=lambda: NOT_GIVEN)


@dataclass
class _WireContext:
    """A context open on the server (from its first ``append`` to ``done``, ``cancelled`` or
    ``error``)."""

    wire_rate_hz: int
    resampler: BaseAudioResampler | None
    cancel_sent_at: float | None = None


class VoicelaneTTSService(WebsocketTTSService):
    """voicelane's streaming TTS for Pipecat: word timestamps, contexts, interruption.

    Example::

        tts = VoicelaneTTSService(
            url="http://localhost:8000",
            api_key=os.environ["VOICELANE_API_KEY"],
            settings=VoicelaneTTSService.Settings(voice="en-us"),
        )

    Event handlers (besides the base ones: ``on_connected``, ``on_disconnected``,
    ``on_connection_error``, ``on_tts_request``):
        on_context_cancelled: ``(service, context_id)`` once the server has acknowledged the
            cancel of an interrupted context (no audio of it follows).
    """

    Settings = VoicelaneTTSSettings
    _settings: VoicelaneTTSSettings

    def __init__(
        self,
        *,
        api_key: str,
        url: str = "ws://localhost:8000/v1/agent",
        voice: str | None = None,
        sample_rate: int | None = None,
        ready_timeout_s: float = 10.0,
        extra_headers: Mapping[str, str] | None = None,
        settings: VoicelaneTTSSettings | None = None,
        text_aggregation_mode: TextAggregationMode | None = None,
        **kwargs: Any,
    ) -> None:
        """Initialize the service.

        Args:
            api_key: A voicelane API key (sent as ``Authorization: Bearer``).
            url: The server: its base URL (``http://host:8000``) or the ``/v1/agent``
                WebSocket URL.
            voice: The voice (a voice id of ``GET /v1/voices``); None: the server's default.
                ``settings.voice`` wins when both are given.
            sample_rate: Output rate; None: the pipeline's ``audio_out_sample_rate``.
            ready_timeout_s: How long to wait for the server's ``ready`` after connecting.
            extra_headers: More headers for the WebSocket handshake.
            settings: Runtime-updatable settings (voice, speed, normalize, lexicons).
            text_aggregation_mode: SENTENCE (default: each sentence is appended and flushed)
                or TOKEN (tokens are appended as they come; the server cuts sentences).
            **kwargs: Passed to :class:`WebsocketTTSService`.
        """
        default_settings = self.Settings(
            model=None, voice=voice, language=None, speed=None, normalize=None, lexicons=None
        )
        if settings is not None:
            default_settings.apply_update(settings)
        # Pipecat's sentences come without the space between them; the server reads the
        # context's text as one, so each sentence ends with one ("Hi. There", not "Hi.There").
        kwargs.setdefault("append_trailing_space", True)
        super().__init__(
            text_aggregation_mode=text_aggregation_mode,
            push_text_frames=False,
            push_start_frame=True,
            pause_frame_processing=False,
            sample_rate=sample_rate,
            settings=default_settings,
            **kwargs,
        )
        self._url = agent_url(url)
        self._api_key = api_key
        self._ready_timeout_s = ready_timeout_s
        self._extra_headers = dict(extra_headers or {})
        self._offered_rates_hz: tuple[int, ...] = DEFAULT_SAMPLE_RATES_HZ
        self._max_contexts: int | None = None
        self._wire_contexts: dict[str, _WireContext] = {}
        self._receive_task: asyncio.Task[None] | None = None
        # Contexts the server failed, until their turn ends: their later text goes unsent.
        self._failed_contexts: set[str] = set()
        self._register_event_handler("on_context_cancelled")

    def can_generate_metrics(self) -> bool:
        """TTFB and usage metrics are reported."""
        return True

    @property
    def max_contexts(self) -> int | None:
        """Contexts the server lets one connection hold open (from ``ready``)."""
        return self._max_contexts

    #
    # Connection
    #

    async def setup(self, setup: FrameProcessorSetup) -> None:
        """Set up the service and connect (the output rate is known from here on)."""
        await super().setup(setup)
        await self._connect()

    async def _connect(self) -> None:
        await super()._connect()
        await self._connect_websocket()
        # A receive loop that ended (the server closed the connection normally) is replaced.
        if self._websocket and (not self._receive_task or self._receive_task.done()):
            self._receive_task = self.create_task(self._receive_task_handler(self._report_error))

    async def _disconnect(self) -> None:
        await super()._disconnect()
        if self._receive_task:
            await self.cancel_task(self._receive_task)
            self._receive_task = None
        await self._disconnect_websocket()

    async def _connect_websocket(self) -> None:
        try:
            if self._websocket and self._websocket.state is State.OPEN:
                return
            logger.debug(f"{self}: connecting to {self._url}")
            websocket = await self._websocket_connect(
                self._url,
                additional_headers={
                    "Authorization": f"Bearer {self._api_key}",
                    **self._extra_headers,
                },
            )
            try:
                ready = await self._await_ready(websocket)
            except BaseException:
                await websocket.close()
                raise
            self._offered_rates_hz = tuple(
                int(rate) for rate in ready.get("sample_rates_hz", DEFAULT_SAMPLE_RATES_HZ)
            )
            self._max_contexts = ready.get("max_contexts")
            self._wire_contexts.clear()
            self._websocket = websocket
            await self._call_event_handler("on_connected")
        except Exception as e:
            self._websocket = None
            await self.push_error(
                error_msg=f"voicelane: cannot connect: {e}",
                exception=e,
                category=error_category(e),
            )
            await self._call_event_handler("on_connection_error", f"{e}")

    async def _await_ready(self, websocket: Any) -> dict[str, Any]:
        """The server's ``ready`` (it checks the key first); its ``error`` raised."""
        raw = await asyncio.wait_for(websocket.recv(), self._ready_timeout_s)
        message = json.loads(raw) if isinstance(raw, str) else {}
        if message.get("type") == "ready":
            return dict(message)
        if message.get("type") == "error":
            raise RefusedError(message)
        raise ConnectionError(f"expected a ready message, got {str(raw)[:200]!r}")

    async def _disconnect_websocket(self) -> None:
        try:
            await self.stop_all_metrics()
            if self._websocket:
                logger.debug(f"{self}: disconnecting")
                await self._websocket.close()
        except Exception as e:
            await self.push_error(error_msg=f"voicelane: error closing: {e}", exception=e)
        finally:
            self._websocket = None
            self._wire_contexts.clear()
            await self._call_event_handler("on_disconnected")

    async def _send(self, message: dict[str, Any]) -> None:
        if not self._websocket:
            raise ConnectionError("not connected")
        await self._websocket.send(json.dumps(message))

    #
    # Text out
    #

    def _context_options(self) -> dict[str, Any]:
        """The options of a new context: the settings that are set, the PCM rate."""
        options: dict[str, Any] = {
            "encoding": "pcm",
            "sample_rate_hz": wire_sample_rate(self.sample_rate, self._offered_rates_hz),
        }
        for name in ("voice", "speed", "normalize", "lexicons"):
            value = getattr(self._settings, name)
            if is_given(value) and value is not None:
                options[name] = value
        return options

    def _open_wire_context(self, context_id: str, options: Mapping[str, Any]) -> None:
        rate_hz = int(options["sample_rate_hz"])
        # One context's audio is one continuous stream, paced with gaps: the resampler keeps
        # its history across them (and gives up its tail at ``done``).
        resampler = (
            create_stream_resampler(clear_after_secs=None) if rate_hz != self.sample_rate else None
        )
        self._wire_contexts[context_id] = _WireContext(rate_hz, resampler)

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """Append ``text`` to the context (opening it on the server with its first text);
        with sentence aggregation, flush it so the sentence is spoken at once. Audio arrives
        on the receive task."""
        if context_id in self._failed_contexts:
            # The server failed this context (and said why): the rest of its turn goes unsaid.
            return
        if not self._websocket or self._websocket.state is State.CLOSED:
            await self._connect()
            if not self._websocket:
                # The connection failed (and said why): this text goes unspoken.
                yield TTSStoppedFrame(context_id=context_id)
                await self.remove_audio_context(context_id)
                return
        try:
            message: dict[str, Any] = {"type": "append", "context_id": context_id, "text": text}
            if context_id not in self._wire_contexts:
                options = self._context_options()
                message.update(options)
                self._open_wire_context(context_id, options)
            await self._send(message)
            if not self._is_streaming_tokens:
                await self._send({"type": "flush", "context_id": context_id})
            await self.start_tts_usage_metrics(text)
        except Exception as e:
            self._wire_contexts.pop(context_id, None)
            yield ErrorFrame(error=f"voicelane: cannot send text: {e}")
            yield TTSStoppedFrame(context_id=context_id)
            await self._disconnect()
            await self._connect()
            return
        yield None

    async def flush_audio(self, context_id: str | None = None) -> None:
        """Speak what was appended to the context so far, even an unfinished sentence."""
        flush_id = context_id or self.get_active_audio_context_id()
        if flush_id and flush_id in self._wire_contexts and self._websocket:
            try:
                await self._send({"type": "flush", "context_id": flush_id})
            except Exception as e:
                await self.push_error(error_msg=f"voicelane: cannot flush: {e}", exception=e)

    async def on_turn_context_completed(self) -> None:
        """End of the turn: ``close`` its context (the rest is spoken, then ``done``)."""
        context_id = self._turn_context_id
        await super().on_turn_context_completed()
        await self._close_wire_context(context_id)
        if context_id in self._failed_contexts:
            self._failed_contexts.discard(context_id)
            if self.audio_context_available(context_id):
                await self._stop_context_audio(context_id)

    async def _close_wire_context(self, context_id: str | None) -> None:
        context = self._wire_contexts.get(context_id) if context_id else None
        if context_id and context and context.cancel_sent_at is None and self._websocket:
            try:
                await self._send({"type": "close", "context_id": context_id})
            except Exception as e:
                await self.push_error(error_msg=f"voicelane: cannot close: {e}", exception=e)

    async def _cancel_wire_context(self, context_id: str) -> None:
        context = self._wire_contexts.get(context_id)
        if not context or context.cancel_sent_at is not None or not self._websocket:
            return
        context.cancel_sent_at = time.monotonic()
        try:
            await self._send({"type": "cancel", "context_id": context_id})
        except Exception as e:
            self._wire_contexts.pop(context_id, None)
            await self.push_error(error_msg=f"voicelane: cannot cancel: {e}", exception=e)

    async def on_audio_context_interrupted(self, context_id: str) -> None:
        """Interrupted: ``cancel`` the context; its audio still on the way is dropped (its
        audio context is gone)."""
        await self.stop_all_metrics()
        await self._cancel_wire_context(context_id)
        await super().on_audio_context_interrupted(context_id)

    async def on_audio_context_completed(self, context_id: str) -> None:
        """A context that went quiet while still open on the server, outside the current
        turn, is cancelled there so it does not hold one of the connection's contexts."""
        if context_id in self._wire_contexts and context_id != self._turn_context_id:
            await self._cancel_wire_context(context_id)
        await super().on_audio_context_completed(context_id)

    async def _update_settings(self, delta: TTSSettings) -> dict[str, Any]:
        """Apply a settings delta; a change of a context's options closes the turn's context
        and moves the rest of the turn to a new one."""
        changed: dict[str, Any] = await super()._update_settings(delta)
        turn_id = self._turn_context_id
        if changed.keys() & CONTEXT_FIELDS and turn_id:
            await self._push_sequencer_frames(
                await self._aggregated_frame_sequencer.finalize(turn_id), turn_id
            )
            await self._close_wire_context(turn_id)
            self._turn_context_id = None
            self._turn_context_id = self.create_context_id()
        return changed

    #
    # Audio and words in
    #

    async def _receive_messages(self) -> None:
        if not self._websocket:
            raise ConnectionError("not connected")
        async for raw in self._websocket:
            if isinstance(raw, bytes):
                logger.warning(f"{self}: unexpected binary message ({len(raw)} bytes)")
                continue
            await self._handle_message(json.loads(raw))

    async def _handle_message(self, message: dict[str, Any]) -> None:
        """One server message: audio, words, done, cancelled, error (``started`` needs
        nothing: the context's options were fixed when it was opened)."""
        kind = message.get("type")
        context_id = message.get("context_id")
        if kind == "error":
            await self._handle_error(message)
            return
        if not isinstance(context_id, str):
            return
        if kind == "cancelled":
            if self._wire_contexts.pop(context_id, None) is not None:
                await self._call_event_handler("on_context_cancelled", context_id)
            return
        context = self._wire_contexts.get(context_id)
        if context is None:
            # Not a context open here: text sent for a context as the server failed it opened
            # a new one under its id, which nobody will close: cancelled, nothing of it played.
            if kind == "started":
                await self._cancel_stray_context(context_id)
            return
        if context.cancel_sent_at is not None:
            return  # interrupted: its audio, words and end are dropped
        if not self.audio_context_available(context_id) and context_id != self._turn_context_id:
            # Its audio context is gone (it went quiet past ``stop_frame_timeout_s`` and its
            # turn is over, or was interrupted then): too late to play, so it is cancelled.
            # The current turn's is opened again (Pipecat's ``append_to_audio_context``).
            await self._cancel_wire_context(context_id)
            return
        if kind == "audio":
            await self._handle_audio(context, context_id, message)
        elif kind == "words":
            words = message.get("words") or []
            await self.add_word_timestamps(
                [(str(w["text"]), float(w["start_ms"]) / 1000.0) for w in words], context_id
            )
        elif kind == "done":
            del self._wire_contexts[context_id]
            await self.stop_ttfb_metrics()
            await self._flush_resampler(context_id, context)
            await self._stop_context_audio(context_id)

    async def _cancel_stray_context(self, context_id: str) -> None:
        try:
            await self._send({"type": "cancel", "context_id": context_id})
        except Exception as e:
            logger.debug(f"{self}: cannot cancel stray context {context_id}: {e}")

    async def _handle_audio(
        self, context: _WireContext, context_id: str, message: dict[str, Any]
    ) -> None:
        audio = base64.b64decode(message.get("audio") or "")
        if context.resampler and audio:
            audio = await context.resampler.resample(audio, context.wire_rate_hz, self.sample_rate)
        if not audio:
            return
        await self.stop_ttfb_metrics()
        frame = TTSAudioRawFrame(audio, self.sample_rate, 1, context_id=context_id)
        await self.append_to_audio_context(context_id, frame)

    async def _flush_resampler(self, context_id: str, context: _WireContext) -> None:
        """The resampled tail the resampler held back, at the end of the context's audio."""
        if context.resampler is None:
            return
        tail = await context.resampler.flush()
        if tail:
            frame = TTSAudioRawFrame(tail, self.sample_rate, 1, context_id=context_id)
            await self.append_to_audio_context(context_id, frame)

    async def _handle_error(self, message: dict[str, Any]) -> None:
        context_id = message.get("context_id")
        text = f"voicelane: {describe_error(message)}"
        if not isinstance(context_id, str):
            # The connection failed; the server closes it and the receive loop reconnects.
            await self.push_error(error_msg=text)
            return
        if self._wire_contexts.pop(context_id, None) is None:
            # Already ended here (the answer to a flush or close sent as it failed, say).
            logger.debug(f"{self}: {text} (context {context_id}, already ended)")
            return
        if not self.audio_context_available(context_id):
            return  # interrupted meanwhile
        await self.stop_all_metrics()
        await self.push_error(error_msg=f"{text} (context {context_id})")
        if context_id == self._turn_context_id:
            # The turn goes on writing: the rest of its text is not sent (one error per
            # context, not one per sentence) and its audio context ends with the turn.
            self._failed_contexts.add(context_id)
        else:
            await self._stop_context_audio(context_id)

    async def _stop_context_audio(self, context_id: str) -> None:
        """End a context's audio (a TTSStoppedFrame, then its end) when the server will send
        no more of it."""
        await self.append_to_audio_context(context_id, TTSStoppedFrame(context_id=context_id))
        await self.remove_audio_context(context_id)


def describe_error(message: Mapping[str, Any]) -> str:
    """A server ``error`` message in one line: code, error code, message, field."""
    where = f" (field {message['field']})" if message.get("field") else ""
    code = message.get("error_code") or message.get("code") or "error"
    return f"{code}: {message.get('message', '')}{where}"
