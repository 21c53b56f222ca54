"""Workers on another host: a partition and a dead host, each in the middle of a job and of
live streams.

Two hosts simulated with network namespaces (``tests/support/netns.py``): host A runs Redis,
the S3 store (SeaweedFS), the API, the gRPC front, the CPU worker and one render worker (the
survivor); host B runs a render worker that reaches Redis and S3 across the hosts' link.
Streams are opened while B's worker is the only one, so B serves them; a job is submitted
and rendered by both. Then host B goes away — the link is cut (every packet dropped, both
ways) or its processes are SIGKILLed — and:

- the job finishes on A with every chunk committed exactly once (the ledger's commit log),
  none of the chunks B held at the fault committed by B;
- every stream either carries on from A (no repeated or reordered audio, finished by A) or
  ends UNAVAILABLE within the bound the liveness rules give (``docs/grpc.md``, Liveness);
- after a cut, the link comes back with B's commits still in flight: they are refused
  (their leases lapsed), B's log shows them fenced; and B takes work again by itself (in
  the job, or in a second one when the first ended without it).

Without a survivor (B's worker the only one), a cut ends every stream UNAVAILABLE within the
bound.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from tests.integration.test_batch_lane import s3_env, wait_final
from tests.support.ledger import commit_log
from tests.support.netns import HostRedis, HostSeaweed, TwoHosts, two_hosts
from tests.support.s3_server import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, S3Endpoint
from tests.support.stack import ACME_KEY, Stack, wait_for
from voicelane.api.streams import DEFAULT_BLOCK_MS, LIVENESS_CHECK_S
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.lane.keys import heartbeat_key, owner_key
from voicelane.core.lane.messages import lane_request_id
from voicelane.core.ledger import Ledger
from voicelane.core.settings import RealtimeSettings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

METADATA = (("authorization", f"Bearer {ACME_KEY}"),)
SURVIVOR = "gpu-a@test"
REMOTE = "gpu-b@test"
# ~200 chunks of about 3 s of audio each (VOICELANE_CHUNK_TARGET_AUDIO_S=3).
JOB_TEXT = " ".join(
    f"Paragraph {i} talks about the weather, the harbor and the long road home." for i in range(200)
)
# A live stream of about 40 s: still playing when host B goes away, after the survivor started.
STREAM_TEXT = " ".join(
    f"Sentence {i} of a stream that keeps on talking while the other host goes away."
    for i in range(10)
)
STREAMS = 3
RT = RealtimeSettings()
"""The real-time lane's settings as every process here runs them (the defaults: the stacks
set none)."""


def unavailable_bound_s(rt: RealtimeSettings) -> float:
    """How long after its worker stopped a stream nobody took over ends UNAVAILABLE: the
    heartbeat lapses within ``heartbeat_ttl_s``, the front gives up ``unavailable_after_s``
    later, at its next liveness check (one quiet read and one check step after)."""
    check_s = min(LIVENESS_CHECK_S, rt.claim_timeout_s / 4, rt.unavailable_after_s / 4)
    return rt.heartbeat_ttl_s + rt.unavailable_after_s + check_s + DEFAULT_BLOCK_MS / 1000


@dataclass
class Lane:
    hosts: TwoHosts
    redis: HostRedis
    a: Stack
    b: Stack
    ledger: Ledger
    s3: HostSeaweed

    def logs(self) -> str:
        return f"{self.a.logs()}\n{self.b.logs()}\n----- s3: {self.s3.log_path} -----"

    @contextmanager
    def explained(self) -> Iterator[None]:
        """The processes' logs printed if the block fails."""
        try:
            yield
        except BaseException:
            print(self.logs())
            raise


@pytest.fixture
def lane(tmp_path: Path) -> Iterator[Lane]:
    with two_hosts() as hosts:
        redis_server = HostRedis(hosts.a, hosts.a_from_test, tmp_path / "redis")
        redis_server.start()
        s3 = HostSeaweed(
            hosts.a,
            hosts.a_from_test,
            tmp_path / "s3",
            access_key_id=DUMMY_ACCESS_KEY_ID,
            secret_access_key=DUMMY_SECRET_ACCESS_KEY,
        )
        s3.start()
        bucket = f"twohosts-{uuid.uuid4().hex[:12]}"
        common = {"VOICELANE_CHUNK_TARGET_AUDIO_S": "3"}

        def stack(directory: str, reach_a_at: str, prefix: list[str], address: str) -> Stack:
            endpoint = S3Endpoint(url=s3.url_at(reach_a_at))
            env = {**common, **s3_env(endpoint, bucket)}
            redis_url = redis_server.url_at(reach_a_at)
            return Stack(tmp_path / directory, redis_url, env, prefix=prefix, address=address)

        a = stack("a", hosts.a_from_test, hosts.a.prefix, hosts.a_from_test)
        b = stack("b", hosts.a.address, hosts.b.prefix, "127.0.0.1")
        built = Lane(hosts, redis_server, a, b, Ledger.from_url(redis_server.url), s3)
        try:
            yield built
        finally:
            b.stop()
            a.stop()
            s3.stop()
            redis_server.stop()


