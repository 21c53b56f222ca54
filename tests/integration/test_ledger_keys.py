"""The key table (``voicelane.core.ledger.keys``) against what the code really writes.

Jobs live their whole life through the production code — a front's rate bucket, a tenant's
pronunciation lexicons and its default, a tenant's voices and a reference clip, submit (under
the queued-characters quota), planning into the fair feed, a worker that dies holding a chunk
lease, the reconciler, rendering and commits, an assembler that dies holding the assembly
lock, assembly, cancel, cleanup and the retention sweep — on a real redis-server.
Redis is scanned after every step: every key must belong to exactly one family of the table,
with that family's type and TTL, and every family must be seen (or be listed below as out of
this flow's reach, with the reason).
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import redis

from tests.support.jobs import espeak_context, narrow
from tests.support.stack import wait_for
from voicelane.common.audio import AudioFormat, open_writer
from voicelane.core.batch_lane import QUEUES, BatchClient
from voicelane.core.ledger import JobOptions, JobState, Ledger
from voicelane.core.ledger.keys import (
    CELERY_QUEUE,
    FAMILIES,
    PREFIX,
    Family,
    Lifetime,
)
from voicelane.core.lexicon import Lexicon, LexiconEntry
from voicelane.core.quotas import RequestRate
from voicelane.core.redis_clients import async_client
from voicelane.core.voice_clips import prepare_clip
from voicelane.core.voices import TenantVoice, VoiceClip
from voicelane.workers.jobs import (
    JobContext,
    assemble_job,
    cleanup_job,
    plan_job,
    render_chunk,
    sweep_expired_jobs,
)
from voicelane.workers.reconciler import reconcile_once

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = JobOptions(voice="auto", format="wav", sample_rate_hz=16000)
TEXT = "First sentence here. Second one follows.\n\nA new paragraph starts. 它也有中文。" * 2
UNREACHABLE = {
    CELERY_QUEUE: "Celery's own lists, written by kombu's transport; the ledger only reads "
    "their length, and this flow enqueues through a recorder",
}


@dataclass
class Scans:
    """What every scan of Redis found, and what did not fit the table."""

    client: redis.Redis
    seen: set[Family] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    def scan(self, step: str) -> set[str]:
        found = set()
        for raw in self.client.scan_iter(count=1000):
            key = raw.decode()
            found.add(key)
            families = [family for family in FAMILIES if family.matches(key)]
            if len(families) != 1:
                self.problems.append(f"{step}: {key} matches {len(families)} families")
                continue
            [family] = families
            pipe = self.client.pipeline(transaction=True)
            pipe.type(key)
            pipe.pttl(key)
            kind, ttl_ms = pipe.execute()
            if ttl_ms == -2:  # expired since the scan found it
                continue
            self.seen.add(family)
            if (kind := kind.decode()) != family.type:
                self.problems.append(f"{step}: {key} is a {kind}, its family says {family.type}")
            if (ttl_ms > 0) != (family.lifetime is Lifetime.TTL):
                self.problems.append(f"{step}: {key} PTTL {ttl_ms}, family {family.lifetime}")
        return found


@pytest.fixture
def ctx(redis_url: str, tmp_path: Path) -> Iterator[JobContext]:
    with espeak_context(redis_url, tmp_path, chunk_target_audio_s=3, render_queue_target=2) as c:
        yield c


def take_a_rate_token(redis_url: str) -> None:
    async def take() -> None:
        client = async_client(redis_url, socket_timeout_s=5)
        try:
            await RequestRate(client, per_s=20, burst=40).take("acme")
        finally:
            await client.aclose()

    asyncio.run(take())


def create_voices(ledger: Ledger) -> None:
    """A tenant's seed voice and clip voice (its clip stored apart)."""
    tone = np.sin(np.arange(4 * 16_000) * (2 * np.pi * 150 / 16_000)).astype(np.float32)
    target = io.BytesIO()
    with open_writer(target, AudioFormat.WAV, 16_000) as writer:
        writer.write(tone * np.float32(0.3))
    clip = prepare_clip(target.getvalue(), min_s=3, max_s=30, max_bytes=512 * 1024)
    info = VoiceClip(clip.sha256, "A tone.", clip.duration_s, len(clip.audio))
    ledger.voices.create("acme", TenantVoice("seedy", "chattts", "seed", seed=7), max_voices=4)
    clipped = TenantVoice("clipped", "chattts", "clip", clip=info)
    ledger.voices.create("acme", clipped, max_voices=4, clip_audio=clip.audio)


