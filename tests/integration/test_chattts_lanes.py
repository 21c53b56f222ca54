"""The ChatTTS engine (tiny random-weight checkpoint, CPU) serving both lanes end to end:
a batch job over REST and a real-time stream over gRPC, through real worker processes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from tests.integration.test_batch_lane import wait_final
from tests.support.chattts_checkpoint import build_checkpoint
from tests.support.stack import ACME_KEY, Stack
from tests.unit.workers.engines.conftest import require_chattts_extra
from voicelane.api.ollama_standin import OllamaStandin, StandinConfig
from voicelane.common.audio import OpusStreamDecoder, probe
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def standin() -> Iterator[OllamaStandin]:
    with OllamaStandin(StandinConfig(tokens_per_s=0)) as server:
        yield server


@pytest.fixture(scope="module")
def chattts_lane(
    tmp_path_factory: pytest.TempPathFactory, standin: OllamaStandin
) -> Iterator[Stack]:
    require_chattts_extra()
    directory = tmp_path_factory.mktemp("chattts-lane")
    checkpoint = build_checkpoint(directory / "tiny")
    redis_server = RedisServer(directory / "redis").start()
    lane = Stack(
        directory / "lane",
        redis_server.url,
        env_overrides={
            "OLLAMA_HOST": standin.url,
            "VOICELANE_LLM__MODEL": "qwen2.5:7b",
            "VOICELANE_ENGINE": "chattts",
            "VOICELANE_CHATTTS__DIR": str(checkpoint.directory),
            "VOICELANE_REALTIME__LOOKAHEAD_S": "1000",
            "VOICELANE_REALTIME__ENCODE_AHEAD_S": "1000",
            "VOICELANE_REALTIME__CLAIM_TIMEOUT_S": "60",
        },
    )
    try:
        lane.gpu_worker()
        lane.cpu_worker()
        lane.api()
        lane.grpc()
        lane.wait_realtime_workers(timeout_s=120)
        yield lane
    finally:
        lane.stop()
        redis_server.stop()


def test_a_batch_job_renders_with_chattts(chattts_lane: Stack, tmp_path: Path) -> None:
    with chattts_lane.client() as client:
        voices = client.get("/v1/voices").json()
        assert voices["engine"] == "chattts" and "seed:3" in voices["voices"]
        created = client.post("/v1/jobs", json={"text": "Hello there. 你好。", "voice": "seed:3"})
        assert created.status_code == 202, created.text
        job = wait_final(client, created.json()["id"], timeout_s=180)
        assert job["state"] == "done", chattts_lane.logs()
        out = tmp_path / "job.ogg"
        out.write_bytes(httpx.get(job["download_url"], timeout=30).content)
    info = probe(out)
    assert info.codec == "opus" and info.duration_s > 0.1
    assert info.duration_s == pytest.approx(job["output"]["duration_s"], abs=0.03)


def test_a_realtime_stream_speaks_with_chattts(chattts_lane: Stack) -> None:
    async def go() -> list[pb.AudioChunk]:
        async with grpc.aio.insecure_channel(chattts_lane.grpc_target) as channel:
            stub = pb_grpc.SpeechStub(channel)
            request = pb.SynthesizeRequest(text="Streaming with ChatTTS.", voice="seed:1")
            metadata = (("authorization", f"Bearer {ACME_KEY}"),)
            return [c async for c in stub.Synthesize(request, metadata=metadata, timeout=120)]

    chunks = asyncio.run(go())
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert chunks[-1].final
    packets = [p for c in chunks for p in c.opus_packets]
    assert packets  # random weights stop early at random; any audio proves the path
    assert len(OpusStreamDecoder(24000).decode_all(packets)) == 480 * len(packets)
    assert chunks[-1].pts_ms == 20 * len(packets)


def test_a_chat_reply_is_spoken_by_chattts(chattts_lane: Stack, standin: OllamaStandin) -> None:
    """The LLM lane on the GPU engine: the reply's text, its spoken captions, its audio."""

    async def go() -> list[pb.ChatResponse]:
        async with grpc.aio.insecure_channel(chattts_lane.grpc_target) as channel:
            stub = pb_grpc.SpeechStub(channel)
            request = pb.ChatRequest(
                messages=[pb.ChatMessage(role="user", content="Say hello.")], voice="seed:1"
            )
            metadata = (("authorization", f"Bearer {ACME_KEY}"),)
            return [r async for r in stub.Chat(request, metadata=metadata, timeout=180)]

    responses = asyncio.run(go())
    text = "".join(r.text_delta for r in responses if r.WhichOneof("event") == "text_delta")
    assert text and responses[-1].WhichOneof("event") == "stats"
    chunks = [r.audio for r in responses if r.WhichOneof("event") == "audio"]
    assert chunks[-1].final
    packets = [p for c in chunks for p in c.opus_packets]
    assert packets
    assert len(OpusStreamDecoder(24000).decode_all(packets)) == 480 * len(packets)
    spoken = "".join(c.text for chunk in chunks for c in chunk.captions)
    assert spoken.replace(" ", "") == responses[-1].stats.spoken_text.replace(" ", "")
    body = next(r.body for r in reversed(standin.requests) if r.body and r.body.get("messages"))
    assert body["options"]["num_ctx"] == 2048
