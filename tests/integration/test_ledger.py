"""The job ledger on a real redis-server: states, leases, fencing, exactly-once assembly."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.ledger import commit_log, queued_chars, waiting_chunks
from tests.support.stack import wait_for
from voicelane.common.errors import JobNotFoundError, QuotaExceededError
from voicelane.core.ledger import ChunkPlan, JobOptions, JobState, Ledger
from voicelane.core.ledger.feed import FedChunk
from voicelane.core.ledger.keys import CHUNK_LEASE
from voicelane.core.redis_clients import UnreplicatedWriteError

pytestmark = pytest.mark.integration

OPTIONS = JobOptions(voice="auto", format="ogg", sample_rate_hz=24000)


@pytest.fixture
def ledger(redis_url: str) -> Iterator[Ledger]:
    ledger = Ledger.from_url(redis_url)
    yield ledger
    ledger.redis.close()


def plans(count: int) -> list[ChunkPlan]:
    return [
        ChunkPlan(
            texts=(f"chunk {n}.",), paragraph_ends=(True,), start=n, end=n + 1, last=n == count - 1
        )
        for n in range(count)
    ]


def rendering_job(ledger: Ledger, chunks: int) -> str:
    return tenant_job(ledger, "acme", chunks)


def tenant_job(ledger: Ledger, tenant: str, chunks: int, engine: str = "espeak") -> str:
    """A job of ``tenant``'s for ``engine``, planned: rendering, its chunks in line."""
    job = ledger.jobs.create(tenant, dataclasses.replace(OPTIONS, engine=engine), "some text")
    assert ledger.jobs.transition(job.id, JobState.PLANNING, only_from=(JobState.QUEUED,))
    assert ledger.jobs.save_plan(job, plans(chunks))
    return job.id


def finish(ledger: Ledger, job_id: str, owner: str) -> str:
    """assembling → done for ``owner``, with a made-up file."""
    return ledger.assembly.finish(
        job_id, owner=owner, key="k", size_bytes=1, duration_s=1.0, sha256="x"
    )


