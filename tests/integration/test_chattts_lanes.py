"""The ChatTTS engine (tiny random-weight checkpoint, CPU) serving both lanes end to end:
a batch job over REST and a real-time stream over gRPC, through real worker processes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


# ---- tenant voices ------------------------------------------------------------------------


def _clip_wav(path: Path) -> str:
    """A reference clip (4 s of espeak speech, WAV) as base64, and what it says."""
    import base64

    from voicelane.common.audio import AudioFormat
    from voicelane.core.settings import EmbeddedSettings
    from voicelane.workers.render import EmbeddedRenderer

    text = "The quick brown fox jumps over the lazy dog, and then it runs far away."
    with EmbeddedRenderer(EmbeddedSettings(engine="espeak")) as renderer:
        renderer.render(text, path, fmt=AudioFormat.WAV, sample_rate_hz=24000)
    return base64.b64encode(path.read_bytes()).decode()


@pytest.fixture(scope="module")
def tenant_voices(chattts_lane: Stack, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """One voice of each kind for tenant acme: seed, embedding, reference clip, mix."""
    from tests.support.chattts_checkpoint import TINY
    from voicelane.core.speaker_embedding import encode_spk_emb

    clip = _clip_wav(tmp_path_factory.mktemp("clip") / "clip.wav")
    with chattts_lane.client() as client:
        listing = client.get("/v1/voices").json()
        chattts = next(e for e in listing["engines"] if e["engine"] == "chattts")
        assert set(chattts["voice_kinds"]) == {"seed", "embedding", "clip", "mix"}
        bodies: list[dict[str, Any]] = [
            {"name": "sam", "kind": "seed", "seed": 11},
            {"name": "emma", "kind": "embedding", "spk_emb": encode_spk_emb([0.1] * TINY.hidden)},
            {"name": "clio", "kind": "clip", "clip_base64": clip, "transcript": "The quick "
             "brown fox jumps over the lazy dog, and then it runs far away."},
            {"name": "mixy", "kind": "mix", "mix": "sam(2)+seed:4(1)"},
        ]  # fmt: skip
        for body in bodies:
            created = client.post("/v1/voices", json={"engine": "chattts", **body})
            assert created.status_code == 201, created.text
        listed = {v["name"] for v in client.get("/v1/voices").json()["custom"]["voices"]}
    assert listed == {"sam", "emma", "clio", "mixy"}
    return ["sam", "emma", "clio", "mixy"]


async def _grpc_packets(
    target: str, voice: str, text: str, key: str = ACME_KEY, seed: int | None = None
) -> list[bytes]:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.SpeechStub(channel)
        request = pb.SynthesizeRequest(text=text, voice=voice, seed=seed)
        metadata = (("authorization", f"Bearer {key}"),)
        chunks = [c async for c in stub.Synthesize(request, metadata=metadata, timeout=120)]
    assert chunks[-1].final
    return [p for c in chunks for p in c.opus_packets]


async def _websocket_end(api_port: int, voice: str, text: str) -> dict[str, object]:
    import json

    import websockets

    url = f"ws://127.0.0.1:{api_port}/v1/stream"
    headers = {"Authorization": f"Bearer {ACME_KEY}"}
    async with websockets.connect(url, additional_headers=headers) as socket:
        await socket.send(json.dumps({"text": text, "voice": voice}))
        async for message in socket:
            if isinstance(message, str) and json.loads(message)["type"] in ("end", "error"):
                return dict(json.loads(message))
    raise AssertionError("the WebSocket closed without an end")


def test_each_kind_of_tenant_voice_speaks_in_jobs_and_on_every_front(
    chattts_lane: Stack, tenant_voices: list[str]
) -> None:
    text = "A voice of my own."
    with chattts_lane.client() as client:
        for voice in tenant_voices:
            created = client.post("/v1/jobs", json={"text": text, "voice": voice})
            assert created.status_code == 202, (voice, created.text)
            job = wait_final(client, created.json()["id"], timeout_s=180)
            assert job["state"] == "done", (voice, job, chattts_lane.logs())
            assert job["voice"] == voice and job["engine"] == "chattts"
            speech = client.post(
                "/v1/audio/speech",
                json={"model": "tts-1", "input": text, "voice": voice, "response_format": "wav"},
            )
            assert speech.status_code == 200, (voice, speech.text)
            assert probe(speech.content).duration_s > 0
        mixed = client.post("/v1/jobs", json={"text": text, "voice": "emma(1)+seed:2(3)"})
        assert mixed.status_code == 202, mixed.text
        assert wait_final(client, mixed.json()["id"], timeout_s=180)["state"] == "done"
    for voice in tenant_voices:
        assert asyncio.run(_grpc_packets(chattts_lane.grpc_target, voice, text)), voice
        end = asyncio.run(_websocket_end(chattts_lane.api_port, voice, text))
        assert end["type"] == "end", (voice, end)


def test_a_tenants_voices_are_invisible_to_others(
    chattts_lane: Stack, tenant_voices: list[str]
) -> None:
    from tests.support.stack import OTHER_KEY

    with chattts_lane.client(OTHER_KEY) as other:
        assert other.get("/v1/voices").json()["custom"]["voices"] == []
        assert other.get("/v1/voices/sam").status_code == 404
        assert other.delete("/v1/voices/sam").status_code == 404
        refused = other.post("/v1/jobs", json={"text": "Borrowed.", "voice": "sam"})
        mix = other.post("/v1/jobs", json={"text": "Borrowed.", "voice": "sam(1)+seed:1"})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "voice"
    assert mix.status_code == 422 and mix.json()["error"]["field"] == "voice"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        asyncio.run(_grpc_packets(chattts_lane.grpc_target, "clio", "Borrowed.", OTHER_KEY))
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    with chattts_lane.client() as owner:
        assert owner.get("/v1/voices/sam").status_code == 200  # still the owner's


def test_the_same_tenant_voice_sounds_the_same_whatever_shares_its_batch(
    chattts_lane: Stack, tenant_voices: list[str]
) -> None:
    """API level: a stream alone, then the same stream (voice and seed) while others (other
    voices, other texts, seeded or not) run beside it in the worker's batcher: the same Opus
    packets; another seed, other audio."""
    target, text = chattts_lane.grpc_target, "Same voice, same words."

    async def crowded() -> list[bytes]:
        neighbours = [
            asyncio.create_task(
                _grpc_packets(target, voice, f"Neighbour number {n} talks.", seed=n or None)
            )
            for n, voice in enumerate(["sam", "seed:3", "emma", "clio", "mixy"])
        ]
        mine = await _grpc_packets(target, "mixy", text, seed=77)
        await asyncio.gather(*neighbours)
        return mine

    alone = asyncio.run(_grpc_packets(target, "mixy", text, seed=77))
    other_seed = asyncio.run(_grpc_packets(target, "mixy", text, seed=78))
    assert alone and asyncio.run(crowded()) == alone
    assert other_seed != alone
