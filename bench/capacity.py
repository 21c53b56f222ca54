"""Benchmark: what one live stream and one job chunk cost Redis and each process, and how many
fronts and workers one Redis primary carries (issue 25, capacity planning).

Real processes, one run: redis-server (AOF everysec, as ``voicelane up`` starts it),
``--workers`` render workers (espeak), one CPU worker, ``voicelane grpc`` and ``voicelane api``
(:class:`tests.support.stack.Stack`), with the server's production timings (lease TTL,
reconcile interval, stall timeout: the stack's test values are faster and would inflate the
idle cost) and tenant quotas raised so that only capacity can refuse.

Counters, read before and after each phase:

* Redis: ``INFO commandstats`` (calls per command; Lua's inner calls are counted too, so the
  column is "commands executed", not round trips), ``INFO stats`` (``total_commands_processed``,
  ``total_net_input_bytes``, ``total_net_output_bytes``), ``INFO cpu`` (the main thread's
  CPU: what saturates a single-threaded Redis) and ``INFO persistence``
  (``aof_current_size``; automatic AOF rewrites are held off for the run, so that a fork does
  not land in one phase at random). The bench's own INFO calls are left out of the commands
  and of the output bytes.
* CPU per process kind: ``/proc/PID/stat`` utime + stime (and waited-for children) of each
  process tree — the gRPC front, the API, the render workers, the CPU worker, redis-server —
  and this process's own (the load generator) from ``time.process_time``.

Phases, in order (baselines first, in the same run):

1. **Idle, staged** (``--idle-s`` each): Redis alone, then with each process kind added, so
   the table says what an idle process of each kind costs Redis (ops/s, CPU).
2. **Idle, warm**: the whole stack after one stream went through (the fronts' output readers
   exist): the baseline subtracted from every "marginal" figure below.
3. **Live streams** at each of ``--levels`` (50, 100, 200): that many gRPC clients in a
   closed loop for ``--duration-s`` (first streams spread over 3.5 s), each stream one
   sentence (about 3.4 s of audio, paced like a live listener); streams started before the
   end are finished and counted. Per stream and per audio second: the whole window. Rates
   (Redis CPU per wall second, commands/s): the steady part (all clients started, none
   stopped yet).
4. **Jobs**: ``--jobs`` jobs of ``--job-chars`` characters submitted at once over REST; the
   window runs from the first submission to the last job done. Per chunk: the whole window
   (planning, assembly and the API's submission and polling included: a chunk carries its
   share of its job).

Extrapolation (printed last): Redis main-thread CPU per second of live audio (a stream that
plays delivers one audio second per second, so this is the cost of one playing stream per
second: the largest over the levels, idle taken off) and per chunk; the ceiling is where the
idle stack plus the load reaches one core. Assumption: Redis's CPU is linear in the commands
it runs (the mix per stream and per chunk stays what it was here; the table shows it does
across the levels) and Redis is single-threaded (a primary saturates at ~100% of one core,
whatever the machine has).

Run: ``.venv/bin/python -m bench.capacity [--workers 2] [--slots 128] [--levels 50,100,200]
[--duration-s 30] [--idle-s 8] [--jobs 3] [--job-chars 30000] [--headroom 0.5]``
(about 5 minutes with the defaults).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
import redis

from bench.render import ENGLISH
from bench.tables import header, percentile
from tests.support.stack import ACME_KEY, Stack, wait_for
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.redis_server import RedisServer

if TYPE_CHECKING:
    from voicelane.common.wire.speech_pb2_grpc import SpeechAsyncStub

SENTENCE = "The weather is nice today, so we will walk along the river."
"""The stream of ``bench.protocols`` and ``bench.realtime``: about 3.4 s of audio."""
METADATA = (("authorization", f"Bearer {ACME_KEY}"),)
STREAMS_PER_CHANNEL = 8
RAMP_S = 3.5
FRAME_MS = 20
INFO_SECTIONS = ("server", "stats", "cpu", "persistence", "commandstats")
BENCH_COMMANDS = frozenset({"info"})
"""Commands the bench itself sends to Redis: left out of the counts."""
KINDS = ("front", "api", "render workers", "cpu worker", "redis", "load gen")
PRODUCTION_TIMINGS = {  # the stack's test values (3 s, 0.5 s, 15 s) would inflate idle costs
    "VOICELANE_LEASE_TTL_S": "10",
    "VOICELANE_RECONCILE_INTERVAL_S": "2",
    "VOICELANE_STALL_TIMEOUT_S": "120",
}
UNLIMITED_TENANT = {
    "VOICELANE_TENANT_REQUESTS_PER_S": "100000",
    "VOICELANE_TENANT_REQUEST_BURST": "100000",
    "VOICELANE_TENANT_MAX_STREAMS": "100000",
    "VOICELANE_TENANT_MAX_QUEUED_CHARS": "1000000000",
}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SERVER_SLOTS = 80
"""The server's default real-time slots per render worker: what one core keeps fed with espeak
(docs/benchmarks.md, "Real-time lane at scale"); the sizing uses it, not the bench's --slots."""
PROCESS_CORE_BUDGET = 0.7
"""How busy a front or CPU worker is planned to run (of its one core): queueing stays short."""

