"""Redis through Sentinel: failovers lose nothing that was acknowledged.

Real processes: a primary, a replica and three sentinels (:mod:`tests.support.sentinel`), and
a stack (GPU worker, CPU worker, REST API, gRPC front) pointed at the sentinels.

* The stale-primary trap, measured both ways by one test: a pooled client keeps writing to the
  old primary after ``SENTINEL FAILOVER`` (it stays a writable master until the sentinels
  demote it); with the fix off (``redis_replica_acks=0``) the writes it acknowledged there are
  lost at the demotion; with it on (every write waits for a replica: ``WAIT 1``) none is.
* Manual failover and SIGKILL of the primary, 5 times each, each time with jobs rendering,
  submissions arriving and streams speaking: every job answered 202 ends done with each chunk
  committed exactly once (the ledger's commit log), every stream ends complete (its final
  chunk) or UNAVAILABLE within the bound, the API answers again after the failover, and no
  process exits (the Celery workers reconnect). Each round covers mid-job and mid-stream at
  once (one failover, both in flight). ``VOICELANE_SENTINEL_ROUNDS`` sets the rounds of each.

The file takes about 4.5 minutes on 2 shared cores with 5 rounds (a manual failover's writes
pause ~15 s until the old primary is demoted; docs/operations.md, "Redis high availability").
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import grpc
import httpx
import pytest
import redis

from tests.support.ledger import commit_log
from tests.support.sentinel import HOST, SentinelCluster
from tests.support.stack import ACME_KEY, Stack, wait_for
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.ledger import Ledger
from voicelane.core.redis_clients import UnreplicatedWriteError, sync_client

pytestmark = [pytest.mark.integration, pytest.mark.slow]

METADATA = (("authorization", f"Bearer {ACME_KEY}"),)
ROUNDS = int(os.environ.get("VOICELANE_SENTINEL_ROUNDS", "5"))
"""Rounds of each kind (manual failover, SIGKILL of the primary)."""
DOWN_AFTER_MS = 3000
"""The sentinels' ``down-after-milliseconds``. Not 1 s: the shared 2-core machine stalls
whole for about a second now and then, and all three sentinels then declared a primary that
had answered until the stall down at the same millisecond and failed it over — a failover
nobody caused, twice in 20 rounds (one of them as a round began, where the test needs a
settled cluster). Compose uses 5 s."""
STREAM_BOUND_S = 20.0
"""A stream in flight across a failover ends (complete or UNAVAILABLE) within this: the
failover (~1.3 s manual, ~4.7 s after a SIGKILL: down-after 3 s + election), a worker's
write refused on the stale primary, and the front's ``unavailable_after_s`` (3 s here)."""
FAST = {
    "VOICELANE_REALTIME__HEARTBEAT_TTL_S": "1",
    "VOICELANE_REALTIME__RECLAIM_IDLE_S": "1",
    "VOICELANE_REALTIME__UNAVAILABLE_AFTER_S": "3",
    "VOICELANE_REALTIME__CLAIM_TIMEOUT_S": "3",
    "VOICELANE_TENANT_REQUESTS_PER_S": "1000",
    "VOICELANE_TENANT_REQUEST_BURST": "1000",
    "VOICELANE_TENANT_MAX_STREAMS": "64",
    "VOICELANE_CHUNK_TARGET_AUDIO_S": "2",
    "VOICELANE_STALL_TIMEOUT_S": "4",  # a Celery message lost with the stale primary: re-sent
    "VOICELANE_LEASE_TTL_S": "2",
}
JOB_TEXT = " ".join(f"Sentence {i} of a short job about the harbor." for i in range(8))
STREAM_TEXT = "A short sentence spoken while Redis fails over. And one more after it."


# -- the stale-primary trap, fix off and on ---------------------------------------------------


