"""The client of the Speech service (:class:`SpeechClient`): its channels and options, and the
calls — ``synthesize`` (raw chunks, PCM, a file), ``converse``, ``list_voices`` and
``sync_clock``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self, TypeAlias

import grpc
import grpc.aio

from voicelane.client.failure import remote_error
from voicelane.client.audio import PcmAssembler, SynthesisResult, write_atomically
from voicelane.client.chat import ChatResult, chat_pcm, chat_request
from voicelane.client.clock import DEFAULT_SAMPLES, ClockEstimate, ClockSync, measure_clock
from voicelane.client.converse import ConverseSession
from voicelane.client.pool import ChannelPool, Metadata
from voicelane.client.retry import DEFAULT_RETRY, Retrier, RetryPolicy
from voicelane.client.stats import StreamStats
from voicelane.client.synthesis import Synthesis, SynthesisStream
from voicelane.common.audio.files import format_from_path, validate_sample_rate
from voicelane.common.errors import InvalidInputError, RemoteError
from voicelane.common.defaults import DEFAULT_SAMPLE_RATE_HZ
from voicelane.common.wire import speech_pb2 as pb

DEFAULT_KEEPALIVE_TIME_S = 30.0
"""Ping an idle-looking connection this often while a call is open (see ``docs/client.md``)."""
DEFAULT_KEEPALIVE_TIMEOUT_S = 10.0
"""...and call it dead when the ping is not answered within this."""
DEFAULT_MAX_RECEIVE_MESSAGE_BYTES = 8 * 1024 * 1024

ChannelOption: TypeAlias = tuple[str, int | str]


@dataclass(frozen=True)
class VoiceInfo:
    id: str
    name: str
    languages: tuple[str, ...]
    engine: str


class SpeechClient:
    """Asyncio client of the Speech service with a channel pool; see the package docstring.

    Channels are created on first use inside the running event loop, so a client belongs to
    one loop. ``close()`` (or leaving ``async with``) cancels the streams still open.
    """

    def __init__(
        self,
        target: str,
        api_key: str,
        *,
        channels: int = 4,
        streams_per_channel: int = 8,
        secure: bool = False,
        root_certificates: bytes | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        default_timeout_s: float | None = 300,
        keepalive_time_s: float = DEFAULT_KEEPALIVE_TIME_S,
        keepalive_timeout_s: float = DEFAULT_KEEPALIVE_TIMEOUT_S,
        max_receive_message_bytes: int = DEFAULT_MAX_RECEIVE_MESSAGE_BYTES,
        channel_options: Sequence[ChannelOption] = (),
    ) -> None:
        if channels < 1 or streams_per_channel < 1:
            raise InvalidInputError(
                f"channels and streams_per_channel must be >= 1, got {channels} and "
                f"{streams_per_channel}"
            )
        if default_timeout_s is not None and default_timeout_s <= 0:
            raise InvalidInputError(f"default_timeout_s must be > 0, got {default_timeout_s}")
        self.target = target
        self.retry = retry
        self.default_timeout_s = default_timeout_s
        self._channels = channels
        self._streams_per_channel = streams_per_channel
        self._secure = secure
        self._root_certificates = root_certificates
        self._metadata: Metadata = (("authorization", f"Bearer {api_key}"),)
        self.channel_options: list[ChannelOption] = [
            ("grpc.use_local_subchannel_pool", 1),  # one connection per channel, not shared
            ("grpc.keepalive_time_ms", round(keepalive_time_s * 1000)),
            ("grpc.keepalive_timeout_ms", round(keepalive_timeout_s * 1000)),
            ("grpc.keepalive_permit_without_calls", 0),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.max_receive_message_length", max_receive_message_bytes),
            ("grpc.initial_reconnect_backoff_ms", max(1, round(retry.initial_backoff_s * 1000))),
            ("grpc.max_reconnect_backoff_ms", max(1, round(retry.max_backoff_s * 1000))),
            *channel_options,
        ]
        self._pool: ChannelPool | None = None
        self._closed = False
        self._clock = ClockSync()

    # -- pool

    def _new_channel(self) -> grpc.aio.Channel:
        if self._secure:
            credentials = grpc.ssl_channel_credentials(root_certificates=self._root_certificates)
            return grpc.aio.secure_channel(self.target, credentials, options=self.channel_options)
        return grpc.aio.insecure_channel(self.target, options=self.channel_options)

    def _require_pool(self) -> ChannelPool:
        if self._closed:
            raise RemoteError("CANCELLED", "the SpeechClient is closed")
        if self._pool is None:
            channels = [self._new_channel() for _ in range(self._channels)]
            self._pool = ChannelPool(channels, self._streams_per_channel)
        return self._pool

    def channel_loads(self) -> tuple[int, ...]:
        """Open streams per channel, in channel order."""
        if self._pool is None:
            return (0,) * self._channels
        return tuple(slot.active for slot in self._pool.slots)

    @property
    def waiting(self) -> int:
        """Streams waiting for a free slot."""
        return 0 if self._pool is None else self._pool.waiting

    async def __aenter__(self) -> Self:
        self._require_pool()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every channel (cancelling open streams) and fail the waiters (idempotent)."""
        self._closed = True
        if self._pool is not None and not self._pool.closed:
            await self._pool.close()

    def _retrier(self, timeout_s: float | None) -> Retrier:
        return Retrier(self.retry, timeout_s or self.default_timeout_s, StreamStats())

    # -- calls

    def synthesize(
        self,
        text: str,
        *,
        voice: str = "",
        sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ,
        speed: float = 1.0,
        timeout_s: float | None = None,
        pace: bool = True,
        normalize: bool | None = None,
        ssml: bool | None = None,
        lexicons: Sequence[str] | None = None,
    ) -> SynthesisStream:
        """The raw chunks of one text, seq strictly increasing; retried and resumed. Each
        chunk carries its captions and, for engines that know them, the word timings and
        SSML marks (``chunk.words``, ``chunk.marks``; ``docs/grpc.md``).

        ``timeout_s`` (default: the client's ``default_timeout_s``) bounds the whole call,
        retries and resumes included. ``pace`` (default) has the server synthesise just
        ahead of playback, for a live player; ``pace=False`` renders as fast as it can.
        How the text is read (``docs/text.md``; None: the server's default):
        ``normalize=False`` speaks numbers and symbols as written, ``ssml`` says whether the
        text is SSML (None: when it starts with ``<speak``), ``lexicons`` names the tenant's
        pronunciation lexicons to apply (None: its default one; ``[]``: none).
        """
        request = pb.SynthesizeRequest(
            text=text, voice=voice, sample_rate_hz=sample_rate_hz, speed=speed, pace=pace
        )
        if normalize is not None:
            request.normalize = normalize
        if ssml is not None:
            request.ssml = ssml
        if lexicons is not None:
            request.lexicons.names.extend(lexicons)
            request.lexicons.SetInParent()
        synthesis = Synthesis(
            self._require_pool(),
            self._metadata,
            request,
            self._retrier(timeout_s),
            clock=self._clock,
        )
        return SynthesisStream(synthesis.chunks(), synthesis.stats)

    async def synthesize_pcm(
        self,
        text: str,
        *,
        voice: str = "",
        sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ,
        speed: float = 1.0,
        timeout_s: float | None = None,
        pace: bool = False,
        normalize: bool | None = None,
        ssml: bool | None = None,
        lexicons: Sequence[str] | None = None,
    ) -> SynthesisResult:
        """The text's audio decoded to mono float32 PCM (codec delay trimmed at the start),
        with its captions, word timings and SSML marks; file-style (not paced to playback)
        unless ``pace``. The text options as for :meth:`synthesize`."""
        sample_rate_hz = sample_rate_hz or DEFAULT_SAMPLE_RATE_HZ
        assembler = PcmAssembler(sample_rate_hz)  # checks the rate before any call
        stream = self.synthesize(
            text,
            voice=voice,
            sample_rate_hz=sample_rate_hz,
            speed=speed,
            timeout_s=timeout_s,
            pace=pace,
            normalize=normalize,
            ssml=ssml,
            lexicons=lexicons,
        )
        async with stream:
            async for chunk in stream:
                assembler.add(chunk)
        return assembler.result(stream.stats)

    async def synthesize_to_file(
        self,
        text: str,
        path: str | os.PathLike[str],
        *,
        voice: str = "",
        sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ,
        speed: float = 1.0,
        timeout_s: float | None = None,
        bitrate_bps: int | None = None,
        normalize: bool | None = None,
        ssml: bool | None = None,
        lexicons: Sequence[str] | None = None,
    ) -> SynthesisResult:
        """Synthesize and write ``path`` (format from its extension) atomically; the result
        has the word timings and marks too. The text options as for :meth:`synthesize`.

        The audio is written to a hidden temporary file beside ``path`` and renamed over it
        once complete: ``path`` is either untouched or the whole new file, never partial.
        """
        sample_rate_hz = sample_rate_hz or DEFAULT_SAMPLE_RATE_HZ
        target = Path(path)
        fmt = format_from_path(target)
        validate_sample_rate(fmt, sample_rate_hz)  # fail before speaking, not after
        result = await self.synthesize_pcm(
            text,
            voice=voice,
            sample_rate_hz=sample_rate_hz,
            speed=speed,
            timeout_s=timeout_s,
            normalize=normalize,
            ssml=ssml,
            lexicons=lexicons,
        )
        await asyncio.to_thread(
            write_atomically, target, fmt, sample_rate_hz, result.pcm, bitrate_bps
        )
        return result

    def converse(
        self,
        *,
        voice: str = "",
        sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ,
        speed: float = 1.0,
        timeout_s: float | None = None,
    ) -> ConverseSession:
        """A conversation: text in pieces, audio back as sentences complete."""
        start = pb.ConverseStart(voice=voice, sample_rate_hz=sample_rate_hz, speed=speed)
        return ConverseSession(
            self._require_pool(), self._metadata, start, self._retrier(timeout_s), clock=self._clock
        )

    async def chat(
        self,
        messages: Sequence[tuple[str, str]],
        *,
        model: str = "",
        voice: str = "",
        system: str = "",
        sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ,
        speed: float = 1.0,
        timeout_s: float | None = None,
    ) -> ChatResult:
        """An LLM's reply to ``messages`` ((role, content) pairs), spoken: its text, decoded
        audio with captions, and the server's stats. Not retried (see ``voicelane.client.chat``)."""
        request = chat_request(
            messages, model=model, voice=voice, system=system,
            sample_rate_hz=sample_rate_hz, speed=speed,
        )  # fmt: skip
        pool = self._require_pool()
        lease = await pool.acquire()  # a chat is a stream: it holds a slot like the others
        try:
            return await chat_pcm(
                lease.slot.stub,
                request,
                metadata=self._metadata,
                timeout_s=timeout_s or self.default_timeout_s,
                clock=self._clock,
            )
        finally:
            pool.release(lease)

    async def list_voices(self, *, timeout_s: float | None = None) -> list[VoiceInfo]:
        """The voices of the workers' engine; ``UNAVAILABLE`` is retried (idempotent)."""
        pool = self._require_pool()
        retrier = self._retrier(timeout_s)
        failures = 0
        while True:
            stub = pool.least_loaded().stub
            try:
                response = await stub.ListVoices(
                    pb.ListVoicesRequest(),
                    timeout=retrier.remaining_s(),
                    metadata=self._metadata,
                )
            except grpc.aio.AioRpcError as exc:
                failures += 1
                await retrier.pause(remote_error(exc), failures)
                continue
            return [
                VoiceInfo(v.id, v.name, tuple(v.languages), v.engine or response.engine)
                for v in response.voices
            ]

    # -- clock

    @property
    def clock(self) -> ClockEstimate | None:
        """The client/server clock offset as known now (``offset_ms``: server minus client,
        ``± error_bound_ms``): from :meth:`sync_clock`, or a stream's first-chunk echo when
        that was better; None before either. Streams record it in ``stats.clock``."""
        return self._clock.estimate

    async def sync_clock(
        self, samples: int = DEFAULT_SAMPLES, *, timeout_s: float | None = None
    ) -> ClockEstimate:
        """``samples`` ``Clock`` calls back to back on one channel (NTP-style, see
        ``voicelane.client.clock``); the estimate is kept for :attr:`clock` and the streams started
        after it. ``UNAVAILABLE`` is retried like ``list_voices``."""
        if samples < 1:
            raise InvalidInputError(f"samples must be >= 1, got {samples}")
        pool = self._require_pool()
        retrier = self._retrier(timeout_s)
        failures = 0
        taken = 0
        stub = pool.least_loaded().stub
        while taken < samples:
            try:
                await measure_clock(
                    stub,
                    1,
                    clock=self._clock,
                    metadata=self._metadata,
                    timeout_s=retrier.remaining_s(),
                )
            except grpc.aio.AioRpcError as exc:
                failures += 1
                await retrier.pause(remote_error(exc), failures)
                stub = pool.least_loaded().stub
                continue
            taken += 1
        estimate = self._clock.estimate
        assert estimate is not None  # a sample was just added
        return estimate