# ---- pure helpers: INFO, /proc, deltas, extrapolation -----------------------------------------


@dataclass(frozen=True)
class CommandStat:
    calls: int
    usec: int


def parse_info(text: str) -> dict[str, str]:
    """``INFO``'s reply as field -> value (section headers and blank lines dropped; a value
    keeps any ``:`` after the first)."""
    fields: dict[str, str] = {}
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line or line.startswith("#") or ":" not in line:
            continue
        name, value = line.split(":", 1)
        fields[name] = value
    return fields


def parse_commandstats(info: Mapping[str, str]) -> dict[str, CommandStat]:
    """The ``cmdstat_*`` fields of parsed INFO as command -> calls and usec. Subcommands keep
    Redis's name (``client|setname``)."""
    stats: dict[str, CommandStat] = {}
    for name, value in info.items():
        if not name.startswith("cmdstat_"):
            continue
        parts = dict(p.split("=", 1) for p in value.split(",") if "=" in p)
        stats[name.removeprefix("cmdstat_")] = CommandStat(
            int(parts.get("calls", "0")), int(parts.get("usec", "0"))
        )
    return stats


def parse_proc_stat(text: str) -> tuple[int, float]:
    """A ``/proc/PID/stat`` line as (parent pid, CPU seconds: utime + stime + waited-for
    children's). The command name may hold spaces and parentheses: fields count from the
    last ``)``."""
    fields = text.rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    return int(fields[1]), ticks / CLOCK_TICKS


def tree_sums(
    stats: Mapping[int, tuple[int, float]], roots: Mapping[str, Sequence[int]]
) -> dict[str, float]:
    """CPU seconds of each named group of root pids and all their descendants, from one pass
    of ``/proc`` (pid -> (parent pid, CPU seconds))."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    sums: dict[str, float] = {}
    for name, pids in roots.items():
        total, seen, todo = 0.0, set[int](), [p for p in pids if p in stats]
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            total += stats[pid][1]
            todo += children.get(pid, [])
        sums[name] = total
    return sums


@dataclass(frozen=True)
class Snapshot:
    """Counters at one instant."""

    wall_s: float
    info: Mapping[str, str]
    commands: Mapping[str, CommandStat]
    cpu_s: Mapping[str, float]
    """CPU seconds by process kind (:data:`KINDS`)."""
    reply_bytes: int = 0
    """The size of the INFO reply this snapshot read (Redis counts it in its output bytes
    after the snapshot)."""

    def number(self, name: str) -> float:
        return float(self.info.get(name, "0"))

    @property
    def redis_main_cpu_s(self) -> float:
        return self.number("used_cpu_sys_main_thread") + self.number("used_cpu_user_main_thread")


@dataclass(frozen=True)
class Delta:
    """What happened between two snapshots; the bench's own INFO calls left out."""

    wall_s: float
    commands: dict[str, int]
    usec: int
    net_in_bytes: float
    net_out_bytes: float
    aof_bytes: float
    redis_main_cpu_s: float
    cpu_s: dict[str, float]

    @property
    def total_commands(self) -> int:
        return sum(self.commands.values())

    def minus_idle(self, idle: Delta) -> Delta:
        """This window less what the idle stack does in as long (idle rates x wall)."""
        scale = self.wall_s / idle.wall_s
        names = set(self.commands) | set(idle.commands)
        return Delta(
            self.wall_s,
            {n: self.commands.get(n, 0) - round(idle.commands.get(n, 0) * scale) for n in names},
            self.usec - round(idle.usec * scale),
            self.net_in_bytes - idle.net_in_bytes * scale,
            self.net_out_bytes - idle.net_out_bytes * scale,
            self.aof_bytes - idle.aof_bytes * scale,
            self.redis_main_cpu_s - idle.redis_main_cpu_s * scale,
            {k: v - idle.cpu_s.get(k, 0.0) * scale for k, v in self.cpu_s.items()},
        )


