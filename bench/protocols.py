"""Benchmark: the three real-time fronts side by side at 100 concurrent streams.

Real processes: redis-server, one GPU worker (espeak), ``voicelane grpc`` and ``voicelane
api`` (which serves the WebSocket twin and the OpenAI-compatible speech endpoint). For each
protocol, in the same run, 100 clients stream one sentence each, ``--rounds`` times:

* requests/s — streams completed per wall second;
* TTFA p50/p99 — request sent → first audio bytes received;
* CPU per stream — CPU seconds (user + system, from /proc) the front process spent, divided
  by the streams it served (the worker's share is the same for all three and not counted).

The baseline is gRPC, the native front; the other rows show their ratio to it.

Run: ``.venv/bin/python -m bench.protocols [--streams 100] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import httpx
import websockets

from bench.realtime import percentile
from core.redis_server import RedisServer
from core.wire import speech_pb2 as pb
from core.wire import speech_pb2_grpc as pb_grpc
from tests.support.stack import ACME_KEY, Stack

SENTENCE = "The weather is nice today, so we will walk along the river."
AUTH = f"Bearer {ACME_KEY}"
Stream = Callable[[], Awaitable[float]]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


async def grpc_stream(target: str) -> Callable[[], Awaitable[float]]:
    channels = [
        grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(8)
    ]
    stubs = [pb_grpc.SpeechStub(c) for c in channels]
    counter = iter(range(1 << 30))

    async def one() -> float:
        stub = stubs[next(counter) % len(stubs)]
        started = time.perf_counter()
        first = 0.0
        request = pb.SynthesizeRequest(text=SENTENCE)
        async for chunk in stub.Synthesize(request, metadata=(("authorization", AUTH),)):
            if not first and chunk.opus_packets:
                first = time.perf_counter() - started
        return first

    return one


async def websocket_stream(api_port: int) -> Callable[[], Awaitable[float]]:
    url = f"ws://127.0.0.1:{api_port}/v1/stream"

    async def one() -> float:
        started = time.perf_counter()
        first = 0.0
        async with websockets.connect(url, additional_headers={"Authorization": AUTH}) as socket:
            await socket.send(json.dumps({"text": SENTENCE}))
            async for message in socket:
                if isinstance(message, bytes) and not first:
                    first = time.perf_counter() - started
        return first

    return one


async def openai_stream(api_url: str) -> Callable[[], Awaitable[float]]:
    client = httpx.AsyncClient(
        base_url=api_url,
        headers={"Authorization": AUTH},
        timeout=120,
        limits=httpx.Limits(max_connections=200),
    )

    async def one() -> float:
        started = time.perf_counter()
        first = 0.0
        body = {"input": SENTENCE, "voice": "alloy", "response_format": "pcm"}
        async with client.stream("POST", "/v1/audio/speech", json=body) as response:
            response.raise_for_status()
            async for data in response.aiter_bytes():
                if data and not first:
                    first = time.perf_counter() - started
        return first

    return one


async def run(
    make: Callable[[], Awaitable[Callable[[], Awaitable[float]]]], streams: int, rounds: int
) -> tuple[list[float | BaseException], float]:
    one = await make()
    await one()  # warm
    started = time.perf_counter()
    results: list[float | BaseException] = []
    for _ in range(rounds):
        results += await asyncio.gather(*(one() for _ in range(streams)), return_exceptions=True)
    return results, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows: list[tuple[str, list[float | BaseException], float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        redis_server = RedisServer(Path(tmp) / "redis").start()
        lane = Stack(
            Path(tmp) / "lane",
            redis_server.url,
            env_overrides={"VOICELANE_REALTIME__SLOTS_PER_WORKER": str(2 * args.streams + 28)},
        )
        try:
            lane.gpu_worker()
            grpc_proc = lane.grpc()
            api_proc = lane.api()
            lane.wait_realtime_workers()
            grpc_pid, api_pid = grpc_proc.process.pid, api_proc.process.pid
            fronts: list[tuple[str, int, Callable[[], Awaitable[Stream]]]] = [
                ("gRPC Synthesize", grpc_pid, lambda: grpc_stream(lane.grpc_target)),
                ("WebSocket /v1/stream", api_pid, lambda: websocket_stream(lane.api_port)),
                (
                    "REST /v1/audio/speech (OpenAI, pcm)",
                    api_pid,
                    lambda: openai_stream(lane.api_url),
                ),
            ]
            for name, pid, make in fronts:
                before = cpu_s(pid)
                results, wall_s = asyncio.run(run(make, args.streams, args.rounds))
                rows.append((name, results, wall_s, cpu_s(pid) - before))
        finally:
            lane.stop()
            redis_server.stop()

    print(f"{args.streams} concurrent streams x {args.rounds} rounds, one sentence each, espeak\n")
    print(
        "| front | streams/s | failed | TTFA p50 | TTFA p99 | front CPU per stream "
        "| vs gRPC (CPU) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    base_cpu = rows[0][3] / len(rows[0][1])
    for name, results, wall_s, cpu in rows:
        values = [r for r in results if isinstance(r, float)]
        failures = [r for r in results if not isinstance(r, float)]
        per_stream = cpu / len(results)
        print(
            f"| {name} | {len(values) / wall_s:.1f} | {len(failures)} "
            f"| {percentile(values, 0.5) * 1000:.0f} ms "
            f"| {percentile(values, 0.99) * 1000:.0f} ms | {per_stream * 1000:.1f} ms "
            f"| {per_stream / base_cpu:.2f}x |"
        )
        for failure in failures[:3]:
            print(f"  failure: {type(failure).__name__}: {str(failure)[:150]}")


if __name__ == "__main__":
    main()
