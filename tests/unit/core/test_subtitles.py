"""Subtitles: WebVTT read back by webvtt-py and SRT by srt give the input's cues (count, order,
text, times), hostile text included; cues are normalized (sorted, never overlapping, inside
the audio); the JSON round-trips; formats are checked by name."""

from __future__ import annotations

import html
import io
import json
import re
import unicodedata
from datetime import timedelta

import pytest
import srt
import webvtt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voicelane.common.errors import InvalidInputError
from voicelane.core.subtitles import (
    LINE_CHARS,
    SUBTITLE_FORMATS,
    SubtitleChapter,
    Subtitles,
    TimedSentence,
    cue_lines,
    normalize_cues,
    parse_subtitle_format,
)
from voicelane.core.word_timings import WordTiming

HOUR_MS = 3_600_000

Cue = tuple[int, int, str]
"""(start ms, end ms, text with its lines joined by spaces)."""


def read_vtt(text: str) -> list[Cue]:
    """The cues webvtt-py reads (strictly: a malformed cue block is an error), unescaped."""
    parsed = webvtt.from_buffer(io.StringIO(text), strict=True)
    for caption in parsed.captions:
        assert caption.text == caption.raw_text  # no markup of the text became cue tags
    return [
        (
            c.start_time.in_milliseconds(),
            c.end_time.in_milliseconds(),
            html.unescape(" ".join(c.lines)),
        )
        for c in parsed.captions
    ]


def read_srt(text: str) -> list[Cue]:
    """The cues srt reads (it raises on anything it cannot place)."""
    return [
        (
            s.start // timedelta(milliseconds=1),
            s.end // timedelta(milliseconds=1),
            " ".join(s.content.split("\n")),
        )
        for s in srt.parse(text)
    ]


HOSTILE = {
    "arrow": "Then -> now --> later ---> never.",
    "timing line": "00:00:01,000 --> 00:00:02,000",
    "vtt timing line": "00:00:01.000 --> 00:00:02.000 align:start",
    "tags": "<b>bold</b> <i>it</i> <v Roger>voice</v> <c.red>red</c> {\\an8}top",
    "entities": "Fish & chips &amp; &lt;b&gt; &#45;&#45;&gt; a&b",
    "blank line": "Before.\n\n\nAfter the blank lines.",
    "number line": "Chapter\n12\nbegins here.",
    "number then timing": "x\n5\n00:00:01,000 - > 00:00:02,000\n\n7\n00:00:03,000 --> 00:00:04,000",
    "webvtt header": "WEBVTT\n\nNOTE this is text\n\nSTYLE ::cue { color: red }",
    "only a number": "42",
    "rtl": "שלום עולם, مرحبا بالعالم! \u200fעברית\u200f",
    "emoji": "Family 👨\u200d👩\u200d👧\u200d👦 and flags 🇩🇪🇫🇷 ok 🎉.",
    "crlf": "Windows\r\nline\rends\u2028and\u2029separators\x85too.",
}

ANY_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=120) | st.sampled_from(
    list(HOSTILE.values())
)


def clock(ms: int) -> str:
    """A WebVTT time under a minute."""
    assert ms < 60_000
    return f"00:00:{ms // 1000:02d}.{ms % 1000:03d}"


def is_number(word: str) -> bool:
    """What SRT readers take for a cue number."""
    return re.fullmatch(r"-?[0-9]+\.?[0-9]*", word) is not None


def spoken(text: str) -> str:
    """What a cue shows of ``text`` (no control characters in it): whitespace runs collapsed."""
    return " ".join(text.split())


def shown(text: str) -> str:
    """What a cue shows of any ``text``: control characters dropped (the whitespace ones
    are spaces), whitespace runs collapsed."""
    kept = (" " if ch.isspace() else "" if unicodedata.category(ch) == "Cc" else ch for ch in text)
    return spoken("".join(kept))


