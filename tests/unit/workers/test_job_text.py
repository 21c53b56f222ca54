"""The batch lane plans what the engine will be given: normalized, unless the job says not."""

from __future__ import annotations

from voicelane.core.ledger import ChunkPlan
from voicelane.core.settings import ServiceSettings
from voicelane.core.speech_text import TextOptions
from voicelane.workers.jobs import plan_chunks


def _texts(chunks: list[ChunkPlan]) -> list[str]:
    return [text for chunk in chunks for text in chunk.texts]


def test_a_job_plans_normalized_text_by_default() -> None:
    settings = ServiceSettings(engine="chattts")
    texts = _texts(plan_chunks("It costs $5 at 9:05.", settings))
    assert texts == ["It costs five dollars at nine oh five."]


def test_normalize_false_plans_the_text_as_written() -> None:
    settings = ServiceSettings(engine="espeak")
    texts = _texts(plan_chunks("It costs $5.", settings, TextOptions(normalize=False)))
    assert texts == ["It costs $5."]


def test_chunk_plans_without_breaks_keep_their_old_form() -> None:
    plan = plan_chunks("One. Two.", ServiceSettings())[0]
    assert "pauses_ms" not in plan.to_json()
    assert ChunkPlan.from_json(plan.to_json()) == plan
