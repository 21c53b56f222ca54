"""Blocking helpers for scripts and the CLI: each runs its own event loop."""

from __future__ import annotations

import asyncio
import os

from client.audio import SynthesisResult
from client.retry import DEFAULT_RETRY, RetryPolicy
from client.speech import SpeechClient
from core.rules import DEFAULT_SAMPLE_RATE_HZ


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
) -> SynthesisResult:
    """Speak ``text`` on the server at ``target`` into ``path``; for scripts and the CLI.

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
            )

    return asyncio.run(speak())
