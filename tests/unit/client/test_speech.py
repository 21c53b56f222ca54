"""The SpeechClient's channel options, list_voices and its error type (voicelane.client.speech),
against the fake Speech server (see helpers.py for the rules every test here follows)."""

from __future__ import annotations

from tests.support.fake_speech_server import FakeSpeechServer
from tests.unit.client.helpers import TEXT, async_test, new_client
from voicelane.client import SpeechClient

# ---- options ---------------------------------------------------------------------------------


def test_channel_options_carry_keepalive_and_message_size() -> None:
    client = SpeechClient(
        "localhost:1", "k", keepalive_time_s=20, max_receive_message_bytes=1 << 20
    )
    options = dict(client.channel_options)
    assert options["grpc.keepalive_time_ms"] == 20000
    assert options["grpc.keepalive_timeout_ms"] == 10000
    assert options["grpc.keepalive_permit_without_calls"] == 0
    assert options["grpc.http2.max_pings_without_data"] == 0
    assert options["grpc.max_receive_message_length"] == 1 << 20
    assert options["grpc.use_local_subchannel_pool"] == 1


# ---- list_voices -----------------------------------------------------------------------------


@async_test
async def test_list_voices_is_retried_and_typed() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        server.fail_first_calls = 1
        voices = await client.list_voices()
    assert [(v.id, v.languages, v.engine) for v in voices] == [
        ("auto", ("en", "zh"), "fake"),
        ("en-1", ("en",), "fake"),
    ]
    assert server.calls["ListVoices"] == 2


# ---- error type ------------------------------------------------------------------------------


@async_test
async def test_the_text_options_reach_the_request_only_when_given() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        await client.synthesize_pcm(TEXT)
        await client.synthesize_pcm(TEXT, normalize=False, ssml=True, lexicons=[])
        await client.synthesize_pcm(TEXT, lexicons=["names", "places"])
    plain, chosen, named = server.synthesize_requests
    assert not any(plain.HasField(f) for f in ("normalize", "ssml", "lexicons"))
    assert chosen.HasField("normalize") and not chosen.normalize
    assert chosen.HasField("ssml") and chosen.ssml
    assert chosen.HasField("lexicons") and list(chosen.lexicons.names) == []  # none at all
    assert list(named.lexicons.names) == ["names", "places"] and not named.HasField("ssml")
