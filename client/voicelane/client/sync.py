"""Blocking helpers for scripts and the CLI: :func:`say_to_file` and :func:`chat_to_file` run
their own event loop, :func:`sync_clock` a blocking gRPC channel."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

import grpc

from voicelane.client.audio import SynthesisResult, write_atomically
from voicelane.client.chat import ChatResult
from voicelane.client.clock import DEFAULT_SAMPLES, ClockEstimate, measure_clock_sync
from voicelane.client.retry import DEFAULT_RETRY, RetryPolicy
from voicelane.client.speech import SpeechClient
from voicelane.common.audio.files import format_from_path, validate_sample_rate
from voicelane.common.defaults import DEFAULT_SAMPLE_RATE_HZ


def say_to_file(
    target: str,
    api_key: str,
    text: str,
    path: str | os.PathLike[str],
    *,
    voice: str = "",
    sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ,
    speed: float = 1.0,
    timeout_s: float | None = None,
    bitrate_bps: int | None = None,
    secure: bool = False,
    root_certificates: bytes | None = None,
    retry: RetryPolicy = DEFAULT_RETRY,
    normalize: bool | None = None,
    ssml: bool | None = None,
    lexicons: Sequence[str] | None = None,
) -> SynthesisResult:
    """Speak ``text`` on the server at ``target`` into ``path``; for scripts and the CLI.
    The result has the stream's word timings and marks (``words_json()``, ``marks_json()``);
    the text options as for :meth:`SpeechClient.synthesize`.

    Runs its own event loop (``asyncio.run``), so it cannot be called from async code.
    """

    async def speak() -> SynthesisResult:
        async with SpeechClient(
            target,
            api_key,
            channels=1,
            streams_per_channel=1,
            secure=secure,
            root_certificates=root_certificates,
            retry=retry,
        ) as client:
            return await client.synthesize_to_file(
                text,
                path,
                voice=voice,
                sample_rate_hz=sample_rate_hz,
                speed=speed,
                timeout_s=timeout_s,
                bitrate_bps=bitrate_bps,
                normalize=normalize,
                ssml=ssml,
                lexicons=lexicons,
            )

    return asyncio.run(speak())


def chat_to_file(
    target: str,
    api_key: str,
    messages: Sequence[tuple[str, str]],
    path: str | os.PathLike[str],
    *,
    model: str = "",
    voice: str = "",
    sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ,
    timeout_s: float | None = None,
    secure: bool = False,
    root_certificates: bytes | None = None,
) -> ChatResult:
    """Ask the server's LLM (``Chat``) and write the spoken reply to ``path`` atomically;
    for scripts and the CLI (runs its own event loop)."""
    target_path = Path(path)
    fmt = format_from_path(target_path)
    validate_sample_rate(fmt, sample_rate_hz)

    async def ask() -> ChatResult:
        async with SpeechClient(
            target, api_key, channels=1, streams_per_channel=1, secure=secure,
            root_certificates=root_certificates,
        ) as client:  # fmt: skip
            return await client.chat(
                messages, model=model, voice=voice, sample_rate_hz=sample_rate_hz,
                timeout_s=timeout_s,
            )  # fmt: skip

    result = asyncio.run(ask())
    write_atomically(target_path, fmt, sample_rate_hz, result.audio.pcm, None)
    return result


def sync_clock(
    target: str,
    api_key: str,
    *,
    samples: int = DEFAULT_SAMPLES,
    timeout_s: float | None = 5.0,
    secure: bool = False,
    root_certificates: bytes | None = None,
) -> ClockEstimate:
    """The clock offset of the server at ``target`` (server minus client, with its error
    bound): ``samples`` ``Clock`` calls back to back over a blocking channel, the shortest
    round trip kept (``voicelane.client.clock``). Needs no event loop, so it may be called anywhere;
    gRPC failures raise ``grpc.RpcError``."""
    if secure:
        credentials = grpc.ssl_channel_credentials(root_certificates=root_certificates)
        channel = grpc.secure_channel(target, credentials)
    else:
        channel = grpc.insecure_channel(target)
    with channel:
        metadata = (("authorization", f"Bearer {api_key}"),)
        return measure_clock_sync(channel, samples, metadata=metadata, timeout_s=timeout_s)
