"""The job functions in-process (real Redis, local storage, a recording enqueue): planning,
chunk rendering and commits, failure after bounded attempts, assembly, the reconciler."""

from __future__ import annotations

import dataclasses
import wave
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import cast

import numpy as np
import pytest

from tests.support.engines import RecordingEngine
from tests.support.jobs import S3_PARAM, Recorder, espeak_context, narrow, storage_param
from tests.support.ledger import waiting_chunks
from tests.support.tiny_fs import fill, tiny_tmpfs
from voicelane.common.audio import probe
from voicelane.common.errors import EngineError, StorageFullError
from voicelane.core.batch_lane import ASSEMBLE_TASK, CLEANUP_TASK, PLAN_TASK, RENDER_CHUNK_TASK
from voicelane.core.engines import render_queue
from voicelane.core.ledger import (
    ChunkPlan,
    CommitOutcome,
    Job,
    JobOptions,
    JobState,
    Lease,
    Ledger,
)
from voicelane.core.ledger.keys import CHUNK_LEASE, CHUNK_PARTS
from voicelane.core.ledger.queues import PRIORITY_STEPS, priority_key
from voicelane.core.redis_clients import UnreplicatedWriteError
from voicelane.core.settings import ServiceSettings
from voicelane.core.storage import LocalStorage, LocalStorageSettings, Storage, StoredObject
from voicelane.workers.batching import Batcher
from voicelane.workers.engines import Utterance
from voicelane.workers.jobs import (
    JobContext,
    assemble_job,
    feed_render_queue,
    part_key,
    parts_prefix,
    plan_chunks,
    plan_job,
    render_chunk,
    sweep_expired_jobs,
    timings_key,
)
from voicelane.workers.reconciler import reconcile_once

pytestmark = pytest.mark.integration


@pytest.fixture
def ctx(request: pytest.FixtureRequest, redis_url: str, tmp_path: Path) -> Iterator[JobContext]:
    with espeak_context(
        redis_url,
        tmp_path,
        storage=storage_param(request),
        chunk_target_audio_s=3,
        max_chunk_attempts=2,
    ) as context:
        yield context


def recorder(ctx: JobContext) -> Recorder:
    assert isinstance(ctx.enqueue, Recorder)
    return ctx.enqueue


TEXT = "First sentence here. Second one follows.\n\nA new paragraph starts. 它也有中文。" * 3


def submit(ctx: JobContext, text: str = TEXT, fmt: str = "wav") -> str:
    options = JobOptions(voice="auto", format=fmt, sample_rate_hz=16000)
    return ctx.ledger.jobs.create("acme", options, text).id


def test_chunks_hold_a_few_seconds_each_and_keep_order() -> None:
    settings = ServiceSettings(chunk_target_audio_s=3)
    chunks = plan_chunks(TEXT * 4, settings)
    assert len(chunks) > 5
    assert [c.last for c in chunks].count(True) == 1 and chunks[-1].last
    starts = [c.start for c in chunks]
    assert starts == sorted(starts)
    assert all(len(c.texts) == len(c.paragraph_ends) >= 1 for c in chunks)


@S3_PARAM
def test_plan_render_assemble_end_to_end(ctx: JobContext, tmp_path: Path) -> None:
    job_id = submit(ctx)
    total = plan_job(ctx, job_id)
    assert total > 1
    assert recorder(ctx).of(RENDER_CHUNK_TASK) == [(job_id, n) for n in range(total)]
    outcomes = [render_chunk(ctx, job_id, n) for n in range(total)]
    assert outcomes == ["committed"] * (total - 1) + ["assemble"]
    assert recorder(ctx).of(ASSEMBLE_TASK) == [(job_id,)]
    # A redelivered chunk is skipped, not rendered twice.
    assert render_chunk(ctx, job_id, 0) == "inactive"
    assert assemble_job(ctx, job_id)
    assert not assemble_job(ctx, job_id)  # exactly once
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None and job.state is JobState.DONE
    assert job.output_key is not None and job.duration_s is not None
    output = tmp_path / "output.wav"
    output.write_bytes(ctx.storage.get_bytes(job.output_key))
    info = probe(output)
    assert info.sample_rate_hz == 16000
    assert info.duration_s == pytest.approx(job.duration_s, abs=1e-3)
    assert info.duration_s == pytest.approx(job.audio_s, abs=1e-3)
    assert recorder(ctx).of(CLEANUP_TASK) == [(job_id,)]