def delta(before: Snapshot, after: Snapshot, bench_reply_bytes: int | None = None) -> Delta:
    """``after`` - ``before``. The output bytes lose the INFO replies the bench read in the
    window: ``before``'s own (sent after its counters were taken) unless
    ``bench_reply_bytes`` says how many bytes of replies to take off."""
    commands = {
        name: stat.calls - before.commands.get(name, CommandStat(0, 0)).calls
        for name, stat in after.commands.items()
        if name not in BENCH_COMMANDS
    }
    usec = sum(
        stat.usec - before.commands.get(name, CommandStat(0, 0)).usec
        for name, stat in after.commands.items()
        if name not in BENCH_COMMANDS
    )
    replies = before.reply_bytes if bench_reply_bytes is None else bench_reply_bytes
    return Delta(
        after.wall_s - before.wall_s,
        {name: calls for name, calls in commands.items() if calls},
        usec,
        after.number("total_net_input_bytes") - before.number("total_net_input_bytes"),
        after.number("total_net_output_bytes") - before.number("total_net_output_bytes") - replies,
        after.number("aof_current_size") - before.number("aof_current_size"),
        after.redis_main_cpu_s - before.redis_main_cpu_s,
        {k: after.cpu_s[k] - before.cpu_s.get(k, 0.0) for k in after.cpu_s},
    )


def mean_concurrency(spans: Iterable[tuple[float, float]], start: float, end: float) -> float:
    """How many of the ``spans`` (start, end) were open on average between ``start`` and
    ``end``: their overlap with the window over its length."""
    overlap = sum(max(0.0, min(b, end) - max(a, start)) for a, b in spans)
    return overlap / (end - start)


def units_at(budget: float, intercept: float, per_unit: float) -> float:
    """How many units (concurrent streams, chunks per second) fit before a resource's use
    (``intercept`` + ``per_unit`` x units, in cores) reaches ``budget`` cores; inf when a
    unit costs nothing measurable, 0 when the idle cost alone is over budget."""
    if per_unit <= 0:
        return math.inf
    return max(0.0, (budget - intercept) / per_unit)


def book_hours_per_hour(chunks_per_s: float, audio_s_per_chunk: float) -> float:
    """Hours of audio rendered per wall-clock hour at ``chunks_per_s``."""
    return chunks_per_s * audio_s_per_chunk


def processes_for(units: float, per_process: float) -> int:
    """Processes needed for ``units`` when each carries ``per_process`` (at least one)."""
    if per_process <= 0 or math.isinf(per_process):
        return 1
    return max(1, math.ceil(units / per_process - 1e-9))


# ---- measurement -------------------------------------------------------------------------------


