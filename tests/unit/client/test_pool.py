"""The SDK's channel pool and flow control (voicelane.client.pool), against the fake Speech server
(see helpers.py for the rules every test here follows)."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.fake_speech_server import FakeSpeechServer
from tests.unit.client.helpers import TEXT, async_test, collect, new_client
from voicelane.client import SynthesisResult
from voicelane.common.errors import RemoteError


@async_test
async def test_flow_control_caps_concurrent_streams_and_everyone_finishes() -> None:
    async with FakeSpeechServer() as server:
        server.hold = asyncio.Event()
        async with new_client(server.target, channels=2, streams_per_channel=2) as client:
            calls = [asyncio.create_task(client.synthesize_pcm(f"{TEXT} {i}")) for i in range(10)]
            await server.wait_until(lambda s: s.active_streams == 4)
            assert client.channel_loads() == (2, 2)
            assert client.waiting == 6
            server.hold.set()
            results: list[SynthesisResult] = await asyncio.gather(*calls)
            assert client.channel_loads() == (0, 0)
    assert server.peak_streams == 4
    assert server.calls["Synthesize"] == 10
    for i, result in enumerate(results):
        expected = -(-len(f"{TEXT} {i}") * 240 // 480)
        assert result.packets == expected


@async_test
async def test_new_streams_go_to_the_least_loaded_channel_each_its_own_connection() -> None:
    async with FakeSpeechServer() as server:
        server.hold = asyncio.Event()
        async with new_client(server.target, channels=3, streams_per_channel=4) as client:
            calls = [asyncio.create_task(collect(client, TEXT)) for _ in range(3)]
            await server.wait_until(lambda s: s.active_streams == 3)
            assert client.channel_loads() == (1, 1, 1)
            assert len(set(server.peers)) == 3  # three HTTP/2 connections, not one shared
            calls += [asyncio.create_task(collect(client, TEXT)) for _ in range(2)]
            await server.wait_until(lambda s: s.active_streams == 5)
            assert client.channel_loads() == (2, 2, 1)
            server.hold.set()
            await asyncio.gather(*calls)
            assert client.channel_loads() == (0, 0, 0)


@async_test
async def test_leaving_a_stream_early_frees_its_slot() -> None:
    async with FakeSpeechServer() as server, new_client(server.target, channels=1) as client:
        async with client.synthesize(TEXT * 4) as stream:
            first = await anext(stream)
            assert client.channel_loads() == (1,)
        assert first.seq == 0
        assert client.channel_loads() == (0,)
        await server.wait_until(lambda s: s.active_streams == 0)


@async_test
async def test_a_waiter_cancelled_in_the_queue_takes_no_slot() -> None:
    async with FakeSpeechServer() as server:
        server.hold = asyncio.Event()
        async with new_client(server.target, channels=1, streams_per_channel=1) as client:
            running = asyncio.create_task(collect(client, TEXT))
            await server.wait_until(lambda s: s.active_streams == 1)
            # Queued behind the held stream, it cannot finish whatever the timing: the
            # timeout only decides when it is cancelled while waiting for a slot.
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(collect(client, TEXT), 0.05)
            assert client.waiting == 0
            server.hold.set()
            await running
            assert client.channel_loads() == (0,)
            assert (await collect(client, TEXT))[-1].final


@async_test
async def test_closing_the_client_ends_open_and_waiting_streams_with_cancelled() -> None:
    async with FakeSpeechServer() as server:
        server.hold = asyncio.Event()
        client = new_client(server.target, channels=1, streams_per_channel=1)
        running = asyncio.create_task(collect(client, TEXT))
        await server.wait_until(lambda s: s.active_streams == 1)
        waiting = asyncio.create_task(collect(client, TEXT))
        session = client.converse()
        opening = asyncio.create_task(session.open())
        await client.close()
        for task in (running, waiting, opening):
            with pytest.raises(RemoteError) as caught:
                await task
            assert caught.value.status == "CANCELLED"


@async_test
async def test_the_deadline_bounds_the_wait_for_a_slot() -> None:
    async with FakeSpeechServer() as server:
        server.hold = asyncio.Event()
        async with new_client(server.target, channels=1, streams_per_channel=1) as client:
            running = asyncio.create_task(collect(client, TEXT))
            await server.wait_until(lambda s: s.active_streams == 1)
            with pytest.raises(RemoteError) as caught:
                await collect(client, TEXT, timeout_s=0.05)
            assert caught.value.status == "DEADLINE_EXCEEDED"
            assert client.waiting == 0
            server.hold.set()
            await running
    assert server.calls["Synthesize"] == 1


@async_test
async def test_a_closed_client_refuses_new_calls() -> None:
    async with FakeSpeechServer() as server:
        client = new_client(server.target)
        await client.close()
        with pytest.raises(RemoteError) as caught:
            client.synthesize(TEXT)
    assert caught.value.status == "CANCELLED"


@async_test
async def test_a_chat_holds_a_slot_like_any_stream() -> None:
    async with FakeSpeechServer() as server:
        server.hold = asyncio.Event()
        async with new_client(server.target, channels=1, streams_per_channel=1) as client:
            stream = asyncio.create_task(client.synthesize_pcm(TEXT))
            await server.wait_until(lambda s: s.active_streams == 1)
            chat = asyncio.create_task(client.chat([("user", "hello")]))
            while client.waiting == 0:  # the chat waits for the stream's slot
                await asyncio.sleep(0.001)
            assert server.calls["Chat"] == 0
            server.hold.set()
            await stream
            result = await chat
            assert client.channel_loads() == (0,)
    assert result.text == "You said: hello."
    assert result.stats.done_reason == "stop"
    assert result.audio.packets > 0
    assert result.spoken_text == "You said: hello."
