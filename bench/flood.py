"""Benchmark: another tenant's small job and live stream, idle vs while one tenant floods.

Real processes: redis-server, the API, the gRPC front, a GPU and a CPU worker (espeak), with
the flooding tenant's quotas of ``tests.support.flood.QUOTAS`` (it holds ~9 books and 8
streams at once, and retries at its hints). Baseline in the same run: the same small job and
live (paced) stream of tenant ``other`` with the service idle. Reported: median of
``--rounds`` runs each, idle and flooded, and the ratio. Targets (issue "Hardening"): both
complete within 2x their idle time.

Run: ``.venv/bin/python -m bench.flood [--rounds 5]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from tests.support.flood import LIVE_TEXT, QUOTAS, SMALL_JOB, Flood, job_seconds, stream_seconds
from tests.support.stack import OTHER_KEY, Stack
from voicelane.core.redis_server import RedisServer

TARGET_RATIO = 2.0


def measure(lane: Stack, rounds: int) -> tuple[list[float], list[float]]:
    jobs = [job_seconds(lane, OTHER_KEY, SMALL_JOB) for _ in range(rounds)]
    streams = [asyncio.run(stream_seconds(lane, OTHER_KEY, LIVE_TEXT)) for _ in range(rounds)]
    return jobs, streams


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="voicelane-flood-") as tmp:
        directory = Path(tmp)
        redis_server = RedisServer(directory / "redis").start()
        lane = Stack(directory / "stack", redis_server.url, env_overrides=QUOTAS)
        try:
            lane.gpu_worker()
            lane.cpu_worker()
            lane.grpc()
            lane.api()
            lane.wait_realtime_workers()
            idle_jobs, idle_streams = measure(lane, args.rounds)
            with Flood(lane) as flood:
                time.sleep(5)
                busy_jobs, busy_streams = measure(lane, args.rounds)
        finally:
            lane.stop()
            redis_server.stop()
    print(f"flooding tenant: {dict(flood.outcomes)}\n")
    print("| tenant other's | idle p50 | flooded p50 | flooded max | flooded / idle | target |")
    print("|---|---:|---:|---:|---:|---|")
    verdicts = []
    for name, idle, busy in (
        ("small job (2 sentences), submit → done", idle_jobs, busy_jobs),
        ("live stream (paced), open → final chunk", idle_streams, busy_streams),
    ):
        ratio = statistics.median(busy) / statistics.median(idle)
        verdicts.append(ratio <= TARGET_RATIO)
        print(
            f"| {name} | {statistics.median(idle):.2f} s | {statistics.median(busy):.2f} s | "
            f"{max(busy):.2f} s | {ratio:.2f}x | <= {TARGET_RATIO:g}x "
            f"{'PASS' if verdicts[-1] else 'FAIL'} |"
        )
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