def test_a_chunk_that_keeps_failing_fails_the_job_with_the_reason(
    redis_url: str, tmp_path: Path
) -> None:
    def broken(batch: Sequence[Utterance]) -> BaseException | None:
        return EngineError("GPU fell off the bus")

    engine = RecordingEngine(voices=("auto",), fail_when=broken)
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "s", secret="s" * 40))
    with Batcher(engine) as batcher:
        context = JobContext(
            settings=ServiceSettings(redis_url=redis_url, max_chunk_attempts=2),
            ledger=Ledger.from_url(redis_url),
            storage=storage,
            worker_name="w@test",
            enqueue=Recorder(),
            batcher=batcher,
        )
        job_id = submit(context, "Just one chunk.")
        plan_job(context, job_id)
        for _ in range(2):  # each attempt raises: Celery would retry it
            with pytest.raises(EngineError):
                render_chunk(context, job_id, 0)
        assert render_chunk(context, job_id, 0) == "failed"
    job = context.ledger.jobs.get(job_id)
    assert job is not None and job.state is JobState.FAILED
    assert job.error is not None
    assert "chunk 0 failed 2 times" in job.error and "GPU fell off the bus" in job.error


@S3_PARAM
def test_cancel_during_render_removes_the_part(ctx: JobContext) -> None:
    job_id = submit(ctx)
    plan_job(ctx, job_id)
    lease = ctx.ledger.chunks.acquire(job_id, 0, "other@test", 30)
    ctx.ledger.jobs.cancel(job_id)
    assert render_chunk(ctx, job_id, 1) == "inactive"
    assert ctx.ledger.chunks.commit(job_id, 0, lease, 1.0) == "inactive"
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None and ctx.storage.list_keys(parts_prefix(job)) == []


class Uploads:
    """A storage that records every upload; ``before_audio`` runs before the first part's
    audio is stored, and ``garbled`` replaces what is stored under it."""

    def __init__(self, storage: Storage, before_audio: Callable[[], None] | None = None) -> None:
        self.storage = storage
        self.before_audio = before_audio
        self.garbled = False
        self.keys: list[str] = []

    def put_bytes(self, key: str, data: bytes, **kwargs: str) -> StoredObject:
        self.keys.append(key)
        if key.endswith(".s16") and self.before_audio is not None:
            hook, self.before_audio = self.before_audio, None
            hook()
            data, self.garbled = b"\x7f" * len(data), True
        return self.storage.put_bytes(key, data, **kwargs)

    def __getattr__(self, name: str) -> object:
        return getattr(self.storage, name)


def wav_samples(data: bytes, tmp_path: Path) -> np.ndarray:
    path = tmp_path / "read.wav"
    path.write_bytes(data)
    with wave.open(str(path)) as wav:
        assert wav.getsampwidth() == 2
        return np.frombuffer(wav.readframes(wav.getnframes()), dtype=np.int16)


@S3_PARAM
@pytest.mark.parametrize("finished", [False, True], ids=["fenced", "job-finished"])
def test_an_attempt_that_lost_its_lease_never_touches_the_committed_part(
    ctx: JobContext, tmp_path: Path, finished: bool
) -> None:
    # Two-host chaos (issue 25): a worker cut off mid-upload lost its lease, the chunk was
    # committed by another (and, ``finished``, every other chunk too: the late commit finds
    # the job assembling), and the late attempt's upload must not change what assembly
    # reads — whatever a store does with it, it is never under the winner's key, and the
    # late attempt's clean-up never deletes the winner's part (with one key per chunk, the
    # late commit answered "inactive" deleted it: NoSuchKey at assembly).
    job_id = submit(ctx)
    total = plan_job(ctx, job_id)
    assert total > 1
    winner = Uploads(ctx.storage)
    winning = dataclasses.replace(ctx, storage=cast(Storage, winner))
    outcomes: list[str] = []

    def lapse_and_lose() -> None:  # the stale attempt rendered; now its lease lapses
        ctx.ledger.redis.delete(CHUNK_LEASE.key(job_id, 0))
        outcomes.append(render_chunk(winning, job_id, 0))
        if finished:
            outcomes.extend(render_chunk(winning, job_id, n) for n in range(1, total))

    stale = Uploads(ctx.storage, before_audio=lapse_and_lose)
    late = dataclasses.replace(ctx, storage=cast(Storage, stale), worker_name="stale@test")
    assert render_chunk(late, job_id, 0) == "fenced"
    assert outcomes[0] == "committed" and stale.garbled
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None
    (stale_audio,) = [k for k in stale.keys if k.endswith(".s16")]
    winner_audio = next(k for k in winner.keys if k.endswith(".s16"))
    assert stale_audio != winner_audio
    assert not set(stale.keys) & set(winner.keys)
    token = ctx.ledger.chunks.parts(job_id)[0]
    assert winner_audio == part_key(job, 0, token)
    assert not ctx.storage.exists(stale_audio)  # the loser deletes its own part
    part = np.frombuffer(ctx.storage.get_bytes(winner_audio), dtype=np.int16)
    assert int(np.abs(part).max()) > 1000 and not np.all(part == part[0])
    if not finished:
        for n in range(1, total):
            render_chunk(ctx, job_id, n)
    assert assemble_job(ctx, job_id)
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None and job.output_key is not None
    samples = wav_samples(ctx.storage.get_bytes(job.output_key), tmp_path)
    assert np.array_equal(samples[: len(part)], part)


