"""Soak: live streams and a steady job flow for a minute, then the same with a worker killed.

Real processes, a fresh set per phase: redis-server (AOF), two GPU workers (espeak; each
serves real-time streams and renders chunks, so either can take over the other's work), one
CPU worker, ``voicelane api`` and ``voicelane grpc``. Recovery timings are short, as in the
chaos tests (chunk lease 3 s, stream heartbeat 2 s, reclaim after 2 s idle, UNAVAILABLE after
4 s without a worker); tenant quotas are set high enough never to refuse the load.

Each phase starts with a warm-up: the same load as below for ``--warmup`` (20) seconds, its
jobs drained, then ``--settle`` seconds of quiet. That is the memory baseline ("before"): a
process that has done this kind of work once (imports, codecs, thread stacks, the
allocators' arenas and Redis's structures sized to the load), so the memory criterion
measures what a load leaves behind for good, not the first-touch growth of a fresh process.
Then:

- ``--streams`` (30) live gRPC ``Synthesize`` streams in closed loop for ``--seconds`` (60):
  each speaks a paragraph of three sentences at normal (real-time) pacing, and when it ends
  its client opens the next. Every call has a deadline (``--stream-deadline``, 60 s).
- one job of ~2,000 characters submitted over REST every second for the same ``--seconds``;
  then submission stops and every job must reach a final state (at most ``--drain``, 240 s).
- Phase B only: at second ``--seconds / 2`` one GPU worker is SIGKILLed (not restarted).

Reported per phase: streams started / completed / ended UNAVAILABLE / any other status
(DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, a gap in seq or a missing final chunk count as
other), jobs submitted / refused / done / failed / not final, duplicated chunk commits (a chunk
that appears more than once in the job's commit log, ``job:{id}:commits``), and the RSS
(``/proc/<pid>/status`` VmRSS, summed over the process group of each service) of every process
before the load, at its peak, and after the load once the service was quiet for ``--settle``
(15 s) seconds.

Criteria (each PASS/FAIL; exit status 1 if any fails): no stream ends with a status other than
OK or UNAVAILABLE; no submission refused; no job lost (every job done); no chunk committed
twice; every surviving process's RSS after the load <= 1.10 x before it.

Run: ``.venv/bin/python -m bench.soak [--seconds 60] [--streams 30]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import httpx
import redis

from bench.jobs import texts
from bench.render import CHINESE, ENGLISH
from bench.tables import percentile
from tests.support.ledger import commit_log
from tests.support.stack import ACME_KEY, Proc, Stack, wait_for
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.ledger import JobState, Ledger
from voicelane.core.redis_server import RedisServer

if TYPE_CHECKING:
    from voicelane.common.wire.speech_pb2_grpc import SpeechAsyncStub

METADATA = (("authorization", f"Bearer {ACME_KEY}"),)
JOB_CHARACTERS = 2000
MEMORY_LIMIT = 1.10
PACKET_S = 0.020
ENV = {
    # Tenant quotas far above the load: 1 job/s + ~3 streams/s, 30 streams open.
    "VOICELANE_TENANT_REQUESTS_PER_S": "1000",
    "VOICELANE_TENANT_REQUEST_BURST": "2000",
    "VOICELANE_TENANT_MAX_STREAMS": "1000",
    "VOICELANE_TENANT_MAX_QUEUED_CHARS": "100000000",
    # Recovery timings of the chaos tests: a dead worker's work moves within a few seconds.
    "VOICELANE_LEASE_TTL_S": "3",
    "VOICELANE_RECONCILE_INTERVAL_S": "0.5",
    "VOICELANE_STALL_TIMEOUT_S": "15",
    "VOICELANE_REALTIME__HEARTBEAT_TTL_S": "2",
    "VOICELANE_REALTIME__RECLAIM_IDLE_S": "2",
    "VOICELANE_REALTIME__WORKER_TTL_S": "3",
    "VOICELANE_REALTIME__UNAVAILABLE_AFTER_S": "4",
    "VOICELANE_REALTIME__CLAIM_TIMEOUT_S": "4",
    # N+1: the surviving GPU worker alone has slots for every stream (32 by default: 30
    # streams would leave it 2 spare, and a stale capacity report would refuse a new one).
    "VOICELANE_REALTIME__SLOTS_PER_WORKER": "64",
    # Chunks of ~5 s of audio: a 2,000-character job is ~30 chunks, many in flight at the kill.
    "VOICELANE_CHUNK_TARGET_AUDIO_S": "5",
}


def note(message: str) -> None:
    """Progress, on stderr (the tables go to stdout)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- memory ----------------------------------------------------------------------------------