class Meter:
    """Reads the snapshots: INFO from Redis (raw, parsed here), CPU from ``/proc``."""

    def __init__(self, redis_url: str) -> None:
        self.client = redis.Redis.from_url(redis_url)
        self.client.set_response_callback("INFO", lambda response, **_: response)
        self.roots: dict[str, list[int]] = {}
        self.loadgen_cpu_s = 0.0
        """CPU this process spent outside the load (snapshots), taken off the load gen's."""

    def redis_pid(self) -> int:
        return int(parse_info(self._info("server")[0])["process_id"])

    def _info(self, *sections: str) -> tuple[str, int]:
        raw: bytes = self.client.execute_command("INFO", *sections)  # type: ignore[no-untyped-call]
        return raw.decode(), len(raw)

    def snapshot(self) -> Snapshot:
        cpu_before = time.process_time()
        text, size = self._info(*INFO_SECTIONS)
        info = parse_info(text)
        stats: dict[int, tuple[int, float]] = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    stats[int(entry.name)] = parse_proc_stat(Path(entry.path, "stat").read_text())
                except (OSError, IndexError, ValueError):
                    continue
        cpu = tree_sums(stats, self.roots)
        self.loadgen_cpu_s += time.process_time() - cpu_before
        cpu["load gen"] = time.process_time() - self.loadgen_cpu_s
        return Snapshot(time.monotonic(), info, parse_commandstats(info), cpu, size)

    def idle(self, seconds: float) -> Delta:
        before = self.snapshot()
        time.sleep(seconds)
        return delta(before, self.snapshot())


@dataclass
class StreamLoad:
    level: int
    window: Delta
    steady: Delta
    streams: int
    audio_s: float
    failures: dict[str, int]
    ttfa_s: list[float]
    concurrency: float
    """Streams open on average in the steady window (measured: under contention fewer than
    ``level`` clients have one open, as refused clients wait their retry hint)."""


async def _stream(stub: SpeechAsyncStub) -> tuple[float, float, float, float]:
    """One live stream read to its end: (time to first audio, audio seconds, start and end on
    the monotonic clock)."""
    opened = time.monotonic()
    started = time.perf_counter()
    first: float | None = None
    end_ms = 0
    request = pb.SynthesizeRequest(text=SENTENCE, client_ts_ms=int(time.time() * 1000))
    async for chunk in stub.Synthesize(request, metadata=METADATA, timeout=60):
        if chunk.opus_packets:
            if first is None:
                first = time.perf_counter() - started
            end_ms = max(end_ms, chunk.pts_ms + FRAME_MS * len(chunk.opus_packets))
    if first is None:
        raise RuntimeError("a stream ended without audio")
    return first, end_ms / 1000, opened, time.monotonic()


async def _streams(
    meter: Meter, target: str, level: int, duration_s: float
) -> tuple[
    Snapshot, Snapshot, Snapshot, Snapshot, list[tuple[float, float, float, float]], dict[str, int]
]:
    channels = [
        grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(max(1, math.ceil(level / STREAMS_PER_CHANNEL)))
    ]
    stubs: list[SpeechAsyncStub] = [pb_grpc.SpeechStub(c) for c in channels]
    results: list[tuple[float, float, float, float]] = []
    failures: dict[str, int] = {}
    try:
        for channel in channels:
            await channel.channel_ready()
        start = meter.snapshot()
        stop_at = time.monotonic() + duration_s

        async def client(index: int) -> None:
            await asyncio.sleep(RAMP_S * index / level)
            while time.monotonic() < stop_at:
                try:
                    results.append(await _stream(stubs[index % len(stubs)]))
                except grpc.aio.AioRpcError as error:
                    failures[error.code().name] = failures.get(error.code().name, 0) + 1
                    await asyncio.sleep(1.0)

        tasks = [asyncio.create_task(client(i)) for i in range(level)]
        await asyncio.sleep(RAMP_S + 1.0)
        steady_start = meter.snapshot()
        await asyncio.sleep(max(0.0, stop_at - time.monotonic()))
        steady_end = meter.snapshot()
        await asyncio.gather(*tasks)
        end = meter.snapshot()
        return start, steady_start, steady_end, end, results, failures
    finally:
        for channel in channels:
            await channel.close()