@dataclass
class StreamRun:
    """One live gRPC stream, as its client saw it."""

    chunks: list[tuple[float, int, int]] = field(default_factory=list)
    """(arrival, seq, pts_ms) of each chunk."""
    request_id: str = ""
    code: str | None = None
    """Its final status (``OK`` once the final chunk arrived); None while it runs."""
    details: str = ""
    ended_at: float = 0.0


async def _speak(target: str, run: StreamRun) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.SpeechStub(channel)
        try:
            async for chunk in stub.Synthesize(
                pb.SynthesizeRequest(text=STREAM_TEXT), metadata=METADATA, timeout=180
            ):
                run.request_id = chunk.request_id
                run.chunks.append((time.monotonic(), chunk.seq, chunk.pts_ms))
            run.code = "OK"
        except grpc.aio.AioRpcError as error:
            run.details = error.details() or ""
            run.code = error.code().name
        run.ended_at = time.monotonic()


def start_streams(target: str, count: int) -> tuple[list[StreamRun], threading.Thread]:
    runs = [StreamRun() for _ in range(count)]

    async def all_of_them() -> None:
        await asyncio.gather(*(_speak(target, run) for run in runs))

    thread = threading.Thread(target=asyncio.run, args=(all_of_them(),), daemon=True)
    thread.start()
    return runs, thread


def _text(value: object) -> str | None:
    return value.decode() if isinstance(value, bytes) else None


@dataclass
class Fault:
    at: float
    """When host B went away (monotonic)."""
    job_id: str
    chunks_total: int
    held_by_b: set[int]
    """The chunks B held leases on at that moment."""
    runs: list[StreamRun]


def held_by_b(lane: Lane, job_id: str, total: int) -> set[int]:
    return {n for n in range(total) if lane.ledger.chunks.lease_holder(job_id, n) == REMOTE}


def _stopped(pid: int) -> bool:
    """Whether every thread of process ``pid`` is stopped."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with suppress(FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
    return all(state in ("T", "t") for state in states)


def freeze_holding_a_lease(lane: Lane, job_id: str, total: int) -> set[int]:
    """Stop host B's worker (SIGSTOP) at a moment it holds a chunk's lease, so the fault
    finds work in its hands (it may otherwise fall between two chunks); returns the chunks it
    holds, read while it is stopped — what the fault then catches in its hands (read after the
    fault instead, a lease could lapse while a slow ``iptables`` applied the cut: CI saw an
    empty set). Read only once every thread has stopped: ``killpg`` returns before they do
    (each stops when next scheduled), and a commit sent meanwhile was counted for B after a
    read that still showed its lease (seen in one run)."""
    worker = lane.b.procs[0].process.pid
    while True:
        wait_for(lambda: held_by_b(lane, job_id, total), 60, "host B to hold a chunk's lease")
        os.killpg(worker, signal.SIGSTOP)
        wait_for(lambda: _stopped(worker), 10, "host B's worker to stop")
        held = held_by_b(lane, job_id, total)
        if held:
            return held
        os.killpg(worker, signal.SIGCONT)


def break_host_b(lane: Lane, fault: Callable[[], None]) -> Fault:
    """Start the lane, open streams served by B, start the survivor and a job both workers
    render, then ``fault``; returns what was in flight."""
    a, b, ledger = lane.a, lane.b, lane.ledger
    b.gpu_worker("gpu-b", concurrency=4)
    a.cpu_worker("cpu-a")
    a.api()
    a.grpc()
    a.wait_realtime_workers(1)
    runs, _ = start_streams(a.grpc_target, STREAMS)
    wait_for(lambda: all(run.chunks for run in runs), 60, "every stream's first audio")
    assert all(run.code is None for run in runs), [(r.code, r.details) for r in runs]
    lane_ids = [lane_request_id("acme", run.request_id) for run in runs]
    serving = [_text(ledger.redis.get(heartbeat_key(i))) for i in lane_ids]
    assert serving == [REMOTE] * STREAMS, serving

    a.gpu_worker("gpu-a", concurrency=4)  # the survivor
    a.wait_realtime_workers(2)
    with a.client() as client:
        response = client.post("/v1/jobs", json={"text": JOB_TEXT})
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        total: int = wait_for(
            lambda: client.get(f"/v1/jobs/{job_id}").json()["chunks_total"], 60, "the plan"
        )
    wait_for(
        lambda: {w for _, _, w in commit_log(ledger.redis, job_id)} == {SURVIVOR, REMOTE},
        60,
        "commits from both hosts",
    )
    still = [run.code for run in runs]
    assert still == [None] * STREAMS, f"streams ended before the fault (make them longer): {still}"

    held = freeze_holding_a_lease(lane, job_id, total)
    at = time.monotonic()  # before: every time measured from here is the longer for it
    fault()
    with suppress(ProcessLookupError):  # a partitioned B runs on, unable to reach anyone
        os.killpg(lane.b.procs[0].process.pid, signal.SIGCONT)
    assert ledger.chunks.done(job_id) != set(range(total)), "the job ended before the fault"
    return Fault(at, job_id, total, held, runs)


def stream_owner(lane: Lane, run: StreamRun) -> str | None:
    """The worker that owns the stream's output now (the last to take it)."""
    return _text(lane.ledger.redis.get(owner_key(lane_request_id("acme", run.request_id))))


