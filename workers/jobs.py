"""The batch lane's work as plain functions: plan, render a chunk, assemble, notify, clean up.

Celery tasks (``workers/tasks.py``) are thin wrappers around these; tests call them directly
too. Each function is idempotent — safe to run twice, or after a crash half-way:

* ``plan_job`` only moves a job out of ``queued``/``planning``;
* ``render_chunk`` leases the chunk (fencing token), skips it when already committed, stores
  its audio under a key of its own attempt (the chunk and its token) and commits with its
  lease; only the commit that completes the job returns ``assemble``;
* ``assemble_job`` runs under a lease (renewed while it works, lapsing within seconds if its
  worker dies), only for a job in ``assembling``, and the ledger moves it to ``done`` only
  after the upload was verified, and only for the lease's holder.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
import time
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from voicelane.common.audio import AudioFormat, float_to_int16
from voicelane.common.errors import CallbackError, ConfigError, InvalidInputError, is_permanent
from voicelane.core import metrics
from voicelane.core.batch_lane import (
    ASSEMBLE_TASK,
    CLEANUP_TASK,
    NOTIFY_TASK,
    RENDER_CHUNK_TASK,
    Enqueue,
)
from voicelane.core.callbacks import AllowList, master_secret, tenant_secret
from voicelane.core.engines import ENGINE_NAMES, render_queue
from voicelane.core.job_files import chapter_file_key, subtitles_key
from voicelane.core.job_view import job_summary
from voicelane.core.ledger import (
    ChunkPlan,
    CommitOutcome,
    FinishOutcome,
    Job,
    JobState,
    Lease,
    LeaseStatus,
    Ledger,
)
from voicelane.core.ledger.queues import priority_for_rank
from voicelane.core.metrics import count_unspeakable
from voicelane.core.settings import ServiceSettings
from voicelane.core.speech_text import (
    PreparedText,
    SpokenSegment,
    TextOptions,
    Voicing,
    prepare_text,
)
from voicelane.core.storage import Storage, is_storage_full
from voicelane.core.subtitles import SUBTITLE_FORMATS
from voicelane.core.text import contains_cjk
from voicelane.core.text_map import Mapped, Piece, replacement
from voicelane.core.text_profiles import profile_for
from voicelane.workers.assembly import AssembledFiles, build_job_files, chapter_times_json
from voicelane.workers.batching import Batcher, Priority
from voicelane.workers.callbacks import callback_client, post_callback
from voicelane.workers.job_timings import chunk_timings_json
from voicelane.workers.render import Timeline, speech_at_rate
from voicelane.workers.voice_clips import fetch_clip

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
    """Where the job's parts are: every attempt's, committed or not (cleanup deletes it)."""
    return f"{job.tenant}/{job.id}/parts/"


def _part_stem(job: Job, n: int, token: int | None) -> str:
    return f"{parts_prefix(job)}{n:06d}" if token is None else f"{parts_prefix(job)}{n:06d}.{token}"


def part_key(job: Job, n: int, token: int | None) -> str:
    """The audio of chunk ``n`` as rendered by the attempt holding fencing token ``token``:
    each attempt writes its own object, so an attempt that lost its lease (its upload cut
    short, late, or retried) never touches the one its chunk's commit recorded. None: the
    key of a part committed before parts were keyed per attempt (shared by every attempt)."""
    return f"{_part_stem(job, n, token)}.s16"


def timings_key(job: Job, n: int, token: int | None) -> str:
    """That attempt's sentence and word timings (JSON), beside its audio."""
    return f"{_part_stem(job, n, token)}.json"


def output_key(job: Job) -> str:
    return f"{job.tenant}/{job.id}/audio.{AudioFormat(job.options.format).extension}"


# ---------------------------------------------------------------------------- planning


def estimate_audio_s(text: str) -> float:
    cjk = sum(1 for c in text if contains_cjk(c))
    return cjk * _SECONDS_PER_CJK_CHAR + (len(text) - cjk) * _SECONDS_PER_OTHER_CHAR


def prepare_job_text(
    text: str,
    settings: ServiceSettings,
    options: TextOptions = TextOptions(),  # noqa: B008
    *,
    engine: str | None = None,
) -> PreparedText:
    """The job's text as its engine (None: the settings') will be given it
    (:func:`prepare_text`)."""
    return prepare_text(
        text,
        profile=profile_for(engine or settings.engine),
        options=options,
        max_segment_chars=settings.max_segment_chars,
    )


