"""Tests for voicelane.core.text: sentence cutting, normalization, soft splits and chunk
grouping."""

from __future__ import annotations

import random
import re
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voicelane.core.text import (
    ABBREVIATIONS,
    DEFAULT_MAX_SEGMENT_CHARS,
    NUMBER_ABBREVIATIONS,
    Segment,
    contains_cjk,
    normalize_whitespace,
    split_sentences,
)

ZW = "\u200b\u2060\ufeff"
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
CJK_ENDS = "。！？；｡"
CLOSERS = "\"'”’」』）)]］｝}〉》】〕〗〙〛»›＂＇"
PROPERTY_SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def texts(text: str, max_chars: int = DEFAULT_MAX_SEGMENT_CHARS) -> list[str]:
    return [s.text for s in split_sentences(text, max_chars)]


def _blank(c: str) -> bool:
    return c.isspace() or c in ZW


def _content(s: str) -> str:
    return "".join(c for c in s if not _blank(c))


def _alnum(s: str) -> list[str]:
    return [c for c in s if c.isalnum()]


_PARAGRAPH_BREAK_RE = re.compile(
    "[" + re.escape(LINE_BREAKS) + "][^\\S" + re.escape(LINE_BREAKS) + "]*"
    "[" + re.escape(LINE_BREAKS) + "]"
)


def _has_paragraph_break(gap: str) -> bool:
    gap = gap.replace("\r\n", "\n").replace(ZW[0], "").replace(ZW[1], "").replace(ZW[2], "")
    return "\u2029" in gap or _PARAGRAPH_BREAK_RE.search(gap) is not None


def assert_invariants(text: str, segments: list[Segment], max_chars: int) -> None:
    """Every documented invariant of split_sentences' output, checked independently."""
    previous_end = 0
    previous: Segment | None = None
    for seg in segments:
        assert previous_end <= seg.start < seg.end <= len(text), seg
        raw = text[seg.start : seg.end]
        # offsets: the span normalizes to the text, and is trimmed on both sides
        assert normalize_whitespace(raw) == seg.text
        assert not _blank(text[seg.start])
        assert not _blank(text[seg.end - 1])
        # the text is normalized and bounded
        assert seg.text == seg.text.strip() != ""
        assert "  " not in seg.text
        assert not any(c.isspace() and c != " " for c in seg.text)
        assert not any(c in ZW for c in seg.text)
        assert len(seg.text) <= max_chars
        assert any(c.isalnum() for c in seg.text)
        # no content lost within the span, nothing speakable in the gap before it
        assert _content(seg.text) == _content(raw)
        gap = text[previous_end : seg.start]
        assert not any(c.isalnum() for c in gap), (gap, seg)
        # line rules: inside a span every line break continues lowercase prose
        for m in re.finditer("[" + re.escape(LINE_BREAKS) + "][\\s" + ZW + "]*", raw):
            assert m.end() < len(raw)
            assert "a" <= raw[m.end()] <= "z", (raw, seg)
            assert not _has_paragraph_break(m.group())
        # CJK sentence ends only at the very end of a span (followed by ends/closers only)
        for i, c in enumerate(raw):
            if c in CJK_ENDS:
                assert all(x in CJK_ENDS or x in ".!?;…" or x in CLOSERS for x in raw[i:]), raw
        # paragraph_end exactly when a paragraph break separates it from the next one
        if previous is not None:
            assert previous.paragraph_end == _has_paragraph_break(gap), (previous, gap)
        previous = seg
        previous_end = seg.end
    assert not any(c.isalnum() for c in text[previous_end:])
    if segments:
        assert segments[-1].paragraph_end
    assert _alnum("".join(s.text for s in segments)) == _alnum(text)


# --- sentence ends ------------------------------------------------------------------------


def test_english_sentence_ends() -> None:
    assert texts("Hello world. How are you? I am fine! Good; thanks… Bye") == [
        "Hello world.",
        "How are you?",
        "I am fine!",
        "Good;",
        "thanks…",
        "Bye",
    ]


def test_punctuation_runs_are_one_end() -> None:
    assert texts("Really?! Yes... Sure!!! Ok") == ["Really?!", "Yes...", "Sure!!!", "Ok"]


def test_ascii_end_needs_whitespace_end_or_cjk_after() -> None:
    assert texts("a.b c!d e?f g;h") == ["a.b c!d e?f g;h"]
    assert texts("Hello.你好") == ["Hello.", "你好"]
    assert texts("OK!中文") == ["OK!", "中文"]
    assert texts("The end.") == ["The end."]


