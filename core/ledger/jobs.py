"""The job record and its state machine.

States: queued → planning → rendering → assembling → done | failed | cancelled. Final states
never change again; every transition is a Lua script that checks the current state
(``set_state.lua``; ``save_plan.lua``, which also puts the chunks in the fair feed's line;
``end_job.lua``; rendering → assembling is the last commit's,
:mod:`~voicelane.core.ledger.chunks`; assembling → done is the assembly lock holder's,
:mod:`~voicelane.core.ledger.assembly`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import cast

import redis
from redis.typing import EncodableT, FieldT

from voicelane.common.errors import JobNotFoundError, QuotaExceededError
from voicelane.core.ledger.ending import ENDING, ending_args, ending_keys
from voicelane.core.ledger.keys import (
    ACTIVE_JOBS,
    ATTEMPTS,
    CHUNKS_DONE,
    FEED_LINE,
    FEED_RING,
    FEED_TENANTS,
    JOB,
    JOB_PLAN,
    JOB_TEXT,
    QUEUED_CHARS,
    STORED_BYTES,
    TENANT_JOBS,
)
from voicelane.core.ledger.lua import register
from voicelane.core.ledger.queued_chars import RETRY_S
from voicelane.core.ledger.records import (
    BookInfo,
    ChunkPlan,
    Job,
    JobOptions,
    JobState,
    number_of,
    one_line,
    text_of,
)
from voicelane.core.speakers import SpeakerDef
from voicelane.core.speech_text import TEXT_OPTION_FIELDS, TextOptions

ERROR_CHARS = 500
"""What a final job keeps of the reason it failed."""
LAST_ERROR_CHARS = 300


def _record(
    job_id: str, tenant: str, options: JobOptions, characters: int, *, now: float, held: int
) -> list[EncodableT]:
    """A new job's hash, as field, value, field, value..."""
    record: dict[str, EncodableT] = {
        "id": job_id,
        "tenant": tenant,
        "state": JobState.QUEUED.value,
        "voice": options.voice,
        "format": options.format,
        "sample_rate_hz": options.sample_rate_hz,
        "speed": options.speed,
        "callback_url": options.callback_url or "",
        "engine": options.engine,
        "requested_voice": options.requested_voice,
        **({"seed": options.seed} if options.seed is not None else {}),
        **({"speaker": options.speaker.to_json()} if options.speaker else {}),
        **({"book": options.book.to_json()} if not options.book.plain else {}),
        "characters": characters,
        "created_at": now,
        "updated_at": now,
        "chunks_total": 0,
        "chunks_done": 0,
        "audio_s": 0.0,
        **({"queued_chars": held} if held else {}),
    }
    record.update(options.text_options.to_fields())
    return [item for pair in record.items() for item in pair]


