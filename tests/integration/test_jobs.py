"""The job functions in-process (real Redis, local storage, a recording enqueue): planning,
chunk rendering and commits, failure after bounded attempts, assembly, the reconciler."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from tests.support.engines import RecordingEngine
from tests.support.jobs import S3_PARAM, Recorder, espeak_context, narrow, storage_param
from tests.support.ledger import waiting_chunks
from tests.support.tiny_fs import fill, tiny_tmpfs
from voicelane.common.audio import probe
from voicelane.common.errors import EngineError, StorageFullError
from voicelane.core.batch_lane import ASSEMBLE_TASK, CLEANUP_TASK, RENDER_CHUNK_TASK
from voicelane.core.ledger import JobOptions, JobState, Ledger
from voicelane.core.ledger.keys import CHUNK_LEASE
from voicelane.core.settings import ServiceSettings
from voicelane.core.storage import LocalStorage, LocalStorageSettings
from voicelane.workers.batching import Batcher
from voicelane.workers.engines import Utterance
from voicelane.workers.jobs import (
    JobContext,
    assemble_job,
    parts_prefix,
    plan_chunks,
    plan_job,
    render_chunk,
    sweep_expired_jobs,
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


def test_reconciler_requeues_a_dead_workers_chunk_once(ctx: JobContext) -> None:
    job_id = submit(ctx)
    plan_job(ctx, job_id)
    recorder(ctx).calls.clear()
    ctx.ledger.chunks.acquire(job_id, 2, "dead@test", ttl_s=60)
    assert reconcile_once(ctx) == 0  # a live lease: its worker is rendering the chunk
    ctx.ledger.redis.delete(CHUNK_LEASE.key(job_id, 2))  # lapsed: the worker died
    recorder(ctx).calls.clear()
    assert reconcile_once(ctx) == 1
    assert recorder(ctx).of(RENDER_CHUNK_TASK) == [(job_id, 2)]
    assert reconcile_once(ctx) == 0  # not again while the re-enqueued message waits


def test_reconciler_requeues_every_unfinished_chunk_of_a_stalled_job(ctx: JobContext) -> None:
    job_id = submit(ctx)
    total = plan_job(ctx, job_id)
    render_chunk(ctx, job_id, 0)
    recorder(ctx).calls.clear()
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None
    later = job.updated_at + ctx.settings.stall_timeout_s + 1
    assert reconcile_once(ctx, now=later) == total - 1
    assert sorted(a[1] for a in recorder(ctx).of(RENDER_CHUNK_TASK)) == list(range(1, total))  # type: ignore[type-var]


def test_rendered_parts_are_int16_at_the_jobs_rate(ctx: JobContext) -> None:
    job_id = submit(ctx, "One short sentence.")
    plan_job(ctx, job_id)
    assert render_chunk(ctx, job_id, 0) == "assemble"
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None
    data = ctx.storage.get_bytes(parts_prefix(job) + "000000.s16")
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
    recorder(small).calls.clear()
    later = job.updated_at + small.settings.stall_timeout_s + 1
    requeued = reconcile_once(small, now=later)
    assert requeued == 2
    enqueued = recorder(small).of(RENDER_CHUNK_TASK)
    assert enqueued[:2] == [(job_id, 0), (job_id, 1)]  # the re-enqueued ones, then the feed
    assert all(n >= 2 for _, n in enqueued[2:])  # type: ignore[operator]


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