def test_closing_quotes_and_brackets_stay_with_the_sentence() -> None:
    assert texts('He said "Stop." Then he left.') == ['He said "Stop."', "Then he left."]
    assert texts("(See above.) Next one.") == ["(See above.)", "Next one."]
    assert texts("It's 'fine.' Ok") == ["It's 'fine.'", "Ok"]
    assert texts("他说：“你好。”然后走了。") == ["他说：“你好。”", "然后走了。"]
    assert texts("「好！」他说。") == ["「好！」", "他说。"]
    assert texts("（完。）下一句") == ["（完。）", "下一句"]


def test_chinese_sentence_ends_always_cut() -> None:
    assert texts("你好。今天天气很好！你呢？我很好；谢谢。") == [
        "你好。",
        "今天天气很好！",
        "你呢？",
        "我很好；",
        "谢谢。",
    ]
    assert texts("真的吗？！是的。abc") == ["真的吗？！", "是的。", "abc"]
    assert texts("结束。Next sentence.") == ["结束。", "Next sentence."]


def test_chinese_comma_is_not_a_sentence_end() -> None:
    assert texts("你好，世界、朋友：再见。") == ["你好，世界、朋友：再见。"]


def test_decimals_versions_domains_are_not_ends() -> None:
    assert texts("Pi is 3.14 today. Version 1.2.3 is out. Visit example.com now.") == [
        "Pi is 3.14 today.",
        "Version 1.2.3 is out.",
        "Visit example.com now.",
    ]
    assert texts("圆周率是3.14。访问www.example.com吧。") == [
        "圆周率是3.14。",
        "访问www.example.com吧。",
    ]


@pytest.mark.parametrize("abbreviation", ABBREVIATIONS)
def test_abbreviations_do_not_end_a_sentence(abbreviation: str) -> None:
    assert texts(f"Talk to {abbreviation} Smith today. Next") == [
        f"Talk to {abbreviation} Smith today.",
        "Next",
    ]


@pytest.mark.parametrize("abbreviation", NUMBER_ABBREVIATIONS)
def test_number_abbreviations_before_a_number(abbreviation: str) -> None:
    assert texts(f"See {abbreviation} 12 here. Next") == [f"See {abbreviation} 12 here.", "Next"]
    # Not followed by a number: a normal word that ends the sentence.
    assert texts(f"I said {abbreviation} Then") == [f"I said {abbreviation}", "Then"]


def test_abbreviations_after_an_opening_bracket() -> None:
    assert texts("A fruit (e.g. apple) is good. Yes") == ["A fruit (e.g. apple) is good.", "Yes"]


def test_unlisted_word_with_period_ends() -> None:
    assert texts("He is a Doctor. Smith left.") == ["He is a Doctor.", "Smith left."]
    assert texts("mr. Smith") == ["mr.", "Smith"]  # case-sensitive


def test_initials() -> None:
    assert texts("J. R. R. Tolkien wrote it. Then J.R.R. Martin did.") == [
        "J. R. R. Tolkien wrote it.",
        "Then J.R.R. Martin did.",
    ]
    assert texts("We meet at 5 p.m. today. Ok") == ["We meet at 5 p.m. today.", "Ok"]


def test_pronoun_i_ends_a_sentence() -> None:
    assert texts("So am I. Then we went.") == ["So am I.", "Then we went."]


def test_list_numbers_at_line_start() -> None:
    assert texts("Steps:\n1. Open it.\n12. Close it.\n  3. Indented\n2.1. Nested") == [
        "Steps:",
        "1. Open it.",
        "12. Close it.",
        "3. Indented",
        "2.1. Nested",
    ]
    assert texts("1. 第一项\n2. 第二项") == ["1. 第一项", "2. 第二项"]
    assert texts("1. First") == ["1. First"]


def test_numbers_mid_line_end_a_sentence() -> None:
    assert texts("I counted to 3. Then I stopped.") == ["I counted to 3.", "Then I stopped."]
    assert texts("Item (1. Then") == ["Item (1.", "Then"]


# --- lines and paragraphs -----------------------------------------------------------------


def test_blank_line_ends_a_paragraph() -> None:
    segments = split_sentences("A one. A two.\n\nB one.\n \t\nC one.\r\n\r\nD one.")
    assert [(s.text, s.paragraph_end) for s in segments] == [
        ("A one.", False),
        ("A two.", True),
        ("B one.", True),
        ("C one.", True),
        ("D one.", True),
    ]