def vm_rss_kib(pid: int) -> int:
    """VmRSS of ``pid`` in KiB; 0 if it is gone (or a zombie)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return 0
    return 0


def process_groups(pgids: set[int]) -> dict[int, list[int]]:
    """The processes of each process group in ``pgids`` (a Stack service and any child it
    forked), from one pass over /proc."""
    groups: dict[int, list[int]] = {pgid: [] for pgid in pgids}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp
        if int(fields[2]) in groups:
            groups[int(fields[2])].append(int(entry.name))
    return groups


@dataclass
class Memory:
    """RSS of named processes: one sample on demand, or the peak while sampling in a thread.

    ``groups``: name -> process group (a Stack service: its whole group is summed);
    ``single``: name -> pid (redis-server, which shares this script's group)."""

    groups: dict[str, int]
    single: dict[str, int]
    peak: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> dict[str, int]:
        members = process_groups(set(self.groups.values()))
        rss = {name: vm_rss_kib(pid) for name, pid in self.single.items()}
        for name, pgid in self.groups.items():
            rss[name] = sum(map(vm_rss_kib, members[pgid]))
        return rss

    def start(self) -> None:
        self.peak = self.sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            for name, kib in self.sample().items():
                self.peak[name] = max(self.peak.get(name, 0), kib)


# ---- load ------------------------------------------------------------------------------------


@dataclass
class StreamStats:
    started: int = 0
    completed: int = 0
    unavailable: int = 0
    others: Counter[str] = field(default_factory=Counter)
    audio_s: float = 0.0
    ttfa_s: list[float] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)
    """The load's start: ``ended`` is relative to it."""
    ended: list[str] = field(default_factory=list)
    """How each stream that did not complete ended, and when (seconds into the load)."""

    def end(self, what: str, seqs: int) -> None:
        self.ended.append(f"{time.monotonic() - self.t0:.1f} s: {what} (after {seqs} chunks)")


@dataclass
class JobStats:
    submitted: list[str] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)


def paragraphs(count: int) -> list[str]:
    """Three sentences each (two English, one Chinese): ~10 s of speech."""
    rng = random.Random(11)
    return [
        f"{rng.choice(ENGLISH)} {rng.choice(CHINESE)} {rng.choice(ENGLISH)}" for _ in range(count)
    ]


async def one_stream(
    stub: SpeechAsyncStub, text: str, deadline_s: float, stats: StreamStats
) -> None:
    stats.started += 1
    started = time.perf_counter()
    seqs: list[int] = []
    final = False
    packets = 0
    try:
        request = pb.SynthesizeRequest(text=text, client_ts_ms=int(time.time() * 1000))
        async for chunk in stub.Synthesize(request, metadata=METADATA, timeout=deadline_s):
            if not packets and chunk.opus_packets:
                stats.ttfa_s.append(time.perf_counter() - started)
            seqs.append(chunk.seq)
            packets += len(chunk.opus_packets)
            final = chunk.final
    except grpc.aio.AioRpcError as error:
        stats.end(f"{error.code().name}: {error.details()}", len(seqs))
        if seqs != list(range(len(seqs))):
            stats.others["seq gap or repeat"] += 1
        elif error.code() is grpc.StatusCode.UNAVAILABLE:
            stats.unavailable += 1
        else:
            stats.others[error.code().name] += 1
        return
    except Exception as error:
        stats.end(f"{type(error).__name__}: {error}", len(seqs))
        stats.others[type(error).__name__] += 1
        return
    finally:
        stats.audio_s += packets * PACKET_S
    if seqs != list(range(len(seqs))):
        stats.end("OK but seq gap or repeat", len(seqs))
        stats.others["seq gap or repeat"] += 1
    elif not final:
        stats.end("OK without a final chunk", len(seqs))
        stats.others["no final chunk"] += 1
    else:
        stats.completed += 1


async def closed_loop(
    stub: SpeechAsyncStub,
    texts_: list[str],
    *,
    first: int,
    until: float,
    deadline_s: float,
    stats: StreamStats,
) -> None:
    n = first
    while time.monotonic() < until:
        await one_stream(stub, texts_[n % len(texts_)], deadline_s, stats)
        n += 7