def plan_chunks(
    text: str,
    settings: ServiceSettings,
    options: TextOptions = TextOptions(),  # noqa: B008
    *,
    chapter_starts: Sequence[int] = (),
) -> list[ChunkPlan]:
    """Sentences grouped into chunks of about ``chunk_target_audio_s`` of audio."""
    segments = prepare_job_text(text, settings, options).segments
    return chunks_of(segments, settings, text=text, chapter_starts=chapter_starts)


def chapter_of(starts: Sequence[int], offset: int) -> int | None:
    """The chapter (index into ``starts``, sorted) that input ``offset`` belongs to; None
    before the first."""
    index = bisect_right(starts, offset) - 1
    return index if index >= 0 else None


def chunks_of(
    segments: Sequence[SpokenSegment],
    settings: ServiceSettings,
    *,
    text: str = "",
    chapter_starts: Sequence[int] = (),
) -> list[ChunkPlan]:
    """Prepared segments grouped into chunks of about ``chunk_target_audio_s`` of audio; a
    chunk never spans two chapters (``chapter_starts``: offsets into ``text``, the input,
    which the chunks quote for their timings)."""
    groups: list[list[SpokenSegment]] = []
    chapters: list[int | None] = []
    current: list[SpokenSegment] = []
    chapter: int | None = None
    audio_s = 0.0
    chars = 0
    for segment in segments:
        seconds = estimate_audio_s(segment.text) + (segment.pause_after_ms or 0) / 1000
        its_chapter = chapter_of(chapter_starts, segment.start)
        if current and (
            audio_s + seconds > settings.chunk_target_audio_s
            or chars + len(segment.text) > settings.chunk_max_chars
            or its_chapter != chapter
        ):
            groups.append(current)
            chapters.append(chapter)
            current, audio_s, chars = [], 0.0, 0
        current.append(segment)
        chapter = its_chapter
        audio_s += seconds
        chars += len(segment.text)
    if current:
        groups.append(current)
        chapters.append(chapter)
    return [
        ChunkPlan(
            texts=tuple(s.text for s in group),
            paragraph_ends=tuple(s.paragraph_end for s in group),
            start=group[0].start,
            end=group[-1].end,
            last=i == len(groups) - 1,
            pauses_ms=(
                tuple(s.pause_after_ms for s in group)
                if any(s.pause_after_ms is not None for s in group)
                else ()
            ),
            voicings=(
                tuple(None if s.voicing.plain else _voicing_tuple(s.voicing) for s in group)
                if any(not s.voicing.plain for s in group)
                else ()
            ),
            after_break=i > 0 and groups[i - 1][-1].pause_after_ms is not None,
            spans=tuple((s.start, s.end) for s in group),
            maps=tuple(_pieces(s.mapping) for s in group),
            source=text[group[0].start : group[-1].end] if text else "",
            chapter=chapters[i],
        )
        for i, group in enumerate(groups)
    ]


def _pieces(mapping: Mapped) -> tuple[tuple[int, int, int, int, int], ...]:
    return tuple(
        (p.out_start, p.out_end, p.src_start, p.src_end, int(p.exact)) for p in mapping.pieces
    )


def _voicing_tuple(voicing: Voicing) -> tuple[str | None, float, float, float]:
    return (voicing.voice, voicing.rate, voicing.volume_db, voicing.pitch_semitones)


def segments_of(plan: ChunkPlan) -> list[SpokenSegment]:
    """A chunk's segments again, for the renderer: texts, paragraph ends, SSML breaks,
    voicings, and each segment's span and map back to the input (for its timings; a plan
    stored before them maps each segment to the chunk's span). No SSML marks: jobs do not
    report them."""
    out = []
    for i, (text, ends) in enumerate(zip(plan.texts, plan.paragraph_ends, strict=True)):
        raw = plan.voicings[i] if plan.voicings else None
        start, end = plan.spans[i] if plan.spans else (plan.start, plan.end)
        mapping = (
            Mapped(text, tuple(Piece(a, b, c, d, bool(e)) for a, b, c, d, e in plan.maps[i]), end)
            if plan.maps
            else replacement(text, start, end, end)
        )
        out.append(
            SpokenSegment(
                text=text,
                start=start,
                end=end,
                paragraph_end=ends,
                mapping=mapping,
                pause_after_ms=plan.pauses_ms[i] if plan.pauses_ms else None,
                voicing=Voicing() if raw is None else Voicing(*raw),
            )
        )
    return out