def stream_load(meter: Meter, target: str, level: int, duration_s: float) -> StreamLoad:
    start, steady_start, steady_end, end, results, failures = asyncio.run(
        _streams(meter, target, level, duration_s)
    )
    replies = start.reply_bytes + steady_start.reply_bytes + steady_end.reply_bytes
    return StreamLoad(
        level,
        delta(start, end, replies),
        delta(steady_start, steady_end),
        len(results),
        sum(r[1] for r in results),
        failures,
        [r[0] for r in results],
        mean_concurrency([(r[2], r[3]) for r in results], steady_start.wall_s, steady_end.wall_s),
    )


@dataclass
class JobLoad:
    window: Delta
    jobs: int
    chunks: int
    audio_s: float


def job_texts(count: int, characters: int) -> list[str]:
    """English prose (``bench.render``'s sentences, shuffled) of about ``characters`` each."""
    rng = random.Random(25)
    result = []
    for _ in range(count):
        sentences: list[str] = []
        while sum(map(len, sentences)) < characters:
            sentences.append(rng.choice(ENGLISH))
        result.append(" ".join(sentences)[:characters])
    return result


def job_load(meter: Meter, lane: Stack, jobs: int, characters: int) -> JobLoad:
    texts = job_texts(jobs, characters)
    with lane.client() as client:
        start = meter.snapshot()
        ids = []
        for text in texts:
            response = client.post("/v1/jobs", json={"text": text})
            assert response.status_code == 202, response.text
            ids.append(response.json()["id"])
        finals: list[dict[str, Any]] = []
        for job_id in ids:

            def final(job_id: str = job_id) -> dict[str, Any] | None:
                job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
                if job["state"] in ("done", "failed", "cancelled"):
                    return job
                time.sleep(0.5)  # polling costs the API and Redis: keep it rare
                return None

            finals.append(wait_for(final, 900, f"job {job_id}"))
        end = meter.snapshot()
    failed = [j for j in finals if j["state"] != "done"]
    assert not failed, f"jobs did not finish: {failed}\n{lane.logs()}"
    return JobLoad(
        delta(start, end),
        jobs,
        sum(int(j["chunks_total"]) for j in finals),
        sum(float(j["output"]["duration_s"]) for j in finals),
    )


# ---- tables ------------------------------------------------------------------------------------


def _kb(value: float) -> str:
    return f"{value / 1024:.1f}"


def _ms(cpu_s: float, count: float) -> str:
    return f"{cpu_s / count * 1000:.2f}" if count else "-"


def top_commands(delta_: Delta, count: float, limit: int = 10) -> str:
    ranked = sorted(delta_.commands.items(), key=lambda item: -item[1])[:limit]
    return ", ".join(f"{name} {calls / count:.1f}" for name, calls in ranked if calls > 0)


def print_idle(stages: Iterable[tuple[str, Delta]]) -> None:
    print("### Idle (no streams, no jobs): what each process kind costs by being there\n")
    header(
        "processes up", "Redis cmds/s", "Redis main thread % of a core",
        "Redis net in KB/s", "net out KB/s", "CPU % of a core: front", "api",
        "render workers", "cpu worker", "redis",
    )  # fmt: skip
    for name, d in stages:
        cpu = {k: d.cpu_s.get(k, 0.0) / d.wall_s * 100 for k in KINDS}
        print(
            f"| {name} | {d.total_commands / d.wall_s:.0f} "
            f"| {d.redis_main_cpu_s / d.wall_s * 100:.2f} | {_kb(d.net_in_bytes / d.wall_s)} "
            f"| {_kb(d.net_out_bytes / d.wall_s)} | {cpu['front']:.1f} | {cpu['api']:.1f} "
            f"| {cpu['render workers']:.1f} | {cpu['cpu worker']:.1f} | {cpu['redis']:.1f} |"
        )
    print()


