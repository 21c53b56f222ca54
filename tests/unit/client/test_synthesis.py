"""The SDK resuming a Synthesize stream after its first chunk (voicelane.client.synthesis), against
the fake Speech server (see helpers.py for the rules every test here follows)."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest

from tests.support.fake_speech_server import DropProxy, FakeSpeechServer
from tests.unit.client.helpers import (
    TEXT,
    async_test,
    collect,
    decode_reference,
    new_client,
    only_rendered,
    seqs,
)
from voicelane.client import RetryPolicy
from voicelane.common.errors import RemoteError
from voicelane.common.wire import speech_pb2 as pb


@async_test
async def test_resume_after_a_midstream_unavailable_gives_every_chunk_once() -> None:
    text = TEXT * 4  # 1.76 s: 89 packets, 19 chunks
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        server.drop_after_chunks, server.drops = 3, 1
        stream = client.synthesize(text)
        chunks = [chunk async for chunk in stream]
    encoded = only_rendered(server)
    assert seqs(chunks) == list(range(len(encoded.chunks)))
    first, resume = server.synthesize_requests
    assert resume.request_id == encoded.request_id == chunks[0].request_id
    assert resume.HasField("resume_after_seq") and resume.resume_after_seq == 2
    assert resume.text == first.text
    assert (stream.stats.attempts, stream.stats.retries, stream.stats.resumes) == (2, 0, 1)
    pcm = decode_reference(chunks, 24000)
    assert np.array_equal(pcm, decode_reference(encoded.chunks, 24000))


@async_test
async def test_a_stream_that_ends_without_its_final_chunk_is_resumed() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        server.drop_after_chunks, server.drops, server.drop_code = 3, 1, None
        stream = client.synthesize(TEXT * 2)
        chunks = [chunk async for chunk in stream]
    assert seqs(chunks) == list(range(len(only_rendered(server).chunks)))
    assert chunks[-1].final and stream.stats.resumes == 1


@async_test
async def test_a_midstream_error_other_than_unavailable_is_not_resumed() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        server.drop_after_chunks, server.drops = 3, 1
        server.drop_code = grpc.StatusCode.INTERNAL
        with pytest.raises(RemoteError) as caught:
            await collect(client, TEXT * 2)
    assert caught.value.status == "INTERNAL"
    assert server.calls["Synthesize"] == 1


@async_test
async def test_chunks_repeated_by_a_resume_are_dropped() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        server.drop_after_chunks, server.drops, server.resume_overlap = 4, 1, 3
        result = await client.synthesize_pcm(TEXT * 3)
    encoded = only_rendered(server)
    assert result.chunks == len(encoded.chunks) and result.packets == encoded.packets
    assert np.array_equal(result.pcm, decode_reference(encoded.chunks, 24000))


@async_test
async def test_a_resume_that_makes_progress_starts_a_fresh_attempt_budget() -> None:
    policy = RetryPolicy(max_attempts=2, initial_backoff_s=0.001, max_backoff_s=0.001)
    async with FakeSpeechServer() as server, new_client(server.target, retry=policy) as client:
        server.drop_after_chunks, server.drops = 2, 6  # every attempt brings 2 chunks, 6 times
        stream = client.synthesize(TEXT * 4)
        chunks = [chunk async for chunk in stream]
    assert seqs(chunks) == list(range(len(only_rendered(server).chunks)))
    assert stream.stats.resumes == 6


@async_test
async def test_a_resume_answered_not_found_raises() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        server.drop_after_chunks, server.drops, server.expire_outputs = 3, 1, True
        received: list[pb.AudioChunk] = []
        with pytest.raises(RemoteError) as caught:
            async with client.synthesize(TEXT * 4) as stream:
                async for chunk in stream:
                    received.append(chunk)
    assert caught.value.status == "NOT_FOUND"
    assert "expired" in caught.value.message
    assert seqs(received) == [0, 1, 2]
    assert server.calls["Synthesize"] == 2


@async_test
async def test_a_dropped_connection_is_resumed_on_a_new_connection() -> None:
    async with FakeSpeechServer() as server, DropProxy(server.port) as proxy:
        server.pause_after_chunks = 3
        async with new_client(proxy.target, channels=1) as client:
            stream = client.synthesize(TEXT * 4)
            received = [await anext(stream) for _ in range(3)]
            await asyncio.wait_for(server.paused.wait(), 5)
            server.pause_after_chunks = None
            proxy.drop()  # TCP reset mid-stream, both sides
            received += [chunk async for chunk in stream]
            server.unpause.set()
    encoded = only_rendered(server)
    assert seqs(received) == list(range(len(encoded.chunks)))
    assert stream.stats.resumes == 1
    assert proxy.connections == 2
    assert server.synthesize_requests[-1].resume_after_seq == 2


@async_test
async def test_a_restarted_front_is_resumed_on_the_new_process() -> None:
    first = FakeSpeechServer()
    await first.start()
    first.pause_after_chunks = 3
    async with new_client(first.target, channels=1) as client:
        stream = client.synthesize(TEXT * 4)
        received = [await anext(stream) for _ in range(3)]
        await asyncio.wait_for(first.paused.wait(), 5)
        await first.stop()  # GOAWAY, calls cancelled: UNAVAILABLE on the client
        async with FakeSpeechServer(port=first.port, state=first.state) as second:
            received += [chunk async for chunk in stream]
    assert seqs(received) == list(range(len(only_rendered(first).chunks)))
    assert stream.stats.resumes == 1
    (resume,) = second.synthesize_requests
    assert resume.resume_after_seq == 2