def plan_job(ctx: JobContext, job_id: str) -> int:
    """queued → planning → rendering; the chunks wait their turn in the tenant's line and the
    render queue is fed (:func:`feed_render_queue`). Returns chunks."""
    ledger = ctx.ledger
    job = ledger.jobs.get(job_id)
    waiting = (JobState.QUEUED, JobState.PLANNING)
    if job is None or job.state not in waiting:
        return 0
    ledger.jobs.transition(job_id, JobState.PLANNING, only_from=waiting)
    text = ledger.jobs.text(job_id)
    try:
        prepared = prepare_job_text(
            text,
            ctx.settings,
            job.options.text_options,
            engine=job.options.engine,
        )
    except InvalidInputError as error:  # checked at submission: only a changed engine gets here
        fail_job(ctx, job_id, _one_line(error))
        return 0
    chunks = chunks_of(
        prepared.segments,
        ctx.settings,
        text=text,
        chapter_starts=[c.start for c in job.options.book.chapters],
    )
    if not chunks:
        fail_job(ctx, job_id, "text has nothing to speak (no letters or digits)")
        return 0
    if job.options.book.chapters:
        ledger.jobs.set_extras(job_id, chapter_chunks=json.dumps(first_chunks(chunks, job)))
    ledger.jobs.set_warnings(job_id, prepared.warnings_json())
    count_unspeakable(job.options.engine, prepared.unspeakable_chars)
    if not ledger.jobs.save_plan(job, chunks):  # rendering, the chunks in their tenant's line
        return 0  # cancelled while planning
    log.info("job %s planned: %d chunks", job_id, len(chunks))
    feed_render_queue(ctx, job.options.engine)
    return len(chunks)


def first_chunks(chunks: Sequence[ChunkPlan], job: Job) -> list[int]:
    """Each chapter's first chunk (-1: a chapter with nothing to speak of its own)."""
    firsts = [-1] * len(job.options.book.chapters)
    for n in reversed(range(len(chunks))):
        chapter = chunks[n].chapter
        if chapter is not None:
            firsts[chapter] = n
    return firsts


def feed_render_queue(ctx: JobContext, engine: str | None = None) -> int:
    """Top ``engine``'s render queue (None: every engine's) up to ``render_queue_target``
    waiting chunks, taken from the tenants' lines in turn, plus one chunk of each tenant with
    none queued (:meth:`voicelane.core.ledger.feed.FairFeed.take`); each is sent at the
    priority of its rank among its tenant's queued chunks
    (:func:`~voicelane.core.ledger.queues.priority_for_rank`). So one tenant's backlog never
    stands between another tenant's job and the GPUs, in the feed's lines or in the queue.
    Called after planning, after every chunk, and by the reconciler. Returns the chunks
    enqueued."""
    fed = 0
    for name in ENGINE_NAMES if engine is None else (engine,):
        queue = render_queue(name)
        queued = ctx.ledger.queues.length(queue)
        if queued == 0:
            ctx.ledger.feed.forget_queued(engine=name)
        taken = ctx.ledger.feed.take(ctx.settings.render_queue_target - queued, engine=name)
        for chunk in taken:
            ctx.enqueue(
                RENDER_CHUNK_TASK,
                chunk.job_id,
                chunk.n,
                queue=queue,
                priority=priority_for_rank(chunk.rank),
            )
        fed += len(taken)
    return fed


# ---------------------------------------------------------------------------- rendering


