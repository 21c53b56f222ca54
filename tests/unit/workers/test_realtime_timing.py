"""A real-time sentence's edges and times (:mod:`voicelane.workers.realtime_timing`): silence cut
only around breaks, words of the whole request's text on the stream's clock, marks."""

from __future__ import annotations

import dataclasses

import numpy as np

from voicelane.core.speech_text import SpokenSegment, prepare_text
from voicelane.core.text_profiles import profile_for
from voicelane.core.word_timings import MarkTiming, WordTiming
from voicelane.workers.engines import PcmF32, WordEvent
from voicelane.workers.realtime_timing import Edges, SentenceSource, SentenceTimes

RATE = 1000  # one sample per ms: positions read as milliseconds
FRAME = 5  # EDGE_FRAME_S at RATE


def sound(ms: int) -> PcmF32:
    return np.full(ms * RATE // 1000, 0.5, dtype=np.float32)


def quiet(ms: int) -> PcmF32:
    return np.zeros(ms * RATE // 1000, dtype=np.float32)


def cat(*parts: PcmF32) -> PcmF32:
    return np.concatenate(parts)


def test_without_a_break_nothing_is_cut() -> None:
    edges = Edges(RATE, trim_lead=False, trim_tail=False)
    first, second = cat(quiet(30), sound(50)), cat(sound(20), quiet(40))
    out = cat(edges.take(first), edges.take(second), edges.finish())
    assert np.array_equal(out, cat(first, second))
    assert edges.cut_lead == 0 and edges.delivered == 140
    assert (edges.speech_start, edges.speech_end) == (30, 100)


def test_after_a_break_the_leading_silence_goes_even_across_chunks() -> None:
    edges = Edges(RATE, trim_lead=True, trim_tail=False)
    assert len(edges.take(quiet(25))) == 0
    out = edges.take(cat(quiet(10), sound(30), quiet(15)))
    assert np.array_equal(out, cat(sound(30), quiet(15)))  # the tail stays: no break after
    assert edges.cut_lead == 35 and edges.speech_start == 35


def test_before_a_break_the_trailing_silence_is_held_then_dropped() -> None:
    edges = Edges(RATE, trim_lead=False, trim_tail=True)
    out = [edges.take(cat(sound(30), quiet(20)))]
    assert len(out[0]) == 30  # the silence might be trailing: held back
    out.append(edges.take(cat(quiet(10), sound(10), quiet(25))))
    assert len(out[1]) == 20 + 10 + 10  # it was not: it goes, with the new sound
    out.append(edges.finish())
    assert len(out[2]) == 0  # the true trailing silence never goes out
    assert np.array_equal(cat(*out), cat(sound(30), quiet(30), sound(10)))
    assert edges.delivered == 70 and edges.speech_end == 70


def test_a_segment_between_two_breaks_is_its_sound_alone() -> None:
    edges = Edges(RATE, trim_lead=True, trim_tail=True)
    out = edges.take(cat(quiet(20), sound(40), quiet(30)))
    assert np.array_equal(out, sound(40))
    assert len(edges.finish()) == 0 and edges.cut_lead == 20 and edges.delivered == 40


TEXT = "Intro. I paid $3.5M today."


def segment(text: str) -> SpokenSegment:
    """The segment of ``text`` (one sentence) as the espeak engine is given it."""
    (only,) = prepare_text(text, profile=profile_for("espeak")).segments
    return only


def event(seg: SpokenSegment, word: str, sample: int, after: int = 0) -> WordEvent:
    start = seg.text.index(word, after)
    return WordEvent(start, start + len(word), sample)


def test_words_map_to_the_whole_texts_spans_and_the_streams_clock() -> None:
    raw = TEXT[7:]
    seg = segment(raw)
    assert seg.text == "I paid three point five million dollars today."
    names = ["I", "paid", "three", "point", "five", "million", "dollars", "today"]
    samples = [30, 120, 400, 600, 800, 1000, 1200, 1500]
    edges = Edges(RATE, trim_lead=True, trim_tail=False)
    times = SentenceTimes(seg, SentenceSource(raw, 7), start_ms=2000.4, sample_rate_hz=RATE)
    times.add([event(seg, w, s) for w, s in zip(names, samples, strict=True)])
    edges.take(cat(quiet(30), sound(1800), quiet(100)))  # 30 ms cut

    words, marks = times.take(edges)  # known with the chunk they came with

    assert [w.text for w in words] == ["I", "paid", "$3.5M", "today"]
    assert all(TEXT[w.char_start : w.char_end] == w.text for w in words)
    assert [(w.start_ms, w.end_ms) for w in words] == [
        (2000, 2090),
        (2090, 2370),  # ends where "three" starts
        (2370, 3470),  # "$3.5M": from "three" to "today", spoken as five words
        (3470, 3800),  # the last word ends with the speech (1830 - 30 cut)
    ]
    assert marks == [] and times.finish(edges) == ([], [])


def test_words_wait_for_the_start_of_the_sound_after_a_break() -> None:
    seg = segment("Hello there.")
    edges = Edges(RATE, trim_lead=True, trim_tail=False)
    times = SentenceTimes(seg, SentenceSource("Hello there.", 0), start_ms=0, sample_rate_hz=RATE)
    times.add([event(seg, "Hello", 0), event(seg, "there", 300)])
    edges.take(quiet(40))
    assert times.take(edges) == ([], [])  # where the audio starts is not known yet
    edges.take(cat(quiet(20), sound(600)))
    words, _ = times.take(edges)
    assert [(w.text, w.start_ms, w.end_ms) for w in words] == [
        ("Hello", 0, 240),
        ("there", 240, 600),
    ]


def test_a_word_spoken_across_two_chunks_is_given_once() -> None:
    raw = "It costs $3.5M now."
    seg = segment(raw)
    edges = Edges(RATE, trim_lead=False, trim_tail=False)
    times = SentenceTimes(seg, SentenceSource(raw, 0), start_ms=0, sample_rate_hz=RATE)
    times.add([event(seg, w, s) for w, s in [("It", 0), ("costs", 100), ("three", 300)]])
    edges.take(sound(350))
    first, _ = times.take(edges)
    times.add([event(seg, w, s) for w, s in [("point", 400), ("five", 500), ("now", 900)]])
    edges.take(sound(700))
    second, _ = times.take(edges)
    assert [w.text for w in first] == ["It", "costs", "$3.5M"]
    assert [w.text for w in second] == ["now"]


def test_marks_take_the_next_words_start_or_the_end_of_the_speech() -> None:
    seg = dataclasses.replace(
        segment("Hello there world."),
        marks=(("first", 0), ("middle", 6), ("late", 17)),
    )
    edges = Edges(RATE, trim_lead=False, trim_tail=True)
    times = SentenceTimes(
        seg, SentenceSource("Hello there world.", 0), start_ms=100, sample_rate_hz=RATE
    )
    times.add([event(seg, "Hello", 50), event(seg, "there", 400), event(seg, "world", 700)])
    edges.take(cat(quiet(50), sound(900), quiet(200)))
    _, marks = times.take(edges)
    assert marks == [MarkTiming("first", 150), MarkTiming("middle", 500)]
    edges.finish()
    assert times.finish(edges) == ([], [MarkTiming("late", 1050)])  # after the last word


def test_without_word_events_the_segment_is_one_timing_and_marks_are_at_its_end() -> None:
    seg = dataclasses.replace(segment("Hello there."), marks=(("start", 0), ("end", 5)))
    edges = Edges(RATE, trim_lead=False, trim_tail=False)
    times = SentenceTimes(seg, SentenceSource("Hello there.", 0), start_ms=0, sample_rate_hz=RATE)
    edges.take(cat(quiet(40), sound(500), quiet(60)))
    assert times.take(edges) == ([], [])
    edges.finish()
    assert times.finish(edges) == (
        [WordTiming("Hello there.", 0, 540, 0, 12)],  # a sentence timing
        [MarkTiming("start", 540), MarkTiming("end", 540)],
    )