def submit_jobs(lane: Stack, job_texts: list[str], start: float, until: float) -> JobStats:
    """One job per second from ``start`` until ``until`` (monotonic clock)."""
    stats = JobStats()
    with lane.client() as client:
        n = 0
        while (due := start + n) < until:
            time.sleep(max(0.0, due - time.monotonic()))
            text = job_texts[n % len(job_texts)]
            n += 1
            try:
                response = client.post("/v1/jobs", json={"text": text})
            except httpx.HTTPError as error:
                stats.refused[type(error).__name__] += 1
                continue
            if response.status_code == 202:
                stats.submitted.append(response.json()["id"])
            else:
                stats.refused[f"HTTP {response.status_code}"] += 1
    return stats


async def load(
    lane: Stack, args: argparse.Namespace, job_texts: list[str], kill: Proc | None
) -> tuple[StreamStats, JobStats, float | None]:
    streams = StreamStats()
    channels = [
        grpc.aio.insecure_channel(lane.grpc_target, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(max(1, args.streams // 8))
    ]
    stubs: list[SpeechAsyncStub] = [pb_grpc.SpeechStub(c) for c in channels]
    stream_texts = paragraphs(97)
    start = streams.t0 = time.monotonic()
    until = start + args.seconds
    killed_at: float | None = None

    async def kill_midway() -> None:
        nonlocal killed_at
        if kill is None:
            return
        await asyncio.sleep(max(0.0, start + args.seconds / 2 - time.monotonic()))
        killed_at = time.monotonic() - start
        await asyncio.to_thread(kill.kill)
        note(f"SIGKILLed {kill.name} at {killed_at:.1f} s")

    try:
        jobs_task = asyncio.create_task(
            asyncio.to_thread(submit_jobs, lane, job_texts, start, until)
        )
        await asyncio.gather(
            kill_midway(),
            *(
                closed_loop(
                    stubs[i % len(stubs)],
                    stream_texts,
                    first=i,
                    until=until,
                    deadline_s=args.stream_deadline,
                    stats=streams,
                )
                for i in range(args.streams)
            ),
        )
        jobs = await jobs_task
    finally:
        for channel in channels:
            await channel.close()
    return streams, jobs, killed_at


def warm_up(lane: Stack, args: argparse.Namespace, job_texts: list[str]) -> None:
    """The load itself, shorter, and its jobs drained: the processes do once what they do
    once (the memory baseline is taken after this)."""
    warm = argparse.Namespace(**{**vars(args), "seconds": args.warmup})
    streams, jobs, _ = asyncio.run(load(lane, warm, job_texts, None))
    assert not streams.others, streams
    with lane.client() as client:

        def drained() -> bool:
            states = [str(client.get(f"/v1/jobs/{i}").json()["state"]) for i in jobs.submitted]
            return all(state in ("done", "failed", "cancelled") for state in states)

        wait_for(drained, args.drain, "the warm-up's jobs")


# ---- a phase ---------------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    streams: StreamStats
    jobs: JobStats
    states: Counter[str]
    failed_errors: list[str]
    duplicated_commits: int
    commits: int
    planned: int
    commits_by_worker: Counter[str]
    latency_s: list[float]
    audio_s: float
    drain_s: float
    killed: str | None
    killed_at: float | None
    before: dict[str, int]
    peak: dict[str, int]
    after: dict[str, int]
    redis_before: dict[str, int]
    redis_after: dict[str, int]
    logs: Path

    @property
    def lost(self) -> int:
        return len(self.jobs.submitted) - self.states["done"]


def redis_facts(url: str) -> dict[str, int]:
    client = redis.Redis.from_url(url)
    try:
        info = client.info("memory")
        return {"used_memory": int(info["used_memory"]), "keys": int(client.dbsize())}
    finally:
        client.close()


def run_phase(
    name: str, directory: Path, args: argparse.Namespace, job_texts: list[str], *, kill: bool
) -> Phase:
    redis_server = RedisServer(directory / "redis").start()
    lane = Stack(directory / "stack", redis_server.url, env_overrides=ENV)
    ledger = Ledger.from_url(redis_server.url)
    try:
        gpus = [lane.gpu_worker("gpu-a"), lane.gpu_worker("gpu-b")]
        lane.cpu_worker("cpu")
        lane.api()
        lane.grpc()
        lane.wait_realtime_workers(2)
        note(f"{name}: stack up, warming up for {args.warmup:g} s")
        warm_up(lane, args, job_texts)
        time.sleep(args.settle)

        assert redis_server.pid is not None
        memory = Memory(
            groups={proc.name: proc.process.pid for proc in lane.procs},  # each its own session
            single={"redis-server": redis_server.pid},
        )
        before = memory.sample()
        redis_before = redis_facts(redis_server.url)
        victim = gpus[0] if kill else None
        memory.start()
        note(f"{name}: load for {args.seconds:g} s")
        streams, jobs, killed_at = asyncio.run(load(lane, args, job_texts, victim))
        note(f"{name}: load over ({streams.started} streams); draining {len(jobs.submitted)} jobs")

        drain_started = time.monotonic()
        final: dict[str, JobState] = {}
        while time.monotonic() - drain_started < args.drain:
            for job_id in jobs.submitted:
                if job_id not in final:
                    job = ledger.jobs.get(job_id)
                    if job is not None and job.state.final:
                        final[job_id] = job.state
            if len(final) == len(jobs.submitted):
                break
            time.sleep(0.5)
        drain_s = time.monotonic() - drain_started
        memory.stop()
        note(f"{name}: drain {drain_s:.1f} s; settling {args.settle:g} s")
        time.sleep(args.settle)
        after = memory.sample()
        redis_after = redis_facts(redis_server.url)

        states: Counter[str] = Counter()
        failed_errors: list[str] = []
        duplicated = commits = planned = 0
        by_worker: Counter[str] = Counter()
        latency: list[float] = []
        audio_s = 0.0
        for job_id in jobs.submitted:
            job = ledger.jobs.get(job_id)
            assert job is not None, job_id
            states[job.state.value if job.state.final else "not final"] += 1
            if job.state is JobState.FAILED:
                failed_errors.append(f"{job_id}: {job.error}")
            if job.state is JobState.DONE and job.finished_at is not None:
                latency.append(job.finished_at - job.created_at)
                audio_s += job.duration_s or 0.0
            log = commit_log(ledger.redis, job_id)
            counts = Counter(n for n, _, _ in log)
            duplicated += sum(c - 1 for c in counts.values())
            commits += len(log)
            planned += job.chunks_total
            by_worker.update(w for _, _, w in log)
        return Phase(
            name=name,
            streams=streams,
            jobs=jobs,
            states=states,
            failed_errors=failed_errors,
            duplicated_commits=duplicated,
            commits=commits,
            planned=planned,
            commits_by_worker=by_worker,
            latency_s=latency,
            audio_s=audio_s,
            drain_s=drain_s,
            killed=victim.name if victim else None,
            killed_at=killed_at,
            before=before,
            peak=memory.peak,
            after=after,
            redis_before=redis_before,
            redis_after=redis_after,
            logs=directory / "stack",
        )
    except BaseException:
        print(lane.logs(), file=sys.stderr)
        raise
    finally:
        ledger.redis.close()
        lane.stop()
        redis_server.stop()
        # Keep the logs; drop the audio and the AOF.
        shutil.rmtree(directory / "stack" / "storage", ignore_errors=True)
        shutil.rmtree(directory / "redis", ignore_errors=True)


# ---- report ----------------------------------------------------------------------------------


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f}"


def report(phase: Phase, args: argparse.Namespace) -> list[tuple[str, bool, str]]:
    s, j = phase.streams, phase.jobs
    kill = f"; {phase.killed} SIGKILLed at {phase.killed_at:.1f} s" if phase.killed else ""
    print(f"### {phase.name}{kill}\n")
    others = ", ".join(f"{k} {v}" for k, v in sorted(s.others.items())) or "0"
    print(
        "| streams started | completed | ended UNAVAILABLE | other statuses "
        "| audio streamed | TTFA p50 / p99 |"
    )
    print("|---:|---:|---:|---|---:|---:|")
    print(
        f"| {s.started} | {s.completed} | {s.unavailable} | {others} | {s.audio_s:.0f} s "
        f"| {percentile(s.ttfa_s, 0.5) * 1000:.0f} / {percentile(s.ttfa_s, 0.99) * 1000:.0f} ms |"
    )
    print()
    refused = sum(j.refused.values())
    print(
        "| jobs submitted | refused | done | failed | not final | lost "
        "| chunk commits / planned | duplicated chunk commits | submit → done p50 / max "
        "| drain after submission |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {len(j.submitted)} | {refused} | {phase.states['done']} | {phase.states['failed']} "
        f"| {phase.states['not final']} | {phase.lost} | {phase.commits} / {phase.planned} "
        f"| {phase.duplicated_commits} | {percentile(phase.latency_s, 0.5):.1f} / "
        f"{max(phase.latency_s, default=float('nan')):.1f} s | {phase.drain_s:.1f} s |"
    )
    workers = ", ".join(f"{w} {n}" for w, n in sorted(phase.commits_by_worker.items()))
    print(
        f"\njobs' audio: {phase.audio_s:.0f} s ({phase.audio_s / args.seconds:.0f} audio s per "
        f"second of submission); chunk commits by worker: {workers}"
    )
    print()
    print(f"| process | RSS before | peak | after ({args.settle:g} s quiet) | after / before |")
    print("|---|---:|---:|---:|---:|")
    memory_fails = []
    for name, before in phase.before.items():
        if name == phase.killed:
            print(f"| {name} | {mib(before)} MiB | {mib(phase.peak[name])} MiB | killed | — |")
            continue
        after = phase.after[name]
        ratio = after / before if before else float("inf")
        if ratio > MEMORY_LIMIT:
            memory_fails.append(f"{name} {ratio:.2f}x")
        print(
            f"| {name} | {mib(before)} MiB | {mib(phase.peak[name])} MiB | {mib(after)} MiB "
            f"| {ratio:.2f}x |"
        )
    rb, ra = phase.redis_before, phase.redis_after
    print(
        f"\nredis used_memory {rb['used_memory'] / 2**20:.1f} → {ra['used_memory'] / 2**20:.1f} "
        f"MiB, keys {rb['keys']} → {ra['keys']}; logs: {phase.logs}"
    )
    for line in phase.failed_errors:
        print(f"failed job {line}")
    if s.ended:
        print(f"streams that did not complete ({len(s.ended)}), first 12:")
        for line in s.ended[:12]:
            print(f"  {line}")
    print()
    tag = phase.name.split(":")[0]
    return [
        (f"{tag}: every stream completed or ended UNAVAILABLE", not s.others, others),
        (
            f"{tag}: no submission refused",
            refused == 0,
            ", ".join(f"{k} {v}" for k, v in j.refused.items()) or "0",
        ),
        (
            f"{tag}: no job lost (all done)",
            phase.lost == 0,
            f"{phase.lost} of {len(j.submitted)} not done",
        ),
        (
            f"{tag}: no chunk committed twice",
            phase.duplicated_commits == 0,
            f"{phase.duplicated_commits} duplicated",
        ),
        (
            f"{tag}: RSS after <= {MEMORY_LIMIT:.2f} x before, every surviving process",
            not memory_fails,
            ", ".join(memory_fails) or "all within",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--streams", type=int, default=30)
    parser.add_argument("--stream-deadline", type=float, default=60)
    parser.add_argument("--drain", type=float, default=240, help="bound on the job drain, s")
    parser.add_argument(
        "--settle", type=float, default=15, help="quiet before 'before' and 'after', s"
    )
    parser.add_argument("--warmup", type=float, default=20, help="warm-up load, s")
    parser.add_argument("--dir", type=Path, default=None, help="logs (default: a new temp dir)")
    args = parser.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="voicelane-soak-"))
    note(f"logs under {directory}")
    job_texts = texts(int(args.seconds) + 1, JOB_CHARACTERS)
    phases = [
        run_phase("A: steady", directory / "a", args, job_texts, kill=False),
        run_phase(
            "B: one GPU worker SIGKILLed midway", directory / "b", args, job_texts, kill=True
        ),
    ]
    print(
        f"{args.streams} live gRPC streams in closed loop (3 sentences each, real-time pacing, "
        f"deadline {args.stream_deadline:g} s) + one {JOB_CHARACTERS:,}-character job per second "
        f"over REST, for {args.seconds:g} s; 2 GPU workers (espeak) + 1 CPU worker, API, gRPC "
        f"front, redis-server; {os.cpu_count()} cores\n"
    )
    criteria = [c for phase in phases for c in report(phase, args)]
    for what, ok, detail in criteria:
        print(f"{'PASS' if ok else 'FAIL'}  {what}: {detail}")
    sys.exit(0 if all(ok for _, ok, _ in criteria) else 1)


if __name__ == "__main__":
    main()