class Jobs:
    """Jobs in Redis. Safe to share between threads (redis-py pools connections)."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._create = register(client, "create_job")
        self._set_state = register(client, "set_state")
        self._save_plan = register(client, "save_plan")
        self._end = register(client, "end_job", libraries=(ENDING,))

    # ---------------------------------------------------------------- creating and reading
    def create(
        self,
        tenant: str,
        options: JobOptions,
        text: str,
        *,
        max_queued_chars: int | None = None,
        max_stored_bytes: int | None = None,
        job_id: str | None = None,
    ) -> Job:
        """A new job in ``queued``. With ``max_queued_chars``, the tenant's unfinished jobs
        may hold at most that many characters together (:class:`QuotaExceededError` else);
        a job gives its characters back when it ends. With ``max_stored_bytes``, a tenant
        whose finished outputs already hold that many bytes gets :class:`QuotaExceededError`
        until retention frees some (checked here, at submission: a job under way may end a
        little past it). ``job_id``: one drawn by the caller (:func:`new_job_id`: the front
        stores a document's cover under it first)."""
        job_id = job_id or new_job_id()
        now = time.time()
        if max_stored_bytes is not None:
            stored_bytes = self.stored_bytes(tenant)
            if stored_bytes >= max_stored_bytes:
                raise QuotaExceededError(
                    f"the tenant's finished outputs hold {stored_bytes:,} bytes, the limit is "
                    f"{max_stored_bytes:,}; they are freed when their jobs pass retention"
                )
        held = len(text) if max_queued_chars is not None else 0
        if not self._create(
            keys=[
                JOB.key(job_id),
                JOB_TEXT.key(job_id),
                TENANT_JOBS.key(tenant),
                ACTIVE_JOBS.key(),
                QUEUED_CHARS.key(tenant),
            ],
            args=[
                job_id,
                now,
                text.encode("utf-8"),
                held,
                max_queued_chars or 0,
                *_record(job_id, tenant, options, len(text), now=now, held=held),
            ],
        ):
            raise QuotaExceededError(
                f"text: the tenant's unfinished jobs would hold more than "
                f"{max_queued_chars:,} characters; wait for some to finish",
                field="text",
                retry_after_s=RETRY_S,
            )
        job = self.get(job_id)
        assert job is not None
        return job

    def stored_bytes(self, tenant: str) -> int:
        """Bytes of the tenant's finished outputs (done jobs not yet forgotten)."""
        return max(0, int(cast(bytes | None, self.redis.get(STORED_BYTES.key(tenant))) or 0))

    def get(self, job_id: str) -> Job | None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(JOB.key(job_id))
        pipe.hvals(ATTEMPTS.key(job_id))
        raw, attempts = cast(tuple[Mapping[bytes, bytes], list[bytes]], pipe.execute())
        if not raw:
            return None
        return decode_job(raw, sum(int(a) for a in attempts))

    def get_for_tenant(self, tenant: str, job_id: str) -> Job:
        """The tenant's job; another tenant's job is reported exactly like a missing one."""
        job = self.get(job_id) if plausible_id(job_id) else None
        if job is None or job.tenant != tenant:
            raise JobNotFoundError(f"no job {job_id!r}")
        return job

    def list_for_tenant(
        self, tenant: str, *, limit: int, before: float | None = None
    ) -> tuple[list[Job], float | None]:
        """Newest first; returns the page and the cursor of the next page (None at the end)."""
        high: float | str = f"({before}" if before is not None else "+inf"
        ids = cast(
            list[tuple[bytes, float]],
            self.redis.zrevrangebyscore(
                TENANT_JOBS.key(tenant), high, "-inf", start=0, num=limit + 1, withscores=True
            ),
        )
        jobs = [job for raw_id, _ in ids[:limit] if (job := self.get(raw_id.decode()))]
        cursor = ids[limit - 1][1] if len(ids) > limit else None
        return jobs, cursor

    def text(self, job_id: str) -> str:
        raw = cast(bytes | None, self.redis.get(JOB_TEXT.key(job_id)))
        if raw is None:
            raise JobNotFoundError(f"job {job_id} has no text")
        return raw.decode("utf-8")

    def set_warnings(self, job_id: str, warnings: list[dict[str, object]]) -> None:
        """What of the text is not spoken as written (the planner's findings), shown in
        the job record."""
        if warnings:
            self.redis.hset(JOB.key(job_id), "warnings", json.dumps(warnings, ensure_ascii=False))

    def set_extras(self, job_id: str, **fields: str) -> None:
        """Record what a job's planner or assembler found beside its audio, as JSON strings:
        ``chapter_chunks`` (each chapter's first chunk), ``chapter_times`` (each chapter's
        ``[start_ms, end_ms]`` in the output), ``outputs`` (the other files: subtitles,
        chapter files)."""
        if fields:
            mapping: dict[FieldT, EncodableT] = dict(fields.items())
            self.redis.hset(JOB.key(job_id), mapping=mapping)

    def extras(self, job_id: str) -> dict[str, str]:
        """What :meth:`set_extras` recorded (missing fields left out)."""
        names = ("chapter_chunks", "chapter_times", "outputs")
        values = cast(list[bytes | None], self.redis.hmget(JOB.key(job_id), names))
        return {n: v.decode() for n, v in zip(names, values, strict=True) if v is not None}

    def done_chunks(self, job_id: str) -> set[int]:
        """The chunks committed so far."""
        return {int(n) for n in cast(set[bytes], self.redis.smembers(CHUNKS_DONE.key(job_id)))}

    def chunk(self, job_id: str, n: int) -> ChunkPlan:
        """The plan of the job's chunk ``n``."""
        raw = cast(bytes | None, self.redis.lindex(JOB_PLAN.key(job_id), n))
        if raw is None:
            raise JobNotFoundError(f"job {job_id} has no chunk {n}")
        return ChunkPlan.from_json(raw)

    # ---------------------------------------------------------------- transitions
    def transition(self, job_id: str, to: JobState, *, only_from: tuple[JobState, ...]) -> bool:
        result = self._set_state(
            keys=[JOB.key(job_id)],
            args=[to.value, time.time(), *(s.value for s in only_from)],
        )
        if result == -1:
            raise JobNotFoundError(f"no job {job_id!r}")
        return bool(result)

    def save_plan(self, job: Job, chunks: list[ChunkPlan]) -> bool:
        """planning → rendering with these chunks, and the chunks in line in the fair feed
        (:mod:`~voicelane.core.ledger.feed`: behind the tenant's other chunks for the job's
        engine) — one atomic write, so no job is ever rendering with chunks that never joined
        the line. False, and nothing written, if the job moved on (cancelled)."""
        engine = job.options.engine
        return bool(
            self._save_plan(
                keys=[
                    JOB.key(job.id),
                    JOB_PLAN.key(job.id),
                    FEED_LINE.key(engine, job.tenant),
                    FEED_RING.key(engine),
                    FEED_TENANTS.key(engine),
                ],
                args=[time.time(), job.id, job.tenant, *(c.to_json() for c in chunks)],
            )
        )

    def fail(self, job_id: str, reason: str) -> bool:
        return self._end_job(job_id, JobState.FAILED, reason)

    def cancel(self, job_id: str) -> bool:
        return self._end_job(job_id, JobState.CANCELLED, "cancelled by the client")

    def _end_job(self, job_id: str, state: JobState, reason: str) -> bool:
        result = self._end(
            keys=ending_keys(job_id),
            args=[job_id, time.time(), state.value, one_line(reason, ERROR_CHARS), *ending_args()],
        )
        if result == -1:
            raise JobNotFoundError(f"no job {job_id!r}")
        return bool(result)

    # ---------------------------------------------------------------- progress notes
    def touch(self, job_id: str) -> None:
        """Mark progress (long assembly), so the reconciler does not think the job stalled."""
        self.redis.hset(JOB.key(job_id), "updated_at", time.time())

    def record_error(self, job_id: str, error: str) -> None:
        """Remember the job's last error (shown when it fails for good)."""
        self.redis.hset(JOB.key(job_id), "last_error", one_line(error, LAST_ERROR_CHARS))

    def last_error(self, job_id: str) -> str | None:
        return text_of(cast(bytes | None, self.redis.hget(JOB.key(job_id), "last_error")))

    # ---------------------------------------------------------------- the active jobs
    def active(self) -> list[str]:
        """Ids of the jobs not in a final state, sorted."""
        members = cast(set[bytes], self.redis.smembers(ACTIVE_JOBS.key()))
        return sorted(m.decode() for m in members)

    def active_count(self) -> int:
        """Jobs not in a final state."""
        return int(self.redis.scard(ACTIVE_JOBS.key()))

    def active_by_state(self) -> dict[str, int]:
        """Jobs not in a final state, counted by state (one round trip for all of them)."""
        pipe = self.redis.pipeline(transaction=False)
        for job_id in self.active():
            pipe.hget(JOB.key(job_id), "state")
        counts: dict[str, int] = {}
        for raw in pipe.execute():
            state = text_of(raw) or "gone"
            counts[state] = counts.get(state, 0) + 1
        return counts


_TEXT_FIELDS = TEXT_OPTION_FIELDS


def new_job_id() -> str:
    """A fresh job id (32 hex digits)."""
    return uuid.uuid4().hex


def plausible_id(job_id: str) -> bool:
    """A job id could be this (32 hex digits): anything else is not looked up at all."""
    return len(job_id) == 32 and all(c in "0123456789abcdef" for c in job_id)


def decode_job(raw: Mapping[bytes, bytes], attempts: int) -> Job:
    """The job record from its hash (``attempts``: the sum of its chunks')."""

    def get(name: str) -> str | None:
        return text_of(raw.get(name.encode()))

    def number(name: str) -> float | None:
        return number_of(raw.get(name.encode()))

    size = number("size_bytes")
    return Job(
        id=get("id") or "",
        tenant=get("tenant") or "",
        state=JobState(get("state") or JobState.FAILED.value),
        options=JobOptions(
            voice=get("voice") or "",
            format=get("format") or "",
            sample_rate_hz=int(number("sample_rate_hz") or 0),
            speed=number("speed") or 1.0,
            callback_url=get("callback_url") or None,
            text_options=TextOptions.from_fields(
                {k: v for k in _TEXT_FIELDS if (v := get(k)) is not None}
            ),
            engine=get("engine") or "espeak",
            speaker=SpeakerDef.from_json(speaker) if (speaker := get("speaker")) else None,
            requested_voice=get("requested_voice") or "",
            seed=int(seed) if (seed := get("seed")) else None,
            book=BookInfo.from_json(book) if (book := get("book")) else BookInfo(),
        ),
        warnings=tuple(json.loads(get("warnings") or "[]")),
        characters=int(number("characters") or 0),
        created_at=number("created_at") or 0.0,
        updated_at=number("updated_at") or 0.0,
        started_at=number("started_at"),
        finished_at=number("finished_at"),
        chunks_total=int(number("chunks_total") or 0),
        chunks_done=int(number("chunks_done") or 0),
        audio_s=number("audio_s") or 0.0,
        attempts=attempts,
        output_key=get("output_key") or None,
        size_bytes=int(size) if size is not None else None,
        duration_s=number("duration_s"),
        sha256=get("sha256") or None,
        error=get("error") or None,
    )
