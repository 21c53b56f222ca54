"""SSML's audio in the batch lane: a job whose text has breaks (and a voicing) is planned,
rendered chunk by chunk and assembled; the breaks are measured in the decoded output, across
chunk boundaries too. (The SSML reader is not involved: the job's prepared text is given.)"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.jobs import espeak_context
from tests.support.speech_audio import gaps_ms, rms, sound_runs
from voicelane.common.audio import decode_to_pcm
from voicelane.core.ledger import JobOptions, JobState
from voicelane.core.speech_text import PreparedText, TextOptions, Voicing, prepare_text
from voicelane.core.storage import LocalStorage
from voicelane.core.text_profiles import ESPEAK
from voicelane.workers import jobs
from voicelane.workers.jobs import JobContext, assemble_job, plan_job, render_chunk

pytestmark = pytest.mark.integration

BREAKS_MS = [200, 700, 1500]
TEXT = " ".join(f"Sentence {word} is here." for word in ("one", "two", "three", "four", "five",
                                                          "six", "seven"))  # fmt: skip


@pytest.fixture
def ctx(redis_url: str, tmp_path: Path) -> Iterator[JobContext]:
    with espeak_context(redis_url, tmp_path, chunk_target_audio_s=2) as context:
        yield context


def with_breaks(text: str) -> PreparedText:
    base = prepare_text(text, profile=ESPEAK)
    segments = [
        dataclasses.replace(s, pause_after_ms=BREAKS_MS[i % 3])
        for i, s in enumerate(base.segments[:-1])
    ]
    last = dataclasses.replace(base.segments[-1], voicing=Voicing(volume_db=6.0))
    return dataclasses.replace(base, segments=(*segments, last))


def run_job(ctx: JobContext, text: str) -> str:
    options = JobOptions(voice="auto", format="wav", sample_rate_hz=16000)
    job_id = ctx.ledger.jobs.create("acme", options, text).id
    total = plan_job(ctx, job_id)
    assert total > 2  # the breaks fall inside chunks and between them
    for n in range(total):
        render_chunk(ctx, job_id, n)
    assert assemble_job(ctx, job_id)
    job = ctx.ledger.jobs.get(job_id)
    assert job is not None and job.state is JobState.DONE and job.output_key is not None
    assert isinstance(ctx.storage, LocalStorage)
    return str(ctx.storage.path_for(job.output_key))


def test_a_jobs_breaks_are_their_exact_silences(
    ctx: JobContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared = with_breaks(TEXT)

    def prepare(
        text: str,
        settings: object,
        options: TextOptions = TextOptions(),  # noqa: B008
        *,
        engine: str | None = None,
    ) -> PreparedText:
        return prepared

    monkeypatch.setattr(jobs, "prepare_job_text", prepare)
    chunks = jobs.chunks_of(prepared.segments, ctx.settings)
    assert any(c.after_break for c in chunks)  # a break at a chunk boundary is covered
    pcm, rate = decode_to_pcm(run_job(ctx, TEXT))
    runs = sound_runs(pcm, rate, min_gap_ms=150)
    gaps = gaps_ms(runs)
    expected = [BREAKS_MS[i % 3] for i in range(len(prepared.segments) - 1)]
    assert len(gaps) == len(expected), (gaps, expected)
    for gap, want in zip(gaps, expected, strict=True):
        assert abs(gap - want) <= 50, (gaps, expected)
    # The last sentence's +6 dB: about twice the RMS of the one before it.
    start = int(runs[-1][0] * rate / 1000)
    before = pcm[int(runs[-2][0] * rate / 1000) : int(runs[-2][1] * rate / 1000)]
    assert 1.6 < rms(pcm[start:]) / rms(before) < 2.4
