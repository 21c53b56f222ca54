"""The real-time lane's client SDK (api.client) against an in-process fake Speech server.

Every test runs its own event loop with an overall timeout; waiting is done on events and
server conditions (:meth:`FakeSpeechServer.wait_until`), never on sleeps; no assertion is on
a duration measured by a clock.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, ParamSpec

import grpc
import numpy as np
import pytest

from api.client import (
    RetryPolicy,
    SpeechClient,
    SynthesisResult,
    say_to_file,
)
from core.audio import open_writer, probe
from core.audio.opus import FRAME_DURATION_MS, OpusStreamDecoder, codec_delay_samples
from core.audio.pcm import PcmF32
from core.errors import RemoteError, VoicelaneError
from core.wire import speech_pb2 as pb
from tests.support.fake_speech_server import (
    API_KEY,
    DropProxy,
    FakeSpeechServer,
    Rendered,
)

P = ParamSpec("P")
TEST_TIMEOUT_S = 20.0
FAST = RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.005, jitter=0.0)
TEXT = "The quick brown fox jumps over the lazy dog."  # 44 chars: 0.44 s at 24 kHz


def async_test(fn: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    """Run the coroutine test in a fresh event loop, failing it after TEST_TIMEOUT_S."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        asyncio.run(asyncio.wait_for(fn(*args, **kwargs), TEST_TIMEOUT_S))

    return run


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


# ---- decoding --------------------------------------------------------------------------------


@pytest.mark.parametrize("rate_hz", [16000, 24000, 48000])
@async_test
async def test_decoded_audio_is_exactly_what_the_server_encoded(rate_hz: int) -> None:
    # 12 frames minus the codec delay: the flush padding covers the delay exactly, so after
    # trimming the delay at the start nothing is missing and nothing is extra.
    frame = rate_hz * FRAME_DURATION_MS // 1000
    samples = 12 * frame - codec_delay_samples(rate_hz)
    async with FakeSpeechServer(fixed_samples=samples) as server, new_client(server.target) as c:
        result = await c.synthesize_pcm(TEXT, sample_rate_hz=rate_hz)
    encoded = only_rendered(server)
    assert result.sample_rate_hz == rate_hz
    assert len(result.pcm) == len(encoded.pcm) == samples
    assert result.duration_s == pytest.approx(samples / rate_hz)
    assert result.pcm.dtype == np.float32
    # Aligned sample for sample: the trim is right (one codec delay off would be noise).
    assert snr_db(result.pcm, encoded.pcm) > 20
    delay = codec_delay_samples(rate_hz)
    assert snr_db(result.pcm[delay:], encoded.pcm[:-delay]) < 6


