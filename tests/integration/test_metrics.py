"""Every process exports its metrics: a GPU worker, a CPU worker and the gRPC front on their
``VOICELANE_METRICS_PORT``, the REST API on its own port. A job, gRPC and WebSocket streams
and a refused call run; each named metric must be there and must have moved."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator

import grpc
import httpx
import pytest
import websockets
from prometheus_client.parser import text_string_to_metric_families

from tests.support.stack import ACME_KEY, Stack, wait_for
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.redis_server import RedisServer

pytestmark = pytest.mark.integration

METADATA = (("authorization", f"Bearer {ACME_KEY}"),)
TEXT = "The weather is nice today. We will walk along the river."
FINAL = ("done", "failed", "cancelled")
METRICS_TOKEN = "metrics-token-for-tests-0123456789"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """One scrape; the API's ``/metrics`` wants its bearer token, the others answer anyone on
    the loopback (they bind to ``VOICELANE_METRICS_HOST``, 127.0.0.1 by default)."""
    headers = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    response = httpx.get(url, headers=headers, timeout=10)
    assert response.status_code == 200, f"{url}: {response.status_code}"
    text = response.text
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample's value; the test fails naming the metric when it is missing."""
    key = (name, tuple(sorted(labels.items())))
    assert key in samples, f"{name}{labels} is not exported"
    return samples[key]


@pytest.fixture(scope="module")
def lane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, dict[str, str]]]:
    directory = tmp_path_factory.mktemp("metrics")
    redis_server = RedisServer(directory / "redis").start()
    stack = Stack(
        directory / "stack",
        redis_server.url,
        env_overrides={"VOICELANE_METRICS_TOKEN": METRICS_TOKEN},
    )
    try:
        ports = stack.metered_processes()
        stack.api()
        stack.wait_realtime_workers()
        urls = {name: f"http://127.0.0.1:{port}/metrics" for name, port in ports.items()}
        urls["api"] = f"{stack.api_url}/metrics"
        wait_for(lambda: all(_answers(url) for url in urls.values()), 60, "metrics endpoints")
        yield stack, urls
    finally:
        stack.stop()
        redis_server.stop()