@given(ANY_TEXT)
@settings(max_examples=200, deadline=None)
def test_cue_lines_are_the_text_wrapped(text: str) -> None:
    lines = cue_lines(text)
    assert " ".join(lines) == shown(text)
    assert all(line and line == line.strip() for line in lines)
    assert all(not is_number(line) for line in lines[1:])
    for line in lines:
        # A line is at most LINE_CHARS long, or one long word, or it ends with numbers that
        # joined it so as not to stand alone.
        words = line.split(" ")
        while len(words) > 1 and len(" ".join(words)) > LINE_CHARS and is_number(words[-1]):
            words.pop()
        assert len(" ".join(words)) <= LINE_CHARS or len(words) == 1, line


def srt_shown(text: str) -> str:
    """SRT has no escapes: ``-->`` is written ``->``."""
    out = spoken(text)
    while "-->" in out:
        out = out.replace("-->", "->")
    return out


def sentences_of(texts: list[str], *, step_ms: int = 1000) -> tuple[TimedSentence, ...]:
    out: list[TimedSentence] = []
    offset = 0
    for index, text in enumerate(texts):
        out.append(
            TimedSentence(
                text, index * step_ms, index * step_ms + step_ms - 200, offset, offset + len(text)
            )
        )
        offset += len(text) + 1
    return tuple(out)


def subtitles_of(texts: list[str], *, step_ms: int = 1000) -> Subtitles:
    return Subtitles(sentences_of(texts, step_ms=step_ms), len(texts) * step_ms, False)


# ---- both formats read back ----------------------------------------------------------------


def test_each_sentence_is_one_cue_in_order_with_its_times() -> None:
    texts = ["First sentence.", "Second one,\nover two lines.", "Third."]
    subs = subtitles_of(texts)
    expected = [(i * 1000, i * 1000 + 800, spoken(t)) for i, t in enumerate(texts)]
    assert read_vtt(subs.to_vtt()) == expected
    assert read_srt(subs.to_srt()) == expected


def test_the_files_look_as_their_formats_say() -> None:
    subs = Subtitles(
        (
            TimedSentence("Hi & bye.", 1500, 62_003, 0, 9),
            TimedSentence("Next.", 62_003, 64_000, 10, 15),
        ),
        65_000,
        False,
    )
    assert subs.to_vtt() == (
        "WEBVTT\n\n"
        "1\n00:00:01.500 --> 00:01:02.003\nHi &amp; bye.\n\n"
        "2\n00:01:02.003 --> 00:01:04.000\nNext.\n"
    )
    assert subs.to_srt() == (
        "1\n00:00:01,500 --> 00:01:02,003\nHi & bye.\n\n2\n00:01:02,003 --> 00:01:04,000\nNext.\n\n"
    )


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_text_reads_back_as_the_same_cues(name: str) -> None:
    texts = ["Before it.", HOSTILE[name], "After it."]
    subs = subtitles_of(texts)
    times = [(i * 1000, i * 1000 + 800) for i in range(3)]
    assert read_vtt(subs.to_vtt()) == [
        (a, b, spoken(t)) for (a, b), t in zip(times, texts, strict=True)
    ]
    assert read_srt(subs.to_srt()) == [
        (a, b, srt_shown(t)) for (a, b), t in zip(times, texts, strict=True)
    ]
    arrow_lines = [line for line in subs.to_vtt().split("\n") if "-->" in line]
    assert arrow_lines == [f"{clock(a)} --> {clock(b)}" for a, b in times]


def test_numbers_wrapped_onto_lines_of_their_own_cannot_start_an_srt_cue() -> None:
    # Greedy wrapping would give the lines "...", "5", "00:00:01,000 - > ...": srt would read
    # "5" as a cue number and the next line as its timing.
    long_word = "y" * LINE_CHARS
    text = f"{long_word} 5 {long_word} 6 00:00:01,000 - > 00:00:02,000"
    lines = cue_lines(text)
    assert all(not is_number(line) for line in lines[1:]), lines
    subs = subtitles_of(["One.", text, "Three."])
    assert [c[2] for c in read_srt(subs.to_srt())] == ["One.", srt_shown(text), "Three."]
    assert [c[2] for c in read_vtt(subs.to_vtt())] == ["One.", spoken(text), "Three."]