def test_a_commit_sent_twice_keeps_its_part(
    ctx: JobContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The commit counted but its answer was lost and the client sent it again: the second
    # answer is "fenced" (its own commit dropped the lease) — the part must stay.
    job_id = submit(ctx)
    total = plan_job(ctx, job_id)
    commit = ctx.ledger.chunks.commit

    def twice(job_id: str, n: int, lease: Lease, audio_s: float) -> CommitOutcome:
        commit(job_id, n, lease, audio_s)
        return commit(job_id, n, lease, audio_s)

    monkeypatch.setattr(ctx.ledger.chunks, "commit", twice)
    assert [render_chunk(ctx, job_id, n) for n in range(total)] == ["fenced"] * total
    monkeypatch.undo()
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None and job.state is JobState.ASSEMBLING
    assert sorted(ctx.ledger.chunks.parts(job_id)) == list(range(total))
    assert assemble_job(ctx, job_id)


@S3_PARAM
def test_a_part_committed_before_per_attempt_keys_is_read_from_its_old_key(
    ctx: JobContext,
) -> None:
    # A job in flight across the upgrade: chunk 0 was committed by a worker that stored it
    # under the old shared key and recorded no token.
    job_id = submit(ctx)
    total = plan_job(ctx, job_id)
    for n in range(total):
        render_chunk(ctx, job_id, n)
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None
    token = ctx.ledger.chunks.parts(job_id)[0]
    for key, old in ((part_key, "000000.s16"), (timings_key, "000000.json")):
        assert key(job, 0, None) == parts_prefix(job) + old
        new = key(job, 0, token)
        ctx.storage.put_bytes(parts_prefix(job) + old, ctx.storage.get_bytes(new))
        ctx.storage.delete(new)
    ctx.ledger.redis.hdel(CHUNK_PARTS.key(job_id), "0")
    assert assemble_job(ctx, job_id)
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None and job.state is JobState.DONE
    assert job.duration_s == pytest.approx(job.audio_s, abs=1e-3)


def test_reconciler_requeues_a_dead_workers_chunk_once(ctx: JobContext) -> None:
    job_id = submit(ctx)
    plan_job(ctx, job_id)
    recorder(ctx).clear()
    ctx.ledger.chunks.acquire(job_id, 2, "dead@test", ttl_s=60)
    assert reconcile_once(ctx) == 0  # a live lease: its worker is rendering the chunk
    ctx.ledger.redis.delete(CHUNK_LEASE.key(job_id, 2))  # lapsed: the worker died
    recorder(ctx).clear()
    assert reconcile_once(ctx) == 1
    assert recorder(ctx).of(RENDER_CHUNK_TASK) == [(job_id, 2)]
    assert reconcile_once(ctx) == 0  # not again while the re-enqueued message waits


def test_reconciler_requeues_every_unfinished_chunk_of_a_stalled_job(ctx: JobContext) -> None:
    job_id = submit(ctx)
    total = plan_job(ctx, job_id)
    render_chunk(ctx, job_id, 0)
    recorder(ctx).clear()
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None
    later = job.updated_at + ctx.settings.stall_timeout_s + 1
    assert reconcile_once(ctx, now=later) == total - 1
    assert sorted(a[1] for a in recorder(ctx).of(RENDER_CHUNK_TASK)) == list(range(1, total))  # type: ignore[type-var]


def refuse_plans(ctx: JobContext, monkeypatch: pytest.MonkeyPatch, *, applied: bool) -> None:
    """The plan's write is refused as across a Redis failover (the replica never acknowledged
    it): lost with the demoted primary (``applied=False``), or kept by a primary that stays
    (``applied=True``)."""
    save_plan = ctx.ledger.jobs.save_plan

    def refused(job: Job, chunks: list[ChunkPlan]) -> bool:
        if applied:
            save_plan(job, chunks)
        raise UnreplicatedWriteError("write acknowledged by 0 of 1 replica(s) in time")

    monkeypatch.setattr(ctx.ledger.jobs, "save_plan", refused)


def test_a_plan_lost_in_a_failover_is_planned_again_by_the_reconciler(
    ctx: JobContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = submit(ctx)
    with monkeypatch.context() as patch:
        refuse_plans(ctx, patch, applied=False)
        with pytest.raises(UnreplicatedWriteError):
            plan_job(ctx, job_id)  # the task fails; its message is acknowledged
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None and job.state is JobState.PLANNING
    assert waiting_chunks(ctx.ledger.redis, "acme") == 0
    assert reconcile_once(ctx) == 0  # not stalled yet
    assert reconcile_once(ctx, now=job.updated_at + ctx.settings.stall_timeout_s + 1) == 1
    assert recorder(ctx).of(PLAN_TASK) == [(job_id,)]
    total = plan_job(ctx, job_id)  # the re-sent message
    assert total > 1
    assert recorder(ctx).of(RENDER_CHUNK_TASK) == [(job_id, n) for n in range(total)]


def test_a_plan_kept_but_unacknowledged_is_fed_by_the_reconciler(
    ctx: JobContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = submit(ctx)
    with monkeypatch.context() as patch:
        refuse_plans(ctx, patch, applied=True)
        with pytest.raises(UnreplicatedWriteError):
            plan_job(ctx, job_id)
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None and job.state is JobState.RENDERING
    assert waiting_chunks(ctx.ledger.redis, "acme") == job.chunks_total > 1  # all in line
    assert recorder(ctx).of(RENDER_CHUNK_TASK) == []
    reconcile_once(ctx)  # every pass feeds the render queue
    assert recorder(ctx).of(RENDER_CHUNK_TASK) == [(job_id, n) for n in range(job.chunks_total)]
    assert plan_job(ctx, job_id) == 0  # a redelivered plan changes nothing
    assert waiting_chunks(ctx.ledger.redis, "acme") == 0


def test_rendered_parts_are_int16_at_the_jobs_rate(ctx: JobContext) -> None:
    job_id = submit(ctx, "One short sentence.")
    plan_job(ctx, job_id)
    assert render_chunk(ctx, job_id, 0) == "assemble"
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None
    token = ctx.ledger.chunks.parts(job_id)[0]
    data = ctx.storage.get_bytes(parts_prefix(job) + f"000000.{token}.s16")
    pcm = np.frombuffer(data, dtype=np.int16)
    assert len(pcm) / 16000 == pytest.approx(job.audio_s, abs=1e-3)
    assert int(np.abs(pcm).max()) > 1000


def test_planning_feeds_the_render_queue_up_to_its_target_only(ctx: JobContext) -> None:
    small = narrow(ctx, render_queue_target=2)
    job_id = submit(small, TEXT * 3)
    total = plan_job(small, job_id)
    assert total > 4
    assert recorder(small).of(RENDER_CHUNK_TASK) == [(job_id, 0), (job_id, 1)]
    assert waiting_chunks(small.ledger.redis, "acme") == total - 2
    # A stalled job: only what was dispatched can have been lost; the rest waits in line.
    job = small.ledger.jobs.get(job_id)
    assert job is not None
    recorder(small).clear()
    later = job.updated_at + small.settings.stall_timeout_s + 1
    requeued = reconcile_once(small, now=later)
    assert requeued == 2
    enqueued = recorder(small).of(RENDER_CHUNK_TASK)
    assert enqueued[:2] == [(job_id, 0), (job_id, 1)]  # the re-enqueued ones, then the feed
    assert all(n >= 2 for _, n in enqueued[2:])  # type: ignore[operator]


def test_a_tenants_first_queued_chunk_goes_before_anothers_second(ctx: JobContext) -> None:
    # The render queue is FIFO: before the ranks, another tenant's small job waited behind
    # every chunk of the flooding tenant already in it (bench/flood.py: 4.6x idle).
    small = narrow(ctx, render_queue_target=3)
    book = submit(small, TEXT * 3)
    plan_job(small, book)
    assert recorder(small).prioritised(RENDER_CHUNK_TASK) == [
        ((book, 0), 0),  # acme's first: with everyone's first
        ((book, 1), 3),  # its second: after every tenant's first
        ((book, 2), 6),
    ]
    queue = render_queue("espeak")
    for n in range(3):  # what Celery would hold now: the queue is at its target
        small.ledger.redis.lpush(priority_key(queue, PRIORITY_STEPS[n]), f"message {n}")
    recorder(small).clear()
    other = small.ledger.jobs.create(
        "other", JobOptions(voice="auto", format="wav", sample_rate_hz=16000), "Short."
    ).id
    plan_job(small, other)
    assert recorder(small).prioritised(RENDER_CHUNK_TASK) == [((other, 0), 0)]  # no room: in anyway
    recorder(small).clear()
    assert render_chunk(small, book, 0) == "committed"  # acme's first left the queue
    assert recorder(small).prioritised(RENDER_CHUNK_TASK) == []  # the queue is still full
    small.ledger.redis.delete(*(priority_key(queue, p) for p in PRIORITY_STEPS))
    feed_render_queue(small, "espeak")  # found empty: the counts start over
    assert recorder(small).prioritised(RENDER_CHUNK_TASK) == [
        ((book, 3), 0),
        ((book, 4), 3),
        ((book, 5), 6),
    ]


@S3_PARAM
def test_jobs_past_their_retention_are_forgotten_with_their_files(ctx: JobContext) -> None:
    job_id = submit(ctx, "One short sentence.")
    plan_job(ctx, job_id)
    assert render_chunk(ctx, job_id, 0) == "assemble"
    assert assemble_job(ctx, job_id)
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None and job.output_key is not None and job.finished_at is not None
    assert ctx.storage.exists(job.output_key)
    kept = narrow(ctx, job_retention_s=3600)
    assert sweep_expired_jobs(kept, now=job.finished_at + 60) == 0
    assert sweep_expired_jobs(kept, now=job.finished_at + 3601) == 1
    assert ctx.ledger.jobs.get(job_id) is None
    assert not ctx.storage.exists(job.output_key)
    assert ctx.storage.list_keys(f"acme/{job_id}/") == []


def test_a_full_disk_retries_without_failing_the_job_and_resumes(
    redis_url: str, tmp_path: Path
) -> None:
    # Repro (issue 26, item 8): with the storage's disk full a job failed after 3 quick
    # attempts. Out-of-room attempts must not count (Celery retries them slowly: see
    # test_tasks.py); once room is freed the chunk commits and the job assembles.
    with (
        tiny_tmpfs(tmp_path / "tiny") as root,
        espeak_context(redis_url, root, max_chunk_attempts=2) as context,
    ):
        job_id = submit(context, "Just one chunk.")
        assert plan_job(context, job_id) == 1
        fill(root)
        for _ in range(4):  # twice max_chunk_attempts
            with pytest.raises(StorageFullError):
                render_chunk(context, job_id, 0)
        job = context.ledger.jobs.get(job_id)
        assert job is not None and job.state is JobState.RENDERING
        assert job.attempts == 0
        assert "No space left" in (context.ledger.jobs.last_error(job_id) or "")
        (root / "filler").unlink()
        assert render_chunk(context, job_id, 0) == "assemble"
        fill(root)
        with pytest.raises(StorageFullError):
            assemble_job(context, job_id)
        job = context.ledger.jobs.get(job_id)
        assert job is not None and job.state is JobState.ASSEMBLING
        (root / "filler").unlink()
        assert assemble_job(context, job_id)
        job = context.ledger.jobs.get(job_id)
        assert job is not None and job.state is JobState.DONE and job.output_key is not None
        assert context.storage.exists(job.output_key)