def test_paragraph_separator_character() -> None:
    segments = split_sentences("One\u2029Two")
    assert [(s.text, s.paragraph_end) for s in segments] == [("One", True), ("Two", True)]


def test_last_segment_ends_its_paragraph() -> None:
    segments = split_sentences("One. Two")
    assert [s.paragraph_end for s in segments] == [False, True]


def test_single_line_break_is_a_boundary() -> None:
    segments = split_sentences("Title\nFirst line\n中文标题\n第二行\n123 items")
    assert [(s.text, s.paragraph_end) for s in segments] == [
        ("Title", False),
        ("First line", False),
        ("中文标题", False),
        ("第二行", False),
        ("123 items", True),
    ]


def test_single_line_break_before_lowercase_continues() -> None:
    assert texts("This is hard\nwrapped prose\n  that goes on. Next\nLine") == [
        "This is hard wrapped prose that goes on.",
        "Next",
        "Line",
    ]


def test_blank_line_before_lowercase_still_ends_paragraph() -> None:
    segments = split_sentences("First\n\nsecond")
    assert [(s.text, s.paragraph_end) for s in segments] == [("First", True), ("second", True)]


def test_other_line_break_characters() -> None:
    assert texts("One\rTwo\u2028Three\x85Four\r\nFive") == ["One", "Two", "Three", "Four", "Five"]


# --- normalization ------------------------------------------------------------------------


def test_normalize_whitespace_runs() -> None:
    assert normalize_whitespace("  a \t b\n\nc\u00a0d\u3000e  ") == "a b c d e"


def test_normalize_removes_zero_width() -> None:
    assert normalize_whitespace("foo\u200bbar\ufeff baz\u2060") == "foobar baz"
    assert normalize_whitespace("a \u200b b") == "a b"


def test_normalize_removes_space_between_cjk() -> None:
    assert normalize_whitespace("中文 测试\u3000一下 \n 好。 好") == "中文测试一下好。好"
    assert normalize_whitespace("中文 English 中文") == "中文 English 中文"
    assert normalize_whitespace("한국어 문장") == "한국어 문장"  # Hangul keeps its spaces


@pytest.mark.parametrize("c", [chr(i) for i in range(sys.maxunicode + 1) if chr(i).isspace()])
def test_every_whitespace_character_collapses(c: str) -> None:
    assert normalize_whitespace(f"{c}a{c}{c}b{c}") == "a b"
    seg = split_sentences(f"{c}{c}Word{c}")[0]
    assert (seg.start, seg.end) == (2, 6)


def test_segments_are_normalized() -> None:
    assert texts("  Hello \t world.\u00a0 中文 \u200b 句子。") == ["Hello world.", "中文句子。"]


def test_contains_cjk() -> None:
    for s in ("中", "abc中", "。", "，", "カタカナ", "ひらがな", "（", "𠀀"):
        assert contains_cjk(s), s
    for s in ("", "abc", "한국어", "Ünïcödé", "3.14", "“”", "\u3000"):
        assert not contains_cjk(s), s


# --- dropping -----------------------------------------------------------------------------


def test_punctuation_only_segments_are_dropped() -> None:
    assert texts("Hello.\n***\n---\n…\n。\nWorld.") == ["Hello.", "World."]
    assert texts("***") == []
    assert texts("") == []
    assert texts(" \n\t\u3000\u200b ") == []


def test_letters_and_digits_are_never_dropped() -> None:
    assert texts("***\n7\n---\nX") == ["7", "X"]


def test_paragraph_end_moves_to_the_kept_segment_before_a_dropped_one() -> None:
    segments = split_sentences("Hello\n***\n\nNext\n---")
    assert [(s.text, s.paragraph_end) for s in segments] == [("Hello", True), ("Next", True)]


# --- offsets ------------------------------------------------------------------------------


def test_offsets_point_at_the_raw_span() -> None:
    text = "  Hello   world.  \n\n\t你好 世界。 x"
    segments = split_sentences(text)
    assert [(s.text, s.start, s.end) for s in segments] == [
        ("Hello world.", 2, 16),
        ("你好世界。", 21, 27),
        ("x", 28, 29),
    ]
    assert text[2:16] == "Hello   world."
    assert text[21:27] == "你好 世界。"


# --- max length and soft splits ----------------------------------------------------------


