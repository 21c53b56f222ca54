"""The real-time lane end to end: real redis-server, ``voicelane grpc``, ``voicelane api`` and
GPU worker processes; clients over gRPC, WebSocket and OpenAI's speech API."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
import redis
import websockets

from tests.support.stack import ACME_KEY, ROOT, Stack, wait_for
from voicelane.common.audio import AudioFormat, OpusStreamDecoder, decode_to_pcm
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.lane.keys import heartbeat_key, output_key, owner_key, requests_key
from voicelane.core.lane.messages import lane_request_id
from voicelane.core.redis_server import RedisServer
from voicelane.core.settings import EmbeddedSettings
from voicelane.workers.render import EmbeddedRenderer

ESPEAK_REQUESTS = requests_key("espeak")

pytestmark = pytest.mark.integration

METADATA = (("authorization", f"Bearer {ACME_KEY}"),)
PARAGRAPH = (
    "The committee met on Tuesday to review the budget. 今天的会议讨论了明年的预算。 "
    "Rain is expected in the north, with temperatures around twelve degrees."
)
FAST = {  # no pacing: streams are produced as fast as the engine goes
    "VOICELANE_REALTIME__LOOKAHEAD_S": "1000",
    "VOICELANE_REALTIME__ENCODE_AHEAD_S": "1000",
}
TIMINGS = {
    "VOICELANE_REALTIME__HEARTBEAT_TTL_S": "1",
    "VOICELANE_REALTIME__RECLAIM_IDLE_S": "1",
    "VOICELANE_REALTIME__UNAVAILABLE_AFTER_S": "3",
    "VOICELANE_REALTIME__CLAIM_TIMEOUT_S": "3",
}


def make_lane(tmp_path: Path, **env: str) -> tuple[Stack, RedisServer]:
    redis_server = RedisServer(tmp_path / "redis").start()
    return Stack(
        tmp_path / "lane", redis_server.url, env_overrides={**TIMINGS, **env}
    ), redis_server


@pytest.fixture(scope="module")
def fast_lane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    lane, redis_server = make_lane(tmp_path_factory.mktemp("rt"), **FAST)
    try:
        lane.gpu_worker()
        lane.grpc()
        lane.api()
        lane.wait_realtime_workers()
        yield lane
    finally:
        lane.stop()
        redis_server.stop()


async def collect(target: str, text: str, **kw: object) -> list[pb.AudioChunk]:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.SpeechStub(channel)
        request = pb.SynthesizeRequest(text=text, client_ts_ms=777, **kw)  # type: ignore[arg-type]
        return [c async for c in stub.Synthesize(request, metadata=METADATA, timeout=60)]


def embedded_duration_s(text: str, tmp_path: Path) -> float:
    with EmbeddedRenderer(EmbeddedSettings(engine="espeak", paragraph_pause_s=0)) as renderer:
        return renderer.render(text, tmp_path / "e.wav", fmt=AudioFormat.WAV).duration_s


def test_a_streamed_paragraph_decodes_in_order_and_lasts_as_long_as_a_render(
    fast_lane: Stack, tmp_path: Path
) -> None:
    chunks = asyncio.run(collect(fast_lane.grpc_target, PARAGRAPH))
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert chunks[-1].final and not any(c.final for c in chunks[:-1])
    assert all(c.client_ts_ms == 777 and c.sample_rate_hz == 24000 for c in chunks)
    assert len({c.request_id for c in chunks}) == 1
    packets = [p for c in chunks for p in c.opus_packets]
    pcm = OpusStreamDecoder(24000).decode_all(packets)  # libopus
    streamed_s = len(pcm) / 24000
    assert streamed_s == pytest.approx(embedded_duration_s(PARAGRAPH, tmp_path), rel=0.05)
    captions = [cap.text for c in chunks for cap in c.captions]
    assert captions[0].startswith("The committee met") and len(captions) == 3
    assert float(np.sqrt(np.mean(pcm**2))) > 0.01


def test_an_expired_deadline_is_deadline_exceeded_and_never_queued(fast_lane: Stack) -> None:
    client = redis.Redis.from_url(fast_lane.redis_url)
    before = client.xlen(ESPEAK_REQUESTS)

    async def go() -> grpc.StatusCode:
        async with grpc.aio.insecure_channel(fast_lane.grpc_target) as channel:
            stub = pb_grpc.SpeechStub(channel)
            try:
                async for _ in stub.Synthesize(
                    pb.SynthesizeRequest(text="Too late."), metadata=METADATA, timeout=0.001
                ):
                    pass
            except grpc.aio.AioRpcError as error:
                return error.code()
        return grpc.StatusCode.OK

    assert asyncio.run(go()) is grpc.StatusCode.DEADLINE_EXCEEDED
    assert client.xlen(ESPEAK_REQUESTS) == before


def test_websocket_twin_streams_opus_packets(fast_lane: Stack) -> None:
    async def go() -> tuple[list[dict[str, object]], list[bytes]]:
        url = f"ws://127.0.0.1:{fast_lane.api_port}/v1/stream"
        events: list[dict[str, object]] = []
        packets: list[bytes] = []
        async with websockets.connect(
            url, additional_headers={"Authorization": f"Bearer {ACME_KEY}"}
        ) as socket:
            await socket.send(json.dumps({"text": PARAGRAPH, "sample_rate_hz": 16000}))
            async for message in socket:
                if isinstance(message, bytes):
                    packets.append(message)
                else:
                    events.append(json.loads(message))
        return events, packets

    events, packets = asyncio.run(go())
    assert events[0]["type"] == "start" and events[-1]["type"] == "end"
    audio = [e for e in events if e["type"] == "audio"]
    assert [e["seq"] for e in audio] == list(range(len(audio)))
    assert sum(int(e["packets"]) for e in audio) == len(packets)  # type: ignore[call-overload]
    pcm = OpusStreamDecoder(16000).decode_all(packets)
    assert len(pcm) / 16000 > 5


def test_websocket_refuses_a_bad_key_and_bad_input(fast_lane: Stack) -> None:
    async def first_event(headers: dict[str, str], body: str) -> tuple[dict[str, object], int]:
        url = f"ws://127.0.0.1:{fast_lane.api_port}/v1/stream"
        async with websockets.connect(url, additional_headers=headers) as socket:
            with contextlib.suppress(websockets.ConnectionClosed):
                await socket.send(body)  # a bad header key is refused before it is read
            event = json.loads(await socket.recv())
            await socket.wait_closed()
            return event, socket.close_code or 0

    event, code = asyncio.run(
        first_event({"Authorization": "Bearer nope-nope-nope"}, json.dumps({"text": "Hi."}))
    )
    assert event["code"] == "UNAUTHENTICATED" and code == 1008
    event, code = asyncio.run(
        first_event({"Authorization": f"Bearer {ACME_KEY}"}, json.dumps({"text": ""}))
    )
    assert event["code"] == "INVALID_ARGUMENT" and code == 1008


@pytest.mark.parametrize("fmt", ["mp3", "opus", "wav", "flac", "pcm"])
def test_openai_compatible_speech_streams_each_format(
    fast_lane: Stack, tmp_path: Path, fmt: str
) -> None:
    with httpx.stream(
        "POST",
        f"{fast_lane.api_url}/v1/audio/speech",
        headers={"Authorization": f"Bearer {ACME_KEY}"},
        json={"model": "tts-1", "input": PARAGRAPH, "voice": "alloy", "response_format": fmt},
        timeout=60,
    ) as response:
        assert response.status_code == 200, response.read()
        body = b"".join(response.iter_bytes())
    if fmt == "pcm":
        duration_s = len(body) / 2 / 24000
    else:
        path = tmp_path / f"speech.{fmt}"
        path.write_bytes(body)
        pcm, rate = decode_to_pcm(path)
        duration_s = len(pcm) / rate
    assert duration_s == pytest.approx(embedded_duration_s(PARAGRAPH, tmp_path), rel=0.06)


def test_openai_speech_refuses_bad_input_with_json(fast_lane: Stack) -> None:
    response = httpx.post(
        f"{fast_lane.api_url}/v1/audio/speech",
        headers={"Authorization": f"Bearer {ACME_KEY}"},
        json={"input": "Hi.", "response_format": "ogg"},
        timeout=30,
    )
    assert response.status_code == 400  # OpenAI's status and shape (issue 24; was 422)
    error = response.json()["error"]
    assert "ogg" in error["message"] and error["param"] == "response_format"
    response = httpx.post(f"{fast_lane.api_url}/v1/audio/speech", json={"input": "Hi."}, timeout=30)
    assert response.status_code == 401


def test_say_through_the_server_writes_the_streamed_audio(fast_lane: Stack, tmp_path: Path) -> None:
    out = tmp_path / "said.wav"
    done = subprocess.run(
        [sys.executable, "-m", "voicelane.api.cli", "say", PARAGRAPH, "-o", str(out), "--server",
         fast_lane.grpc_target, "--key", ACME_KEY],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=False,
        env={**fast_lane.env},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "first audio after" in done.stdout
    pcm, rate = decode_to_pcm(out)
    assert len(pcm) / rate == pytest.approx(embedded_duration_s(PARAGRAPH, tmp_path), rel=0.05)


def test_cancel_mid_stream_stops_the_worker(tmp_path: Path) -> None:
    lane, redis_server = make_lane(tmp_path, VOICELANE_REALTIME__LOOKAHEAD_S="0.5")
    try:
        lane.gpu_worker()
        lane.grpc()
        lane.wait_realtime_workers()
        client = redis.Redis.from_url(lane.redis_url)

        async def go() -> str:
            async with grpc.aio.insecure_channel(lane.grpc_target) as channel:
                stub = pb_grpc.SpeechStub(channel)
                call = stub.Synthesize(
                    pb.SynthesizeRequest(text=PARAGRAPH * 4), metadata=METADATA, timeout=60
                )
                first = await anext(aiter(call))
                call.cancel()
                return first.request_id

        lane_id = lane_request_id("acme", asyncio.run(go()))  # the stream's id in the lane
        key = output_key(lane_id)

        def stopped() -> bool:  # the session ended: its heartbeat is gone
            return not client.exists(heartbeat_key(lane_id))

        wait_for(stopped, 10, "the worker to drop the cancelled stream")
        length = client.xlen(key)
        assert length > 0  # the output the client got before it left
        time.sleep(1.0)  # nothing more may be written after the stop
        assert client.xlen(key) == length
        kinds = [f[b"kind"] for _, f in client.xrange(key)]  # type: ignore[union-attr,index]
        assert b"end" not in kinds
    finally:
        lane.stop()
        redis_server.stop()


def test_over_capacity_is_resource_exhausted_at_once(tmp_path: Path) -> None:
    lane, redis_server = make_lane(
        tmp_path,
        VOICELANE_REALTIME__SLOTS_PER_WORKER="1",
        VOICELANE_REALTIME__LOOKAHEAD_S="0.5",
    )
    try:
        lane.gpu_worker()
        lane.grpc()
        lane.wait_realtime_workers()

        async def go() -> tuple[grpc.StatusCode, float]:
            async with grpc.aio.insecure_channel(lane.grpc_target) as channel:
                stub = pb_grpc.SpeechStub(channel)
                long_call = stub.Synthesize(
                    pb.SynthesizeRequest(text=PARAGRAPH * 4), metadata=METADATA, timeout=60
                )
                await anext(aiter(long_call))  # holds the only slot
                await asyncio.sleep(1.2)  # the worker's next capacity report says 0 free
                started = time.monotonic()
                try:
                    async for _ in stub.Synthesize(
                        pb.SynthesizeRequest(text="One more."), metadata=METADATA, timeout=30
                    ):
                        pass
                except grpc.aio.AioRpcError as error:
                    long_call.cancel()
                    return error.code(), time.monotonic() - started
                long_call.cancel()
                return grpc.StatusCode.OK, time.monotonic() - started

        code, waited_s = asyncio.run(go())
        assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert waited_s < 2.0  # at once: not a slow timeout
    finally:
        lane.stop()
        redis_server.stop()


def test_sigkill_of_the_serving_worker_mid_stream(tmp_path: Path) -> None:
    lane, redis_server = make_lane(tmp_path, VOICELANE_REALTIME__LOOKAHEAD_S="0.5")
    try:
        workers = {"gpu-a@test": lane.gpu_worker("gpu-a"), "gpu-b@test": lane.gpu_worker("gpu-b")}
        lane.grpc()
        lane.wait_realtime_workers(2)
        client = redis.Redis.from_url(lane.redis_url)

        async def go() -> tuple[list[pb.AudioChunk], grpc.StatusCode | None, float]:
            chunks: list[pb.AudioChunk] = []
            killed_at = 0.0
            async with grpc.aio.insecure_channel(lane.grpc_target) as channel:
                stub = pb_grpc.SpeechStub(channel)
                call = stub.Synthesize(
                    pb.SynthesizeRequest(text=PARAGRAPH * 3), metadata=METADATA, timeout=90
                )
                try:
                    async for chunk in call:
                        chunks.append(chunk)
                        if len(chunks) == 10:
                            owner = client.get(owner_key(lane_request_id("acme", chunk.request_id)))
                            assert owner is not None
                            workers[owner.decode()].kill()  # type: ignore[union-attr]
                            killed_at = time.monotonic()
                except grpc.aio.AioRpcError as error:
                    return chunks, error.code(), time.monotonic() - killed_at
            return chunks, None, 0.0

        chunks, code, after_kill_s = asyncio.run(go())
        seqs = [c.seq for c in chunks]
        assert seqs == list(range(len(seqs)))  # no duplicate, no missing seq
        if code is None:
            assert chunks[-1].final  # completed by the surviving worker
        else:
            assert code is grpc.StatusCode.UNAVAILABLE and after_kill_s < 5.0
    finally:
        lane.stop()
        redis_server.stop()