def test_a_5000_character_sentence_is_one_cue_wrapped_at_42() -> None:
    words = [("word" * (1 + i % 4))[: 3 + i % 9] for i in range(700)]
    text = " ".join(words)[:5000].strip()
    assert len(text) >= 4900
    subs = subtitles_of(["Short.", text, "End."])
    assert [c[2] for c in read_vtt(subs.to_vtt())] == ["Short.", text, "End."]
    assert [c[2] for c in read_srt(subs.to_srt())] == ["Short.", text, "End."]
    lines = cue_lines(text)
    assert len(lines) > 100
    assert all(len(line) <= LINE_CHARS for line in lines)
    assert " ".join(lines) == text


def test_wrapping_breaks_on_spaces_only_and_keeps_a_long_word_whole() -> None:
    url = "https://example.org/" + "a" * 60
    lines = cue_lines(f"See {url} for the whole story of it all, told at length here.")
    assert lines[0] == "See"
    assert lines[1] == url
    assert all(len(line) <= LINE_CHARS for line in lines[2:])
    assert " ".join(lines) == f"See {url} for the whole story of it all, told at length here."


def test_control_characters_never_reach_the_files() -> None:
    text = "Bell\x07 and\x00nul,\x1b[31m escape\x7f and\x9b c1,\ttab\x0bvt\x0cff."
    subs = subtitles_of([text])
    for rendered in (subs.to_vtt(), subs.to_srt()):
        assert not any(ord(ch) < 0x20 and ch != "\n" for ch in rendered)
        assert not any(0x7F <= ord(ch) <= 0x9F for ch in rendered)
    shown = "Bell andnul,[31m escape and c1, tab vt ff."
    assert read_vtt(subs.to_vtt())[0][2] == shown
    assert read_srt(subs.to_srt())[0][2] == shown
    assert subs.to_json()["sentences"][0]["text"] == text  # the JSON keeps the input as it is


def test_hours_past_99_still_format_and_read_back() -> None:
    start_ms = 120 * HOUR_MS + 59 * 60_000 + 59_999
    subs = Subtitles(
        (
            TimedSentence("Five hours in.", 5 * HOUR_MS, 5 * HOUR_MS + 900, 0, 14),
            TimedSentence("Late.", start_ms, start_ms + 1, 15, 20),
        ),
        start_ms + 1,
        False,
    )
    assert "120:59:59.999 --> 121:00:00.000" in subs.to_vtt()
    assert "120:59:59,999 --> 121:00:00,000" in subs.to_srt()
    expected = [
        (5 * HOUR_MS, 5 * HOUR_MS + 900, "Five hours in."),
        (start_ms, start_ms + 1, "Late."),
    ]
    assert read_vtt(subs.to_vtt()) == expected
    assert read_srt(subs.to_srt()) == expected


def test_chapters_are_a_note_block_in_vtt() -> None:
    subs = Subtitles(
        (
            TimedSentence("One.", 0, 900, 0, 4, chapter=0),
            TimedSentence("Two.", 1000, 1900, 5, 9, chapter=1),
        ),
        2000,
        False,
        (SubtitleChapter("Intro --> start", 0, 1000), SubtitleChapter("Part\n\nTwo", 1000, 2000)),
    )
    parsed = webvtt.from_buffer(io.StringIO(subs.to_vtt()), strict=True)
    assert parsed.header_comments == [
        "chapters\n1 00:00:00.000 - 00:00:01.000 Intro -> start\n"
        "2 00:00:01.000 - 00:00:02.000 Part Two"
    ]
    assert [c.text for c in parsed.captions] == ["One.", "Two."]
    assert "NOTE" not in subs.to_srt()


def test_an_empty_cue_text_keeps_its_cue() -> None:
    subs = subtitles_of(["One.", " \n\x00 ", "Three."])
    assert [c[2] for c in read_vtt(subs.to_vtt())] == ["One.", "", "Three."]
    assert [c[2] for c in read_srt(subs.to_srt())] == ["One.", "", "Three."]


# ---- cue normalization ---------------------------------------------------------------------


def cue(
    start_ms: int, end_ms: int, name: str = "s", words: tuple[WordTiming, ...] = ()
) -> TimedSentence:
    return TimedSentence(name, start_ms, end_ms, 0, len(name), words)


