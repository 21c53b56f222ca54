"""The audio side of SSML and word timings in the embedded renderer, measured on the decoded
file that espeak's speech was written to: breaks are exact silences, voicings change voice,
rate, pitch and volume, words and marks land where the audio says they are heard.

Segments are built by hand (``prepare_text``'s plain output with SSML's fields set), so
these tests pin the renderer whatever reads the SSML.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support.engines import RecordingEngine
from tests.support.speech_audio import gaps_ms, render_plan, rms, sound_runs
from voicelane.common.audio import AudioFormat
from voicelane.common.errors import UnknownVoiceError
from voicelane.core.settings import EmbeddedSettings
from voicelane.core.speech_text import PreparedText, SpokenSegment, Voicing, prepare_text
from voicelane.core.text_profiles import ESPEAK
from voicelane.core.word_timings import MarkTiming
from voicelane.workers.engines import Utterance
from voicelane.workers.render import EmbeddedRenderer, RenderResult, utterance_of

RATE_HZ = 24000
ONSET_TOLERANCE_MS = 30
BREAK_TOLERANCE_MS = 50


@pytest.fixture(scope="module")
def renderer() -> Iterator[EmbeddedRenderer]:
    with EmbeddedRenderer(EmbeddedSettings(engine="espeak", paragraph_pause_s=0.9)) as r:
        yield r


def prepared(text: str, **fields_by_index: dict[str, object]) -> PreparedText:
    """``text`` prepared for espeak, segment ``i`` given the fields ``fields_by_index[f"s{i}"]``."""
    base = prepare_text(text, profile=ESPEAK)
    segments = [
        dataclasses.replace(segment, **fields_by_index.get(f"s{i}", {}))  # type: ignore[arg-type]
        for i, segment in enumerate(base.segments)
    ]
    return dataclasses.replace(base, segments=tuple(segments))


def spans_slice(result: RenderResult, text: str) -> None:
    for word in result.words:
        assert word.text == text[word.char_start : word.char_end], word
        assert word.start_ms <= word.end_ms


# ---- breaks ------------------------------------------------------------------------------------


@pytest.mark.parametrize("break_ms", [200, 700, 1500])
def test_a_break_is_exactly_its_silence(
    renderer: EmbeddedRenderer, tmp_path: Path, break_ms: int
) -> None:
    text = "Hello there. General Kenobi. You are bold."
    plan = prepared(
        text,
        s0={"pause_after_ms": break_ms},
        # A break at a paragraph's end replaces the paragraph pause (0.9 s here).
        s1={"pause_after_ms": break_ms, "paragraph_end": True},
    )
    _, pcm = render_plan(renderer, text, plan, tmp_path / "b.wav")
    gaps = gaps_ms(sound_runs(pcm, RATE_HZ, min_gap_ms=150))
    assert len(gaps) == 2, gaps
    for gap in gaps:
        assert abs(gap - break_ms) <= BREAK_TOLERANCE_MS, (gaps, break_ms)


def test_a_break_replaces_the_engines_own_pause(renderer: EmbeddedRenderer, tmp_path: Path) -> None:
    text = "Hello there. General Kenobi."
    _, natural = render_plan(renderer, text, prepared(text), tmp_path / "n.wav")
    (natural_gap,) = gaps_ms(sound_runs(natural, RATE_HZ, min_gap_ms=150))
    assert natural_gap > 250  # espeak's own pause after a sentence
    _, short = render_plan(
        renderer, text, prepared(text, s0={"pause_after_ms": 60}), tmp_path / "s.wav"
    )
    runs = sound_runs(short, RATE_HZ, min_gap_ms=40)
    assert min(gaps_ms(runs)) <= 60 + BREAK_TOLERANCE_MS
    assert len(sound_runs(short, RATE_HZ, min_gap_ms=150)) == 1  # no pause left but the break


def test_a_break_after_the_last_segment_ends_the_audio_with_its_silence(
    renderer: EmbeddedRenderer, tmp_path: Path
) -> None:
    text = "Goodbye now."
    _, pcm = render_plan(
        renderer, text, prepared(text, s0={"pause_after_ms": 800}), tmp_path / "e.wav"
    )
    (run,) = sound_runs(pcm, RATE_HZ)
    trailing_ms = len(pcm) * 1000 / RATE_HZ - run[1]
    assert abs(trailing_ms - 800) <= BREAK_TOLERANCE_MS


# ---- word timings ------------------------------------------------------------------------------


def test_word_starts_are_where_the_audio_starts_each_word(
    renderer: EmbeddedRenderer, tmp_path: Path
) -> None:
    """Words separated by pauses (commas, sentence ends, breaks): each word's start_ms is
    within 30 ms of the onset measured in the decoded file, at another sample rate than the
    engine's, across paragraph pauses and breaks."""
    text = "One, two, three. Four; five!\n\nSix, seven. Eight, today, maybe."
    plan = prepared(text, s2={"pause_after_ms": 400})
    assert len(plan.segments) == 5  # the break follows "Six, seven."
    result, pcm = render_plan(renderer, text, plan, tmp_path / "w.wav", rate_hz=16000)
    spans_slice(result, text)
    assert [w.text for w in result.words] == [
        "One", "two", "three", "Four", "five", "Six", "seven", "Eight", "today", "maybe",
    ]  # fmt: skip
    onsets = [start for start, _ in sound_runs(pcm, 16000, min_gap_ms=60)]
    assert len(onsets) == len(result.words), (onsets, result.words)
    for word, onset in zip(result.words, onsets, strict=True):
        assert abs(word.start_ms - onset) <= ONSET_TOLERANCE_MS, (word, onset)
    # A word ends where the next starts, or where its sentence's voice ends before a pause.
    for word, after in itertools.pairwise(result.words):
        assert word.start_ms < word.end_ms <= after.start_ms
    assert result.words[-1].end_ms <= round(result.duration_s * 1000)