@async_test
async def test_decoded_length_is_packets_minus_codec_delay_for_any_text_length() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        result = await client.synthesize_pcm(TEXT)
    encoded = only_rendered(server)
    frame, delay = 480, codec_delay_samples(24000)
    assert result.packets == encoded.packets == -(-len(encoded.pcm) // frame)
    assert len(result.pcm) == result.packets * frame - delay
    assert abs(len(result.pcm) - len(encoded.pcm)) < frame
    assert result.chunks == len(encoded.chunks)
    assert [c.text for c in result.captions] == [TEXT]


@async_test
async def test_a_pts_gap_is_concealed_so_audio_stays_on_the_timeline() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        server.lost_seqs = frozenset({3})  # 5 packets (100 ms) never arrive
        result = await client.synthesize_pcm(TEXT * 2)
    encoded = only_rendered(server)
    assert result.concealed_ms == 100
    assert result.packets == encoded.packets - 5
    assert len(result.pcm) == encoded.packets * 480 - codec_delay_samples(24000)
    after_gap = slice(len(result.pcm) - 4800, len(result.pcm) - 480)  # the audio goes on in step
    assert snr_db(result.pcm[after_gap], encoded.pcm[after_gap]) > 20


# ---- retries before the first chunk --------------------------------------------------------


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


# ---- resume after the first chunk ----------------------------------------------------------


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


# ---- the pool ------------------------------------------------------------------------------


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


# ---- list_voices ---------------------------------------------------------------------------


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


# ---- converse ------------------------------------------------------------------------------


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


# ---- figures -------------------------------------------------------------------------------


@async_test
async def test_stats_are_populated_and_consistent() -> None:
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        server.chunk_delay_s = 0.001
        result = await client.synthesize_pcm(TEXT)
    stats = result.stats
    encoded = only_rendered(server)
    assert stats.request_id == encoded.request_id
    assert stats.chunks == len(encoded.chunks) == len(stats.server_delays_ms)
    assert stats.packets == encoded.packets
    assert stats.audio_s == pytest.approx(encoded.packets * 0.02)
    assert (stats.attempts, stats.retries, stats.resumes, stats.backoff_s) == (1, 0, 0, 0.0)
    assert stats.time_to_first_audio_s is not None and stats.time_to_first_audio_s >= 0
    assert stats.elapsed_s is not None and stats.elapsed_s >= stats.time_to_first_audio_s
    assert stats.echo_round_trip_ms is not None and stats.echo_round_trip_ms >= 0
    assert min(stats.server_delays_ms) >= 0  # one host, one clock
    assert stats.server_delay_p50_ms is not None and stats.server_delay_max_ms is not None
    assert stats.slot_wait_s >= 0
    first = server.synthesize_requests[0]
    assert first.client_ts_ms > 0


# ---- files ---------------------------------------------------------------------------------


@pytest.mark.parametrize("extension", ["wav", "ogg", "flac"])
@async_test
async def test_synthesize_to_file_writes_the_decoded_audio(tmp_path: Path, extension: str) -> None:
    path = tmp_path / f"out.{extension}"
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        result = await client.synthesize_to_file(TEXT, path)
    info = probe(path)
    assert info.sample_rate_hz == 24000
    assert info.duration_s == pytest.approx(result.duration_s, abs=0.001)
    assert os.listdir(tmp_path) == [path.name]


@async_test
async def test_synthesize_to_file_leaves_no_partial_file_on_failure(tmp_path: Path) -> None:
    path = tmp_path / "out.wav"
    path.write_bytes(b"previous")
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        server.drop_after_chunks, server.drops, server.expire_outputs = 2, 1, True
        with pytest.raises(RemoteError):
            await client.synthesize_to_file(TEXT * 4, path)
    assert path.read_bytes() == b"previous"
    assert os.listdir(tmp_path) == [path.name]


@async_test
async def test_a_failing_encoder_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "out.ogg"

    def failing_open_writer(*args: Any, **kwargs: Any) -> Any:
        writer = open_writer(*args, **kwargs)

        def write(pcm: PcmF32) -> None:
            writer.__class__.write(writer, pcm[: len(pcm) // 2])  # half of it lands on disk
            raise OSError("disk full")

        writer.write = write  # type: ignore[method-assign]
        return writer

    monkeypatch.setattr("api.client.open_writer", failing_open_writer)
    async with FakeSpeechServer() as server, new_client(server.target) as client:
        with pytest.raises(OSError, match="disk full"):
            await client.synthesize_to_file(TEXT, path)
    assert os.listdir(tmp_path) == []


@async_test
async def test_say_to_file_runs_the_client_in_its_own_loop(tmp_path: Path) -> None:
    path = tmp_path / "say.wav"
    async with FakeSpeechServer() as server:  # served by this loop while say_to_file runs
        result = await asyncio.to_thread(
            say_to_file, server.target, API_KEY, TEXT, path, sample_rate_hz=16000, retry=FAST
        )
    assert result.sample_rate_hz == 16000
    assert probe(path).duration_s == pytest.approx(result.duration_s, abs=0.001)


# ---- policy and error types ----------------------------------------------------------------


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


def test_speech_error_carries_the_status_name() -> None:
    error = RemoteError("UNAVAILABLE", "no  worker\npicked it up")
    assert error.status == error.grpc_status == "UNAVAILABLE"
    assert error.message == "no worker picked it up"
    assert str(error) == "UNAVAILABLE: no worker picked it up"
    assert not error.permanent
    assert RemoteError("INVALID_ARGUMENT", "").permanent
