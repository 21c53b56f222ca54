"""Every Redis key of the batch lane, in one table: one :class:`Family` per kind of key.

A family names its key pattern, its Redis type, what it holds, how long it lives and who
writes it. The ledger's modules build every key they touch from these families — Lua scripts
included: a script gets its keys in ``KEYS``, or, where it must build one from a value it
reads (the fair feed's tenants, a job's tenant), the family's :meth:`Family.around` parts in
``ARGV``. ``tests/integration/test_ledger_keys.py`` runs jobs through their whole life and
checks that every key in Redis belongs to a family here, with that family's type and TTL,
and that every family was seen.

All keys start with :data:`PREFIX` except Celery's queue lists (Celery names them; the
ledger only reads their length). The real-time lane's keys (``vl:rt:...``, ``vl:engine:...``)
are :mod:`voicelane.core.lane.keys`'s, not in this table.
"""

from __future__ import annotations

import enum
import re
import string
from dataclasses import dataclass, field
from typing import Literal

PREFIX = "vl:"

RedisType = Literal["string", "hash", "list", "set", "zset"]

PLACEHOLDERS = {
    "job_id": r"[0-9a-f]{32}",
    "n": r"\d+",
    "tenant": r"[^:]+",
    "what": r"plan|assemble|chunk:\d+",
    "queue": r"[a-z]+(?:\.[a-z]+)?(?:\x06\x16[369])?",
    "engine": r"[a-z]+",
    "sha256": r"[0-9a-f]{64}",
}
"""What each placeholder of a pattern may hold (job ids are uuid4 hex; chunk numbers count
from 0; a tenant has no colon; a requeue hold is for ``plan``, ``assemble`` or ``chunk:{n}``;
a voice clip is named by its SHA-256; a Celery queue's lower-priority lists end in kombu's
separator and the step, :mod:`voicelane.core.ledger.queues`)."""


class Lifetime(enum.StrEnum):
    """How long a key lives — what :mod:`voicelane.core.ledger.retention` deletes, and when."""

    TTL = "ttl"
    """It expires on its own (a lease, a lock, a hold, a token bucket)."""
    CLEANUP = "cleanup"
    """A job's bulky or in-flight data: deleted by the ``cleanup`` task once the job is final
    (and by retention, if cleanup never ran)."""
    RETENTION = "retention"
    """A job's record and history: deleted when the job is forgotten (``job_retention_s``)."""
    SHARED = "shared"
    """Not one job's: its members come and go; Redis drops it when it is empty."""
    KEPT = "kept"
    """A tenant's own data (its pronunciation lexicons, its voices): no TTL, untouched by
    cleanup and retention; it lives until the tenant deletes it (Redis drops a hash when it
    is empty)."""


@dataclass(frozen=True, slots=True)
class Family:
    """One kind of key: its pattern (``{placeholders}``), Redis type, contents, lifetime and
    writer. :meth:`key` builds a key; :meth:`matches` recognises one."""

    pattern: str
    type: RedisType
    contents: str
    lifetime: Lifetime
    written_by: str
    placeholders: tuple[str, ...] = field(init=False)
    regex: re.Pattern[str] = field(init=False)

    def __post_init__(self) -> None:
        names = tuple(name for _, name, _, _ in string.Formatter().parse(self.pattern) if name)
        regex = "".join(
            re.escape(text) + (f"(?:{PLACEHOLDERS[name]})" if name else "")
            for text, name, _, _ in string.Formatter().parse(self.pattern)
        )
        object.__setattr__(self, "placeholders", names)
        object.__setattr__(self, "regex", re.compile(regex))

    @property
    def prefixed(self) -> bool:
        return self.pattern.startswith(PREFIX)

    def key(self, *values: str | int) -> str:
        """The key for these placeholder values, in the pattern's order."""
        if len(values) != len(self.placeholders):
            raise TypeError(f"{self.pattern} takes {len(self.placeholders)} values")
        return self.pattern.format(**dict(zip(self.placeholders, map(str, values), strict=True)))

    def around(self, *leading: str | int) -> tuple[str, str]:
        """The text before and after the pattern's last placeholder, the ones before it
        filled with ``leading`` (for a Lua script that builds the key from a value it reads:
        ``head .. value .. tail``)."""
        if len(self.placeholders) != len(leading) + 1:
            raise TypeError(f"{self.pattern} takes {len(self.placeholders) - 1} leading values")
        head, _, tail = self.key(*leading, "\x00").partition("\x00")
        return head, tail

    def matches(self, key: str) -> bool:
        return self.regex.fullmatch(key) is not None


