"""Word timings mapped to the original input: replaced spans merge, ends meet the next start,
sentence timings without word events, marks at the next word."""

from __future__ import annotations

import re
from dataclasses import dataclass

from voicelane.core.speech_text import SpokenSegment, prepare_text
from voicelane.core.text_map import MapBuilder
from voicelane.core.text_profiles import ESPEAK
from voicelane.core.word_timings import MarkTiming, WordTiming, mark_times_ms, segment_word_timings

RATE = 1000  # one sample per millisecond: samples read as times


@dataclass(frozen=True)
class Event:
    char_start: int
    char_end: int
    sample: int


def events(text: str, samples: list[int]) -> list[Event]:
    """One event per run of letters/digits of ``text`` (as espeak reports words: without
    their punctuation), at the given samples."""
    words = [m.span() for m in re.finditer(r"[\w'-]+", text)]
    assert len(words) == len(samples), (words, samples)
    return [Event(a, b, s) for (a, b), s in zip(words, samples, strict=True)]


def one_segment(text: str) -> SpokenSegment:
    (segment,) = prepare_text(text, profile=ESPEAK).segments
    return segment


def test_a_replacement_spoken_as_five_words_is_one_timing() -> None:
    source = "I paid $3.5M today."
    segment = one_segment(source)
    assert segment.text == "I paid three point five million dollars today."
    timed = segment_word_timings(
        segment,
        events(segment.text, [0, 100, 300, 420, 560, 700, 900, 1200]),
        rate_hz=RATE,
        start_ms=2000,
        voiced_ms=1500,
        source=source,
    )
    assert timed == [
        WordTiming("I", 2000, 2100, 0, 1),
        WordTiming("paid", 2100, 2300, 2, 6),
        WordTiming("$3.5M", 2300, 3200, 7, 12),
        WordTiming("today", 3200, 3500, 13, 18),
    ]
    assert all(t.text == source[t.char_start : t.char_end] for t in timed)


def test_times_follow_the_engine_rate_and_the_segments_place() -> None:
    source = "Hello big world."
    segment = one_segment(source)
    timed = segment_word_timings(
        segment,
        events(segment.text, [0, 11025, 22050]),
        rate_hz=22050,
        start_ms=500.4,
        voiced_ms=1600,
        source=source,
    )
    assert [(t.text, t.start_ms, t.end_ms) for t in timed] == [
        ("Hello", 500, 1000),
        ("big", 1000, 1500),
        ("world", 1500, 2100),
    ]


def test_without_word_events_the_segment_is_one_timing() -> None:
    source = "  First sentence here.  "
    segment = one_segment(source)
    (timed,) = segment_word_timings(
        segment, [], rate_hz=RATE, start_ms=100, voiced_ms=900, source=source
    )
    assert timed == WordTiming("First sentence here.", 100, 1000, 2, 22)


def test_spans_slice_the_original_through_whitespace_and_normalization() -> None:
    source = "On 2024-05-06   at 14:30,\n we   met."
    texts = []
    for segment in prepare_text(source, profile=ESPEAK).segments:
        words = [m.span() for m in re.finditer(r"[\w'-]+", segment.text)]
        timed = segment_word_timings(
            segment,
            [Event(a, b, 10 * i) for i, (a, b) in enumerate(words)],
            rate_hz=RATE,
            start_ms=0,
            voiced_ms=1000,
            source=source,
        )
        for t in timed:
            assert t.text == source[t.char_start : t.char_end]
            assert t.text and t.text == t.text.strip()
            assert t.start_ms <= t.end_ms
        starts = [t.char_start for t in timed]
        assert starts == sorted(starts)
        texts += [t.text for t in timed]
    assert "14:30" in texts and "we" in texts and "met" in texts


def test_a_word_the_engine_times_after_the_voiced_end_is_clamped() -> None:
    source = "a b"
    segment = one_segment(source)
    timed = segment_word_timings(
        segment, [Event(0, 1, 0), Event(2, 3, 5000)], rate_hz=RATE, start_ms=0,
        voiced_ms=800, source=source,
    )  # fmt: skip
    assert [(t.start_ms, t.end_ms) for t in timed] == [(0, 800), (800, 800)]


def test_inserted_text_with_no_source_is_part_of_the_word_before() -> None:
    builder = MapBuilder("go now")
    builder.keep(0, 3)
    builder.replace(3, 3, "right ")  # inserted: maps to nothing of the source
    builder.keep(3, 6)
    mapped = builder.build()
    assert mapped.text == "go right now"
    segment = SpokenSegment(mapped.text, 0, 6, True, mapped)
    timed = segment_word_timings(
        segment,
        events(mapped.text, [0, 200, 400]),
        rate_hz=RATE,
        start_ms=0,
        voiced_ms=600,
        source="go now",
    )
    assert timed == [WordTiming("go", 0, 400, 0, 2), WordTiming("now", 400, 600, 3, 6)]


def test_marks_take_the_next_words_time_or_the_segments_end() -> None:
    text = "one two three"
    marks = [("start", 0), ("before-two", 4), ("mid-two", 5), ("end", len(text))]
    times = mark_times_ms(
        marks,
        events(text, [0, 300, 700]),
        rate_hz=RATE,
        start_ms=1000,
        voiced_ms=1200,
    )
    assert [(m.name, m.time_ms) for m in times] == [
        ("start", 1000),
        ("before-two", 1300),
        ("mid-two", 1700),
        ("end", 2200),
    ]
    (alone,) = mark_times_ms([("m", 0)], [], rate_hz=RATE, start_ms=0, voiced_ms=500)
    assert alone == MarkTiming("m", 500)
    assert alone.to_json() == {"name": "m", "time_ms": 500}


def test_timings_serialize_with_the_documented_keys() -> None:
    timing = WordTiming("$3.5M", 10, 20, 7, 12)
    assert timing.to_json() == {
        "text": "$3.5M",
        "start_ms": 10,
        "end_ms": 20,
        "char_start": 7,
        "char_end": 12,
    }