def stale_primary_run(cluster: SentinelCluster, *, replica_acks: int) -> dict[str, int]:
    """One writer pushing numbered entries through a pooled sentinel client across a manual
    failover, until the old primary was demoted and writes land on the new one. Returns the
    entries acknowledged, lost (acknowledged, not on the new primary after the demotion) and
    refused (not acknowledged: the fix's ``UnreplicatedWriteError`` or a connection error)."""
    key = f"stale:{replica_acks}"
    client = sync_client(cluster.target(replica_acks=replica_acks), socket_timeout_s=2.0)
    acked: list[int] = []
    first_refused_at: list[float] = []
    outage_s: list[float] = []
    refused_unreplicated = 0
    refused_other = 0
    stop = threading.Event()

    def writer() -> None:
        nonlocal refused_unreplicated, refused_other
        n = 0
        while not stop.is_set():
            n += 1
            try:
                client.rpush(key, n)
            except UnreplicatedWriteError:
                refused_unreplicated += 1
                first_refused_at[:] = first_refused_at or [time.monotonic()]
                continue
            except redis.RedisError:
                refused_other += 1
                first_refused_at[:] = first_refused_at or [time.monotonic()]
                time.sleep(0.01)  # a connection refused: do not spin
                continue
            if first_refused_at and not outage_s:
                outage_s.append(time.monotonic() - first_refused_at[0])
            acked.append(n)
            time.sleep(0.002)  # a steady writer, not a spinning one (2 cores shared)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(acked) >= 100, 30, "writes before the failover")
        old, new = cluster.failover()
        cluster.wait_demoted(old)
        at_demotion = len(acked)
        wait_for(lambda: len(acked) >= at_demotion + 100, 30, "writes on the new primary")
    finally:
        stop.set()
        thread.join(10)
        client.close()
    kept = {int(v) for v in redis.Redis(HOST, new).lrange(key, 0, -1)}
    lost = [n for n in acked if n not in kept]
    cluster.wait_replicated()
    return {
        "acknowledged": len(acked),
        "lost": len(lost),
        "refused_unreplicated": refused_unreplicated,
        "refused_other": refused_other,
        "write_outage_ms": round(1000 * outage_s[0]) if outage_s else 0,
    }


def test_the_stale_primary_loses_acknowledged_writes_unless_writes_wait_for_a_replica(
    tmp_path: Path,
) -> None:
    # One replica, the writes wait for it (redis_replica_acks = the number of replicas: with two
    # replicas and WAIT 1, the second one acknowledged the stale primary's writes until the
    # sentinels reconfigured it, and 283 of them were lost — measured, docs/operations.md).
    with SentinelCluster(tmp_path / "sentinel") as cluster:
        off = stale_primary_run(cluster, replica_acks=0)
        on = stale_primary_run(cluster, replica_acks=1)
    print(f"\nstale primary, fix off (redis_replica_acks=0): {off}")
    print(f"stale primary, fix on  (redis_replica_acks=1): {on}")
    assert off["lost"] > 0, off  # the trap is real: acknowledged, then wiped by the demotion
    assert on["lost"] == 0, on
    assert on["refused_unreplicated"] > 0, on  # the stale primary's writes it refused


# -- failovers under a running stack -----------------------------------------------------------


class HaStack:
    def __init__(self, cluster: SentinelCluster, stack: Stack) -> None:
        self.cluster = cluster
        self.stack = stack
        self.ledger = Ledger.from_url(cluster.target())
        self.bounds_s: list[float] = []
        self.outcomes: Counter[str] = Counter()


@pytest.fixture(scope="module")
def ha(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HaStack]:
    root = tmp_path_factory.mktemp("ha")
    cluster = SentinelCluster(root / "sentinel", down_after_ms=DOWN_AFTER_MS).start()
    stack = Stack(root / "stack", cluster.url, env_overrides={**cluster.env(), **FAST})
    try:
        stack.gpu_worker(concurrency=2)
        stack.cpu_worker()
        stack.api()
        stack.grpc()
        stack.flower()  # Flower reads the broker through the sentinels too
        wait_for(lambda: workers_reporting(cluster), 60, "a real-time worker")
        ha = HaStack(cluster, stack)
        yield ha
        longest_s = max(ha.bounds_s, default=0.0)
        print(f"\nstreams across failovers: {dict(ha.outcomes)}; longest {longest_s:.1f} s")
    except BaseException:
        print(stack.logs())
        raise
    finally:
        stack.stop()
        cluster.stop()


def workers_reporting(cluster: SentinelCluster) -> bool:
    from voicelane.core.lane.worker import reporting_workers

    client = sync_client(cluster.target(), socket_timeout_s=2.0)
    try:
        return reporting_workers(client, "espeak") > 0
    except redis.RedisError:
        return False
    finally:
        client.close()


async def one_stream(target: str) -> tuple[str, float]:
    """(outcome, seconds): ``complete`` (final chunk, audio), or the gRPC status's name."""
    started = time.monotonic()
    packets = 0
    final = False
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.SpeechStub(channel)
        try:
            async for chunk in stub.Synthesize(
                pb.SynthesizeRequest(text=STREAM_TEXT), metadata=METADATA, timeout=60
            ):
                packets += len(chunk.opus_packets)
                final = final or chunk.final
        except grpc.aio.AioRpcError as error:
            return error.code().name, time.monotonic() - started
    outcome = "complete" if final and packets > 0 else "incomplete"
    return outcome, time.monotonic() - started


