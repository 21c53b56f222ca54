"""The job ledger: the batch lane's state, in Redis (AOF on), decided atomically with Lua.

Keys (prefix ``vl:``):

* ``job:{id}`` — hash: the job (state, options, progress, output, error, timestamps);
* ``job:{id}:text`` — the submitted text (never in task arguments, logs or Flower);
* ``job:{id}:chunks`` — list of chunk plans (JSON), one per chunk, in order;
* ``job:{id}:started`` / ``job:{id}:done`` — sets of chunk numbers ever leased / committed;
* ``job:{id}:lease:{n}`` — the current lease of chunk n: ``{token}|{worker}``, with a TTL;
* ``job:{id}:fence`` — the fencing-token counter of the job;
* ``job:{id}:attempts`` — hash: chunk n → attempts;
* ``tenant:{tenant}:jobs`` — sorted set of the tenant's job ids by creation time;
* ``jobs:active`` — set of jobs not yet in a final state (the reconciler's work list).

States: queued → planning → rendering → assembling → done | failed | cancelled. Final states
never change again; every transition is a Lua script that checks the current state.

Chunks: a worker *leases* a chunk (gets a fencing token), renders it, stores the audio under
a deterministic key and *commits* with its token. A commit counts only if the token still
holds the lease, so two workers can never both commit one chunk; ``done`` is a set, so a
duplicate commit cannot count twice; the commit that completes the set flips the job to
``assembling`` and is told so — exactly once.
"""

from __future__ import annotations

import enum
import json
import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, cast

import redis

from voicelane.common.errors import JobNotFoundError, QuotaExceededError
from voicelane.core.redis_clients import sync_client

PREFIX = "vl:"
QUEUED_CHARS_RETRY_S = 60.0
"""The retry hint of a submission refused for the queued-characters quota (jobs take about
this long to move on; there is no exact time to give)."""


class JobState(enum.StrEnum):
    QUEUED = "queued"
    PLANNING = "planning"
    RENDERING = "rendering"
    ASSEMBLING = "assembling"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)


@dataclass(frozen=True, slots=True)
class ChunkPlan:
    """One chunk: consecutive segments, with what the renderer needs to reproduce pauses."""

    texts: tuple[str, ...]
    paragraph_ends: tuple[bool, ...]
    start: int
    end: int
    last: bool
    """The job's last chunk: no pause after its final segment."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> ChunkPlan:
        data = json.loads(raw)
        return cls(
            texts=tuple(data["texts"]),
            paragraph_ends=tuple(data["paragraph_ends"]),
            start=data["start"],
            end=data["end"],
            last=data["last"],
        )


@dataclass(frozen=True, slots=True)
class JobOptions:
    voice: str
    format: str
    sample_rate_hz: int
    speed: float = 1.0
    callback_url: str | None = None


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    tenant: str
    state: JobState
    options: JobOptions
    characters: int
    created_at: float
    updated_at: float
    started_at: float | None
    finished_at: float | None
    chunks_total: int
    chunks_done: int
    audio_s: float
    attempts: int
    output_key: str | None
    size_bytes: int | None
    duration_s: float | None
    sha256: str | None
    error: str | None

    @property
    def progress(self) -> float:
        if self.state is JobState.DONE:
            return 1.0
        return self.chunks_done / self.chunks_total if self.chunks_total else 0.0

    def eta_s(self, now: float | None = None) -> float | None:
        """Remaining seconds at the pace so far; None until a chunk is done or when final."""
        if self.state.final or self.started_at is None or self.chunks_done == 0:
            return None
        elapsed = (now or time.time()) - self.started_at
        remaining = self.chunks_total - self.chunks_done
        return max(0.0, elapsed / self.chunks_done * remaining)


@dataclass(frozen=True, slots=True)
class Lease:
    status: str
    """``acquired``, ``done`` (already committed), ``busy`` (another worker holds it) or
    ``inactive`` (the job is no longer rendering)."""
    token: int = 0


def _s(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else value


def _f(value: bytes | str | None) -> float | None:
    text = _s(value)
    return float(text) if text not in (None, "") else None


# Lua: every state transition and chunk decision, atomically.
_SET_STATE = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return -1 end
for _, final in ipairs({'done', 'failed', 'cancelled'}) do
  if state == final then return 0 end
end
local allowed = false
for i = 3, #ARGV do if ARGV[i] == state then allowed = true end end
if #ARGV > 2 and not allowed then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'updated_at', ARGV[2])
return 1
"""

