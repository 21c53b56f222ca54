"""What the client SDK's tests share: a loop per test with a timeout, a client with fast
retries, and references to compare the decoded audio with.

The tests run the SDK against an in-process fake Speech server
(:mod:`tests.support.fake_speech_server`). Every test runs its own event loop with an overall
timeout; waiting is done on events and server conditions (:meth:`FakeSpeechServer.wait_until`),
never on sleeps; no assertion is on a duration measured by a clock.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.support.aio import async_test_with
from tests.support.fake_speech_server import API_KEY, FakeSpeechServer, Rendered
from voicelane.client import RetryPolicy, SpeechClient
from voicelane.common.audio.opus import OpusStreamDecoder, codec_delay_samples
from voicelane.common.audio.pcm import PcmF32
from voicelane.common.wire import speech_pb2 as pb

TEST_TIMEOUT_S = 20.0
FAST = RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.005, jitter=0.0)
TEXT = "The quick brown fox jumps over the lazy dog."  # 44 chars: 0.44 s at 24 kHz


async_test = async_test_with(TEST_TIMEOUT_S)
"""Run the coroutine test in a fresh event loop, failing it after TEST_TIMEOUT_S."""


def new_client(target: str, *, api_key: str = API_KEY, **options: Any) -> SpeechClient:
    options.setdefault("retry", FAST)
    options.setdefault("default_timeout_s", 10.0)
    return SpeechClient(target, api_key, **options)


def only_rendered(server: FakeSpeechServer) -> Rendered:
    (rendered,) = server.state.rendered.values()
    return rendered


def decode_reference(chunks: list[pb.AudioChunk], sample_rate_hz: int) -> PcmF32:
    """What a client should get: every packet decoded in order, codec delay trimmed."""
    decoder = OpusStreamDecoder(sample_rate_hz)
    pcm = decoder.decode_all(p for c in chunks for p in c.opus_packets)
    return pcm[codec_delay_samples(sample_rate_hz) :]


def snr_db(signal: PcmF32, reference: PcmF32) -> float:
    noise = float(np.sum((signal - reference) ** 2))
    return 10 * float(np.log10(float(np.sum(reference**2)) / noise))


async def collect(client: SpeechClient, text: str, **options: Any) -> list[pb.AudioChunk]:
    async with client.synthesize(text, **options) as stream:
        return [chunk async for chunk in stream]


def seqs(chunks: list[pb.AudioChunk]) -> list[int]:
    return [c.seq for c in chunks]