def times(cues: tuple[TimedSentence, ...]) -> list[tuple[str, int, int]]:
    return [(c.text, c.start_ms, c.end_ms) for c in cues]


def test_an_end_past_the_next_start_is_cut_to_it() -> None:
    assert times(normalize_cues([cue(0, 1500, "a"), cue(1000, 2000, "b")], 3000)) == [
        ("a", 0, 1000),
        ("b", 1000, 2000),
    ]


def test_cues_are_sorted_by_start_and_ties_keep_their_order() -> None:
    got = normalize_cues(
        [cue(2000, 2500, "c"), cue(0, 400, "a"), cue(1000, 1200, "b1"), cue(1000, 1100, "b2")], 3000
    )
    assert times(got) == [
        ("a", 0, 400),
        ("b1", 1000, 1000 + 1),
        ("b2", 1001, 1100),
        ("c", 2000, 2500),
    ]


def test_times_are_clamped_to_the_audio_and_zero_length_cues_get_a_millisecond() -> None:
    got = normalize_cues(
        [cue(-50, 100, "a"), cue(300, 200, "b"), cue(900, 5000, "c"), cue(7000, 8000, "d")], 1000
    )
    assert times(got) == [("a", 0, 100), ("b", 300, 301), ("c", 900, 1000), ("d", 1000, 1000)]


def test_words_are_clamped_inside_their_sentence() -> None:
    words = (WordTiming("Hi", 50, 400, 0, 2), WordTiming("there", 400, 1600, 3, 8))
    (got,) = normalize_cues([cue(100, 1200, "Hi there", words)], 1000)
    assert (got.start_ms, got.end_ms) == (100, 1000)
    assert [(w.start_ms, w.end_ms) for w in got.words] == [(100, 400), (400, 1000)]
    assert [w.text for w in got.words] == ["Hi", "there"]


def test_subtitles_store_their_cues_normalized() -> None:
    raw = [cue(1000, 3000, "b"), cue(0, 2000, "a")]
    subs = Subtitles(tuple(raw), 2500, False)
    assert times(subs.sentences) == [("a", 0, 1000), ("b", 1000, 2500)]
    assert subs.sentences == normalize_cues(raw, 2500)


def test_a_negative_duration_is_a_bug() -> None:
    with pytest.raises(ValueError, match="duration_ms"):
        Subtitles((), -1, False)


def test_a_sentence_naming_a_missing_chapter_is_a_bug() -> None:
    with pytest.raises(ValueError, match="chapter 1"):
        Subtitles(
            (TimedSentence("a", 0, 1, 0, 1, chapter=1),),
            10,
            False,
            (SubtitleChapter("Only", 0, 10),),
        )


@st.composite
def timed_sentences(draw: st.DrawFn) -> tuple[list[TimedSentence], int]:
    duration_ms = draw(st.integers(0, 200 * HOUR_MS) | st.integers(0, 5000))
    span = st.integers(-1000, duration_ms + 1000)
    out: list[TimedSentence] = []
    for _ in range(draw(st.integers(0, 12))):
        start_ms, end_ms = draw(span), draw(span)
        words = tuple(
            WordTiming("w", draw(span), draw(span), 0, 1) for _ in range(draw(st.integers(0, 3)))
        )
        out.append(TimedSentence(draw(ANY_TEXT), start_ms, end_ms, 0, 1, words))
    return out, duration_ms


@given(timed_sentences())
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_sentences_become_cues_both_parsers_accept(
    case: tuple[list[TimedSentence], int],
) -> None:
    sentences, duration_ms = case
    cues = normalize_cues(sentences, duration_ms)
    assert sorted(c.text for c in cues) == sorted(s.text for s in sentences)
    previous_end_ms = 0
    for c in cues:
        assert 0 <= previous_end_ms <= c.start_ms <= c.end_ms <= duration_ms
        assert c.end_ms - c.start_ms >= 1 or c.start_ms == duration_ms
        assert all(c.start_ms <= w.start_ms <= w.end_ms <= c.end_ms for w in c.words)
        previous_end_ms = c.end_ms
    assert normalize_cues(cues, duration_ms) == cues

    subs = Subtitles(tuple(sentences), duration_ms, True)
    assert subs.sentences == cues
    expected = [(c.start_ms, c.end_ms, c.text) for c in cues]
    vtt = read_vtt(subs.to_vtt())
    assert [(a, b) for a, b, _ in vtt] == [(a, b) for a, b, _ in expected]
    assert [t for _, _, t in vtt] == [shown(t) for _, _, t in expected]
    got_srt = read_srt(subs.to_srt())
    assert [(a, b) for a, b, _ in got_srt] == [(a, b) for a, b, _ in expected]
    assert [t for _, _, t in got_srt] == [srt_shown(shown(t)) for _, _, t in expected]
    assert Subtitles.from_json(json.loads(subs.render("json")[0])) == subs


