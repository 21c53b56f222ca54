"""Several engines in one stack (docs/engines.md, "Several engines"): espeak and Piper
workers at once, behind one API and one gRPC front. Jobs and streams for each engine's
voices land on that engine's workers; a voice of an engine the stack does not serve is
refused at submission; stopping the Piper workers refuses Piper streams at once while
espeak streams go on."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import grpc
import httpx
import pytest

from tests.integration.test_batch_lane import wait_final
from tests.support.stack import ACME_KEY, Stack
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.redis_server import RedisServer, free_port

PIPER_VOICE = "piper:en_US-joe-medium"
ESPEAK_VOICE = "espeak:en-us"
METADATA = (("authorization", f"Bearer {ACME_KEY}"),)


class TwoEngines:
    def __init__(self, stack: Stack, ports: dict[str, int]) -> None:
        self.stack = stack
        self.ports = ports

    def calls(self, worker: str, klass: str) -> float:
        """Engine calls the worker's batcher made for items of ``klass`` (its /metrics)."""
        text = httpx.get(f"http://127.0.0.1:{self.ports[worker]}/metrics", timeout=5).text
        pattern = rf'^voicelane_batch_size_count{{class="{klass}"}} ([0-9.e+]+)$'
        found = re.search(pattern, text, re.MULTILINE)
        return float(found.group(1)) if found else 0.0


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoEngines]:
    directory = tmp_path_factory.mktemp("two-engines")
    redis_server = RedisServer(directory / "redis").start()
    stack = Stack(
        directory / "stack",
        redis_server.url,
        env_overrides={"VOICELANE_ENGINES": "piper,espeak"},
    )
    ports = {"piper": free_port(), "espeak": free_port()}
    try:
        for engine in ("piper", "espeak"):
            stack.gpu_worker(
                engine,
                concurrency=2,
                extra_env={
                    "VOICELANE_ENGINE": engine,
                    "VOICELANE_METRICS_PORT": str(ports[engine]),
                },
            )
        stack.cpu_worker()
        stack.api()
        stack.grpc()
        for engine in ("piper", "espeak"):
            stack.wait_realtime_workers(engine=engine, timeout_s=120)
        yield TwoEngines(stack, ports)
    finally:
        stack.stop()
        redis_server.stop()


async def _stream(target: str, voice: str, text: str) -> list[pb.AudioChunk]:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.SpeechStub(channel)
        request = pb.SynthesizeRequest(text=text, voice=voice)
        return [c async for c in stub.Synthesize(request, metadata=METADATA, timeout=60)]


def test_the_voice_list_shows_every_engines_voices(engines: TwoEngines) -> None:
    with engines.stack.client() as client:
        listing = client.get("/v1/voices").json()
    by_engine = {e["engine"]: [v["id"] for v in e["voices"]] for e in listing["engines"]}
    assert listing["engine"] == "piper"  # the first served: what `auto` falls back to
    assert PIPER_VOICE in by_engine["piper"]
    assert ESPEAK_VOICE in by_engine["espeak"] and "espeak:cmn" in by_engine["espeak"]

    async def grpc_listing() -> pb.ListVoicesResponse:
        async with grpc.aio.insecure_channel(engines.stack.grpc_target) as channel:
            stub = pb_grpc.SpeechStub(channel)
            return await stub.ListVoices(pb.ListVoicesRequest(), metadata=METADATA)

    reply = asyncio.run(grpc_listing())
    ids = {(v.engine, v.id) for v in reply.voices}
    assert ("piper", "en_US-joe-medium") in ids  # the default engine's, by their own ids
    assert ("espeak", ESPEAK_VOICE) in ids


def test_jobs_land_on_their_engines_workers(engines: TwoEngines) -> None:
    before = {w: engines.calls(w, "batch") for w in ("piper", "espeak")}
    with engines.stack.client() as client:
        piper = client.post("/v1/jobs", json={"text": "Joe reads this.", "voice": PIPER_VOICE})
        assert piper.status_code == 202, piper.text
        piper_job = wait_final(client, piper.json()["id"], timeout_s=120)
        middle = {w: engines.calls(w, "batch") for w in ("piper", "espeak")}
        espeak = client.post("/v1/jobs", json={"text": "espeak reads that.", "voice": "en-us"})
        assert espeak.status_code == 202, espeak.text
        espeak_job = wait_final(client, espeak.json()["id"], timeout_s=120)
    after = {w: engines.calls(w, "batch") for w in ("piper", "espeak")}
    assert piper_job["state"] == "done" and piper_job["engine"] == "piper"
    assert espeak_job["state"] == "done" and espeak_job["engine"] == "espeak"
    assert middle["piper"] > before["piper"] and middle["espeak"] == before["espeak"]
    assert after["espeak"] > middle["espeak"] and after["piper"] == middle["piper"]


def test_streams_land_on_their_engines_workers(engines: TwoEngines) -> None:
    target = engines.stack.grpc_target
    before = {w: engines.calls(w, "realtime") for w in ("piper", "espeak")}
    piper = asyncio.run(_stream(target, PIPER_VOICE, "A neural voice, live."))
    middle = {w: engines.calls(w, "realtime") for w in ("piper", "espeak")}
    auto_cjk = asyncio.run(_stream(target, "auto", "你好，世界。"))  # piper has no Mandarin
    after = {w: engines.calls(w, "realtime") for w in ("piper", "espeak")}
    assert piper[-1].final and any(c.opus_packets for c in piper)
    assert auto_cjk[-1].final and any(c.opus_packets for c in auto_cjk)
    assert middle["piper"] > before["piper"] and middle["espeak"] == before["espeak"]
    assert after["espeak"] > middle["espeak"] and after["piper"] == middle["piper"]


def test_a_voice_of_an_engine_not_served_is_refused_at_submission(engines: TwoEngines) -> None:
    with engines.stack.client() as client:
        refused = client.post("/v1/jobs", json={"text": "Hello.", "voice": "chattts:seed:3"})
        unknown = client.post("/v1/jobs", json={"text": "Hello.", "voice": "piper:nobody"})
        jobs = client.get("/v1/jobs").json()["jobs"]
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "voice"
    assert "chattts engine is not served" in refused.json()["error"]["message"]
    assert unknown.status_code == 422 and "piper" in unknown.json()["error"]["message"]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        asyncio.run(_stream(engines.stack.grpc_target, "chattts:seed:3", "Hello."))
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert all(job["engine"] in ("piper", "espeak") for job in jobs)


def test_stopping_the_piper_workers_refuses_piper_streams_and_espeak_goes_on(
    engines: TwoEngines,
) -> None:
    """Runs last in this module: it stops the Piper worker."""
    target = engines.stack.grpc_target

    async def go() -> tuple[list[pb.AudioChunk], grpc.StatusCode, list[pb.AudioChunk]]:
        long_text = " ".join(["espeak keeps talking while Piper goes away."] * 6)
        ongoing = asyncio.create_task(_stream(target, ESPEAK_VOICE, long_text))
        piper = next(p for p in engines.stack.procs if p.name == "piper")
        await asyncio.to_thread(piper.stop)
        try:
            await _stream(target, PIPER_VOICE, "Is anyone there?")
        except grpc.aio.AioRpcError as error:
            code = error.code()
        else:
            code = grpc.StatusCode.OK
        after = await _stream(target, ESPEAK_VOICE, "Still here.")
        return await ongoing, code, after

    ongoing, code, after = asyncio.run(go())
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert ongoing[-1].final and sum(len(c.opus_packets) for c in ongoing) > 100
    assert after[-1].final and any(c.opus_packets for c in after)