_ACQUIRE = """
-- KEYS: job, done, started, lease, fence ; ARGV: n, worker, ttl_ms
if redis.call('HGET', KEYS[1], 'state') ~= 'rendering' then return {'inactive', 0} end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return {'done', 0} end
if redis.call('EXISTS', KEYS[4]) == 1 then return {'busy', 0} end
local token = redis.call('INCR', KEYS[5])
redis.call('SET', KEYS[4], token .. '|' .. ARGV[2], 'PX', ARGV[3])
redis.call('SADD', KEYS[3], ARGV[1])
return {'acquired', token}
"""

_RENEW = """
-- KEYS: lease ; ARGV: token, ttl_ms
local held = redis.call('GET', KEYS[1])
if held and string.match(held, '^(%d+)|') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

_RELEASE = """
local held = redis.call('GET', KEYS[1])
if held and string.match(held, '^(%d+)|') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""

_COMMIT = """
-- KEYS: job, done, lease, commits ; ARGV: n, token, audio_s, now
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'rendering' then return {'inactive', 0} end
local held = redis.call('GET', KEYS[3])
if not held or string.match(held, '^(%d+)|') ~= ARGV[2] then return {'fenced', 0} end
redis.call('DEL', KEYS[3])
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then return {'duplicate', 0} end
redis.call('RPUSH', KEYS[4], ARGV[1] .. '|' .. ARGV[2] .. '|' .. string.match(held, '|(.*)$'))
redis.call('HINCRBYFLOAT', KEYS[1], 'audio_s', ARGV[3])
local done = redis.call('SCARD', KEYS[2])
redis.call('HSET', KEYS[1], 'chunks_done', done, 'updated_at', ARGV[4])
if done == tonumber(redis.call('HGET', KEYS[1], 'chunks_total')) then
  redis.call('HSET', KEYS[1], 'state', 'assembling')
  return {'assemble', done}
end
return {'committed', done}
"""

_SAVE_PLAN = """
-- KEYS: job, chunks ; ARGV: now, total, chunk1, chunk2, ...
if redis.call('HGET', KEYS[1], 'state') ~= 'planning' then return 0 end
redis.call('DEL', KEYS[2])
for i = 3, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
redis.call('HSET', KEYS[1], 'state', 'rendering', 'chunks_total', ARGV[2],
           'started_at', ARGV[1], 'updated_at', ARGV[1])
return 1
"""

# A job that ends gives its characters back to its tenant's queued-characters quota (once:
# the job's ``queued_chars`` field marks what it holds). ARGV[1] of this snippet's caller is
# the ledger's key prefix. (The tenant's counter is derived from the job inside the script;
# voicelane runs on one Redis, not a cluster.)
_RELEASE_CHARS = """
local function release_chars(job, prefix)
  local held = tonumber(redis.call('HGET', job, 'queued_chars') or '0')
  if held > 0 then
    local counter = prefix .. 'tenant:' .. redis.call('HGET', job, 'tenant') .. ':queued_chars'
    if redis.call('DECRBY', counter, held) <= 0 then redis.call('DEL', counter) end
    redis.call('HDEL', job, 'queued_chars')
  end
end
"""

_FINISH = (
    _RELEASE_CHARS
    + """
-- KEYS: job, active, assembly lease ; ARGV: id, now, key, size, duration, sha256, prefix, owner
if redis.call('HGET', KEYS[1], 'state') ~= 'assembling' then return 'inactive' end
if redis.call('GET', KEYS[3]) ~= ARGV[8] then return 'fenced' end
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[1], 'state', 'done', 'output_key', ARGV[3], 'size_bytes', ARGV[4],
           'duration_s', ARGV[5], 'sha256', ARGV[6], 'finished_at', ARGV[2], 'updated_at', ARGV[2])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('ZADD', ARGV[7] .. 'jobs:finished', ARGV[2], ARGV[1])
release_chars(KEYS[1], ARGV[7])
return 'done'
"""
)

# Assembly is leased like a chunk: a short lease renewed while the file is built, so a dead
# assembler's job is taken over within seconds; only the lease's holder may finish the job.
_ACQUIRE_ASSEMBLY = """
-- KEYS: job, lease ; ARGV: owner, ttl_ms
if redis.call('HGET', KEYS[1], 'state') ~= 'assembling' then return 0 end
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'assembly_started', 1)
return 1
"""