# ---- JSON and formats ----------------------------------------------------------------------


def sample() -> Subtitles:
    words = (
        WordTiming("I", 0, 200, 0, 1),
        WordTiming("paid", 200, 700, 2, 6),
        WordTiming("$3.5M", 700, 1500, 7, 12),
    )
    return Subtitles(
        (
            TimedSentence("I paid $3.5M.", 0, 1500, 0, 13, words, chapter=0),
            TimedSentence("Then  \n left.", 2000, 2800, 14, 27, chapter=1),
            TimedSentence("No chapter.", 3000, 3500, 28, 39),
        ),
        4000,
        True,
        (SubtitleChapter("One", 0, 2000), SubtitleChapter("Two", 2000, 4000)),
    )


def test_the_json_says_everything_and_round_trips() -> None:
    subs = sample()
    data = subs.to_json()
    assert data["duration_ms"] == 4000
    assert data["word_timings"] is True
    assert data["chapters"] == [
        {"title": "One", "start_ms": 0, "end_ms": 2000},
        {"title": "Two", "start_ms": 2000, "end_ms": 4000},
    ]
    first, second, third = data["sentences"]
    assert first == {
        "text": "I paid $3.5M.",
        "start_ms": 0,
        "end_ms": 1500,
        "char_start": 0,
        "char_end": 13,
        "chapter": 0,
        "words": [w.to_json() for w in subs.sentences[0].words],
    }
    assert second["text"] == "Then  \n left." and second["words"] == []
    assert "chapter" not in third
    stored = json.loads(json.dumps(data))
    assert Subtitles.from_json(stored) == subs
    assert Subtitles.from_json(stored).to_json() == data


def test_from_json_refuses_what_is_not_subtitles() -> None:
    good = sample().to_json()
    for bad in (
        {},
        {**good, "duration_ms": "4000"},
        {**good, "word_timings": 1},
        {**good, "sentences": [{"text": "a"}]},
        {**good, "sentences": {}},
    ):
        with pytest.raises(ValueError, match="not subtitles JSON"):
            Subtitles.from_json(bad)


def test_render_gives_utf8_bytes_and_the_media_type() -> None:
    subs = Subtitles((TimedSentence("Grüße 👋 <3", 0, 900, 0, 10),), 1000, False)
    vtt, vtt_type = subs.render("vtt")
    srt_bytes, srt_type = subs.render("SRT")
    json_bytes, json_type = subs.render(" json ")
    assert (vtt_type, srt_type, json_type) == (
        "text/vtt; charset=utf-8",
        "application/x-subrip; charset=utf-8",
        "application/json",
    )
    assert vtt.decode("utf-8") == subs.to_vtt() and "Grüße 👋 &lt;3" in vtt.decode("utf-8")
    assert srt_bytes.decode("utf-8") == subs.to_srt()
    assert json.loads(json_bytes.decode("utf-8")) == subs.to_json()
    assert "👋".encode() in json_bytes  # not \\u escapes


def test_a_format_is_named_or_refused() -> None:
    assert [parse_subtitle_format(f) for f in ("vtt", "SRT", " Json ")] == ["vtt", "srt", "json"]
    for bad in ("ass", "", "webvtt"):
        with pytest.raises(InvalidInputError) as caught:
            parse_subtitle_format(bad)
        assert caught.value.field == "format"
        assert all(f in caught.value.message for f in SUBTITLE_FORMATS)
    with pytest.raises(InvalidInputError):
        sample().render("txt")