def test_a_replacement_spoken_as_many_words_is_one_timing(
    renderer: EmbeddedRenderer, tmp_path: Path
) -> None:
    text = "I paid $3.5M, yesterday."
    result, pcm = render_plan(renderer, text, prepared(text), tmp_path / "m.wav")
    spans_slice(result, text)
    assert [w.text for w in result.words] == ["I", "paid", "$3.5M", "yesterday"]
    money = result.words[2]
    assert (money.char_start, money.char_end) == (7, 12)
    # "three point five million dollars" takes far longer than one word.
    assert money.end_ms - money.start_ms > 1000
    onsets = [start for start, _ in sound_runs(pcm, RATE_HZ, min_gap_ms=60)]
    assert min(abs(result.words[3].start_ms - o) for o in onsets) <= ONSET_TOLERANCE_MS


def test_an_engine_without_word_times_gives_sentence_timings(tmp_path: Path) -> None:
    engine = RecordingEngine(voices=("a",))
    text = "First sentence here. Second one."
    with EmbeddedRenderer(EmbeddedSettings(voice="a", paragraph_pause_s=0), engine=engine) as r:
        result = r.render(
            text, tmp_path / "s.wav", fmt=AudioFormat.WAV, sample_rate_hz=8000, timings=True
        )
        untimed = r.render(text, tmp_path / "u.wav", fmt=AudioFormat.WAV, sample_rate_hz=8000)
    assert untimed.words == [] and untimed.duration_s == result.duration_s  # only when asked
    assert [w.text for w in result.words] == ["First sentence here.", "Second one."]
    first, second = result.words
    # RecordingEngine: one sample per character at 1 kHz, no pause between sentences.
    assert (first.start_ms, first.end_ms) == (0, 20)
    assert second.start_ms == 20 and second.end_ms <= 31 == round(result.duration_s * 1000)


# ---- marks -------------------------------------------------------------------------------------


def test_marks_are_reported_at_the_next_words_start(
    renderer: EmbeddedRenderer, tmp_path: Path
) -> None:
    text = "Alpha bravo. Charlie delta."
    base = prepared(text, s0={"pause_after_ms": 500})
    first, second = base.segments
    plan = dataclasses.replace(
        base,
        segments=(
            dataclasses.replace(first, marks=(("at-bravo", first.text.index("bravo")),)),
            dataclasses.replace(second, marks=(("start-2", 0), ("end-2", len(second.text)))),
        ),
        trailing_marks=("after-all",),
    )
    result, _ = render_plan(renderer, text, plan, tmp_path / "k.wav")
    by_text = {w.text: w for w in result.words}
    assert result.marks == [
        MarkTiming("at-bravo", by_text["bravo"].start_ms),
        MarkTiming("start-2", by_text["Charlie"].start_ms),
        MarkTiming("end-2", by_text["delta"].end_ms),
        MarkTiming("after-all", round(result.duration_s * 1000)),
    ]


# ---- voicing -----------------------------------------------------------------------------------


