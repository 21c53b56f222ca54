"""Benchmark: 20 jobs of 5,000 characters through the whole batch lane vs the embedded render.

The lane: a real redis-server, ``voicelane api``, one GPU worker (espeak, one batcher) and
one CPU worker as processes, storage local or SeaweedFS's S3 server (``weed mini``, from
tests/support/s3_server.py). All 20 jobs are submitted over REST at once; the wall time runs
from the first submission to the last job ``done``.
The baseline, in the same run: the same 20 texts rendered one after another by the embedded
renderer in this process (engine + batcher + encoder, no Redis, no storage).

Reported: audio seconds per wall second for both, and the lane's overhead
(1 - lane / embedded). Target: <= 15%.

Run: ``.venv/bin/python bench/jobs.py [--storage local|s3] [--jobs 20] [--characters 5000]``
"""

from __future__ import annotations

import argparse
import contextlib
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.render import CHINESE, ENGLISH
from tests.support.stack import Stack, wait_for
from voicelane.common.audio import AudioFormat
from voicelane.core.redis_server import RedisServer
from voicelane.core.settings import EmbeddedSettings
from voicelane.workers.render import EmbeddedRenderer


def texts(count: int, characters: int) -> list[str]:
    rng = random.Random(5)
    result = []
    for _ in range(count):
        parts: list[str] = []
        while sum(map(len, parts)) < characters:
            pool = ENGLISH if rng.random() < 0.6 else CHINESE
            parts.append(rng.choice(pool))
        result.append(" ".join(parts)[:characters])
    return result


def embedded(job_texts: list[str], directory: Path) -> tuple[float, float]:
    with EmbeddedRenderer(EmbeddedSettings(engine="espeak")) as renderer:
        started = time.perf_counter()
        audio_s = 0.0
        for i, text in enumerate(job_texts):
            audio_s += renderer.render(
                text, directory / f"e{i}.ogg", fmt=AudioFormat.OGG
            ).duration_s
        return time.perf_counter() - started, audio_s


@contextlib.contextmanager
def s3_env() -> Iterator[dict[str, str]]:
    from tests.support.s3_server import running_s3_server

    with running_s3_server() as endpoint:
        yield {
            "VOICELANE_STORAGE__BACKEND": "s3",
            "VOICELANE_STORAGE__S3__ENDPOINT_URL": endpoint.url,
            "VOICELANE_STORAGE__S3__BUCKET": "bench-jobs",
            "VOICELANE_STORAGE__S3__REGION": endpoint.region,
            "VOICELANE_STORAGE__S3__ACCESS_KEY_ID": endpoint.access_key_id,
            "VOICELANE_STORAGE__S3__SECRET_ACCESS_KEY": endpoint.secret_access_key,
        }


def lane_run(
    job_texts: list[str], directory: Path, env: dict[str, str], cpu_workers: int
) -> tuple[float, float]:
    redis_server = RedisServer(directory / "redis").start()
    lane = Stack(directory / "lane", redis_server.url, env_overrides=env)
    try:
        lane.gpu_worker()
        for n in range(cpu_workers):
            lane.cpu_worker(f"cpu{n}")
        lane.api()
        with lane.client() as client:
            client.post("/v1/jobs", json={"text": "warm up."})  # workers connected and loaded
            started = time.perf_counter()
            ids = [client.post("/v1/jobs", json={"text": t}).json()["id"] for t in job_texts]
            finals = []
            for job_id in ids:

                def done(job_id: str = job_id) -> dict[str, Any] | None:
                    job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
                    return job if job["state"] in ("done", "failed") else None

                finals.append(wait_for(done, 600, f"job {job_id}"))
            wall_s = time.perf_counter() - started
        assert all(j["state"] == "done" for j in finals), lane.logs()
        audio_s = sum(float(j["output"]["duration_s"]) for j in finals)
        return wall_s, audio_s
    finally:
        lane.stop()
        redis_server.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--characters", type=int, default=5000)
    parser.add_argument("--storage", choices=("local", "s3"), default="local")
    parser.add_argument(
        "--cpu-workers", type=int, nargs="+", default=[1, 2], help="lane layouts to measure"
    )
    args = parser.parse_args()
    job_texts = texts(args.jobs, args.characters)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        env = stack.enter_context(s3_env()) if args.storage == "s3" else {}
        base_wall, base_audio = embedded(job_texts, Path(tmp))
        lanes = [
            (n, *lane_run(job_texts, Path(tmp) / f"lane{n}", env, n)) for n in args.cpu_workers
        ]
    base_rate = base_audio / base_wall
    print(
        f"{args.jobs} jobs x {args.characters:,} characters, Ogg/Opus 24 kHz, "
        f"storage {args.storage}\n"
    )
    print("| path | wall s | audio s | audio s per wall s | lane overhead |")
    print("|---|---:|---:|---:|---:|")
    print(
        f"| embedded render, one after another (baseline) | {base_wall:.2f} | {base_audio:.1f} "
        f"| {base_rate:.0f} | — |"
    )
    for cpu_workers, lane_wall, lane_audio in lanes:
        lane_rate = lane_audio / lane_wall
        print(
            f"| batch lane, 1 GPU worker + {cpu_workers} CPU worker(s) | {lane_wall:.2f} "
            f"| {lane_audio:.1f} | {lane_rate:.0f} | {1 - lane_rate / base_rate:+.1%} |"
        )
    print("\nlane overhead = 1 - lane rate / embedded rate (target <= 15%)")


if __name__ == "__main__":
    main()