def print_streams(loads: Sequence[StreamLoad], idle: Delta) -> None:
    print("### Per live stream (gRPC Synthesize, one sentence, paced; marginal: idle taken off)\n")
    header(
        "clients", "open streams (measured)", "streams", "audio s", "failures", "TTFA p50",
        "TTFA p99",
        "Redis cmds/stream", "cmds per audio s", "net in KB/stream", "net out KB/stream",
        "in / out KB per audio s", "AOF KB/stream",
    )  # fmt: skip
    for load in loads:
        m = load.window.minus_idle(idle)
        n, a = load.streams, load.audio_s
        fails = " ".join(f"{k}:{v}" for k, v in sorted(load.failures.items())) or "0"
        print(
            f"| {load.level} | {load.concurrency:.0f} | {n} | {a:.0f} | {fails} "
            f"| {percentile(load.ttfa_s, 0.5) * 1000:.0f} ms "
            f"| {percentile(load.ttfa_s, 0.99) * 1000:.0f} ms "
            f"| {m.total_commands / n:.1f} | {m.total_commands / a:.1f} "
            f"| {_kb(m.net_in_bytes / n)} | {_kb(m.net_out_bytes / n)} "
            f"| {_kb(m.net_in_bytes / a)} / {_kb(m.net_out_bytes / a)} "
            f"| {_kb(m.aof_bytes / n)} |"
        )
    print()
    print("Commands per stream (marginal), most frequent first:\n")
    for load in loads:
        print(f"- {load.level}: {top_commands(load.window.minus_idle(idle), load.streams)}")
    print()
    print("### CPU ms per stream by process kind (marginal: idle taken off)\n")
    header("clients", *KINDS, "Redis main thread")
    for load in loads:
        m = load.window.minus_idle(idle)
        cells = " | ".join(_ms(m.cpu_s.get(k, 0.0), load.streams) for k in KINDS)
        print(f"| {load.level} | {cells} | {_ms(m.redis_main_cpu_s, load.streams)} |")
    print()


def print_jobs(load: JobLoad, idle: Delta) -> None:
    m = load.window.minus_idle(idle)
    c = load.chunks
    print(
        f"### Per job chunk ({load.jobs} jobs, {load.chunks} chunks, "
        f"{load.audio_s / c:.1f} s of audio per chunk; marginal: idle taken off)\n"
    )
    header(
        "chunks", "wall s", "chunks/s", "Redis cmds/chunk", "net in KB/chunk",
        "net out KB/chunk", "AOF KB/chunk", "Redis main thread ms/chunk",
        "Redis % of a core while running",
    )  # fmt: skip
    print(
        f"| {c} | {m.wall_s:.1f} | {c / m.wall_s:.2f} | {m.total_commands / c:.1f} "
        f"| {_kb(m.net_in_bytes / c)} | {_kb(m.net_out_bytes / c)} | {_kb(m.aof_bytes / c)} "
        f"| {_ms(m.redis_main_cpu_s, c)} "
        f"| {load.window.redis_main_cpu_s / load.window.wall_s * 100:.1f} |"
    )
    print(f"\nCommands per chunk (marginal): {top_commands(m, c)}\n")
    header("CPU ms per chunk", *KINDS)
    print("| marginal | " + " | ".join(_ms(m.cpu_s.get(k, 0.0), c) for k in KINDS) + " |")
    print()


def print_redis_load(loads: Sequence[StreamLoad], jobs: JobLoad, idle: Delta) -> None:
    print("### Redis at the bench's loads (streams: the steady part of each window)\n")
    header(
        "load", "Redis cmds/s", "main thread % of a core", "process % of a core",
        "µs main-thread CPU per cmd", "µs in commands per cmd (commandstats)",
    )  # fmt: skip
    rows: list[tuple[str, Delta]] = [("idle (warm stack)", idle)]
    rows += [
        (f"{load.level} clients, {load.concurrency:.0f} streams open", load.steady)
        for load in loads
    ]
    rows.append((f"jobs, {jobs.chunks / jobs.window.wall_s:.1f} chunks/s", jobs.window))
    for name, d in rows:
        cmds = max(1, d.total_commands)
        print(
            f"| {name} | {d.total_commands / d.wall_s:.0f} "
            f"| {d.redis_main_cpu_s / d.wall_s * 100:.1f} "
            f"| {d.cpu_s.get('redis', 0.0) / d.wall_s * 100:.1f} "
            f"| {d.redis_main_cpu_s / cmds * 1e6:.1f} | {d.usec / cmds:.1f} |"
        )
    print()