_RENEW_LOCK = """
-- KEYS: lock ; ARGV: owner, ttl_ms
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

_RELEASE_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

_END = (
    _RELEASE_CHARS
    + """
-- KEYS: job, active ; ARGV: id, now, state, error, prefix
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return -1 end
if state == 'done' or state == 'failed' or state == 'cancelled' then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[3], 'error', ARGV[4], 'finished_at', ARGV[2],
           'updated_at', ARGV[2])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('ZADD', ARGV[5] .. 'jobs:finished', ARGV[2], ARGV[1])
release_chars(KEYS[1], ARGV[5])
return 1
"""
)

_RESERVE_CHARS = """
-- KEYS: counter ; ARGV: characters, limit. 1: reserved; 0: over the limit
local queued = tonumber(redis.call('GET', KEYS[1]) or '0')
if queued + tonumber(ARGV[1]) > tonumber(ARGV[2]) then return 0 end
redis.call('INCRBY', KEYS[1], ARGV[1])
return 1
"""

# The fair feed of the render queue. A planned job's chunks wait as "job:n" references in
# their tenant's list; tenants with waiting chunks form a ring. Taking work rotates the ring
# and takes one reference per tenant per turn, so tenants alternate whatever their backlog;
# references of jobs that stopped rendering (cancelled, failed) are dropped on the way.
_SCHEDULE = """
-- KEYS: tenant list, ring, ring members ; ARGV: job id, chunks, tenant
for n = 0, tonumber(ARGV[2]) - 1 do redis.call('RPUSH', KEYS[1], ARGV[1] .. ':' .. n) end
if redis.call('SADD', KEYS[3], ARGV[3]) == 1 then redis.call('RPUSH', KEYS[2], ARGV[3]) end
return 1
"""

_TAKE_FAIR = """
-- KEYS: ring, ring members ; ARGV: count, prefix
local out = {}
local want = tonumber(ARGV[1])
local budget = want * 64 + 64
while #out < want and budget > 0 do
  budget = budget - 1
  local tenant = redis.call('LMOVE', KEYS[1], KEYS[1], 'LEFT', 'RIGHT')
  if not tenant then break end
  local list = ARGV[2] .. 'sched:tenant:' .. tenant
  local ref = redis.call('LPOP', list)
  if redis.call('LLEN', list) == 0 then
    redis.call('LREM', KEYS[1], 0, tenant)
    redis.call('SREM', KEYS[2], tenant)
  end
  if ref then
    local job, n = string.match(ref, '^(.+):(%d+)$')
    local key = ARGV[2] .. 'job:' .. job
    if job and redis.call('HGET', key, 'state') == 'rendering' then
      redis.call('SADD', key .. ':dispatched', n)
      out[#out + 1] = ref
    end
  end
end
return out
"""


class Ledger:
    """Jobs and chunks in Redis. Safe to share between threads (redis-py pools connections)."""

    def __init__(self, client: redis.Redis, *, prefix: str = PREFIX) -> None:
        self.redis = client
        self.prefix = prefix
        self._set_state = client.register_script(_SET_STATE)
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._commit = client.register_script(_COMMIT)
        self._save_plan = client.register_script(_SAVE_PLAN)
        self._finish = client.register_script(_FINISH)
        self._end = client.register_script(_END)
        self._reserve_chars = client.register_script(_RESERVE_CHARS)
        self._schedule = client.register_script(_SCHEDULE)
        self._take_fair = client.register_script(_TAKE_FAIR)
        self._release_lock = client.register_script(_RELEASE_LOCK)
        self._acquire_assembly = client.register_script(_ACQUIRE_ASSEMBLY)
        self._renew_lock = client.register_script(_RENEW_LOCK)

    @classmethod
    def from_url(cls, url: str, *, socket_timeout_s: float = 10.0) -> Ledger:
        """A ledger on its own connection pool. A front passes a short ``socket_timeout_s``:
        a paused Redis then fails its requests fast (503) instead of holding them."""
        return cls(sync_client(url, socket_timeout_s=socket_timeout_s))

    # ---------------------------------------------------------------- keys
    def key(self, job_id: str, part: str = "") -> str:
        return f"{self.prefix}job:{job_id}{':' + part if part else ''}"

    def _tenant_key(self, tenant: str) -> str:
        return f"{self.prefix}tenant:{tenant}:jobs"

    @property
    def _active_key(self) -> str:
        return f"{self.prefix}jobs:active"

    # ---------------------------------------------------------------- jobs
    def queued_chars_key(self, tenant: str) -> str:
        return f"{self.prefix}tenant:{tenant}:queued_chars"

    def queued_chars(self, tenant: str) -> int:
        """Characters of the tenant's unfinished jobs (those created under a quota)."""
        return int(cast(bytes | None, self.redis.get(self.queued_chars_key(tenant))) or 0)

    def create(
        self, tenant: str, options: JobOptions, text: str, *, max_queued_chars: int | None = None
    ) -> Job:
        """A new job in ``queued``. With ``max_queued_chars``, the tenant's unfinished jobs
        may hold at most that many characters together (:class:`QuotaExceededError` else);
        a job gives its characters back when it ends."""
        job_id = uuid.uuid4().hex
        now = time.time()
        held = 0
        if max_queued_chars is not None:
            counter = self.queued_chars_key(tenant)
            if not self._reserve_chars(keys=[counter], args=[len(text), max_queued_chars]):
                raise QuotaExceededError(
                    f"text: the tenant's unfinished jobs would hold more than "
                    f"{max_queued_chars:,} characters; wait for some to finish",
                    field="text",
                    retry_after_s=QUEUED_CHARS_RETRY_S,
                )
            held = len(text)
        try:
            self._write_job(job_id, tenant, options, text, now=now, held=held)
        except BaseException:
            if held:
                self.redis.decrby(self.queued_chars_key(tenant), held)
            raise
        job = self.get(job_id)
        assert job is not None
        return job

    def _write_job(
        self, job_id: str, tenant: str, options: JobOptions, text: str, *, now: float, held: int
    ) -> None:
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(
            self.key(job_id),
            mapping={
                "id": job_id,
                "tenant": tenant,
                "state": JobState.QUEUED.value,
                "voice": options.voice,
                "format": options.format,
                "sample_rate_hz": options.sample_rate_hz,
                "speed": options.speed,
                "callback_url": options.callback_url or "",
                "characters": len(text),
                "created_at": now,
                "updated_at": now,
                "chunks_total": 0,
                "chunks_done": 0,
                "audio_s": 0.0,
                **({"queued_chars": held} if held else {}),
            },
        )
        pipe.set(self.key(job_id, "text"), text.encode("utf-8"))
        pipe.zadd(self._tenant_key(tenant), {job_id: now})
        pipe.sadd(self._active_key, job_id)
        pipe.execute()

    def get(self, job_id: str) -> Job | None:
        raw = cast(Mapping[bytes, bytes], self.redis.hgetall(self.key(job_id)))
        if not raw:
            return None
        attempts = cast(list[bytes], self.redis.hvals(self.key(job_id, "attempts")))
        return self._job(raw, sum(int(a) for a in attempts))

    def get_for_tenant(self, tenant: str, job_id: str) -> Job:
        """The tenant's job; another tenant's job is reported exactly like a missing one."""
        job = self.get(job_id) if _plausible_id(job_id) else None
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
                self._tenant_key(tenant), high, "-inf", start=0, num=limit + 1, withscores=True
            ),
        )
        jobs = [job for raw_id, _ in ids[:limit] if (job := self.get(raw_id.decode()))]
        cursor = ids[limit - 1][1] if len(ids) > limit else None
        return jobs, cursor

    def text(self, job_id: str) -> str:
        raw = cast(bytes | None, self.redis.get(self.key(job_id, "text")))
        if raw is None:
            raise JobNotFoundError(f"job {job_id} has no text")
        return raw.decode("utf-8")

    def transition(self, job_id: str, to: JobState, *, only_from: tuple[JobState, ...]) -> bool:
        result = self._set_state(
            keys=[self.key(job_id)],
            args=[to.value, time.time(), *(s.value for s in only_from)],
        )
        if result == -1:
            raise JobNotFoundError(f"no job {job_id!r}")
        return bool(result)

    def save_plan(self, job_id: str, chunks: list[ChunkPlan]) -> bool:
        """planning → rendering with these chunks; False if the job moved on (cancelled)."""
        return bool(
            self._save_plan(
                keys=[self.key(job_id), self.key(job_id, "chunks")],
                args=[time.time(), len(chunks), *(c.to_json() for c in chunks)],
            )
        )

    def chunk(self, job_id: str, n: int) -> ChunkPlan:
        raw = cast(bytes | None, self.redis.lindex(self.key(job_id, "chunks"), n))
        if raw is None:
            raise JobNotFoundError(f"job {job_id} has no chunk {n}")
        return ChunkPlan.from_json(raw)

    def finish(
        self,
        job_id: str,
        *,
        owner: str,
        key: str,
        size_bytes: int,
        duration_s: float,
        sha256: str,
    ) -> str:
        """assembling → done, for the holder of the assembly lease only. Returns ``done``,
        ``inactive`` (cancelled or failed meanwhile) or ``fenced`` (the lease lapsed and
        another assembler may be at it: leave its file alone)."""
        outcome = self._finish(
            keys=[self.key(job_id), self._active_key, self._assembly_key(job_id)],
            args=[job_id, time.time(), key, size_bytes, duration_s, sha256, self.prefix, owner],
        )
        return outcome.decode() if isinstance(outcome, bytes) else str(outcome)

    # ---------------------------------------------------------------- assembly lease
    def _assembly_key(self, job_id: str) -> str:
        return f"{self.prefix}lock:assemble:{job_id}"

    def acquire_assembly(self, job_id: str, owner: str, ttl_s: float) -> bool:
        """Lease the job's assembly (it must be ``assembling`` and nobody else at it)."""
        keys = [self.key(job_id), self._assembly_key(job_id)]
        ttl_ms = max(1, math.ceil(ttl_s * 1000))
        return bool(self._acquire_assembly(keys=keys, args=[owner, ttl_ms]))

    def renew_assembly(self, job_id: str, owner: str, ttl_s: float) -> bool:
        ttl_ms = max(1, math.ceil(ttl_s * 1000))
        return bool(self._renew_lock(keys=[self._assembly_key(job_id)], args=[owner, ttl_ms]))

    def release_assembly(self, job_id: str, owner: str) -> None:
        self._release_lock_if_owner(self._assembly_key(job_id), owner)

    def assembly_holder(self, job_id: str) -> str | None:
        """The worker assembling the job now, if any."""
        return _s(cast(bytes | None, self.redis.get(self._assembly_key(job_id))))

    def assembly_orphaned(self, job_id: str) -> bool:
        """An assembler started and its lease lapsed without finishing (it died)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(self.key(job_id), "assembly_started")
        pipe.exists(self._assembly_key(job_id))
        started, leased = pipe.execute()
        return started is not None and not leased

    def fail(self, job_id: str, reason: str) -> bool:
        return self._end_job(job_id, JobState.FAILED, reason)

    def cancel(self, job_id: str) -> bool:
        return self._end_job(job_id, JobState.CANCELLED, "cancelled by the client")

    def _end_job(self, job_id: str, state: JobState, reason: str) -> bool:
        result = self._end(
            keys=[self.key(job_id), self._active_key],
            args=[job_id, time.time(), state.value, " ".join(reason.split())[:500], self.prefix],
        )
        if result == -1:
            raise JobNotFoundError(f"no job {job_id!r}")
        return bool(result)

    def active_jobs(self) -> list[str]:
        return sorted(m.decode() for m in cast(set[bytes], self.redis.smembers(self._active_key)))

    def active_count(self) -> int:
        """Jobs not in a final state."""
        return int(self.redis.scard(self._active_key))

    def active_by_state(self) -> dict[str, int]:
        """Jobs not in a final state, counted by state (one round trip for all of them)."""
        pipe = self.redis.pipeline(transaction=False)
        for job_id in self.active_jobs():
            pipe.hget(self.key(job_id), "state")
        counts: dict[str, int] = {}
        for raw in pipe.execute():
            state = _s(raw) or "gone"
            counts[state] = counts.get(state, 0) + 1
        return counts

    def record_error(self, job_id: str, error: str) -> None:
        """Remember the job's last error (shown when it fails for good)."""
        self.redis.hset(self.key(job_id), "last_error", " ".join(error.split())[:300])

    def last_error(self, job_id: str) -> str | None:
        return _s(cast(bytes | None, self.redis.hget(self.key(job_id), "last_error")))

    def queue_length(self, queue: str) -> int:
        """Messages waiting in a Celery queue (the broker's list lives in this Redis)."""
        return int(self.redis.llen(queue))

    def ping(self) -> None:
        """Raises if Redis does not answer."""
        self.redis.ping()

    # ---------------------------------------------------------------- chunks
    def acquire_chunk(self, job_id: str, n: int, worker: str, ttl_s: float) -> Lease:
        status, token = self._acquire(
            keys=[
                self.key(job_id),
                self.key(job_id, "done"),
                self.key(job_id, "started"),
                self.key(job_id, f"lease:{n}"),
                self.key(job_id, "fence"),
            ],
            args=[n, worker, max(1, math.ceil(ttl_s * 1000))],
        )
        return Lease(status=_s(status) or "", token=int(token))

    def renew_chunk(self, job_id: str, n: int, token: int, ttl_s: float) -> bool:
        return bool(
            self._renew(
                keys=[self.key(job_id, f"lease:{n}")],
                args=[token, max(1, math.ceil(ttl_s * 1000))],
            )
        )

    def release_chunk(self, job_id: str, n: int, token: int) -> bool:
        return bool(self._release(keys=[self.key(job_id, f"lease:{n}")], args=[token]))

    def commit_chunk(self, job_id: str, n: int, token: int, audio_s: float) -> str:
        """``committed``, ``assemble`` (this commit completed the job: assemble it, once),
        ``fenced`` (the lease was lost), ``duplicate`` or ``inactive`` (job not rendering)."""
        status, _ = self._commit(
            keys=[
                self.key(job_id),
                self.key(job_id, "done"),
                self.key(job_id, f"lease:{n}"),
                self.key(job_id, "commits"),
            ],
            args=[n, token, repr(float(audio_s)), time.time()],
        )
        return _s(status) or ""

    def commit_log(self, job_id: str) -> list[tuple[int, int, str]]:
        """Every counted commit: (chunk, fencing token, worker), in commit order."""
        entries = cast(list[bytes], self.redis.lrange(self.key(job_id, "commits"), 0, -1))
        log: list[tuple[int, int, str]] = []
        for entry in entries:
            n, token, worker = entry.decode().split("|", 2)
            log.append((int(n), int(token), worker))
        return log

    def requeue_once(self, job_id: str, what: str, hold_s: float) -> bool:
        """True at most once per ``hold_s`` for ``what``: stops the reconciler from
        re-enqueueing the same work while the first re-enqueued message still waits."""
        key = self.key(job_id, f"requeued:{what}")
        return bool(self.redis.set(key, "1", nx=True, px=max(1, math.ceil(hold_s * 1000))))

    def touch(self, job_id: str) -> None:
        """Mark progress (long assembly), so the reconciler does not think the job stalled."""
        self.redis.hset(self.key(job_id), "updated_at", time.time())

    def record_attempt(self, job_id: str, n: int) -> int:
        return int(self.redis.hincrby(self.key(job_id, "attempts"), str(n), 1))

    # ---------------------------------------------------------------- fair feed
    @property
    def _ring_keys(self) -> list[str]:
        return [f"{self.prefix}sched:ring", f"{self.prefix}sched:tenants"]

    def schedule_chunks(self, job_id: str, tenant: str, chunks: int) -> None:
        """Put the job's chunks in line behind its tenant's other waiting chunks."""
        self._schedule(
            keys=[f"{self.prefix}sched:tenant:{tenant}", *self._ring_keys],
            args=[job_id, chunks, tenant],
        )

    def take_fair(self, count: int) -> list[tuple[str, int]]:
        """Up to ``count`` waiting chunks, one per tenant in turn (round robin); each is
        marked dispatched. Chunks of jobs no longer rendering are dropped on the way."""
        refs = cast(list[bytes], self._take_fair(keys=self._ring_keys, args=[count, self.prefix]))
        taken = []
        for ref in refs:
            job_id, _, n = ref.decode().rpartition(":")
            taken.append((job_id, int(n)))
        return taken

    def waiting_chunks(self, tenant: str) -> int:
        """Chunks of the tenant's jobs waiting for their turn in the render queue."""
        return int(self.redis.llen(f"{self.prefix}sched:tenant:{tenant}"))

    def dispatched_chunks(self, job_id: str) -> set[int]:
        """Chunks handed to the render queue (by the fair feed)."""
        members = cast(set[bytes], self.redis.smembers(self.key(job_id, "dispatched")))
        return {int(m) for m in members}

    def done_chunks(self, job_id: str) -> set[int]:
        return {int(m) for m in cast(set[bytes], self.redis.smembers(self.key(job_id, "done")))}

    def unfinished_chunks(self, job_id: str) -> list[int]:
        job = self.get(job_id)
        if job is None:
            return []
        done = self.done_chunks(job_id)
        return [n for n in range(job.chunks_total) if n not in done]

    def orphaned_chunks(self, job_id: str) -> list[int]:
        """Chunks a worker started whose lease lapsed without a commit (the worker died)."""
        started = {
            int(m) for m in cast(set[bytes], self.redis.smembers(self.key(job_id, "started")))
        }
        candidates = sorted(started - self.done_chunks(job_id))
        if not candidates:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for n in candidates:
            pipe.exists(self.key(job_id, f"lease:{n}"))
        leased = pipe.execute()
        return [n for n, held in zip(candidates, leased, strict=True) if not held]

    def lease_holder(self, job_id: str, n: int) -> str | None:
        held = _s(cast(bytes | None, self.redis.get(self.key(job_id, f"lease:{n}"))))
        return held.split("|", 1)[1] if held else None

    def acquire_lock(self, name: str, owner: str, ttl_s: float) -> bool:
        """A short named lock (assembly, reconciler turns)."""
        return bool(
            self.redis.set(f"{self.prefix}lock:{name}", owner, nx=True, px=math.ceil(ttl_s * 1000))
        )

    def release_lock(self, name: str, owner: str) -> None:
        self._release_lock_if_owner(f"{self.prefix}lock:{name}", owner)

    def _release_lock_if_owner(self, key: str, owner: str) -> None:
        self._release_lock(keys=[key], args=[owner])

    def expired_jobs(self, finished_before: float, limit: int) -> list[str]:
        """Final jobs that ended before ``finished_before`` (unix s), oldest first."""
        ids = cast(
            list[bytes],
            self.redis.zrangebyscore(
                f"{self.prefix}jobs:finished", "-inf", finished_before, start=0, num=limit
            ),
        )
        return [i.decode() for i in ids]

    def delete_job(self, job_id: str, tenant: str) -> None:
        """Forget a final job entirely (retention): its record, bookkeeping and listings."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(
            self.key(job_id),
            *(
                self.key(job_id, part)
                for part in ("text", "chunks", "started", "fence", "dispatched", "done",
                             "commits", "attempts")
            ),
        )  # fmt: skip
        pipe.zrem(self._tenant_key(tenant), job_id)
        pipe.zrem(f"{self.prefix}jobs:finished", job_id)
        pipe.execute()

    def delete_job_data(self, job_id: str) -> None:
        """Drop the bulky per-job keys once a job is final (text, plan, chunk bookkeeping)."""
        self.redis.delete(
            self.key(job_id, "text"),
            self.key(job_id, "chunks"),
            self.key(job_id, "started"),
            self.key(job_id, "fence"),
            self.key(job_id, "dispatched"),
        )

    # ---------------------------------------------------------------- decoding
    @staticmethod
    def _job(raw: Mapping[bytes, bytes], attempts: int) -> Job:
        def get(name: str) -> str | None:
            return _s(raw.get(name.encode()))

        def number(name: str) -> float | None:
            return _f(raw.get(name.encode()))

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
            ),
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


def _plausible_id(job_id: str) -> bool:
    return len(job_id) == 32 and all(c in "0123456789abcdef" for c in job_id)


def job_summary(job: Job, *, now: float | None = None) -> dict[str, Any]:
    """The job as the API shows it (never the text)."""
    return {
        "id": job.id,
        "state": job.state.value,
        "voice": job.options.voice,
        "format": job.options.format,
        "sample_rate_hz": job.options.sample_rate_hz,
        "speed": job.options.speed,
        "characters": job.characters,
        "chunks_total": job.chunks_total,
        "chunks_done": job.chunks_done,
        "progress": round(job.progress, 4),
        "audio_seconds_rendered": round(job.audio_s, 3),
        "eta_s": _round(job.eta_s(now)),
        "attempts": job.attempts,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "output": (
            {
                "size_bytes": job.size_bytes,
                "duration_s": job.duration_s,
                "sha256": job.sha256,
            }
            if job.state is JobState.DONE
            else None
        ),
        "error": job.error,
        "callback_url": job.options.callback_url,
    }


def _round(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None