def test_max_chars_validation() -> None:
    with pytest.raises(ValueError):
        split_sentences("hello", 19)
    assert texts("hello", 20) == ["hello"]
    assert DEFAULT_MAX_SEGMENT_CHARS == 300


def test_default_max_is_300() -> None:
    text = " ".join(["word"] * 100) + "."  # 500 characters
    assert [len(t) for t in texts(text)] == [299, 200]
    assert texts(text, 1000) == [text]


def test_soft_split_prefers_the_last_clause_break() -> None:
    text = "alpha beta gamma, delta epsilon zeta, eta theta iota kappa lambda."
    assert texts(text, 40) == [
        "alpha beta gamma, delta epsilon zeta,",
        "eta theta iota kappa lambda.",
    ]


def test_soft_split_clause_break_even_if_early() -> None:
    text = "Well, " + " ".join(["word"] * 10)
    assert texts(text, 30) == ["Well,", "word word word word word word", "word word word word"]


def test_soft_split_falls_back_to_whitespace() -> None:
    text = "aaaa bbbb cccc dddd eeee ffff gggg hhhh"
    assert texts(text, 20) == ["aaaa bbbb cccc dddd", "eeee ffff gggg hhhh"]


def test_soft_split_chinese_comma() -> None:
    text = "一二三四五六七八九十，一二三四五六七八九十一二三四五六七八九十"
    assert texts(text, 20) == ["一二三四五六七八九十，", "一二三四五六七八九十一二三四五六七八九十"]


def test_soft_split_between_cjk_characters() -> None:
    text = "中" * 45
    assert texts(text, 20) == ["中" * 20, "中" * 20, "中" * 5]


def test_soft_split_between_cjk_and_latin() -> None:
    assert texts("中" * 10 + "a" * 26, 20) == ["中" * 10, "a" * 20, "a" * 6]
    assert texts("abc" + "中" * 30, 20) == ["abc" + "中" * 17, "中" * 13]


def test_soft_split_not_before_cjk_punctuation_nor_after_an_opener() -> None:
    assert texts("中" * 20 + "」" + "中", 20) == ["中" * 19, "中」中"]
    assert texts("中" * 19 + "「中中", 20) == ["中" * 19, "「中中"]


def test_soft_split_space_between_cjk_counts_as_normalized() -> None:
    text = "中 " * 30  # normalizes to 30 characters
    segments = split_sentences(text, 20)
    assert [s.text for s in segments] == ["中" * 20, "中" * 10]
    assert_invariants(text, segments, 20)


def test_giant_token_is_hard_cut() -> None:
    url = "https://example.com/" + "a" * 100
    assert [len(t) for t in texts(url, 50)] == [50, 50, 20]
    assert "".join(texts(url, 50)) == url
    token = "QUJD" * 250  # base64-like, 1000 characters
    assert [len(t) for t in texts(f"Data: {token} end", 300)] == [5, 300, 300, 300, 104]


def test_soft_split_never_cuts_inside_numbers() -> None:
    for n in range(5, 40):
        text = "x " * n + "3,000,000 and 3.14 and 10:30 and 1–5 and 3，000 ok"
        segments = split_sentences(text, 20)
        joined = " | ".join(s.text for s in segments)
        for number in ("3,000,000", "3.14", "10:30", "1–5", "3，000"):
            assert any(number in s.text for s in segments), (number, joined)
        assert_invariants(text, segments, 20)


def test_soft_split_ascii_comma_needs_space_after() -> None:
    text = "aaaa,bbbb cccc dddd eeee ffff"
    assert texts(text, 20) == ["aaaa,bbbb cccc dddd", "eeee ffff"]


def test_soft_split_keeps_closing_quote_with_clause() -> None:
    text = "He said “yes,” and then went to the shop again"
    assert texts(text, 30) == ["He said “yes,”", "and then went to the shop", "again"]


def test_soft_split_dash() -> None:
    text = "The first part—then the second part goes on and on"
    assert texts(text, 30)[0] == "The first part—"


def test_soft_split_hard_cut_at_a_zero_width_joint_leaves_it_out() -> None:
    text = "a" * 20 + "\u200b" + "b" * 5
    segments = split_sentences(text, 20)
    assert [(s.text, s.start, s.end) for s in segments] == [("a" * 20, 0, 20), ("b" * 5, 21, 26)]