def voiced_ms(pcm: np.ndarray) -> int:
    runs = sound_runs(pcm, RATE_HZ)
    return runs[-1][1] - runs[0][0]


def test_rate_half_takes_about_twice_as_long(renderer: EmbeddedRenderer, tmp_path: Path) -> None:
    text = "The quick brown fox jumps over the lazy dog near the bank of the river."
    _, normal = render_plan(renderer, text, prepared(text), tmp_path / "n.wav")
    slow_plan = prepared(text, s0={"voicing": Voicing(rate=0.5)})
    _, slow = render_plan(renderer, text, slow_plan, tmp_path / "s.wav")
    assert 1.7 < voiced_ms(slow) / voiced_ms(normal) < 2.3


def test_volume_plus_6_db_doubles_the_rms(renderer: EmbeddedRenderer, tmp_path: Path) -> None:
    text = "A sentence spoken at two volumes."
    _, normal = render_plan(renderer, text, prepared(text), tmp_path / "n.wav")
    _, loud = render_plan(renderer, text, prepared(text, s0={"voicing": Voicing(volume_db=6.0)}),
                     tmp_path / "l.wav")  # fmt: skip
    _, soft = render_plan(renderer, text, prepared(text, s0={"voicing": Voicing(volume_db=-6.0)}),
                     tmp_path / "q.wav")  # fmt: skip
    assert 1.8 < rms(loud) / rms(normal) < 2.1
    assert 0.48 < rms(soft) / rms(normal) < 0.52


def test_a_voice_switch_speaks_that_segment_in_the_other_voice(
    renderer: EmbeddedRenderer, tmp_path: Path
) -> None:
    text = "Bonjour. Comment allez-vous aujourd'hui?"
    switched = prepared(text, s1={"voicing": Voicing(voice="fr-fr")})
    result, pcm = render_plan(renderer, text, switched, tmp_path / "v.wav")
    _, plain = render_plan(renderer, text, prepared(text), tmp_path / "p.wav")
    engine = renderer.engine
    second = switched.segments[1].text
    (as_french,) = engine.synthesize([Utterance(second, "fr-fr")])
    (as_default,) = engine.synthesize([Utterance(second, "auto")])
    rate = engine.sample_rate_hz
    assert abs(len(as_french) - len(as_default)) / rate > 0.15  # the voices differ here
    difference_s = (len(pcm) - len(plain)) / RATE_HZ
    assert difference_s == pytest.approx((len(as_french) - len(as_default)) / rate, abs=0.05)
    spans_slice(result, text)


def test_an_unknown_ssml_voice_fails_before_any_work(
    renderer: EmbeddedRenderer, tmp_path: Path
) -> None:
    text = "One. Two."
    plan = prepared(text, s1={"voicing": Voicing(voice="klingon")})
    with pytest.raises(UnknownVoiceError, match="klingon"):
        render_plan(renderer, text, plan, tmp_path / "x.wav")
    assert list(tmp_path.iterdir()) == []


class _ChatTTSLike(RecordingEngine):
    name = "chattts"  # its text profile renders no pitch
    min_speed = 0.5
    max_speed = 2.0


def _segment(voicing: Voicing) -> SpokenSegment:
    (segment,) = prepare_text("Hi there.", profile=ESPEAK).segments
    return dataclasses.replace(segment, voicing=voicing)


@pytest.mark.parametrize(
    ("voicing", "expected"),
    [
        (Voicing(), Utterance("Hi there.", "a", 1.5)),
        (Voicing(voice="b", rate=0.5), Utterance("Hi there.", "b", 0.75)),
        (Voicing(rate=4.0), Utterance("Hi there.", "a", 2.5)),  # clamped to the range
        (Voicing(rate=0.1), Utterance("Hi there.", "a", 0.5)),
        (
            Voicing(pitch_semitones=3.0),
            Utterance("Hi there.", "a", 1.5, params=(("pitch_semitones", 3.0),)),
        ),
    ],
)
def test_the_utterance_of_a_voiced_segment(voicing: Voicing, expected: Utterance) -> None:
    engine = RecordingEngine()
    engine.min_speed, engine.max_speed = 0.5, 2.5
    assert utterance_of(engine, _segment(voicing), voice="a", speed=1.5) == expected


def test_pitch_is_left_out_where_the_engine_renders_none() -> None:
    utterance = utterance_of(
        _ChatTTSLike(), _segment(Voicing(pitch_semitones=3.0)), voice="a", speed=1.0
    )
    assert utterance.params == ()
