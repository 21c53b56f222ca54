"""voicelane.client.failure: a failed call's RemoteError carries the server's code, field and
retry hint (its trailing metadata), on every kind of call and after retries too."""

from __future__ import annotations

import grpc
import pytest

from tests.support.fake_speech_server import FakeSpeechServer
from tests.unit.client.helpers import TEXT, async_test, collect, new_client
from voicelane.client import RetryPolicy
from voicelane.common.error_wire import CODE_KEY, FIELD_KEY, RETRY_AFTER_MS_KEY
from voicelane.common.errors import RemoteError, exit_status

UNKNOWN_VOICE = ((CODE_KEY, "unknown_voice"), (FIELD_KEY, "voice"))
FULL = ((CODE_KEY, "store_full"), (RETRY_AFTER_MS_KEY, "30000"))


def refuse(
    server: FakeSpeechServer, code: grpc.StatusCode, trailers: tuple[tuple[str, str], ...]
) -> None:
    server.fail_first_calls = 100
    server.fail_code = code
    server.fail_trailers = trailers


@async_test
async def test_synthesize_raises_the_servers_code_and_field() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        refuse(server, grpc.StatusCode.INVALID_ARGUMENT, UNKNOWN_VOICE)
        with pytest.raises(RemoteError) as caught:
            await collect(client, TEXT)
    error = caught.value
    assert (error.status, error.code, error.field, error.retry_after_s) == (
        "INVALID_ARGUMENT",
        "unknown_voice",
        "voice",
        None,
    )
    assert error.permanent and exit_status(error) == 2
    assert server.calls["Synthesize"] == 1


@async_test
async def test_the_retry_hint_survives_the_retries() -> None:
    policy = RetryPolicy(
        max_attempts=2, initial_backoff_s=0.001, max_backoff_s=0.001, retry_resource_exhausted=True
    )
    async with FakeSpeechServer() as server, new_client(server.target, retry=policy) as client:
        refuse(server, grpc.StatusCode.RESOURCE_EXHAUSTED, FULL)
        with pytest.raises(RemoteError) as caught:
            await collect(client, TEXT)
    error = caught.value
    assert (error.status, error.code, error.retry_after_s) == (
        "RESOURCE_EXHAUSTED",
        "store_full",
        30.0,
    )
    assert "gave up after 2 attempts" in error.message
    assert server.calls["Synthesize"] == 2


@async_test
async def test_converse_chat_and_list_voices_raise_it_too() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        refuse(server, grpc.StatusCode.INVALID_ARGUMENT, UNKNOWN_VOICE)
        errors = []
        with pytest.raises(RemoteError) as conversing:
            async with client.converse() as session:
                [chunk async for chunk in session]
        errors.append(conversing.value)
        with pytest.raises(RemoteError) as chatting:
            await client.chat([("user", "Hi.")])
        errors.append(chatting.value)
        with pytest.raises(RemoteError) as listing:
            await client.list_voices()
        errors.append(listing.value)
    for error in errors:
        assert (error.status, error.code, error.field) == (
            "INVALID_ARGUMENT",
            "unknown_voice",
            "voice",
        )


@async_test
async def test_a_server_that_sends_no_code() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        refuse(server, grpc.StatusCode.INVALID_ARGUMENT, ())
        with pytest.raises(RemoteError) as caught:
            await collect(client, TEXT)
    assert (caught.value.code, caught.value.field) == ("remote_error", None)
    assert str(caught.value) == "INVALID_ARGUMENT: fake failure of Synthesize (knob)"
