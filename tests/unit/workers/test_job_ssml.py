"""The batch lane keeps what SSML asks of the audio: each segment's break and voicing go into
the chunk plan (stored as JSON in the ledger) and come back for the renderer; plans stored
before SSML read as plain."""

from __future__ import annotations

import dataclasses
import json

from voicelane.core.ledger import ChunkPlan
from voicelane.core.settings import ServiceSettings
from voicelane.core.speech_text import PLAIN, Voicing, prepare_text
from voicelane.core.text_profiles import ESPEAK
from voicelane.workers.jobs import chunks_of, segments_of

TEXT = " ".join(f"Sentence number {n} is here." for n in range(12))


def test_breaks_and_voicings_travel_through_the_plan() -> None:
    segments = list(prepare_text(TEXT, profile=ESPEAK).segments)
    segments[1] = dataclasses.replace(segments[1], pause_after_ms=700)
    segments[2] = dataclasses.replace(
        segments[2], voicing=Voicing(voice="en-gb", rate=0.8, volume_db=-3.0, pitch_semitones=2)
    )
    chunks = chunks_of(segments, ServiceSettings(chunk_target_audio_s=3))
    assert len(chunks) > 2
    stored = [ChunkPlan.from_json(chunk.to_json()) for chunk in chunks]
    assert stored == chunks
    again = [segment for chunk in stored for segment in segments_of(chunk)]
    assert [s.text for s in again] == [s.text for s in segments]
    assert [s.pause_after_ms for s in again] == [s.pause_after_ms for s in segments]
    assert [s.voicing for s in again] == [s.voicing for s in segments]
    assert [s.paragraph_end for s in again] == [s.paragraph_end for s in segments]


def test_a_chunk_after_a_break_knows_it() -> None:
    segments = list(prepare_text(TEXT, profile=ESPEAK).segments)
    settings = ServiceSettings(chunk_target_audio_s=3)
    first_size = len(chunks_of(segments, settings)[0].texts)
    # A break on the first chunk's last segment: the next chunk cuts its leading silence.
    last = first_size - 1
    segments[last] = dataclasses.replace(segments[last], pause_after_ms=300)
    chunks = chunks_of(segments, settings)
    assert chunks[0].pauses_ms[-1] == 300
    assert [c.after_break for c in chunks] == [False, True] + [False] * (len(chunks) - 2)


def test_plans_stored_before_ssml_read_as_plain() -> None:
    old = json.dumps(
        {"texts": ["One.", "Two."], "paragraph_ends": [False, True], "start": 0, "end": 9,
         "last": True}
    )  # fmt: skip
    plan = ChunkPlan.from_json(old)
    assert (plan.pauses_ms, plan.voicings, plan.after_break) == ((), (), False)
    assert [s.voicing for s in segments_of(plan)] == [PLAIN, PLAIN]
    assert [s.pause_after_ms for s in segments_of(plan)] == [None, None]
    assert json.loads(plan.to_json()) == json.loads(old)