class LeaseKeeper:
    """Renews the leases this process holds — chunks it renders, jobs it assembles — every
    ttl/3.

    If the process dies, renewals stop and each lease lapses after ``ttl_s``: the
    reconciler then gives the work to another worker.
    """

    def __init__(self, ledger: Ledger, ttl_s: float) -> None:
        self.ledger = ledger
        self.ttl_s = ttl_s
        self._held: dict[tuple[str, int], Lease] = {}
        self._assemblies: dict[str, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
        self._thread.start()

    def hold(self, job_id: str, n: int, lease: Lease) -> None:
        with self._lock:
            self._held[(job_id, n)] = lease

    def drop(self, job_id: str, n: int) -> None:
        with self._lock:
            self._held.pop((job_id, n), None)

    def hold_assembly(self, job_id: str, owner: str) -> None:
        with self._lock:
            self._assemblies[job_id] = owner

    def drop_assembly(self, job_id: str) -> None:
        with self._lock:
            self._assemblies.pop(job_id, None)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            with self._lock:
                held = list(self._held.items())
                assemblies = list(self._assemblies.items())
            for (job_id, n), lease in held:
                try:
                    if not self.ledger.chunks.renew(job_id, n, lease, self.ttl_s):
                        log.warning("lost the lease of job %s chunk %d", job_id, n)
                except Exception:
                    log.exception("could not renew the lease of job %s chunk %d", job_id, n)
            for job_id, owner in assemblies:
                try:
                    if not self.ledger.assembly.renew(job_id, owner, self.ttl_s):
                        log.warning("lost the assembly lease of job %s", job_id)
                except Exception:
                    log.exception("could not renew the assembly lease of job %s", job_id)


def render_chunk(ctx: JobContext, job_id: str, n: int) -> str:
    """Render chunk ``n`` and commit it. Returns the ledger's verdict, or why it was skipped:
    ``committed``, ``assemble``, ``done``, ``busy``, ``inactive``, ``fenced``, ``failed``."""
    assert ctx.batcher is not None, "render_chunk needs a worker with an engine"
    ledger = ctx.ledger
    job = ledger.jobs.get(job_id)
    if job is None:
        return "inactive"
    ledger.feed.started(engine=job.options.engine, tenant=job.tenant)
    if job.state is not JobState.RENDERING:
        return "inactive"
    lease = ledger.chunks.acquire(job_id, n, ctx.worker_name, ctx.settings.lease_ttl_s)
    if lease.status is not LeaseStatus.ACQUIRED:
        return lease.status
    attempts = ledger.chunks.record_attempt(job_id, n)
    if attempts > 1:
        metrics.CHUNK_RETRIES.inc()
    if attempts > ctx.settings.max_chunk_attempts:
        ledger.chunks.release(job_id, n, lease)
        reason = ledger.jobs.last_error(job_id) or "the worker died"
        fail_job(ctx, job_id, f"chunk {n} failed {attempts - 1} times; last error: {reason}")
        return "failed"
    if ctx.leases is not None:
        ctx.leases.hold(job_id, n, lease)
    try:
        plan = ledger.jobs.chunk(job_id, n)
        timeline = (
            Timeline(
                plan.source,
                source_offset=plan.start,
                word_timings=ctx.batcher.engine.capabilities().word_timings,
            )
            if plan.spans
            else None
        )
        pcm = _render_plan(ctx, job, plan, timeline)
        if timeline is not None:  # before the audio: a committed part always has its timings
            ctx.storage.put_bytes(
                timings_key(job, n, lease.token),
                chunk_timings_json(timeline, len(pcm)),
                content_type="application/json",
            )
        ctx.storage.put_bytes(part_key(job, n, lease.token), float_to_int16(pcm).tobytes())
        audio_s = len(pcm) / job.options.sample_rate_hz
        outcome = ledger.chunks.commit(job_id, n, lease, audio_s)
    except BaseException as error:
        ledger.chunks.release(job_id, n, lease)
        ledger.jobs.record_error(job_id, _one_line(error))
        if is_storage_full(error):  # not the chunk's fault: retried with a long backoff
            ledger.chunks.forgive_attempt(job_id, n)
        if is_permanent(error):
            fail_job(ctx, job_id, f"chunk {n}: {_one_line(error)}")
            return "failed"
        raise
    finally:
        if ctx.leases is not None:
            ctx.leases.drop(job_id, n)
    if outcome is CommitOutcome.ASSEMBLE:
        ctx.enqueue(ASSEMBLE_TASK, job_id)
    elif outcome is not CommitOutcome.COMMITTED:
        _drop_uncounted_part(ctx, job, n, lease.token)
    _feed_quietly(ctx, job.options.engine)
    return outcome


def _drop_uncounted_part(ctx: JobContext, job: Job, n: int, token: int) -> None:
    """Delete the part of an attempt whose commit did not count now (fenced, duplicate; or the
    job ended meanwhile): nobody reads it, and only this attempt ever wrote its key — unless
    this very commit had counted before, its answer lost and the command sent again (the
    client retries once on a dropped connection): then it is the chunk's part and stays. One
    left behind (a failure here, a worker that died before its commit) goes with the job's
    parts prefix at cleanup."""
    try:
        if ctx.ledger.chunks.part(job.id, n) == token:
            return
        ctx.storage.delete(part_key(job, n, token))
        ctx.storage.delete(timings_key(job, n, token))
    except Exception:
        log.exception("could not delete job %s chunk %d's uncounted part", job.id, n)


def _feed_quietly(ctx: JobContext, engine: str) -> None:
    """Feed the render queue after a chunk; a failure here is the reconciler's to catch up."""
    try:
        feed_render_queue(ctx, engine)
    except Exception:
        log.exception("could not feed the render queue")


def _render_plan(
    ctx: JobContext, job: Job, plan: ChunkPlan, timeline: Timeline | None
) -> np.ndarray:

    assert ctx.batcher is not None
    fetch_clip(job.options.speaker, ctx.ledger.voices)
    segments = segments_of(plan)
    deadline_s = ctx.batcher.clock() + ctx.settings.render_time_limit_s
    pieces = [
        pcm
        for _, pcm in speech_at_rate(
            ctx.batcher,
            segments,
            voice=job.options.voice,
            speaker=job.options.speaker,
            seed=job.options.seed,
            speed=job.options.speed,
            sample_rate_hz=job.options.sample_rate_hz,
            pause_s=ctx.settings.paragraph_pause_s,
            pause_after_last=not plan.last,
            after_break=plan.after_break,
            priority=Priority.BATCH,
            deadline_s=deadline_s,
            group=job.tenant,
            timeline=timeline,
        )
    ]
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)


