"""The SDK's Converse sessions (voicelane.client.converse), against the fake Speech server (see
helpers.py for the rules every test here follows)."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.fake_speech_server import FakeSpeechServer
from tests.unit.client.helpers import async_test, decode_reference, new_client, seqs
from voicelane.common.audio.opus import codec_delay_samples
from voicelane.common.errors import RemoteError
from voicelane.common.wire import speech_pb2 as pb


@async_test
async def test_converse_round_trip_while_text_still_arrives() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        session = client.converse(sample_rate_hz=24000)
        received: list[pb.AudioChunk] = []
        first_audio = asyncio.Event()

        async def listen() -> None:
            async for chunk in session:
                received.append(chunk)
                first_audio.set()

        async with session:
            listener = asyncio.create_task(listen())
            await session.send("Hello there. How ")
            await asyncio.wait_for(first_audio.wait(), 5)  # spoken before the rest is sent
            await session.send("are you")
            await session.flush()
            await session.send("?")
            await session.end()
            await listener
    assert seqs(received) == list(range(len(received)))
    assert received[-1].final and not any(c.final for c in received[:-1])
    captions = [c for chunk in received for c in chunk.captions]
    assert [c.text for c in captions] == ["Hello there.", "How are you", "?"]
    assert [c.sentence for c in captions] == [0, 1, 2]
    packets = sum(len(c.opus_packets) for c in received)
    (samples,) = server.converse_samples
    assert packets == -(-samples // 480)
    assert len(decode_reference(received, 24000)) == packets * 480 - codec_delay_samples(24000)
    stats = session.stats
    assert stats.chunks == len(received) and stats.packets == packets
    assert stats.time_to_first_audio_s is not None and stats.time_to_first_audio_s >= 0
    assert client.channel_loads() == (0, 0, 0, 0)


@async_test
async def test_converse_is_retried_while_no_text_was_sent() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        server.fail_first_calls = 1
        async with client.converse() as session:
            await server.wait_until(lambda s: s.calls["Converse"] == 2)  # the retry is open
            await session.send("Hello there.")
            await session.end()
            chunks = [chunk async for chunk in session]
    assert chunks[-1].final and chunks[0].captions[0].text == "Hello there."
    assert (session.stats.attempts, session.stats.retries) == (2, 1)


@async_test
async def test_converse_is_not_retried_once_text_was_sent() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        server.converse_fail_after_text = True
        async with client.converse() as session:
            await session.send("Hello there.")
            with pytest.raises(RemoteError) as caught:
                [chunk async for chunk in session]
            with pytest.raises(RemoteError):
                await session.send("More.")
    assert caught.value.status == "UNAVAILABLE"
    assert server.calls["Converse"] == 1
    assert session.stats.retries == 0