def print_ceiling(
    loads: Sequence[StreamLoad], jobs: JobLoad, idle: Delta, *, workers: int, headroom: float
) -> None:
    idle_core = idle.redis_main_cpu_s / idle.wall_s
    # A live stream that plays delivers one audio second per second: concurrent healthy streams
    # are audio seconds per second, whatever the machine did to the streams' open time.
    per_audio = [
        (load.level, load.window.minus_idle(idle).redis_main_cpu_s / load.audio_s) for load in loads
    ]
    per_stream = max(cost for _, cost in per_audio)  # the costliest: no amortisation assumed
    marginal_jobs = jobs.window.minus_idle(idle)
    per_chunk_s = marginal_jobs.redis_main_cpu_s / jobs.chunks
    audio_per_chunk = jobs.audio_s / jobs.chunks
    top = max(loads, key=lambda load: load.audio_s / load.window.wall_s)
    front_per_stream = top.window.minus_idle(idle).cpu_s["front"] / top.audio_s
    streams_per_front = units_at(PROCESS_CORE_BUDGET, 0.0, front_per_stream)
    chunks_per_worker = jobs.chunks / jobs.window.wall_s / workers
    assembly_per_chunk_s = marginal_jobs.cpu_s["cpu worker"] / jobs.chunks
    chunks_per_cpu_worker = units_at(PROCESS_CORE_BUDGET, 0.0, assembly_per_chunk_s)
    cmds_per_stream_s = top.window.minus_idle(idle).total_commands / top.audio_s
    us_per_cmd = top.steady.redis_main_cpu_s / max(1, top.steady.total_commands) * 1e6
    print("### The Redis ceiling (extrapolated)\n")
    print(
        "Redis main-thread CPU per second of live audio (= per playing stream per second; "
        f"idle taken off): {', '.join(f'{c * 1000:.3f} ms at {n} clients' for n, c in per_audio)}"
        f"; the table uses the largest, {per_stream * 1000:.3f} ms; idle stack "
        f"{idle_core:.4f} cores. Per chunk: {per_chunk_s * 1000:.3f} ms. In commands: "
        f"{cmds_per_stream_s:.1f} commands per audio second at {us_per_cmd:.1f} µs of "
        f"main-thread CPU each (at {top.level} clients) -> {1e6 / us_per_cmd:,.0f} "
        "commands/s per core.\n"
        "Assumption: Redis's CPU is linear in the commands it runs (each stream's and chunk's "
        "mix as measured here) and its main thread saturates at 1.0 core.\n"
    )
    header(
        "Redis main thread at", "concurrent streams (no jobs)",
        f"render workers at {SERVER_SLOTS} slots",
        f"gRPC fronts at {PROCESS_CORE_BUDGET:.0%} of a core", "chunks/s (no streams)",
        "book-hours per hour", "render workers (espeak) for those chunks",
        f"CPU workers at {PROCESS_CORE_BUDGET:.0%} of a core",
    )  # fmt: skip
    for budget in (1.0, headroom):
        streams = units_at(budget, idle_core, per_stream)
        chunks = units_at(budget, idle_core, per_chunk_s)
        print(
            f"| {budget:.0%} of a core | {streams:,.0f} "
            f"| {processes_for(streams, SERVER_SLOTS):,} "
            f"| {processes_for(streams, streams_per_front):,} "
            f"| {chunks:,.1f} | {book_hours_per_hour(chunks, audio_per_chunk):,.0f} "
            f"| {processes_for(chunks, chunks_per_worker):,} "
            f"| {processes_for(chunks, chunks_per_cpu_worker):,} |"
        )
    print(
        f"\nper process: gRPC front {front_per_stream * 1000:.3f} ms CPU per audio second "
        f"(at {top.level} clients) -> {streams_per_front:,.0f} streams per front at "
        f"{PROCESS_CORE_BUDGET:.0%} of a core; render worker (espeak, one core): "
        f"{chunks_per_worker:.2f} chunks/s ({chunks_per_worker * audio_per_chunk:.0f} audio s "
        f"per s) in this run, {SERVER_SLOTS} real-time slots (the server's default); CPU "
        f"worker {assembly_per_chunk_s * 1000:.2f} ms per chunk -> "
        f"{chunks_per_cpu_worker:,.0f} chunks/s at {PROCESS_CORE_BUDGET:.0%} of a core."
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2, help="render workers (espeak)")
    parser.add_argument(
        "--slots", type=int, default=128, help="real-time slots per worker (admits 200 on 2)"
    )
    parser.add_argument("--levels", default="50,100,200")
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--idle-s", type=float, default=8.0)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--job-chars", type=int, default=30000)
    parser.add_argument("--headroom", type=float, default=0.5, help="recommended Redis load")
    args = parser.parse_args()
    levels = [int(v) for v in args.levels.split(",") if v]
    env = {
        "VOICELANE_REALTIME__SLOTS_PER_WORKER": str(args.slots),
        **PRODUCTION_TIMINGS,
        **UNLIMITED_TENANT,
    }
    with tempfile.TemporaryDirectory() as tmp:
        redis_server = RedisServer(Path(tmp) / "redis").start()
        lane = Stack(Path(tmp) / "lane", redis_server.url, env_overrides=env)
        meter = Meter(redis_server.url)
        meter.roots["redis"] = [meter.redis_pid()]
        # No AOF rewrite inside a window: its fork would land in one phase's numbers at random
        # (and shrink aof_current_size); the AOF still grows as in production.
        meter.client.config_set("auto-aof-rewrite-min-size", str(64 * 1024**3))
        stages: list[tuple[str, Delta]] = []
        try:
            stages.append(("Redis alone", meter.idle(args.idle_s)))
            workers = [lane.gpu_worker(f"gpu{i}") for i in range(args.workers)]
            meter.roots["render workers"] = [w.process.pid for w in workers]
            lane.wait_realtime_workers(args.workers)
            time.sleep(2)
            stages.append((f"+ {args.workers} render workers", meter.idle(args.idle_s)))
            meter.roots["cpu worker"] = [lane.cpu_worker().process.pid]
            time.sleep(6)  # its start-up (imports, Celery's connections) is not its idle cost
            stages.append(("+ CPU worker", meter.idle(args.idle_s)))
            meter.roots["front"] = [lane.grpc().process.pid]
            time.sleep(2)
            stages.append(("+ gRPC front", meter.idle(args.idle_s)))
            meter.roots["api"] = [lane.api().process.pid]
            time.sleep(2)
            stages.append(("+ API", meter.idle(args.idle_s)))
            stream_load(meter, lane.grpc_target, 1, 0.1)  # the front's output reader exists
            time.sleep(2)
            idle = meter.idle(args.idle_s)
            stages.append(("whole stack, warm (the baseline)", idle))
            loads = []
            for level in levels:
                loads.append(stream_load(meter, lane.grpc_target, level, args.duration_s))
                print(f"{level} streams: {loads[-1].streams} done", flush=True)
                time.sleep(3)
            jobs = job_load(meter, lane, args.jobs, args.job_chars)
        finally:
            lane.stop()
            redis_server.stop()
    print(
        f"\n{args.workers} render workers (espeak) x {args.slots} slots, 1 CPU worker, "
        f"1 gRPC front, 1 API, Redis 7 (AOF everysec); {os.cpu_count()} cores shared with "
        f"the load generator; {args.duration_s:g} s per level\n"
    )
    print_idle(stages)
    print_streams(loads, idle)
    print_jobs(jobs, idle)
    print_redis_load(loads, jobs, idle)
    print_ceiling(loads, jobs, idle, workers=args.workers, headroom=args.headroom)


if __name__ == "__main__":
    main()