def check_streams(lane: Lane, runs: list[StreamRun], fault_at: float) -> list[str]:
    """Every stream carried on from the survivor or ended UNAVAILABLE within the bound;
    returns one line per stream (how it ended, the gap the listener heard)."""
    wait_for(lambda: all(run.code is not None for run in runs), 180, "every stream to end")
    bound_s = unavailable_bound_s(RT)
    lines = []
    for run in runs:
        seqs = [seq for _, seq, _ in run.chunks]
        pts = [p for _, _, p in run.chunks]
        assert seqs == list(range(len(seqs))), f"repeated or missing audio: {seqs}"
        assert all(x < y for x, y in itertools.pairwise(pts)), pts
        arrivals = [t for t, _, _ in run.chunks]
        if run.code == "UNAVAILABLE":
            took_s = run.ended_at - fault_at
            assert took_s <= bound_s, (took_s, bound_s, run.details)
            lines.append(f"UNAVAILABLE {took_s:.2f} s after the fault (bound {bound_s:.2f} s)")
            continue
        assert run.code == "OK", (run.code, run.details)
        assert arrivals[-1] > fault_at, "the stream had ended before the fault"
        finisher = stream_owner(lane, run)
        assert finisher == SURVIVOR, finisher
        gap_s, before_s = max(  # the takeover's silence, and when it began (from the fault)
            (b - a, a - fault_at) for a, b in itertools.pairwise(arrivals)
        )
        lines.append(
            f"resumed on host A: gap {gap_s:.2f} s (from {before_s:+.2f} s), "
            f"{len(seqs)} chunks, none repeated"
        )
    return lines


def check_job(lane: Lane, fault: Fault) -> Counter[str]:
    """The job is done, every chunk committed exactly once, none B held at the fault by B;
    returns the commits per worker."""
    with lane.a.client() as client:
        job = wait_final(client, fault.job_id, timeout_s=240)
    assert job["state"] == "done", job
    log = commit_log(lane.ledger.redis, fault.job_id)
    counts = Counter(n for n, _, _ in log)
    assert sorted(counts) == list(range(fault.chunks_total))
    assert set(counts.values()) == {1}, [n for n, c in counts.items() if c > 1]
    by = {n: w for n, _, w in log}
    assert {by[n] for n in fault.held_by_b} <= {SURVIVOR}, by
    return Counter(w for _, _, w in log)


class Return(threading.Thread):
    """Notes when host B's first commit after the heal lands: polls the commit logs of the
    jobs in ``jobs`` (appended to as they are submitted) from the heal on."""

    def __init__(self, lane: Lane, job_id: str) -> None:
        super().__init__(daemon=True)
        self.redis = lane.ledger.redis
        self.healed_at = time.monotonic()
        self.jobs = {job_id: len(commit_log(self.redis, job_id))}
        self.back_s: float | None = None
        self.stop = threading.Event()

    def seconds(self) -> float | None:
        """Seconds from the heal to B's first commit; None while none."""
        return self.back_s

    def run(self) -> None:
        while not self.stop.wait(0.02):
            for job_id, since in list(self.jobs.items()):
                if REMOTE in (w for _, _, w in commit_log(self.redis, job_id)[since:]):
                    self.back_s = time.monotonic() - self.healed_at
                    return