async def streams_across(target: str, chaos: Any, count: int = 4) -> list[tuple[str, float]]:
    running = [asyncio.create_task(one_stream(target)) for _ in range(count)]
    await asyncio.sleep(0.2)  # the streams are speaking
    await asyncio.to_thread(chaos)
    return list(await asyncio.gather(*running))


def submit(client: httpx.Client, unexpected: list[str]) -> str | None:
    """A job's id if the API answered 202; None for a refusal (503 while Redis fails over;
    anything else is noted in ``unexpected``)."""
    try:
        response = client.post("/v1/jobs", json={"text": JOB_TEXT})
    except httpx.HTTPError:
        return None
    if response.status_code == 202:
        return cast(str, response.json()["id"])
    if response.status_code != 503:  # refused, never half-accepted
        unexpected.append(f"{response.status_code} {response.text}")
    return None


def no_process_exited(ha: HaStack) -> None:
    """Every process of the stack survives the failover: Celery workers reconnect (kombu 5.7's
    sentinel transport crashed a worker when its primary was killed, "Unrecoverable error:
    AttributeError: 'NoneType' object has no attribute 'hostname'", restoring unacked
    messages; voicelane's transport keeps what it needs: core/kombu_sentinel.py)."""
    exited = [proc.name for proc in ha.stack.procs if not proc.alive()]
    assert not exited, (exited, ha.stack.logs())


def job_state(ha: HaStack, client: httpx.Client, job_id: str) -> str | None:
    no_process_exited(ha)
    try:
        response = client.get(f"/v1/jobs/{job_id}")
    except httpx.HTTPError:
        return None
    if response.status_code != 200:  # 503 while the API's Redis fails over
        return None
    state = cast(str, response.json()["state"])
    return state if state in ("done", "failed", "cancelled") else None


@pytest.mark.parametrize("round_", range(ROUNDS))
@pytest.mark.parametrize("kind", ["failover", "sigkill"])
def test_a_failover_mid_job_and_mid_stream_loses_nothing_acknowledged(
    ha: HaStack, kind: str, round_: int
) -> None:
    cluster, stack = ha.cluster, ha.stack
    chaos = cluster.failover if kind == "failover" else cluster.kill_primary
    accepted: list[str] = []
    unexpected: list[str] = []
    stop = threading.Event()

    with stack.client() as client:
        accepted += [job for job in (submit(client, unexpected) for _ in range(2)) if job]
        assert len(accepted) == 2  # before the chaos, the API answers

        def submitting() -> None:  # submissions keep arriving across the failover
            with stack.client() as own:
                while not stop.is_set():
                    job = submit(own, unexpected)
                    if job:
                        accepted.append(job)
                    time.sleep(0.05)

        feeder = threading.Thread(target=submitting, daemon=True)
        feeder.start()
        try:
            results = asyncio.run(streams_across(stack.grpc_target, chaos))
        finally:
            stop.set()
            feeder.join(30)

        print(
            f"\n{kind} {round_}: new primary in {cluster.last_switch_s:.1f} s, "
            f"streams {sorted((o, round(t, 1)) for o, t in results)}, "
            f"jobs answered 202: {len(accepted)}"
        )
        assert not unexpected, (unexpected, stack.logs())
        for outcome, seconds in results:
            ha.outcomes[outcome] += 1
            ha.bounds_s.append(seconds)
            assert outcome in ("complete", "UNAVAILABLE"), results
            assert seconds < STREAM_BOUND_S, results

        # Every job answered 202 ends done, each chunk committed exactly once.
        for job_id in accepted:
            try:
                state = wait_for(functools.partial(job_state, ha, client, job_id), 120, job_id)
            except AssertionError:
                print(ha.ledger.jobs.get(job_id), stack.logs())
                raise
            assert state == "done", (job_id, state, stack.logs())
            job = ha.ledger.jobs.get(job_id)
            assert job is not None
            log = commit_log(ha.ledger.redis, job_id)
            counts = Counter(n for n, _, _ in log)
            assert sorted(counts) == list(range(job.chunks_total)), (job_id, log)
            assert set(counts.values()) == {1}, (job_id, log)

        # After the failover, new streams and jobs go through again.
        def serves() -> bool:
            no_process_exited(ha)
            outcome, _ = asyncio.run(one_stream(stack.grpc_target))
            return outcome == "complete"

        wait_for(serves, 30, "a stream to complete after the failover")
    cluster.wait_replicated()  # the next round starts from a settled cluster (old one demoted)