# ---------------------------------------------------------------------------- assembly


def assemble_job(ctx: JobContext, job_id: str) -> bool:
    """Parts → one encoded file → verified upload → ``done``. True if this call finished it."""
    ledger = ctx.ledger
    job = ledger.jobs.get(job_id)
    if job is None or job.state is not JobState.ASSEMBLING:
        return False
    owner = ctx.worker_name
    if not ledger.assembly.acquire(job_id, owner, ctx.settings.lease_ttl_s):
        return False
    if ctx.leases is not None:
        ctx.leases.hold_assembly(job_id, owner)
    try:
        fmt = AudioFormat(job.options.format)
        extras = ledger.jobs.extras(job_id)
        tokens = ledger.chunks.parts(job_id)  # exactly the parts the commits counted
        with tempfile.TemporaryDirectory(prefix="voicelane-assemble-") as tmp:
            built = build_job_files(
                job,
                ctx.storage,
                Path(tmp),
                part_key=lambda n: part_key(job, n, tokens.get(n)),
                timings_key=lambda n: timings_key(job, n, tokens.get(n)),
                first_chunks=json.loads(extras.get("chapter_chunks", "[]")),
                chapter_pause_s=ctx.settings.chapter_pause_s,
                touch=lambda: ledger.jobs.touch(job_id),
            )
            side_keys = _upload_side_files(ctx, job, built)
            stored = ctx.storage.upload_file(
                output_key(job), built.audio, content_type=fmt.mime_type
            )
        outcome = ledger.assembly.finish(
            job_id,
            owner=owner,
            key=stored.key,
            size_bytes=stored.size_bytes,
            duration_s=built.duration_s,
            sha256=stored.sha256,
        )
        if outcome is FinishOutcome.INACTIVE:  # cancelled meanwhile: the file must not outlive it
            for key in (stored.key, *side_keys):
                ctx.storage.delete(key)
            return False
        if outcome is FinishOutcome.FENCED:  # our lock lapsed: another assembler owns the job
            log.warning("job %s: assembly lease lost; leaving the job to its new assembler", job_id)
            return False
        _after_final(ctx, job_id, job.options.callback_url)
        log.info("job %s done: %.1f s of audio", job_id, built.duration_s)
        return True
    finally:
        if ctx.leases is not None:
            ctx.leases.drop_assembly(job_id)
        ledger.assembly.release(job_id, owner)