def b_came_back(lane: Lane, back: Return) -> str:
    """Host B's Celery consumer takes work again after the heal: during the first job, or (it
    ended first) a second job's, within 120 s of its submission; returns when."""
    first_s = back.seconds()
    if first_s is not None:
        return f"B committed again {first_s:.2f} s after the heal"
    with lane.a.client() as client:
        response = client.post("/v1/jobs", json={"text": JOB_TEXT[: len(JOB_TEXT) // 4]})
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        back.jobs[job_id] = 0
        second_s = time.monotonic() - back.healed_at
        with suppress(AssertionError):
            wait_for(
                lambda: back.seconds() is not None, 120, "host B's first commit after the heal"
            )
        wait_final(client, job_id, timeout_s=240)
    back.stop.set()
    first_s = back.seconds()
    assert first_s is not None, (
        f"host B committed nothing after the heal (a second job submitted {second_s:.2f} s "
        "after it, waited for 120 s)"
    )
    return (
        f"B committed again {first_s:.2f} s after the heal, in a second job "
        f"(submitted {second_s:.2f} s after the heal: the first ended without B)"
    )


def test_a_cut_link_to_the_worker_host_mid_job_and_mid_stream(lane: Lane) -> None:
    with lane.explained():
        fault = break_host_b(lane, lane.hosts.partition)
        assert fault.held_by_b, "host B held no lease when the link was cut"
        # The survivor takes over B's chunks once their leases lapse; then the link comes back,
        # with B's work on them still in flight.
        wait_for(
            lambda: fault.held_by_b <= lane.ledger.chunks.done(fault.job_id),
            60,
            "the survivor to commit the chunks B held",
        )
        # And every stream was taken over by the survivor or ended UNAVAILABLE: the link
        # must not come back first (B would then carry on the streams nobody took yet, as a
        # network blip allows; CI saw B finish one).
        wait_for(
            lambda: all(
                run.code == "UNAVAILABLE" or stream_owner(lane, run) == SURVIVOR
                for run in fault.runs
            ),
            unavailable_bound_s(RT) + 10,
            "every stream taken over by host A or ended UNAVAILABLE, before the heal",
        )
        cut_s = time.monotonic() - fault.at
        lane.hosts.heal()
        back = Return(lane, fault.job_id)
        back.start()
        healed_at = back.jobs[fault.job_id]
        lines = check_streams(lane, fault.runs, fault.at)
        per_worker = check_job(lane, fault)
        # B's late commits reached the ledger after the heal and were fenced, not counted.
        b_log = lane.b.procs[0].log
        fenced = wait_for(
            lambda: b_log.read_text(errors="replace").count("'fenced'"),
            60,
            "host B's stale commits to be refused",
        )
        rejoined = [w for _, _, w in commit_log(lane.ledger.redis, fault.job_id)[healed_at:]]
        returned = b_came_back(lane, back)
        print(
            f"\nlink cut {cut_s:.2f} s; B held chunks {sorted(fault.held_by_b)} at the cut; "
            f"{fenced} stale commits fenced after the heal; commits {dict(per_worker)}, "
            f"{rejoined.count(REMOTE)} of the {len(rejoined)} after the heal by B; {returned}"
        )
        print("\n".join(lines))


def test_host_b_killed_mid_job_and_mid_stream(lane: Lane) -> None:
    with lane.explained():
        fault = break_host_b(lane, lambda: lane.hosts.kill_everything_on(lane.hosts.b))
        assert fault.held_by_b, "host B held no lease when it was killed"
        lines = check_streams(lane, fault.runs, fault.at)
        per_worker = check_job(lane, fault)
        print(
            f"\nhost B killed holding chunks {sorted(fault.held_by_b)}; commits {dict(per_worker)}"
        )
        print("\n".join(lines))


def test_streams_with_no_worker_left_end_unavailable_within_the_bound(lane: Lane) -> None:
    """No survivor: host B's worker is the only one when the link is cut."""
    with lane.explained():
        lane.b.gpu_worker("gpu-b")
        lane.a.grpc()
        lane.a.wait_realtime_workers(1)
        runs, _ = start_streams(lane.a.grpc_target, STREAMS)
        wait_for(lambda: all(run.chunks for run in runs), 60, "every stream's first audio")
        cut_at = time.monotonic()
        lane.hosts.partition()
        lines = check_streams(lane, runs, cut_at)
        assert [run.code for run in runs] == ["UNAVAILABLE"] * STREAMS, lines
        print("\n" + "\n".join(lines))