# ---- one job ---------------------------------------------------------------------------------

JOB = Family(
    PREFIX + "job:{job_id}",
    "hash",
    "the job: id, tenant, state, options (voice, engine, speaker, requested_voice, format, "
    "sample_rate_hz, speed, callback_url), "
    "characters, chunks_total/chunks_done, audio_s, timestamps, output (output_key, size_bytes, "
    "duration_s, sha256), error, last_error, assembly_started, queued_chars (what it holds of "
    "its tenant's quota until it ends), book (the document: chapters, metadata, cover key), "
    "chapter_chunks, chapter_times, outputs (subtitles and chapter files)",
    Lifetime.RETENTION,
    "jobs.py (create, transitions, fail/cancel), chunks.py (commit: progress), assembly.py "
    "(acquire marks assembly_started, finish)",
)
JOB_TEXT = Family(
    PREFIX + "job:{job_id}:text",
    "string",
    "the submitted text, UTF-8 (never in a task argument, a log line or Flower)",
    Lifetime.CLEANUP,
    "jobs.py (create)",
)
JOB_PLAN = Family(
    PREFIX + "job:{job_id}:chunks",
    "list",
    "the chunk plans, one JSON ChunkPlan per chunk, in order",
    Lifetime.CLEANUP,
    "jobs.py (save_plan)",
)
CHUNKS_STARTED = Family(
    PREFIX + "job:{job_id}:started",
    "set",
    "chunk numbers ever leased (an orphan is started, not leased, not done)",
    Lifetime.CLEANUP,
    "chunks.py (acquire)",
)
CHUNKS_DONE = Family(
    PREFIX + "job:{job_id}:done",
    "set",
    "chunk numbers committed (a set: a chunk never counts twice)",
    Lifetime.RETENTION,
    "chunks.py (commit)",
)
CHUNK_LEASE = Family(
    PREFIX + "job:{job_id}:lease:{n}",
    "string",
    "the lease of chunk n, '{token}|{worker}' (a lock of locks.py); TTL lease_ttl_s, renewed "
    "by the worker's lease keeper, deleted by its commit or release",
    Lifetime.TTL,
    "chunks.py (acquire, renew, release, commit)",
)
FENCE = Family(
    PREFIX + "job:{job_id}:fence",
    "string",
    "the job's fencing-token counter (INCR on every chunk lease)",
    Lifetime.CLEANUP,
    "chunks.py (acquire)",
)
ATTEMPTS = Family(
    PREFIX + "job:{job_id}:attempts",
    "hash",
    "chunk n -> attempts so far (a job's attempts are their sum)",
    Lifetime.RETENTION,
    "chunks.py (record_attempt, forgive_attempt)",
)
COMMITS = Family(
    PREFIX + "job:{job_id}:commits",
    "list",
    "every counted commit, '{n}|{token}|{worker}', in commit order (the evidence that each "
    "chunk counted exactly once; read by the chaos tests and the soak benchmark)",
    Lifetime.RETENTION,
    "chunks.py (commit)",
)
CHUNK_PARTS = Family(
    PREFIX + "job:{job_id}:parts",
    "hash",
    "chunk n -> the fencing token of the attempt whose commit counted: its part is stored "
    "under that attempt's own key (parts/{n:06d}.{token}.s16 and .json), which assembly reads",
    Lifetime.CLEANUP,
    "chunks.py (commit)",
)
DISPATCHED = Family(
    PREFIX + "job:{job_id}:dispatched",
    "set",
    "chunk numbers the fair feed handed to the render queue",
    Lifetime.CLEANUP,
    "feed.py (take)",
)
REQUEUE_HOLD = Family(
    PREFIX + "job:{job_id}:requeued:{what}",
    "string",
    "'1' while the reconciler's re-enqueued message for what (plan, assemble, chunk:n) may "
    "still wait in its queue; TTL the hold (3 x max(lease_ttl_s, reconcile_interval_s), or "
    "stall_timeout_s for plan)",
    Lifetime.TTL,
    "locks.py (requeue_once, for the reconciler)",
)
ASSEMBLY_LOCK = Family(
    PREFIX + "lock:assemble:{job_id}",
    "string",
    "the worker assembling the job (a lock of locks.py); TTL lease_ttl_s, renewed by the "
    "lease keeper, deleted by finish or release",
    Lifetime.TTL,
    "assembly.py (acquire, renew, release, finish)",
)