def _upload_side_files(ctx: JobContext, job: Job, built: AssembledFiles) -> list[str]:
    """The subtitles and chapter files, stored before the job is done (and recorded in its
    extras, so the API can link them); returns their keys."""
    keys: list[str] = []
    outputs: dict[str, object] = {}
    if built.subtitles is not None:
        for name in SUBTITLE_FORMATS:
            data, media_type = built.subtitles.render(name)
            keys.append(
                ctx.storage.put_bytes(subtitles_key(job, name), data, content_type=media_type).key
            )
        outputs["subtitles"] = list(SUBTITLE_FORMATS)
    fmt = AudioFormat(job.options.format)
    for index, path in enumerate(built.chapter_files):
        key = chapter_file_key(job, index)
        keys.append(ctx.storage.upload_file(key, path, content_type=fmt.mime_type).key)
    if built.chapter_files:
        outputs["chapter_files"] = len(built.chapter_files)
    extras = {"outputs": json.dumps(outputs)}
    if built.chapters:
        extras["chapter_times"] = chapter_times_json(built.chapters)
    ctx.ledger.jobs.set_extras(job.id, **extras)
    return keys


# ---------------------------------------------------------------------------- endings


def fail_job(ctx: JobContext, job_id: str, reason: str) -> bool:
    job = ctx.ledger.jobs.get(job_id)
    if job is None or not ctx.ledger.jobs.fail(job_id, reason):
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
    job = ctx.ledger.jobs.get(job_id)
    if job is None or not job.state.final:
        return 0
    removed = ctx.storage.delete_prefix(parts_prefix(job))
    if job.options.book.cover_key:  # in the file now (or never: the job did not finish)
        ctx.storage.delete(job.options.book.cover_key)
    if job.state is not JobState.DONE and job.output_key is None:
        ctx.storage.delete_prefix(f"{job.tenant}/{job.id}/")
    ctx.ledger.retention.drop_data(job_id)
    return removed


def sweep_expired_jobs(ctx: JobContext, *, now: float | None = None, limit: int = 100) -> int:
    """Forget up to ``limit`` jobs that ended more than ``job_retention_s`` ago: their files
    first, then their records. Returns the jobs forgotten."""
    now = time.time() if now is None else now
    ledger = ctx.ledger
    forgotten = 0
    for job_id in ledger.retention.expired(now - ctx.settings.job_retention_s, limit):
        job = ledger.jobs.get(job_id)
        if job is not None:
            ctx.storage.delete_prefix(f"{job.tenant}/{job.id}/")
            ledger.retention.forget(job_id, job.tenant)
        else:
            ledger.retention.forget(job_id, "-")
        forgotten += 1
    if forgotten:
        log.info("retention: forgot %d jobs", forgotten)
    return forgotten


def notify_job(ctx: JobContext, job_id: str, *, client: httpx.Client | None = None) -> int:
    """POST the final job to its callback URL, signed with the tenant's secret
    (:mod:`voicelane.core.callbacks`), through the guarded client
    (:mod:`voicelane.workers.callbacks`). Returns the HTTP status, or 0 when nothing was sent;
    raises CallbackError to retry (unreachable, 5xx, 429). A destination that may not be reached is
    permanent: logged, never retried."""
    job = ctx.ledger.jobs.get(job_id)
    if job is None or not job.options.callback_url or not job.state.final:
        return 0
    settings = ctx.settings
    master = master_secret(settings.callback_signing_secret, dev_mode=settings.dev_mode)
    if master is None:
        log.warning(
            "callback of job %s not sent: callbacks are off (no VOICELANE_CALLBACK_SIGNING_SECRET)",
            job_id,
        )
        return 0
    body = json.dumps({"job": job_summary(job)}, separators=(",", ":")).encode()
    own = client is None
    try:
        http = client or callback_client(
            AllowList.parse(settings.callback_allow), settings.callback_timeout_s
        )
    except ConfigError as error:
        metrics.CALLBACK_FAILURES.inc()
        log.warning("callback of job %s not sent: %s", job_id, error)
        return 0
    try:
        response = post_callback(
            http,
            job.options.callback_url,
            body,
            secret=tenant_secret(master, job.tenant),
            job_id=job.id,
            deadline_s=settings.callback_timeout_s,
        )
    except InvalidInputError as refused:
        metrics.CALLBACK_FAILURES.inc()
        log.warning("callback of job %s refused, not retried: %s", job_id, refused)
        return 0
    except httpx.HTTPError as error:
        metrics.CALLBACK_FAILURES.inc()
        raise CallbackError(f"callback of job {job_id} failed: {_one_line(error)}") from None
    finally:
        if own:
            http.close()
    if response.status_code >= 500 or response.status_code == 429:
        metrics.CALLBACK_FAILURES.inc()
        raise CallbackError(f"callback answered {response.status_code}")
    return response.status_code


def _one_line(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return " ".join(f"{type(error).__name__}: {text}".split())[:300]
