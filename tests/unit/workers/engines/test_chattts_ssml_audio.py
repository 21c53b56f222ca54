"""SSML's audio side on ChatTTS (the tiny random-weight checkpoint, CPU): a break is exactly
its silence, and an engine without word times gives sentence timings. What the checkpoint
says is noise, but loud noise: its edges stand out from the break's silence. (Its sampling
is unseeded, so two renders differ: gain and rate are measured on espeak, and the renderer
applies them alike to any engine.)"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.workers.engines.conftest import require_chattts_extra

require_chattts_extra()


from tests.support.chattts_checkpoint import Checkpoint  # noqa: E402
from tests.support.speech_audio import longest_silence_ms, render_plan  # noqa: E402
from voicelane.core.settings import ChatTTSSettings, EmbeddedSettings  # noqa: E402
from voicelane.core.speech_text import PreparedText, prepare_text  # noqa: E402
from voicelane.core.text_profiles import CHATTTS  # noqa: E402
from voicelane.workers.engines.chattts import ChatTTSEngine  # noqa: E402
from voicelane.workers.render import EmbeddedRenderer  # noqa: E402

VOICE = "seed:3"
RATE_HZ = 24000
TEXT = "Hi there. Good morning."


@pytest.fixture(scope="module")
def renderer(chattts_checkpoint: Checkpoint) -> Iterator[EmbeddedRenderer]:
    engine = ChatTTSEngine(ChatTTSSettings(dir=chattts_checkpoint.directory))
    settings = EmbeddedSettings(engine="chattts", voice=VOICE, paragraph_pause_s=0)
    with EmbeddedRenderer(settings, engine=engine) as r:
        yield r


def plan(**first: object) -> PreparedText:
    base = prepare_text(TEXT, profile=CHATTTS)
    assert len(base.segments) == 2
    segments = (dataclasses.replace(base.segments[0], **first), base.segments[1])  # type: ignore[arg-type]
    return dataclasses.replace(base, segments=segments)


def test_a_break_is_its_silence_and_timings_are_per_sentence(
    renderer: EmbeddedRenderer, tmp_path: Path
) -> None:
    assert renderer.engine.capabilities().word_timings is False
    _, plain = render_plan(renderer, TEXT, plan(), tmp_path / "p.wav")
    assert longest_silence_ms(plain, RATE_HZ) < 100
    result, pcm = render_plan(renderer, TEXT, plan(pause_after_ms=700), tmp_path / "b.wav")
    assert abs(longest_silence_ms(pcm, RATE_HZ) - 700) <= 50
    assert [w.text for w in result.words] == ["Hi there.", "Good morning."]
    first, second = result.words
    assert second.start_ms - first.end_ms == pytest.approx(700, abs=50)
    assert all(w.text == TEXT[w.char_start : w.char_end] for w in result.words)
