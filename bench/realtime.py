"""Benchmark: time to first audio (TTFA) on the real-time lane, and what the batch lane costs it.

Real processes: redis-server, ``voicelane grpc``, one GPU worker (espeak; engine, batcher,
real-time consumer and Celery consumer in one process), and for the second table the REST
API and a CPU worker. Clients are grpc.aio stubs in this process (one channel per 8 streams).

Table 1 — TTFA at 1, 10 and 100 concurrent streams (each stream one sentence), against the
engine's own time for that sentence measured in the same run (espeak called directly, p50).
"system share" = TTFA - engine time: front + Redis + batcher + resampling + Opus encoding.
Target: system share p50 <= 10 ms at 1 stream.

Table 2 — TTFA p99 at 10 concurrent streams with the batch lane idle, then saturated (a long
job with >= 50 chunks queued on the same worker while measuring). Target: saturated p99 <=
1.5 x idle p99.

Run: ``.venv/bin/python -m bench.realtime [--rounds 20]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import redis

from bench.tables import percentile
from tests.support.stack import ACME_KEY, Stack, wait_for
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.redis_server import RedisServer
from voicelane.workers.engines import Utterance
from voicelane.workers.engines.espeak import EspeakEngine

if TYPE_CHECKING:
    from voicelane.common.wire.speech_pb2_grpc import SpeechAsyncStub

SENTENCE = "The weather is nice today, so we will walk along the river."
METADATA = (("authorization", f"Bearer {ACME_KEY}"),)
UNLIMITED_TENANT = {  # one tenant drives the whole benchmark: its quotas must not be the limit
    "VOICELANE_TENANT_REQUESTS_PER_S": "100000",
    "VOICELANE_TENANT_REQUEST_BURST": "100000",
    "VOICELANE_TENANT_MAX_STREAMS": "100000",
    "VOICELANE_TENANT_MAX_QUEUED_CHARS": "1000000000",
}


def engine_time_s(repeats: int = 50) -> float:
    engine = EspeakEngine()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        engine.synthesize([Utterance(SENTENCE, "auto")])
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def one_stream(stub: SpeechAsyncStub) -> float:
    started = time.perf_counter()
    first: float | None = None
    request = pb.SynthesizeRequest(text=SENTENCE, client_ts_ms=int(time.time() * 1000))
    async for chunk in stub.Synthesize(request, metadata=METADATA, timeout=60):
        if first is None and chunk.opus_packets:
            first = time.perf_counter() - started
    assert first is not None
    return first


async def ttfa(target: str, streams: int, rounds: int) -> list[float]:
    channels = [
        grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(max(1, streams // 8))
    ]
    stubs: list[SpeechAsyncStub] = [pb_grpc.SpeechStub(c) for c in channels]
    try:
        await one_stream(stubs[0])  # warm: channel connected, worker session path hot
        results: list[float] = []
        for _ in range(rounds):
            results += await asyncio.gather(
                *(one_stream(stubs[i % len(stubs)]) for i in range(streams))
            )
        return results
    finally:
        for channel in channels:
            await channel.close()


def saturate(lane: Stack, jobs: int = 4) -> list[str]:
    """Long jobs: hundreds of chunks queued on the one GPU worker."""
    text = " ".join(
        f"Chapter line {i}: the long road home winds past the harbor." for i in range(14000)
    )
    ids: list[str] = []
    with lane.client() as client:
        for _ in range(jobs):
            response = client.post("/v1/jobs", json={"text": text})
            assert response.status_code == 202, response.text
            ids.append(response.json()["id"])
        wait_for(lambda: client.get(f"/v1/jobs/{ids[0]}").json()["chunks_done"] > 0, 180, "start")
    return ids


async def ttfa_sampling_queue(
    target: str, streams: int, rounds: int, broker: redis.Redis
) -> tuple[list[float], list[int]]:
    """TTFA while sampling the render queue's length every 50 ms."""
    depths: list[int] = []
    stop = asyncio.Event()

    async def sample() -> None:
        while not stop.is_set():
            depths.append(int(broker.llen("render")))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.05)

    sampler = asyncio.create_task(sample())
    try:
        return await ttfa(target, streams, rounds), depths
    finally:
        stop.set()
        await sampler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    engine_s = engine_time_s()
    with tempfile.TemporaryDirectory() as tmp:
        redis_server = RedisServer(Path(tmp) / "redis").start()
        lane = Stack(
            Path(tmp) / "lane",
            redis_server.url,
            env_overrides={"VOICELANE_REALTIME__SLOTS_PER_WORKER": "256", **UNLIMITED_TENANT},
        )
        try:
            lane.gpu_worker("gpu")  # default concurrency (4 chunk threads for espeak)
            lane.grpc()
            lane.wait_realtime_workers()
            rows = []
            for streams in (1, 10, 100):
                rounds = args.rounds if streams < 100 else max(2, args.rounds // 5)
                values = asyncio.run(ttfa(lane.grpc_target, streams, rounds))
                rows.append((streams, values))
            lane.cpu_worker()
            lane.api()
            broker = redis.Redis.from_url(redis_server.url)
            idle, _ = asyncio.run(ttfa_sampling_queue(lane.grpc_target, 10, args.rounds, broker))
            job_ids = saturate(lane)
            busy, depths = asyncio.run(
                ttfa_sampling_queue(lane.grpc_target, 10, args.rounds, broker)
            )
            with lane.client() as client:
                for job_id in job_ids:
                    client.delete(f"/v1/jobs/{job_id}")
        finally:
            lane.stop()
            redis_server.stop()

    print(f"sentence: {SENTENCE!r}; engine alone (espeak, p50 of 50): {engine_s * 1000:.2f} ms")
    print()
    print(
        "| concurrent streams | streams measured | TTFA p50 | TTFA p99 "
        "| system share p50 | system share p99 |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for streams, values in rows:
        p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
        print(
            f"| {streams} | {len(values)} | {p50 * 1000:.1f} ms | {p99 * 1000:.1f} ms "
            f"| {(p50 - engine_s) * 1000:.1f} ms | {(p99 - engine_s) * 1000:.1f} ms |"
        )
    print()
    print("| batch lane | render queue while measuring (min / max) | TTFA p50 | TTFA p99 "
          "| p99 / idle p99 |")  # fmt: skip
    print("|---|---|---:|---:|---:|")
    idle_p99 = percentile(idle, 0.99)
    print(f"| idle | 0 | {percentile(idle, 0.5) * 1000:.1f} ms | {idle_p99 * 1000:.1f} ms | 1.00 |")
    busy_p99 = percentile(busy, 0.99)
    print(
        f"| saturated | {min(depths)} / {max(depths)} chunks | "
        f"{percentile(busy, 0.5) * 1000:.1f} ms | {busy_p99 * 1000:.1f} ms "
        f"| {busy_p99 / idle_p99:.2f} |"
    )


if __name__ == "__main__":
    main()