def wait_until(condition: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def test_create_get_and_tenant_isolation(ledger: Ledger) -> None:
    job = ledger.jobs.create("acme", OPTIONS, "Hello 你好")
    assert job.state is JobState.QUEUED and job.characters == 8
    assert ledger.jobs.text(job.id) == "Hello 你好"
    assert ledger.jobs.get_for_tenant("acme", job.id).id == job.id
    with pytest.raises(JobNotFoundError):
        ledger.jobs.get_for_tenant("other", job.id)
    with pytest.raises(JobNotFoundError):
        ledger.jobs.get_for_tenant("acme", "../../etc")
    assert ledger.jobs.active() == [job.id]


def test_listing_is_newest_first_and_paged(ledger: Ledger) -> None:
    ids = [ledger.jobs.create("acme", OPTIONS, f"text {i}").id for i in range(5)]
    ledger.jobs.create("other", OPTIONS, "not mine")
    page, cursor = ledger.jobs.list_for_tenant("acme", limit=2)
    assert [j.id for j in page] == ids[::-1][:2]
    assert cursor is not None
    page2, cursor2 = ledger.jobs.list_for_tenant("acme", limit=2, before=cursor)
    page3, cursor3 = ledger.jobs.list_for_tenant("acme", limit=2, before=cursor2)
    assert [j.id for j in page2 + page3] == ids[::-1][2:]
    assert cursor3 is None


def test_plan_moves_to_rendering_with_every_chunk_in_line_in_one_write(ledger: Ledger) -> None:
    # One script saves the plan, moves the job to rendering and puts its chunks in its
    # tenant's line: split into two writes, a failover or a dead worker between them left a
    # job rendering with chunks that nothing would ever send (the Sentinel chaos test).
    job_id = rendering_job(ledger, 3)
    job = ledger.jobs.get(job_id)
    assert job is not None and job.state is JobState.RENDERING and job.chunks_total == 3
    assert ledger.jobs.chunk(job_id, 2).last
    assert waiting_chunks(ledger.redis, "acme") == 3
    assert ledger.feed.take(5, engine="espeak") == [
        FedChunk(job_id, 0, 0),
        FedChunk(job_id, 1, 1),
        FedChunk(job_id, 2, 2),
    ]


def test_a_cancelled_job_gets_neither_a_plan_nor_a_place_in_line(ledger: Ledger) -> None:
    other = ledger.jobs.create("acme", OPTIONS, "x")
    ledger.jobs.transition(other.id, JobState.PLANNING, only_from=(JobState.QUEUED,))
    assert ledger.jobs.cancel(other.id)
    assert not ledger.jobs.save_plan(other, plans(2))
    job = ledger.jobs.get(other.id)
    assert job is not None and job.state is JobState.CANCELLED and job.chunks_total == 0
    assert waiting_chunks(ledger.redis, "acme") == 0
    with pytest.raises(JobNotFoundError):
        ledger.jobs.chunk(other.id, 0)  # no plan saved
    queued = ledger.jobs.create("acme", OPTIONS, "y")  # not planning yet: nothing either
    assert not ledger.jobs.save_plan(queued, plans(2))
    assert waiting_chunks(ledger.redis, "acme") == 0


def test_a_lease_excludes_others_and_fences_stale_commits(ledger: Ledger) -> None:
    job_id = rendering_job(ledger, 2)
    first = ledger.chunks.acquire(job_id, 0, "w1", ttl_s=30)
    assert first.status == "acquired"
    assert ledger.chunks.acquire(job_id, 0, "w2", ttl_s=30).status == "busy"
    # w1 "dies": its lease lapses; w2 takes over with a newer token.
    ledger.redis.pexpire(CHUNK_LEASE.key(job_id, 0), 1)
    wait_until(lambda: ledger.chunks.lease_holder(job_id, 0) is None)
    assert ledger.chunks.orphaned(job_id) == [0]
    second = ledger.chunks.acquire(job_id, 0, "w2", ttl_s=30)
    assert second.status == "acquired" and second.token > first.token
    assert ledger.chunks.commit(job_id, 0, first, 1.0) == "fenced"
    assert ledger.chunks.parts(job_id) == {}  # a fenced commit records no part
    assert ledger.chunks.commit(job_id, 0, second, 1.0) == "committed"
    assert ledger.chunks.commit(job_id, 0, first, 1.0) == "fenced"  # late: still refused
    assert ledger.chunks.acquire(job_id, 0, "w3", ttl_s=30).status == "done"
    assert commit_log(ledger.redis, job_id) == [(0, second.token, "w2")]
    assert ledger.chunks.parts(job_id) == {0: second.token}  # what assembly reads


def test_a_stale_commit_after_the_job_ended_is_fenced(ledger: Ledger) -> None:
    # Two-host chaos: a cut-off worker's commit reaches the ledger after the heal, when the
    # job has stopped rendering: still told its lease is gone, never counted.
    job_id = rendering_job(ledger, 1)
    stale = ledger.chunks.acquire(job_id, 0, "w1", ttl_s=30)
    ledger.redis.delete(CHUNK_LEASE.key(job_id, 0))  # lapsed
    fresh = ledger.chunks.acquire(job_id, 0, "w2", ttl_s=30)
    assert ledger.chunks.commit(job_id, 0, fresh, 1.0) == "assemble"
    assert ledger.chunks.commit(job_id, 0, stale, 1.0) == "fenced"
    assert ledger.jobs.cancel(job_id)
    assert ledger.chunks.commit(job_id, 0, stale, 1.0) == "fenced"
    assert commit_log(ledger.redis, job_id) == [(0, fresh.token, "w2")]
    assert ledger.chunks.parts(job_id) == {0: fresh.token}
    assert ledger.chunks.orphaned(job_id) == []


def test_renewal_only_by_the_holder(ledger: Ledger) -> None:
    job_id = rendering_job(ledger, 1)
    lease = ledger.chunks.acquire(job_id, 0, "w1", ttl_s=30)
    assert ledger.chunks.renew(job_id, 0, lease, 60)
    newer = lease.token + 1
    forged = dataclasses.replace(lease, token=newer, owner=f"{newer}|w1")  # not the lease's
    assert not ledger.chunks.renew(job_id, 0, forged, 60)
    assert not ledger.chunks.release(job_id, 0, forged)
    assert ledger.chunks.release(job_id, 0, lease)


def test_last_commit_triggers_assembly_exactly_once_under_races(ledger: Ledger) -> None:
    chunks = 40
    job_id = rendering_job(ledger, chunks)
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def worker(name: str) -> None:
        for n in range(chunks):
            lease = ledger.chunks.acquire(job_id, n, name, ttl_s=30)
            if lease.status != "acquired":
                continue
            outcome = ledger.chunks.commit(job_id, n, lease, 0.5)
            with lock:
                outcomes[outcome] += 1

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert outcomes["assemble"] == 1
    assert outcomes["committed"] == chunks - 1
    committed = [n for n, _, _ in commit_log(ledger.redis, job_id)]
    assert sorted(committed) == list(range(chunks))  # each chunk exactly once
    job = ledger.jobs.get(job_id)
    assert job is not None and job.state is JobState.ASSEMBLING
    assert job.chunks_done == chunks and job.audio_s == pytest.approx(0.5 * chunks)


def test_final_states_never_change(ledger: Ledger) -> None:
    job_id = rendering_job(ledger, 1)
    lease = ledger.chunks.acquire(job_id, 0, "w", ttl_s=30)
    assert ledger.chunks.commit(job_id, 0, lease, 1.0) == "assemble"
    assert ledger.assembly.acquire(job_id, "w", ttl_s=30)
    assert finish(ledger, job_id, "w") == "done"
    assert not ledger.jobs.cancel(job_id)
    assert not ledger.jobs.fail(job_id, "late")
    job = ledger.jobs.get(job_id)
    assert job is not None and job.state is JobState.DONE and job.error is None
    assert job_id not in ledger.jobs.active()


def test_commit_after_cancel_is_inactive(ledger: Ledger) -> None:
    job_id = rendering_job(ledger, 2)
    lease = ledger.chunks.acquire(job_id, 0, "w", ttl_s=30)
    assert ledger.jobs.cancel(job_id)
    assert ledger.chunks.commit(job_id, 0, lease, 1.0) == "inactive"
    assert ledger.chunks.lease_holder(job_id, 0) is None  # dropped by that commit
    assert ledger.chunks.parts(job_id) == {}
    assert ledger.chunks.acquire(job_id, 1, "w", ttl_s=30).status == "inactive"
    assert finish(ledger, job_id, "w") == "inactive"


def test_only_the_assembly_lease_holder_finishes_and_a_lapsed_lease_is_orphaned(
    ledger: Ledger,
) -> None:
    job_id = rendering_job(ledger, 1)
    lease = ledger.chunks.acquire(job_id, 0, "w", ttl_s=30)
    assert ledger.chunks.commit(job_id, 0, lease, 1.0) == "assemble"
    assert not ledger.assembly.orphaned(job_id)  # nobody started: not orphaned, just waiting
    assert ledger.assembly.acquire(job_id, "dead", ttl_s=0.2)
    assert not ledger.assembly.acquire(job_id, "other", ttl_s=30)  # held
    assert not ledger.assembly.orphaned(job_id)
    wait_for(lambda: ledger.assembly.orphaned(job_id), 5, "the lease to lapse")
    assert ledger.assembly.acquire(job_id, "other", ttl_s=30)

    assert finish(ledger, job_id, "dead") == "fenced"  # woke up too late
    assert ledger.assembly.renew(job_id, "other", 30) and not ledger.assembly.renew(
        job_id, "dead", 30
    )
    assert finish(ledger, job_id, "other") == "done"


def test_progress_and_eta(ledger: Ledger) -> None:
    job_id = rendering_job(ledger, 4)
    for n in range(2):
        lease = ledger.chunks.acquire(job_id, n, "w", ttl_s=30)
        ledger.chunks.commit(job_id, n, lease, 2.0)
    job = ledger.jobs.get(job_id)
    assert job is not None
    assert job.progress == 0.5
    assert job.started_at is not None
    eta = job.eta_s(now=job.started_at + 10.0)
    assert eta == pytest.approx(10.0)  # 2 chunks took 10 s; 2 remain


def test_attempts_are_counted_per_chunk(ledger: Ledger) -> None:
    job_id = rendering_job(ledger, 2)
    assert ledger.chunks.record_attempt(job_id, 0) == 1
    assert ledger.chunks.record_attempt(job_id, 0) == 2
    assert ledger.chunks.record_attempt(job_id, 1) == 1
    assert ledger.jobs.get(job_id).attempts == 3  # type: ignore[union-attr]


def test_requeue_once_holds_for_its_period(ledger: Ledger) -> None:
    job_id = rendering_job(ledger, 1)
    assert ledger.locks.requeue_once(job_id, "chunk:0", hold_s=30)
    assert not ledger.locks.requeue_once(job_id, "chunk:0", hold_s=30)
    assert ledger.locks.requeue_once(job_id, "chunk:1", hold_s=30)


def test_each_engine_is_fed_from_its_own_lines(ledger: Ledger) -> None:
    """A backlog for one engine never stands in front of another engine's chunks."""
    book = tenant_job(ledger, "acme", 50, engine="chattts")
    short = tenant_job(ledger, "acme", 2, engine="piper")
    assert ledger.feed.take(5, engine="piper") == [FedChunk(short, 0, 0), FedChunk(short, 1, 1)]
    assert ledger.feed.take(5, engine="espeak") == []
    assert [chunk.job_id for chunk in ledger.feed.take(3, engine="chattts")] == [book] * 3
    assert waiting_chunks(ledger.redis, "acme", "chattts") == 47


def test_the_fair_feed_alternates_tenants_whatever_their_backlog(ledger: Ledger) -> None:
    books = [tenant_job(ledger, "acme", 50) for _ in range(4)]  # 200 chunks ahead
    small = tenant_job(ledger, "other", 2)
    taken = ledger.feed.take(4, engine="espeak")
    tenants = [("other" if chunk.job_id == small else "acme") for chunk in taken]
    assert tenants == ["acme", "other", "acme", "other"]  # other's job is in the first turn
    assert [(c.n, c.rank) for c in taken if c.job_id == small] == [(0, 0), (1, 1)]
    assert [c.n for c in taken if c.job_id == books[0]] == [0, 1]  # in order within a tenant
    assert ledger.feed.dispatched(small) == {0, 1}
    assert waiting_chunks(ledger.redis, "acme") == 198
    assert waiting_chunks(ledger.redis, "other") == 0
    assert [chunk.job_id for chunk in ledger.feed.take(3, engine="espeak")] == [
        books[0]
    ] * 3  # only acme is left


def test_the_feed_ranks_a_tenants_queued_chunks_and_lets_a_newcomer_in_at_once(
    ledger: Ledger,
) -> None:
    book = tenant_job(ledger, "acme", 50)
    assert [chunk.rank for chunk in ledger.feed.take(3, engine="espeak")] == [0, 1, 2]
    small = tenant_job(ledger, "other", 2)
    # No room in the queue, but other has no chunk queued: one goes in anyway, ahead of
    # acme's second and third (rank 0), and only one.
    assert ledger.feed.take(0, engine="espeak") == [FedChunk(small, 0, 0)]
    assert ledger.feed.take(0, engine="espeak") == []
    ledger.feed.started(engine="espeak", tenant="other")  # a worker took it
    assert ledger.feed.take(0, engine="espeak") == [FedChunk(small, 1, 0)]
    ledger.feed.started(engine="espeak", tenant="acme")
    assert ledger.feed.take(1, engine="espeak") == [FedChunk(book, 3, 2)]  # 2 still ahead
    assert ledger.feed.take(0, engine="piper") == []  # each engine its own counts


def test_queued_counts_never_go_below_zero_and_start_over_when_forgotten(
    ledger: Ledger,
) -> None:
    book = tenant_job(ledger, "acme", 10)
    assert len(ledger.feed.take(2, engine="espeak")) == 2
    for _ in range(3):  # one more start than was counted: delivered twice, or re-sent
        ledger.feed.started(engine="espeak", tenant="acme")
    assert ledger.feed.take(1, engine="espeak") == [FedChunk(book, 2, 0)]
    ledger.feed.started(engine="espeak", tenant="nobody")  # never counted: nothing to lower
    assert [chunk.rank for chunk in ledger.feed.take(1, engine="espeak")] == [1]
    ledger.feed.forget_queued(engine="espeak")  # the render queue was found empty
    assert ledger.feed.take(1, engine="espeak") == [FedChunk(book, 4, 0)]


def test_a_cancelled_jobs_waiting_chunks_are_dropped_at_no_cost(ledger: Ledger) -> None:
    cancelled = tenant_job(ledger, "acme", 500)
    kept = tenant_job(ledger, "acme", 1)
    assert ledger.jobs.cancel(cancelled)
    taken: list[FedChunk] = []
    calls = 0
    while not taken:  # each call skips a bounded number of stale references
        taken = ledger.feed.take(1, engine="espeak")
        calls += 1
        assert calls <= 5, "the stale references are not being dropped"
    assert taken == [FedChunk(kept, 0, 0)]
    assert ledger.feed.dispatched(cancelled) == set()  # none of them was handed out
    assert waiting_chunks(ledger.redis, "acme") == 0
    assert ledger.feed.take(5, engine="espeak") == []


def test_queued_characters_are_held_until_the_job_ends(ledger: Ledger) -> None:
    first = ledger.jobs.create("acme", OPTIONS, "x" * 60, max_queued_chars=100)
    assert queued_chars(ledger.redis, "acme") == 60
    with pytest.raises(QuotaExceededError) as refused:
        ledger.jobs.create("acme", OPTIONS, "x" * 60, max_queued_chars=100)
    assert refused.value.retry_after_s and refused.value.field == "text"
    assert queued_chars(ledger.redis, "acme") == 60  # a refusal holds nothing
    ledger.jobs.create("other", OPTIONS, "x" * 60, max_queued_chars=100)  # its own quota
    assert ledger.jobs.cancel(first.id)
    assert not ledger.jobs.cancel(first.id)  # ending twice gives back once
    assert queued_chars(ledger.redis, "acme") == 0
    ledger.jobs.create("acme", OPTIONS, "x" * 100, max_queued_chars=100)  # at the limit


def test_a_job_and_the_characters_it_holds_are_one_write(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A create whose write is applied but refused (a Redis failover: the replica never
    # acknowledged it) leaves the job holding exactly what the counter counts; with the
    # reservation and the job as two writes, the refusal gave the characters back while the
    # job that survived still held them (or, lost, kept them reserved for no job, for good).
    create = ledger.jobs._create

    def applied_then_refused(**kwargs: Any) -> Any:
        create(**kwargs)
        raise UnreplicatedWriteError("write acknowledged by 0 of 1 replica(s) in time")

    monkeypatch.setattr(ledger.jobs, "_create", applied_then_refused)
    with pytest.raises(UnreplicatedWriteError):
        ledger.jobs.create("acme", OPTIONS, "x" * 60, max_queued_chars=100, job_id="a" * 32)
    monkeypatch.undo()
    job = ledger.jobs.get("a" * 32)
    assert job is not None and job.state is JobState.QUEUED
    assert queued_chars(ledger.redis, "acme") == 60  # held by the job that exists
    assert ledger.jobs.cancel(job.id)
    assert queued_chars(ledger.redis, "acme") == 0


def done_job(ledger: Ledger, size_bytes: int) -> str:
    """A job of acme's, done with an output of ``size_bytes``."""
    job_id = rendering_job(ledger, 1)
    lease = ledger.chunks.acquire(job_id, 0, "w", ttl_s=30)
    assert ledger.chunks.commit(job_id, 0, lease, 1.0) == "assemble"
    assert ledger.assembly.acquire(job_id, "w", ttl_s=30)
    done = ledger.assembly.finish(
        job_id, owner="w", key="k", size_bytes=size_bytes, duration_s=1.0, sha256="x"
    )
    assert done == "done"
    return job_id


def test_finished_outputs_count_against_the_tenants_stored_bytes(ledger: Ledger) -> None:
    # Repro (issue 26, item 8): there was no per-tenant storage quota: one tenant's outputs
    # could fill the disk for everyone.
    first = done_job(ledger, 600)
    assert ledger.jobs.stored_bytes("acme") == 600
    ledger.jobs.create("acme", OPTIONS, "under", max_stored_bytes=1000)
    second = done_job(ledger, 400)
    assert ledger.jobs.stored_bytes("acme") == 1000
    with pytest.raises(QuotaExceededError) as refused:
        ledger.jobs.create("acme", OPTIONS, "over", max_stored_bytes=1000)
    assert "1,000 bytes" in refused.value.message and refused.value.http_status == 429
    ledger.jobs.create("other", OPTIONS, "its own", max_stored_bytes=1000)
    assert ledger.jobs.stored_bytes("other") == 0
    ledger.retention.forget(first, "acme")  # retention frees its bytes
    assert ledger.jobs.stored_bytes("acme") == 400
    ledger.jobs.create("acme", OPTIONS, "again", max_stored_bytes=1000)
    ledger.retention.forget(second, "acme")
    assert ledger.jobs.stored_bytes("acme") == 0
    ledger.retention.forget(second, "acme")  # forgetting twice takes back nothing more
    assert ledger.jobs.stored_bytes("acme") == 0


def test_jobs_past_their_retention_are_listed_oldest_first(ledger: Ledger) -> None:
    old = ledger.jobs.create("acme", OPTIONS, "old")
    assert ledger.jobs.fail(old.id, "gone")
    cutoff = time.time() + 0.001
    time.sleep(0.01)
    young = ledger.jobs.create("acme", OPTIONS, "young")
    assert ledger.jobs.cancel(young.id)
    assert ledger.retention.expired(cutoff, 10) == [old.id]
    ledger.retention.forget(old.id, "acme")
    assert ledger.jobs.get(old.id) is None and ledger.retention.expired(cutoff, 10) == []
    assert [j.id for j in ledger.jobs.list_for_tenant("acme", limit=10)[0]] == [young.id]