# ---- tenants -------------------------------------------------------------------------------

TENANT_JOBS = Family(
    PREFIX + "tenant:{tenant}:jobs",
    "zset",
    "the tenant's job ids by creation time (unix s): its listing, newest first",
    Lifetime.SHARED,
    "jobs.py (create), retention.py (forget)",
)
QUEUED_CHARS = Family(
    PREFIX + "tenant:{tenant}:queued_chars",
    "string",
    "characters of the tenant's unfinished jobs created under a quota (deleted at 0)",
    Lifetime.SHARED,
    "jobs.py (create: create_job.lua reserves), ending.lua (a job that ends gives back its own)",
)
STORED_BYTES = Family(
    PREFIX + "tenant:{tenant}:stored_bytes",
    "string",
    "bytes of the tenant's finished outputs (audio files of done jobs) until retention",
    Lifetime.SHARED,
    "finish_job.lua (a done job adds its size), retention.py (forget takes it back)",
)
RATE_BUCKET = Family(
    PREFIX + "quota:rate:{tenant}",
    "hash",
    "the tenant's request token bucket: tokens, ts (ms, Redis's clock); TTL the time to "
    "refill plus 1 s",
    Lifetime.TTL,
    "voicelane.core.quotas.RequestRate (every front, both lanes: not the ledger's)",
)

LEXICONS = Family(
    PREFIX + "tenant:{tenant}:lexicons",
    "hash",
    "the tenant's pronunciation lexicons: name -> its entries (JSON, Lexicon.to_json)",
    Lifetime.KEPT,
    "lexicons.py (put, delete)",
)
LEXICON_INFO = Family(
    PREFIX + "tenant:{tenant}:lexicon_info",
    "hash",
    "name -> '{entries, size_bytes, updated_at}' (JSON) of each of the tenant's lexicons: its "
    "listing and its bounds, read without the entries",
    Lifetime.KEPT,
    "lexicons.py (put, delete)",
)
LEXICON_DEFAULT = Family(
    PREFIX + "tenant:{tenant}:lexicon_default",
    "string",
    "the name of the tenant's default lexicon (what a request that names none applies)",
    Lifetime.KEPT,
    "lexicons.py (set_default, clear_default, delete)",
)

VOICES = Family(
    PREFIX + "tenant:{tenant}:voices",
    "hash",
    "the tenant's voices: name -> its record (JSON, voicelane.core.voices.TenantVoice: engine, "
    "kind, seed / spk_emb / clip's sha256, transcript, duration / mix as written and "
    "flattened, description, created_at)",
    Lifetime.KEPT,
    "voices.py (create, delete)",
)
VOICE_CLIP = Family(
    PREFIX + "tenant:{tenant}:voice_clip:{sha256}",
    "string",
    "a clip voice's reference clip (Ogg Opus, mono, 24 kHz: voicelane.core.voice_clips) by its "
    "SHA-256; deleted with the last of the tenant's voices that uses it",
    Lifetime.KEPT,
    "voices.py (create, delete)",
)