def test_every_key_in_redis_is_in_the_key_table_and_every_family_is_written(
    ctx: JobContext, redis_url: str
) -> None:
    ledger = ctx.ledger
    scans = Scans(ledger.redis)
    fronts = BatchClient(ledger, ctx.enqueue)

    take_a_rate_token(redis_url)  # a front's request-rate bucket
    names = Lexicon((LexiconEntry(("Nguyen",), alias="win"),))
    ledger.lexicons.put("acme", "names", names)  # a tenant's lexicons, and its default
    ledger.lexicons.set_default("acme", "names")
    assert ledger.lexicons.resolve("acme", None) == (names, ("names",))
    create_voices(ledger)  # a tenant's voices, and a reference clip
    job_id = fronts.submit("acme", OPTIONS, TEXT, max_queued_chars=100_000).id
    other = fronts.submit("other", OPTIONS, TEXT, max_queued_chars=100_000).id
    scans.scan("submitted")

    total = plan_job(ctx, job_id)  # two chunks dispatched, the rest in the tenant's line
    assert total > 2 and plan_job(ctx, other) > 2
    scans.scan("planned")

    dead = ledger.chunks.acquire(job_id, 0, "dead@test", ttl_s=0.3)  # a worker that dies
    assert dead.status == "acquired"
    scans.scan("leased")
    wait_for(lambda: ledger.chunks.orphaned(job_id) == [0], 10, "the lease to lapse")
    assert reconcile_once(ctx) == 1  # and holds off re-enqueueing it again
    scans.scan("reconciled a chunk")

    outcomes = [render_chunk(ctx, job_id, n) for n in range(total)]
    assert outcomes[-1] == "assemble"
    scans.scan("rendered")

    assert ledger.assembly.acquire(job_id, "dead@test", ttl_s=0.3)  # an assembler that dies
    scans.scan("assembling")
    wait_for(lambda: ledger.assembly.orphaned(job_id), 10, "the assembly lock to lapse")
    assert reconcile_once(ctx) == 1
    assert ledger.locks.reconciler_turn("w@test", 30)
    scans.scan("reconciled the assembly")
    assert assemble_job(ctx, job_id)
    scans.scan("done")

    assert fronts.cancel("other", other).state is JobState.CANCELLED
    assert cleanup_job(ctx, job_id) > 0 and cleanup_job(ctx, other) == 0
    scans.scan("cleaned up")
    forgotten = sweep_expired_jobs(narrow(ctx, job_retention_s=1), now=time.time() + 60)
    assert forgotten == 2
    left = scans.scan("forgotten")
    assert ledger.lexicons.list("acme").default == "names"  # kept: retention leaves them be
    assert [v.name for v in ledger.voices.list("acme")] == ["clipped", "seedy"]

    assert not scans.problems, "\n".join(scans.problems)
    unseen = set(FAMILIES) - scans.seen - set(UNREACHABLE)
    assert not unseen, [family.pattern for family in unseen]
    assert not scans.seen & set(UNREACHABLE), "a family listed unreachable was written"
    # Once forgotten, nothing of either job is left but keys that expire on their own.
    for key in left:
        if job_id in key or other in key:
            family = next(f for f in FAMILIES if f.matches(key))
            assert family.lifetime is Lifetime.TTL, key


def test_the_table_describes_each_family_and_the_docs_list_them() -> None:
    patterns = [family.pattern for family in FAMILIES]
    assert len(set(patterns)) == len(patterns)
    docs = (ROOT / "docs" / "batch-lane.md").read_text()
    for family in FAMILIES:
        assert family.contents and family.written_by, family.pattern
        assert family.prefixed or family is CELERY_QUEUE, family.pattern
        row = f"| `{family.pattern.removeprefix(PREFIX)}` | {family.type} |"
        assert row in docs, f"docs/batch-lane.md has no row {row}"
    assert all(CELERY_QUEUE.matches(queue) for queue in QUEUES)


def test_a_key_is_built_and_recognised_by_its_family() -> None:
    [lease] = [f for f in FAMILIES if f.pattern.endswith(":lease:{n}")]
    job_id = "0123456789abcdef0123456789abcdef"
    key = lease.key(job_id, 7)
    assert key == f"{PREFIX}job:{job_id}:lease:7"
    assert lease.matches(key) and not lease.matches(key + ":x")
    with pytest.raises(TypeError):
        lease.key(job_id)
    [line] = [f for f in FAMILIES if f.pattern.endswith("sched:{engine}:tenant:{tenant}")]
    head, tail = line.around("piper")
    assert head + "acme" + tail == line.key("piper", "acme")
    with pytest.raises(TypeError):
        line.around()
