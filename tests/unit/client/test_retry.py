"""The SDK's retries before the first chunk, the call deadline and the retry policy
(voicelane.client.retry), against the fake Speech server (see helpers.py for the rules every test
here follows)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import grpc
import pytest

from tests.support.fake_speech_server import API_KEY, FakeSpeechServer
from tests.unit.client.helpers import TEXT, async_test, collect, new_client, only_rendered, seqs
from voicelane.client import RetryPolicy
from voicelane.common.errors import RemoteError, VoicelaneError

# ---- retries before the first chunk ----------------------------------------------------------


@async_test
async def test_unavailable_before_the_first_chunk_is_retried_with_backoff() -> None:
    policy = RetryPolicy(initial_backoff_s=0.002, multiplier=2.0, max_backoff_s=1.0, jitter=0)
    server = FakeSpeechServer()
    async with server, new_client(server.target, retry=policy, channels=2) as client:
        server.fail_first_calls = 3
        stream = client.synthesize(TEXT)
        chunks = [chunk async for chunk in stream]
    assert server.calls["Synthesize"] == 4
    assert server.peers[0] != server.peers[1]  # a retry moves to the other channel
    stats = stream.stats
    assert (stats.attempts, stats.retries, stats.resumes) == (4, 3, 0)
    assert stats.backoff_s == pytest.approx(0.002 + 0.004 + 0.008)
    # every retry was a new request, not a resume
    assert all(
        not r.request_id and not r.HasField("resume_after_seq") for r in server.synthesize_requests
    )
    assert seqs(chunks) == list(range(len(only_rendered(server).chunks)))


@async_test
async def test_retries_stop_after_max_attempts() -> None:
    policy = RetryPolicy(max_attempts=3, initial_backoff_s=0.001, max_backoff_s=0.001)
    async with FakeSpeechServer() as server, new_client(server.target, retry=policy) as client:
        server.fail_first_calls = 10
        with pytest.raises(RemoteError) as caught:
            await collect(client, TEXT)
    assert caught.value.status == "UNAVAILABLE"
    assert "3 attempts" in caught.value.message
    assert server.calls["Synthesize"] == 3


@pytest.mark.parametrize("retry_it", [False, True])
@async_test
async def test_resource_exhausted_is_retried_only_when_asked(retry_it: bool) -> None:
    policy = RetryPolicy(
        initial_backoff_s=0.001, max_backoff_s=0.001, retry_resource_exhausted=retry_it
    )
    async with FakeSpeechServer() as server, new_client(server.target, retry=policy) as client:
        server.fail_first_calls = 1
        server.fail_code = grpc.StatusCode.RESOURCE_EXHAUSTED
        if retry_it:
            chunks = await collect(client, TEXT)
            assert chunks[-1].final
        else:
            with pytest.raises(RemoteError) as caught:
                await collect(client, TEXT)
            assert caught.value.status == "RESOURCE_EXHAUSTED"
    assert server.calls["Synthesize"] == (2 if retry_it else 1)


@pytest.mark.parametrize(
    ("text", "api_key", "code"),
    [("", API_KEY, "INVALID_ARGUMENT"), (TEXT, "wrong-key", "UNAUTHENTICATED")],
)
@async_test
async def test_non_retryable_codes_raise_at_once(text: str, api_key: str, code: str) -> None:
    async with FakeSpeechServer() as server, new_client(server.target, api_key=api_key) as c:
        with pytest.raises(RemoteError) as caught:
            await collect(c, text)
    assert caught.value.status == code
    assert caught.value.permanent
    assert isinstance(caught.value, VoicelaneError)
    assert server.calls["Synthesize"] == 1


@async_test
async def test_the_deadline_bounds_the_whole_call() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        server.hold = asyncio.Event()  # never set: no chunk ever comes
        with pytest.raises(RemoteError) as caught:
            await collect(client, TEXT, timeout_s=0.2)
    assert caught.value.status == "DEADLINE_EXCEEDED"


# ---- policy ----------------------------------------------------------------------------------


def test_backoff_grows_caps_and_jitters_within_bounds() -> None:
    policy = RetryPolicy(initial_backoff_s=0.1, max_backoff_s=0.5, multiplier=2.0, jitter=0.0)
    assert [policy.backoff_s(n) for n in range(1, 6)] == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])
    jittered = RetryPolicy(initial_backoff_s=0.1, jitter=0.2)
    rng = random.Random(7)
    waits = [jittered.backoff_s(1, rng) for _ in range(200)]
    assert 0.08 <= min(waits) < max(waits) <= 0.12


@pytest.mark.parametrize(
    "options",
    [{"max_attempts": 0}, {"initial_backoff_s": 3.0}, {"multiplier": 0.5}, {"jitter": 1.0}],
)
def test_retry_policy_rejects_nonsense(options: dict[str, Any]) -> None:
    with pytest.raises(VoicelaneError):
        RetryPolicy(**options)