# ---- every job -----------------------------------------------------------------------------

ACTIVE_JOBS = Family(
    PREFIX + "jobs:active",
    "set",
    "ids of the jobs not in a final state (the reconciler's work list)",
    Lifetime.SHARED,
    "jobs.py (create), ending.lua (every final state)",
)
FINISHED_JOBS = Family(
    PREFIX + "jobs:finished",
    "zset",
    "ids of final jobs by when they ended (unix s): retention's index",
    Lifetime.SHARED,
    "ending.lua (every final state), retention.py (forget)",
)
RECONCILER_LOCK = Family(
    PREFIX + "lock:reconciler",
    "string",
    "the CPU worker taking this reconciler turn (a lock of locks.py); TTL "
    "reconcile_interval_s, never released: one turn per interval",
    Lifetime.TTL,
    "locks.py (reconciler_turn)",
)

# ---- the fair feed -------------------------------------------------------------------------

FEED_RING = Family(
    PREFIX + "sched:{engine}:ring",
    "list",
    "tenants with chunks waiting for one engine, in turn order (rotated by every take)",
    Lifetime.SHARED,
    "jobs.py (save_plan), feed.py (take)",
)
FEED_TENANTS = Family(
    PREFIX + "sched:{engine}:tenants",
    "set",
    "the ring's members (so a tenant joins the ring once)",
    Lifetime.SHARED,
    "jobs.py (save_plan), feed.py (take)",
)
FEED_LINE = Family(
    PREFIX + "sched:{engine}:tenant:{tenant}",
    "list",
    "the tenant's waiting chunks for one engine, '{job_id}:{n}', in order",
    Lifetime.SHARED,
    "jobs.py (save_plan), feed.py (take)",
)
FEED_QUEUED = Family(
    PREFIX + "sched:{engine}:queued",
    "hash",
    "tenant -> its chunks in the engine's render queue not yet started (a scheduling hint: "
    "the rank, and so the priority, of its next one)",
    Lifetime.SHARED,
    "feed.py (take, started, forget_queued)",
)

# ---- Celery's ------------------------------------------------------------------------------

CELERY_QUEUE = Family(
    "{queue}",
    "list",
    "a Celery queue's waiting messages (voicelane.core.batch_lane.QUEUES), and of its "
    "priorities 3, 6 and 9 ('{queue}\\x06\\x16{priority}'); the ledger only reads their lengths",
    Lifetime.SHARED,
    "Celery (kombu's Redis transport)",
)

FAMILIES: tuple[Family, ...] = (
    JOB,
    JOB_TEXT,
    JOB_PLAN,
    CHUNKS_STARTED,
    CHUNKS_DONE,
    CHUNK_LEASE,
    FENCE,
    ATTEMPTS,
    COMMITS,
    CHUNK_PARTS,
    DISPATCHED,
    REQUEUE_HOLD,
    ASSEMBLY_LOCK,
    TENANT_JOBS,
    QUEUED_CHARS,
    STORED_BYTES,
    RATE_BUCKET,
    LEXICONS,
    LEXICON_INFO,
    LEXICON_DEFAULT,
    VOICES,
    VOICE_CLIP,
    ACTIVE_JOBS,
    FINISHED_JOBS,
    RECONCILER_LOCK,
    FEED_RING,
    FEED_TENANTS,
    FEED_LINE,
    FEED_QUEUED,
    CELERY_QUEUE,
)
"""The whole table."""


def job_keys(job_id: str, *lifetimes: Lifetime) -> list[str]:
    """The job's keys of these lifetimes: one per family whose only placeholder is the job
    id (a lease or hold names more than the job, and expires on its own)."""
    return [
        family.key(job_id)
        for family in FAMILIES
        if family.placeholders == ("job_id",) and family.lifetime in lifetimes
    ]
