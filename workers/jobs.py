"""The batch lane's work as plain functions: plan, render a chunk, assemble, notify, clean up.

Celery tasks (``workers/tasks.py``) are thin wrappers around these; tests call them directly
too. Each function is idempotent — safe to run twice, or after a crash half-way:

* ``plan_job`` only moves a job out of ``queued``/``planning``;
* ``render_chunk`` leases the chunk (fencing token), skips it when already committed, stores
  its audio under a deterministic key and commits with its token; only the commit that
  completes the job returns ``assemble``;
* ``assemble_job`` runs under a lock, only for a job in ``assembling``, and the ledger moves
  it to ``done`` only after the upload was verified.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from core.audio import AudioFormat, float_to_int16, int16_to_float, open_writer
from core.batch_lane import ASSEMBLE_TASK, CLEANUP_TASK, NOTIFY_TASK, RENDER_CHUNK_TASK, Enqueue
from core.errors import CallbackError, is_permanent
from core.ledger import ChunkPlan, Job, JobState, Ledger, job_summary
from core.settings import ServiceSettings
from core.storage import Storage
from core.text import Segment, contains_cjk, split_sentences
from workers.batcher import Batcher, Priority

log = logging.getLogger(__name__)

# Rough speaking rates, for sizing chunks before anything is rendered (espeak at 175 wpm;
# other engines are within a factor of two, which is all chunk sizing needs).
_SECONDS_PER_CJK_CHAR = 0.23
_SECONDS_PER_OTHER_CHAR = 0.065


@dataclass
class JobContext:
    """What the job functions need (their dependencies, nothing of the process's
    lifecycle); one per worker process. The batcher and the lease keeper are there on
    workers with an engine (``render`` queue) only."""

    settings: ServiceSettings
    ledger: Ledger
    storage: Storage
    worker_name: str
    enqueue: Enqueue
    batcher: Batcher | None = None
    leases: LeaseKeeper | None = None


# ---------------------------------------------------------------------------- keys


def parts_prefix(job: Job) -> str:
    return f"{job.tenant}/{job.id}/parts/"


def part_key(job: Job, n: int) -> str:
    return f"{parts_prefix(job)}{n:06d}.s16"


def output_key(job: Job) -> str:
    return f"{job.tenant}/{job.id}/audio.{AudioFormat(job.options.format).extension}"


# ---------------------------------------------------------------------------- planning


def estimate_audio_s(text: str) -> float:
    cjk = sum(1 for c in text if contains_cjk(c))
    return cjk * _SECONDS_PER_CJK_CHAR + (len(text) - cjk) * _SECONDS_PER_OTHER_CHAR


def plan_chunks(text: str, settings: ServiceSettings) -> list[ChunkPlan]:
    """Sentences grouped into chunks of about ``chunk_target_audio_s`` of audio."""
    segments = split_sentences(text, settings.max_segment_chars)
    groups: list[list[Segment]] = []
    current: list[Segment] = []
    audio_s = 0.0
    chars = 0
    for segment in segments:
        seconds = estimate_audio_s(segment.text)
        if current and (
            audio_s + seconds > settings.chunk_target_audio_s
            or chars + len(segment.text) > settings.chunk_max_chars
        ):
            groups.append(current)
            current, audio_s, chars = [], 0.0, 0
        current.append(segment)
        audio_s += seconds
        chars += len(segment.text)
    if current:
        groups.append(current)
    return [
        ChunkPlan(
            texts=tuple(s.text for s in group),
            paragraph_ends=tuple(s.paragraph_end for s in group),
            start=group[0].start,
            end=group[-1].end,
            last=i == len(groups) - 1,
        )
        for i, group in enumerate(groups)
    ]


def plan_job(ctx: JobContext, job_id: str) -> int:
    """queued → planning → rendering; enqueues one render task per chunk. Returns chunks."""
    ledger = ctx.ledger
    job = ledger.get(job_id)
    if job is None or job.state not in (JobState.QUEUED, JobState.PLANNING):
        return 0
    ledger.transition(job_id, JobState.PLANNING, only_from=(JobState.QUEUED, JobState.PLANNING))
    chunks = plan_chunks(ledger.text(job_id), ctx.settings)
    if not chunks:
        fail_job(ctx, job_id, "text has nothing to speak (no letters or digits)")
        return 0
    if not ledger.save_plan(job_id, chunks):
        return 0  # cancelled while planning
    for n in range(len(chunks)):
        ctx.enqueue(RENDER_CHUNK_TASK, job_id, n)
    log.info("job %s planned: %d chunks", job_id, len(chunks))
    return len(chunks)


# ---------------------------------------------------------------------------- rendering


class LeaseKeeper:
    """Renews the leases of the chunks this process is rendering, every ttl/3.

    If the process dies, renewals stop and each lease lapses after ``ttl_s``: the
    reconciler then gives the chunk to another worker.
    """

    def __init__(self, ledger: Ledger, ttl_s: float) -> None:
        self.ledger = ledger
        self.ttl_s = ttl_s
        self._held: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
        self._thread.start()

    def hold(self, job_id: str, n: int, token: int) -> None:
        with self._lock:
            self._held[(job_id, n)] = token

    def drop(self, job_id: str, n: int) -> None:
        with self._lock:
            self._held.pop((job_id, n), None)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            with self._lock:
                held = list(self._held.items())
            for (job_id, n), token in held:
                try:
                    if not self.ledger.renew_chunk(job_id, n, token, self.ttl_s):
                        log.warning("lost the lease of job %s chunk %d", job_id, n)
                except Exception:
                    log.exception("could not renew the lease of job %s chunk %d", job_id, n)


def render_chunk(ctx: JobContext, job_id: str, n: int) -> str:
    """Render chunk ``n`` and commit it. Returns the ledger's verdict, or why it was skipped:
    ``committed``, ``assemble``, ``done``, ``busy``, ``inactive``, ``fenced``, ``failed``."""
    assert ctx.batcher is not None, "render_chunk needs a worker with an engine"
    ledger = ctx.ledger
    job = ledger.get(job_id)
    if job is None or job.state is not JobState.RENDERING:
        return "inactive"
    lease = ledger.acquire_chunk(job_id, n, ctx.worker_name, ctx.settings.lease_ttl_s)
    if lease.status != "acquired":
        return lease.status
    attempts = ledger.record_attempt(job_id, n)
    if attempts > ctx.settings.max_chunk_attempts:
        ledger.release_chunk(job_id, n, lease.token)
        reason = ledger.last_error(job_id) or "the worker died"
        fail_job(ctx, job_id, f"chunk {n} failed {attempts - 1} times; last error: {reason}")
        return "failed"
    if ctx.leases is not None:
        ctx.leases.hold(job_id, n, lease.token)
    try:
        plan = ledger.chunk(job_id, n)
        pcm = _render_plan(ctx, job, plan)
        key = part_key(job, n)
        ctx.storage.put_bytes(key, float_to_int16(pcm).tobytes())
        audio_s = len(pcm) / job.options.sample_rate_hz
        outcome = ledger.commit_chunk(job_id, n, lease.token, audio_s)
    except BaseException as error:
        ledger.release_chunk(job_id, n, lease.token)
        ledger.record_error(job_id, _one_line(error))
        if is_permanent(error):
            fail_job(ctx, job_id, f"chunk {n}: {_one_line(error)}")
            return "failed"
        raise
    finally:
        if ctx.leases is not None:
            ctx.leases.drop(job_id, n)
    if outcome == "assemble":
        ctx.enqueue(ASSEMBLE_TASK, job_id)
    elif outcome == "inactive":  # cancelled or failed meanwhile: do not leave the part behind
        ctx.storage.delete(key)
    return outcome


def _render_plan(ctx: JobContext, job: Job, plan: ChunkPlan) -> np.ndarray:
    from workers.render import speech_at_rate

    assert ctx.batcher is not None
    segments = [
        Segment(text=text, start=plan.start, end=plan.end, paragraph_end=ends)
        for text, ends in zip(plan.texts, plan.paragraph_ends, strict=True)
    ]
    deadline_s = ctx.batcher.clock() + ctx.settings.render_time_limit_s
    pieces = [
        pcm
        for _, pcm in speech_at_rate(
            ctx.batcher,
            segments,
            voice=job.options.voice,
            speed=job.options.speed,
            sample_rate_hz=job.options.sample_rate_hz,
            pause_s=ctx.settings.paragraph_pause_s,
            pause_after_last=not plan.last,
            priority=Priority.BATCH,
            deadline_s=deadline_s,
        )
    ]
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)


# ---------------------------------------------------------------------------- assembly


def assemble_job(ctx: JobContext, job_id: str) -> bool:
    """Parts → one encoded file → verified upload → ``done``. True if this call finished it."""
    ledger = ctx.ledger
    job = ledger.get(job_id)
    if job is None or job.state is not JobState.ASSEMBLING:
        return False
    lock = f"assemble:{job_id}"
    lock_ttl_s = max(60.0, ctx.settings.render_time_limit_s)
    if not ledger.acquire_lock(lock, ctx.worker_name, lock_ttl_s):
        return False
    try:
        fmt = AudioFormat(job.options.format)
        with tempfile.TemporaryDirectory(prefix="voicelane-assemble-") as tmp:
            path = Path(tmp) / f"audio.{fmt.extension}"
            with open_writer(path, fmt, job.options.sample_rate_hz) as writer:
                for n in range(job.chunks_total):
                    data = ctx.storage.get_bytes(part_key(job, n))
                    writer.write(int16_to_float(np.frombuffer(data, dtype=np.int16)))
                    if n % 16 == 15:
                        ledger.touch(job_id)
            stored = ctx.storage.upload_file(output_key(job), path, content_type=fmt.mime_type)
        finished = ledger.finish(
            job_id,
            key=stored.key,
            size_bytes=stored.size_bytes,
            duration_s=writer.duration_s,
            sha256=stored.sha256,
        )
        if not finished:  # cancelled while assembling: the file must not outlive the job
            ctx.storage.delete(stored.key)
            return False
        _after_final(ctx, job_id, job.options.callback_url)
        log.info("job %s done: %.1f s of audio", job_id, writer.duration_s)
        return True
    finally:
        ledger.release_lock(lock, ctx.worker_name)


# ---------------------------------------------------------------------------- endings


def fail_job(ctx: JobContext, job_id: str, reason: str) -> bool:
    job = ctx.ledger.get(job_id)
    if job is None or not ctx.ledger.fail(job_id, reason):
        return False
    log.warning("job %s failed: %s", job_id, reason)
    _after_final(ctx, job_id, job.options.callback_url)
    return True


def _after_final(ctx: JobContext, job_id: str, callback_url: str | None) -> None:
    ctx.enqueue(CLEANUP_TASK, job_id)
    if callback_url:
        ctx.enqueue(NOTIFY_TASK, job_id)


def cleanup_job(ctx: JobContext, job_id: str) -> int:
    """Remove a final job's parts and bulky ledger data. Returns parts removed."""
    job = ctx.ledger.get(job_id)
    if job is None or not job.state.final:
        return 0
    removed = ctx.storage.delete_prefix(parts_prefix(job))
    if job.state is not JobState.DONE and job.output_key is None:
        ctx.storage.delete_prefix(f"{job.tenant}/{job.id}/")
    ctx.ledger.delete_job_data(job_id)
    return removed


def notify_job(ctx: JobContext, job_id: str, *, client: httpx.Client | None = None) -> int:
    """POST the final job to its callback URL. Returns the HTTP status; raises to retry."""
    job = ctx.ledger.get(job_id)
    if job is None or not job.options.callback_url or not job.state.final:
        return 0
    body = json.dumps({"job": job_summary(job)}, separators=(",", ":"))
    own = client is None
    http = client or httpx.Client(timeout=ctx.settings.callback_timeout_s)
    try:
        response = http.post(
            job.options.callback_url,
            content=body,
            headers={"content-type": "application/json", "user-agent": "voicelane"},
        )
    except httpx.HTTPError as error:
        raise CallbackError(f"callback to {job.options.callback_url} failed: {error}") from None
    finally:
        if own:
            http.close()
    if response.status_code >= 500 or response.status_code == 429:
        raise CallbackError(f"callback answered {response.status_code}")
    return response.status_code


def _one_line(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return " ".join(f"{type(error).__name__}: {text}".split())[:300]