def test_soft_split_zero_width_joined_word_is_not_cut_at_the_joint() -> None:
    text = "aaaa " + "b" * 10 + "\u200b" + "c" * 10
    assert texts(text, 20) == ["aaaa", "b" * 10 + "c" * 10]


# --- property tests -----------------------------------------------------------------------

_WORDS = st.sampled_from(
    [
        "hello", "World", "the", "Mr.", "Dr.", "e.g.", "U.S.", "etc.", "No.", "J.", "I",
        "3.14", "v1.2.3", "example.com", "3,000,000", "10:30", "1.", "12.", "a.b", "x",
        "https://example.com/path?q=1", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "한국어",
    ]
)  # fmt: skip
_HAN = st.text(alphabet="中文测试句子你好世界一二三龍𠀀カナひら", min_size=1, max_size=30)
_PUNCT = st.sampled_from(
    [*".!?;…。！？；｡，、：:,—–\"'“”‘’「」『』（）()[]*-", "...", "？！", "……", "***"]
)
_SPACE = st.sampled_from(
    [" ", "  ", "\t", "\n", "\n\n", "\r\n", "\n \n", "\u00a0", "\u3000", "\u200b", "\u2029", "\r"]
)
_DIGITS = st.integers(min_value=0, max_value=10**12).map(str)
_PIECE = st.one_of(_WORDS, _HAN, _PUNCT, _SPACE, _SPACE, _DIGITS, st.text(max_size=3))
MIXED = st.lists(_PIECE, max_size=120).map("".join)


@PROPERTY_SETTINGS
@given(text=MIXED, max_chars=st.integers(min_value=20, max_value=80))
def test_property_invariants_mixed(text: str, max_chars: int) -> None:
    assert_invariants(text, split_sentences(text, max_chars), max_chars)


@PROPERTY_SETTINGS
@given(text=st.text(max_size=400), max_chars=st.integers(min_value=20, max_value=60))
def test_property_invariants_any_unicode(text: str, max_chars: int) -> None:
    assert_invariants(text, split_sentences(text, max_chars), max_chars)


@PROPERTY_SETTINGS
@given(
    text=st.lists(st.one_of(_HAN, _WORDS, _SPACE, _PUNCT), min_size=20, max_size=200).map(" ".join)
)
def test_property_invariants_default_max(text: str) -> None:
    assert_invariants(text, split_sentences(text), DEFAULT_MAX_SEGMENT_CHARS)


@PROPERTY_SETTINGS
@given(text=MIXED, max_chars=st.integers(min_value=20, max_value=80))
def test_property_max_chars_only_splits_long_sentences(text: str, max_chars: int) -> None:
    segments = split_sentences(text, max_chars)
    assert split_sentences(text, max_chars) == segments  # deterministic
    sentences = split_sentences(text, 100_000)
    # Sentences within the limit come out unchanged; longer ones are covered by their pieces.
    for sentence in sentences:
        inside = [s for s in segments if sentence.start <= s.start and s.end <= sentence.end]
        if len(sentence.text) <= max_chars:
            assert inside == [sentence]
        else:
            assert inside
            assert inside[-1].paragraph_end == sentence.paragraph_end
    assert sum(
        1 for s in segments for t in sentences if t.start <= s.start and s.end <= t.end
    ) == len(segments)


# --- size ---------------------------------------------------------------------------------


def _megabyte_of_mixed_text(seed: int = 7) -> str:
    rng = random.Random(seed)
    words = ("the", "quick", "Mr.", "Smith", "3.14", "example.com", "e.g.", "3,000,000", "dog")
    han = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可"
    parts: list[str] = []
    size = 0
    while size < 1_000_000:
        r = rng.random()
        if r < 0.45:
            piece = " ".join(rng.choice(words) for _ in range(rng.randint(3, 30))) + ". "
        elif r < 0.9:
            piece = "".join(rng.choice(han) for _ in range(rng.randint(3, 60))) + "。"
        elif r < 0.95:
            piece = f"\n{rng.randint(1, 20)}. item\n"
        else:
            piece = rng.choice(["\n\n", "\n", "a" * rng.randint(200, 900), " *** "])
        parts.append(piece)
        size += len(piece)
    return "".join(parts)


def test_one_megabyte_of_mixed_text() -> None:
    text = _megabyte_of_mixed_text()
    assert len(text) >= 1_000_000
    segments = split_sentences(text)
    assert len(segments) > 10_000
    assert_invariants(text, segments, DEFAULT_MAX_SEGMENT_CHARS)