def _answers(url: str) -> bool:
    try:
        headers = {"Authorization": f"Bearer {METRICS_TOKEN}"}
        return httpx.get(url, headers=headers, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


async def grpc_calls(target: str) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.SpeechStub(channel)
        request = pb.SynthesizeRequest(text=TEXT)
        chunks = [c async for c in stub.Synthesize(request, metadata=METADATA, timeout=60)]
        assert chunks and chunks[-1].final
        bad = pb.SynthesizeRequest(text=TEXT, voice="klingon")
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async for _ in stub.Synthesize(bad, metadata=METADATA, timeout=60):
                pass
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT


async def websocket_stream(api_port: int) -> None:
    url = f"ws://127.0.0.1:{api_port}/v1/stream"
    headers = {"Authorization": f"Bearer {ACME_KEY}"}
    async with websockets.connect(url, additional_headers=headers) as socket:
        await socket.send(json.dumps({"text": TEXT}))
        async for _ in socket:
            pass


def test_every_process_exports_its_metrics_and_they_move(
    lane: tuple[Stack, dict[str, str]],
) -> None:
    stack, urls = lane
    before = {name: scrape(url) for name, url in urls.items()}
    assert value(before["gpu-worker"], "voicelane_realtime_slots", state="used") == 0

    with stack.client() as client:
        response = client.post("/v1/jobs", json={"text": TEXT * 20})
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        assert value(scrape(urls["api"]), "voicelane_jobs_active") >= 1
        wait_for(lambda: client.get(f"/v1/jobs/{job_id}").json()["state"] == "done", 120, "job")
    asyncio.run(grpc_calls(stack.grpc_target))
    asyncio.run(websocket_stream(stack.api_port))

    gpu, cpu, front, api = (
        scrape(urls[name]) for name in ("gpu-worker", "cpu-worker", "grpc", "api")
    )
    # The worker: batches of both classes, their waits, the real-time factor, its device.
    for cls in ("batch", "realtime"):
        earlier = before["gpu-worker"].get(("voicelane_batch_size_count", (("class", cls),)), 0.0)
        assert value(gpu, "voicelane_batch_size_count", **{"class": cls}) > earlier
        assert value(gpu, "voicelane_batch_wait_seconds_count", **{"class": cls}) > 0
        assert value(gpu, "voicelane_batcher_queue_depth", **{"class": cls}) >= 0
    assert value(gpu, "voicelane_realtime_factor_count") > 0
    assert value(gpu, "voicelane_realtime_factor_sum") > value(
        gpu, "voicelane_realtime_factor_count"
    )
    assert 0 < value(gpu, "voicelane_batcher_utilisation") <= 1
    assert value(gpu, "voicelane_max_batch") >= 1
    assert value(gpu, "gpu_memory_free_bytes", device="cpu", source="system") > 0
    assert value(gpu, "voicelane_realtime_slots", state="free") > 0
    assert value(gpu, "voicelane_oom_events_total") == 0
    assert value(gpu, "voicelane_chunk_retries_total") == 0
    assert value(gpu, "voicelane_opus_encode_failures") == 0
    # The CPU worker: assembly, callbacks and the reconciler's counters.
    assert value(cpu, "voicelane_lease_takeovers_total") == 0
    assert value(cpu, "voicelane_callback_failures_total") == 0
    # The gRPC front: first-audio latency of its stream, the refused call by method and code.
    assert value(front, "chattts_stream_latency_ms_count", front="grpc", engine="espeak") >= 1
    assert value(front, "chattts_stream_latency_ms_sum", front="grpc", engine="espeak") > 0
    refused = value(front, "grpc_stream_errors_total", method="Synthesize", code="INVALID_ARGUMENT")
    assert refused == 1
    # The API: its WebSocket stream's latency, queues and jobs.
    assert value(api, "chattts_stream_latency_ms_count", front="websocket", engine="espeak") >= 1
    assert value(api, "voicelane_queue_depth", queue="render.espeak") >= 0
    assert value(api, "voicelane_jobs", state="rendering") >= 0


def test_sighup_hot_swaps_the_engine_under_load_and_loses_nothing(
    lane: tuple[Stack, dict[str, str]],
) -> None:
    """SIGHUP reloads the worker's engine between batches (not Celery's restart): a job
    rendering and live streams running at that moment all finish, and the reload is counted
    with the engine's memory before and after."""
    stack, urls = lane
    worker = next(proc for proc in stack.procs if proc.name == "gpu")

    async def streams_during_reload() -> list[bool]:
        async def one() -> bool:
            async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
                stub = pb_grpc.SpeechStub(channel)
                request = pb.SynthesizeRequest(text=TEXT * 3)
                chunks = [c async for c in stub.Synthesize(request, metadata=METADATA, timeout=60)]
            return bool(chunks) and chunks[-1].final

        tasks = [asyncio.create_task(one()) for _ in range(4)]
        await asyncio.sleep(0.3)
        worker.process.send_signal(signal.SIGHUP)
        return list(await asyncio.gather(*tasks))

    with stack.client() as client:
        response = client.post("/v1/jobs", json={"text": TEXT * 200})
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        assert all(asyncio.run(streams_during_reload()))
        job = wait_for(
            lambda: (j := client.get(f"/v1/jobs/{job_id}").json())["state"] in FINAL and j,
            180,
            "the job",
        )
    assert job["state"] == "done", job
    assert worker.alive()  # reloaded in place, not restarted
    gpu = scrape(urls["gpu-worker"])
    assert value(gpu, "voicelane_engine_reloads_total") == 1
    for when in ("before_reload", "unloaded", "after_reload"):
        assert value(gpu, "voicelane_engine_memory_bytes", when=when) > 0
    assert "reloaded in" in worker.log.read_text()
