"""voicelane.core.lexicon: where entries match (whole words, CJK, longest, overlaps, later
entries replace earlier), W3C PLS import (hostile XML refused with line and column) and the
JSON form, and every rule an entry is checked by."""

from __future__ import annotations

import re
import unicodedata
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voicelane.common.errors import InvalidInputError, MalformedRequestError, TextTooLargeError
from voicelane.core.lexicon import (
    MAX_ALIAS_CHARS,
    MAX_ENTRIES,
    MAX_GRAPHEME_CHARS,
    MAX_PHONEME_CHARS,
    Lexicon,
    LexiconEntry,
    parse_lexicon_json,
    parse_pls,
    read_lexicon,
)


def alias(*graphemes: str, to: str = "X") -> LexiconEntry:
    return LexiconEntry(graphemes, alias=to)


def found(lexicon: Lexicon, text: str) -> list[tuple[str, str | None]]:
    """Each hit as (the text it covers, the alias it says)."""
    hits = lexicon.find(text)
    assert all(a.end <= b.start for a, b in pairwise(hits))  # in order
    return [(text[h.start : h.end], h.entry.alias) for h in hits]


# ---- find --------------------------------------------------------------------------------


def test_latin_graphemes_match_whole_words_only() -> None:
    lexicon = Lexicon((alias("cat", to="kitty"),))
    text = "cat cats concat (cat), bobcat cat. CAT Cat cat"
    hits = lexicon.find(text)
    assert [(h.start, h.end) for h in hits] == [(0, 3), (17, 20), (30, 33), (43, 46)]
    assert all(text[h.start : h.end] == "cat" and h.entry.alias == "kitty" for h in hits)


def test_digits_are_word_characters() -> None:
    lexicon = Lexicon((alias("3", to="three"), alias("R2D2", to="artoo")))
    assert found(lexicon, "35 3 3.5 R2D2 R2D22 xR2D2") == [
        ("3", "three"),
        ("3", "three"),  # "3.5": the point is a boundary
        ("R2D2", "artoo"),
    ]


def test_underscore_and_punctuation_are_boundaries() -> None:
    lexicon = Lexicon((alias("API"),))
    assert found(lexicon, "API_KEY, an-API-call, 'API'") == [("API", "X")] * 3


def test_graphemes_with_punctuation_and_regex_characters() -> None:
    lexicon = Lexicon((alias("C++", to="C plus plus"), alias(".NET", to="dot net"), alias("[x]")))
    assert found(lexicon, "C++, .NET and [x]; C+ NET ASP.NET") == [
        ("C++", "C plus plus"),
        (".NET", "dot net"),
        ("[x]", "X"),
        (".NET", "dot net"),  # an edge that is punctuation needs no boundary
    ]


def test_han_graphemes_match_anywhere_in_han_text() -> None:
    lexicon = Lexicon((alias("北京", to="Beijing"), alias("行", to="xing")))
    assert found(lexicon, "我在北京工作。银行") == [("北京", "Beijing"), ("行", "xing")]


def test_latin_next_to_han_is_a_boundary_both_ways() -> None:
    lexicon = Lexicon((alias("AI", to="A I"), alias("芯片", to="chip")))
    assert found(lexicon, "用AI做芯片，AIR不算，GPU芯片") == [
        ("AI", "A I"),
        ("芯片", "chip"),
        ("芯片", "chip"),
    ]


def test_kana_and_thai_are_written_without_spaces() -> None:
    lexicon = Lexicon((alias("東京"), alias("カメラ"), alias("ไทย")))
    assert found(lexicon, "東京のカメラ屋さん") == [("東京", "X"), ("カメラ", "X")]
    assert found(lexicon, "ภาษาไทยง่าย") == [("ไทย", "X")]


def test_scripts_with_spaces_need_boundaries() -> None:
    lexicon = Lexicon((alias("Москва"), alias("서울"), alias("Αθήνα")))
    text = "Москва Москвафильм 서울 서울시 Αθήνα Αθήνας"
    assert found(lexicon, text) == [("Москва", "X"), ("서울", "X"), ("Αθήνα", "X")]


def test_a_grapheme_never_ends_before_a_combining_mark() -> None:
    lexicon = Lexicon((alias("cafe"), alias("行"), alias("नमस")))
    assert found(lexicon, "cafe\u0301 cafe") == [("cafe", "X")]
    assert found(lexicon, "行\u0301") == []
    assert found(lexicon, "नमस्ते नमस") == [("नमस", "X")]  # not before the virama
    # nor starts right after one (the mark belongs to the letter before)
    assert found(Lexicon((alias("te"),)), "e\u0301te te") == [("te", "X")]


def test_the_longest_grapheme_wins_where_several_start() -> None:
    lexicon = Lexicon(
        (alias("New", to="new"), alias("New York City", to="NYC"), alias("New York", to="NY"))
    )
    assert found(lexicon, "New York City, New York, New Jersey") == [
        ("New York City", "NYC"),
        ("New York", "NY"),
        ("New", "new"),
    ]


def test_a_longer_grapheme_that_is_not_a_whole_word_gives_way_to_a_shorter() -> None:
    lexicon = Lexicon((alias("foo", to="short"), alias("foo bar", to="long")))
    assert found(lexicon, "foo barn, foo bar") == [("foo", "short"), ("foo bar", "long")]


def test_matches_never_overlap_and_go_left_to_right() -> None:
    lexicon = Lexicon((alias("b c", to="second"), alias("a b", to="first")))
    assert found(lexicon, "a b c") == [("a b", "first")]
    assert found(lexicon, "x b c a b") == [("b c", "second"), ("a b", "first")]
    han = Lexicon((alias("北京大", to="one"), alias("大学", to="two")))
    assert found(han, "北京大学") == [("北京大", "one")]


def test_a_later_entry_replaces_an_earlier_one_for_the_same_grapheme() -> None:
    lexicon = Lexicon(
        (
            alias("cat", "dog", to="first"),
            alias("cat", to="second"),
            LexiconEntry(("cat",), phoneme="kæt"),
        )
    )
    hits = lexicon.find("cat dog")
    assert [h.entry.phoneme for h in hits] == ["kæt", None]
    assert hits[1].entry.alias == "first"  # dog keeps the entry that still names it


def test_matching_is_case_sensitive() -> None:
    lexicon = Lexicon((alias("NASA", to="nasa"), alias("nasa", to="lower")))
    assert found(lexicon, "NASA Nasa nasa") == [("NASA", "nasa"), ("nasa", "lower")]


def test_a_space_in_a_grapheme_matches_any_run_of_whitespace() -> None:
    lexicon = Lexicon((alias("New  York", to="NY"),))
    assert found(lexicon, "New York, New\n  York, New\u00a0York, NewYork") == [
        ("New York", "NY"),
        ("New\n  York", "NY"),
        ("New\u00a0York", "NY"),
    ]


def test_an_empty_lexicon_or_text_finds_nothing() -> None:
    assert Lexicon().find("anything") == []
    assert Lexicon((alias("a"),)).find("") == []
    assert not Lexicon() and Lexicon((alias("a"),))


def test_a_lexicon_read_back_from_json_matches_alike_and_compares_equal() -> None:
    lexicon = Lexicon((alias("cat"), LexiconEntry(("dog",), phoneme="dQg", alphabet="x-sampa")))
    assert lexicon.find("cat") and lexicon.find("cat")  # the cached pattern is reused
    again = Lexicon.from_json(lexicon.to_json())
    assert again == lexicon and hash(again) == hash(lexicon)
    assert again.find("a cat, a dog") == lexicon.find("a cat, a dog")


def test_many_entries_and_a_long_text_are_matched() -> None:
    entries = tuple(alias(f"word{n}", to=f"w{n}") for n in range(MAX_ENTRIES))
    text = " ".join(f"word{n}" for n in range(0, 20_000, 3))  # words past 4999 are unknown
    hits = Lexicon(entries).find(text)
    assert [h.entry.alias for h in hits] == [f"w{n}" for n in range(0, MAX_ENTRIES, 3)]
    assert all(text[h.start : h.end] == f"word{h.entry.alias[1:]}" for h in hits if h.entry.alias)


# ---- PLS ---------------------------------------------------------------------------------

PLS_HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<lexicon version="1.0" alphabet="ipa" xml:lang="en-US"\n'
    '    xmlns="http://www.w3.org/2005/01/pronunciation-lexicon">\n'
)


def pls(body: str, head: str = PLS_HEAD) -> str:
    return head + body + "\n</lexicon>"


def test_a_pls_document_as_the_vendors_document_it() -> None:
    lexicon = parse_pls(
        pls(
            """
  <meta name="author" content="me"/>
  <metadata><rdf>anything</rdf></metadata>
  <lexeme>
    <grapheme> Benigni </grapheme>
    <phoneme> bɛˈniːnji</phoneme>
  </lexeme>
  <lexeme>
    <grapheme>BTW</grapheme>
    <grapheme>btw</grapheme>
    <alias>By the
        way</alias>
    <example>BTW, it works.</example>
  </lexeme>
  <lexeme><grapheme>W3C</grapheme><alias>World Wide Web Consortium</alias></lexeme>"""
        )
    )
    assert lexicon.entries == (
        LexiconEntry(("Benigni",), phoneme="bɛˈniːnji", alphabet="ipa"),
        LexiconEntry(("BTW", "btw"), alias="By the way"),
        LexiconEntry(("W3C",), alias="World Wide Web Consortium"),
    )
    assert [h.entry.alias for h in lexicon.find("btw, W3C")] == [
        "By the way",
        "World Wide Web Consortium",
    ]


def test_pls_x_sampa_on_the_lexicon_or_per_phoneme() -> None:
    head = PLS_HEAD.replace('alphabet="ipa"', 'alphabet="x-sampa"')
    lexicon = parse_pls(
        pls(
            "<lexeme><grapheme>tomato</grapheme><phoneme>t@'meItoU</phoneme></lexeme>"
            '<lexeme><grapheme>potato</grapheme><phoneme alphabet="ipa">pəˈteɪtoʊ</phoneme>'
            "</lexeme>",
            head,
        )
    )
    assert [(e.phoneme, e.alphabet) for e in lexicon.entries] == [
        ("t@'meItoU", "x-sampa"),
        ("pəˈteɪtoʊ", "ipa"),
    ]


def test_pls_takes_the_preferred_pronunciation_else_the_first() -> None:
    lexicon = parse_pls(
        pls(
            "<lexeme><grapheme>read</grapheme><phoneme>riːd</phoneme>"
            '<phoneme prefer="true">rɛd</phoneme></lexeme>'
            "<lexeme><grapheme>Dr</grapheme><alias>Doctor</alias><alias>Drive</alias></lexeme>"
        )
    )
    assert lexicon.entries[0].phoneme == "rɛd" and lexicon.entries[1].alias == "Doctor"


def test_pls_with_a_namespace_prefix_and_no_declaration() -> None:
    lexicon = parse_pls(
        '<pls:lexicon version="1.0" alphabet="ipa" '
        'xmlns:pls="http://www.w3.org/2005/01/pronunciation-lexicon">'
        "<pls:lexeme><pls:grapheme>GIF</pls:grapheme><pls:alias>jif</pls:alias></pls:lexeme>"
        "</pls:lexicon>"
    )
    assert lexicon.entries == (LexiconEntry(("GIF",), alias="jif"),)


def test_entities_xml_defines_are_read() -> None:
    lexicon = parse_pls(
        pls("<lexeme><grapheme>AT&amp;T</grapheme><alias>A T &#38; T</alias></lexeme>")
    )
    assert lexicon.entries == (LexiconEntry(("AT&T",), alias="A T & T"),)


HOSTILE = {
    "doctype": '<?xml version="1.0"?>\n<!DOCTYPE lexicon [<!ENTITY x "y">]>\n<lexicon/>',
    "billion laughs": (
        '<?xml version="1.0"?>\n<!DOCTYPE lolz [\n <!ENTITY lol "lol">\n'
        ' <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">\n]>\n'
        "<lexicon><lexeme><grapheme>&lol2;</grapheme><alias>x</alias></lexeme></lexicon>"
    ),
    "external entity": (
        '<!DOCTYPE lexicon [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
        "<lexicon><lexeme><grapheme>&xxe;</grapheme><alias>x</alias></lexeme></lexicon>"
    ),
    "undefined entity": pls("<lexeme><grapheme>&nbsp;</grapheme><alias>x</alias></lexeme>"),
    "not well-formed": pls("<lexeme><grapheme>a</alias></lexeme>"),
    "nested too deep": pls("<metadata>" + "<x>" * 100 + "</x>" * 100 + "</metadata>"),
    "empty": "",
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_or_malformed_xml_is_refused_with_its_line_and_column(name: str) -> None:
    with pytest.raises(MalformedRequestError) as caught:
        parse_pls(HOSTILE[name])
    error = caught.value
    assert error.field == "lexicon" and error.http_status == 400
    assert error.message.startswith("lexicon: line ") and ", column " in error.message


def test_a_doctype_is_refused_where_it_stands() -> None:
    with pytest.raises(MalformedRequestError, match=r"line 2, column \d+: .*DOCTYPE"):
        parse_pls(HOSTILE["doctype"])


def test_a_document_over_the_size_cap_is_refused_before_parsing() -> None:
    with pytest.raises(MalformedRequestError, match="longer than"):
        parse_pls(pls("<!--" + "x" * (3 * 1024 * 1024) + "-->"))


BAD_PLS = {
    "root": ("<speak>hi</speak>", "line 1, column 1: the root element is <speak>"),
    "namespace": (
        '<lexicon xmlns="http://example.com/other"/>',
        "line 1, column 1: namespace",
    ),
    "version": ('<lexicon version="2.0"/>', "only 1.0"),
    "lexicon alphabet": ('<lexicon alphabet="x-microsoft-sapi"/>', "alphabet 'x-microsoft-sapi'"),
    "phoneme alphabet": (
        pls('<lexeme><grapheme>a</grapheme><phoneme alphabet="ups">A</phoneme></lexeme>'),
        "line 4, column 31: alphabet 'ups'",
    ),
    "no grapheme": (
        pls("<lexeme><alias>x</alias></lexeme>"),
        "line 4, column 1: a <lexeme> without a <grapheme>",
    ),
    "no pronunciation": (
        pls("<lexeme><grapheme>a</grapheme></lexeme>"),
        "without an <alias> or a <phoneme>",
    ),
    "grapheme after alias": (
        pls("<lexeme><grapheme>a</grapheme><alias>x</alias><grapheme>b</grapheme></lexeme>"),
        "line 4, column 47: a <grapheme> after a pronunciation",
    ),
    "unknown element": (
        pls("<lexeme><grapheme>a</grapheme><sub>x</sub></lexeme>"),
        "<sub> is not a lexeme element",
    ),
    "unknown top element": (pls("<entry/>"), "<entry> is not a PLS element"),
    "text in lexicon": (pls("stray words"), "text 'stray words' directly in <lexicon>"),
    "markup in a grapheme": (
        pls("<lexeme><grapheme>a<b>c</b></grapheme><alias>x</alias></lexeme>"),
        "<b> inside <grapheme>: text only",
    ),
    "blank grapheme": (
        pls("<lexeme><grapheme>  </grapheme><alias>x</alias></lexeme>"),
        "grapheme 1 is blank",
    ),
    "blank alias": (
        pls("<lexeme><grapheme>a</grapheme><alias> </alias></lexeme>"),
        "alias is blank",
    ),
    "long grapheme": (
        pls(f"<lexeme><grapheme>{'a' * 101}</grapheme><alias>x</alias></lexeme>"),
        "101 characters; at most 100",
    ),
    "x-sampa not ascii": (
        pls('<lexeme><grapheme>a</grapheme><phoneme alphabet="x-sampa">ə</phoneme></lexeme>'),
        "x-sampa phoneme is ASCII only",
    ),
    "declared latin-1": (
        '<?xml version="1.0" encoding="ISO-8859-1"?><lexicon/>',
        "line 1: the document declares encoding 'ISO-8859-1'",
    ),
}


@pytest.mark.parametrize("name", BAD_PLS)
def test_a_pls_that_breaks_the_rules_names_line_column_and_field(name: str) -> None:
    document, message = BAD_PLS[name]
    with pytest.raises(InvalidInputError) as caught:
        parse_pls(document)
    assert not isinstance(caught.value, MalformedRequestError)
    assert caught.value.field == "lexicon"
    assert caught.value.message.startswith("lexicon: line ")
    assert message in caught.value.message


def test_a_pls_over_the_entry_cap_is_too_large() -> None:
    lexemes = "".join(
        f"<lexeme><grapheme>w{n}</grapheme><alias>x</alias></lexeme>"
        for n in range(MAX_ENTRIES + 1)
    )
    with pytest.raises(TextTooLargeError, match="at most 5,000"):
        parse_pls(pls(lexemes))
    assert len(parse_pls(pls(lexemes[: lexemes.rindex("<lexeme>")])).entries) == MAX_ENTRIES


# ---- JSON --------------------------------------------------------------------------------


def test_the_json_form() -> None:
    lexicon = parse_lexicon_json(
        {
            "entries": [
                {"graphemes": ["BTW", " btw "], "alias": "by  the way"},
                {"graphemes": ["tomato"], "phoneme": "t@'meItoU", "alphabet": "X-SAMPA"},
                {"grapheme": "Benigni", "phoneme": "bɛˈniːnji"},
            ]
        }
    )
    assert lexicon.entries == (
        LexiconEntry(("BTW", "btw"), alias="by the way"),
        LexiconEntry(("tomato",), phoneme="t@'meItoU", alphabet="x-sampa"),
        LexiconEntry(("Benigni",), phoneme="bɛˈniːnji", alphabet="ipa"),
    )


def test_a_lexicon_as_read_back_can_be_sent_again() -> None:
    shown = {
        "name": "brands",
        "default": True,
        "entry_count": 1,
        "size_bytes": 40,
        "updated_at": 1.0,
        "entries": [{"graphemes": ["GIF"], "alias": "jif"}],
    }
    assert parse_lexicon_json(shown).entries == (LexiconEntry(("GIF",), alias="jif"),)
    assert parse_lexicon_json({"entries": []}) == Lexicon()


def entry(**fields: Any) -> dict[str, Any]:
    return {"entries": [{"graphemes": ["ok"], "alias": "fine"}, fields]}


BAD_JSON: dict[str, tuple[Any, str, str]] = {
    "unknown top field": ({"entries": [], "lexemes": []}, "lexemes: unknown field", "lexemes"),
    "no entries": ({}, "entries: a list of entries is required", "entries"),
    "entries not a list": ({"entries": {"a": "b"}}, "a list of entries", "entries"),
    "entry not an object": ({"entries": ["cat"]}, "entries.0: an entry is an object", "entries"),
    "unknown entry field": (
        entry(graphemes=["a"], alias="b", role="noun"),
        "entries.1: unknown field 'role'",
        "entries",
    ),
    "both grapheme forms": (
        entry(graphemes=["a"], grapheme="a", alias="b"),
        "'graphemes' (a list) or 'grapheme'",
        "entries",
    ),
    "no grapheme field": (entry(alias="b"), "'graphemes' (a list) or 'grapheme'", "entries"),
    "graphemes not a list": (entry(graphemes="a", alias="b"), "graphemes is a list", "entries"),
    "no graphemes": (entry(graphemes=[], alias="b"), "entries.1: no grapheme", "entries"),
    "grapheme not a string": (
        entry(graphemes=[1], alias="b"),
        "grapheme 1 is not a string",
        "entries",
    ),
    "empty grapheme": (entry(graphemes=["a", ""], alias="b"), "grapheme 2 is blank", "entries"),
    "whitespace grapheme": (entry(graphemes=[" \t "], alias="b"), "grapheme 1 is blank", "entries"),
    "long grapheme": (
        entry(graphemes=["a" * (MAX_GRAPHEME_CHARS + 1)], alias="b"),
        "101 characters; at most 100",
        "entries",
    ),
    "alias and phoneme": (
        entry(graphemes=["a"], alias="b", phoneme="c"),
        "exactly one of an alias or a phoneme",
        "entries",
    ),
    "neither": (entry(graphemes=["a"]), "exactly one of an alias or a phoneme", "entries"),
    "alphabet with alias": (
        entry(graphemes=["a"], alias="b", alphabet="ipa"),
        "applies to a phoneme",
        "entries",
    ),
    "alias not a string": (entry(graphemes=["a"], alias=3), "alias is not a string", "entries"),
    "blank alias": (entry(graphemes=["a"], alias="  "), "alias is blank", "entries"),
    "long alias": (
        entry(graphemes=["a"], alias="b" * (MAX_ALIAS_CHARS + 1)),
        "alias is 201 characters; at most 200",
        "entries",
    ),
    "phoneme not a string": (
        entry(graphemes=["a"], phoneme=["p"]),
        "phoneme is not a string",
        "entries",
    ),
    "blank phoneme": (entry(graphemes=["a"], phoneme=""), "phoneme is blank", "entries"),
    "long phoneme": (
        entry(graphemes=["a"], phoneme="p" * (MAX_PHONEME_CHARS + 1)),
        "phoneme is 201 characters",
        "entries",
    ),
    "unknown alphabet": (
        entry(graphemes=["a"], phoneme="p", alphabet="arpabet"),
        "alphabet 'arpabet' is not one of ipa, x-sampa",
        "entries",
    ),
    "alphabet not a string": (
        entry(graphemes=["a"], phoneme="p", alphabet=1),
        "alphabet 1",
        "entries",
    ),
    "x-sampa not ascii": (
        entry(graphemes=["a"], phoneme="ə", alphabet="x-sampa"),
        "ASCII only",
        "entries",
    ),
    "lone surrogate": (
        entry(graphemes=["a\ud800"], alias="b"),
        "lone surrogate at offset 1",
        "entries",
    ),
    "control character": (
        entry(graphemes=["a"], alias="b\x07"),
        "control character (U+0007)",
        "entries",
    ),
}


@pytest.mark.parametrize("name", BAD_JSON)
def test_every_json_rule_names_the_entry_and_field(name: str) -> None:
    data, message, field = BAD_JSON[name]
    with pytest.raises(InvalidInputError) as caught:
        parse_lexicon_json(data)
    assert message in caught.value.message, caught.value.message
    assert caught.value.field == field
    assert caught.value.message.startswith(field)


def test_a_json_lexicon_that_is_not_an_object_is_malformed() -> None:
    with pytest.raises(MalformedRequestError):
        parse_lexicon_json([{"graphemes": ["a"], "alias": "b"}])


def test_a_json_lexicon_over_the_entry_cap_is_too_large() -> None:
    data = {"entries": [{"grapheme": f"w{n}", "alias": "x"} for n in range(MAX_ENTRIES + 1)]}
    with pytest.raises(TextTooLargeError) as caught:
        parse_lexicon_json(data)
    assert caught.value.http_status == 413 and caught.value.field == "entries"


# ---- either form -------------------------------------------------------------------------


def test_read_lexicon_reads_either_form_and_names_the_file() -> None:
    as_json = read_lexicon('\ufeff {"entries": [{"grapheme": "GIF", "alias": "jif"}]}')
    as_pls = read_lexicon(
        "\n  " + pls("<lexeme><grapheme>GIF</grapheme><alias>jif</alias></lexeme>")
    )
    assert as_json == as_pls == Lexicon((LexiconEntry(("GIF",), alias="jif"),))
    with pytest.raises(MalformedRequestError, match=r"^names\.json: malformed JSON") as caught:
        read_lexicon('{"entries": [', source="names.json")
    assert caught.value.field == "lexicon"
    with pytest.raises(InvalidInputError, match=r"^names.json: entries\.0: no grapheme") as bad:
        read_lexicon('{"entries": [{"graphemes": [], "alias": "x"}]}', source="names.json")
    assert bad.value.field == "lexicon"
    with pytest.raises(InvalidInputError, match=r"^names.json: colour: unknown field") as bad:
        read_lexicon('{"entries": [], "colour": 1}', source="names.json")
    assert bad.value.field == "lexicon"
    with pytest.raises(InvalidInputError, match=r"^names.pls: line 4, column 1: a <lexeme>"):
        read_lexicon(pls("<lexeme><alias>x</alias></lexeme>"), source="names.pls")
    with pytest.raises(MalformedRequestError, match=r"^names.pls: line 2, column \d+: .*DOCTYPE"):
        read_lexicon(HOSTILE["doctype"], source="names.pls")


# ---- against a plain reading of the rules ---------------------------------------------------

ALPHABET = "ab 北京\u0301.1\n"


def _word(char: str) -> bool:
    """A letter, digit or mark of a script written with spaces (here: not 北, 京)."""
    return char not in "北京" and (char.isalnum() or unicodedata.category(char).startswith("M"))


def reference_find(graphemes: list[str], text: str) -> list[tuple[int, int, str]]:
    """The rules read plainly: at each place, left to right, every grapheme tried as a regex
    with its own boundaries; the longest that fits wins; the later of equal ones."""
    table = {" ".join(g.split()): n for n, g in enumerate(graphemes) if g.split()}
    hits: list[tuple[int, int, str]] = []
    at = 0
    while at < len(text):
        best: tuple[int, str] | None = None
        for grapheme in table:
            match = re.compile(re.escape(grapheme).replace("\\ ", r"\s+")).match(text, at)
            if match is None:
                continue
            end = match.end()
            if (
                at
                and _word(grapheme[0])
                and (_word(text[at - 1]) or unicodedata.category(text[at - 1]).startswith("M"))
            ):
                continue
            if end < len(text):
                after = text[end]
                if unicodedata.category(after).startswith("M"):
                    continue
                if _word(grapheme[-1]) and _word(after):
                    continue
            if best is None or end > best[0]:
                best = (end, grapheme)
        if best is None:
            at += 1
            continue
        hits.append((at, best[0], best[1]))
        at = best[0]
    return hits


@settings(max_examples=300, deadline=None)
@given(
    graphemes=st.lists(st.text(ALPHABET, min_size=1, max_size=4), min_size=1, max_size=8),
    text=st.text(ALPHABET, max_size=30),
)
def test_find_agrees_with_the_rules_read_plainly(graphemes: list[str], text: str) -> None:
    entries = tuple(LexiconEntry((g,), alias=str(n)) for n, g in enumerate(graphemes))
    hits = Lexicon(entries).find(text)
    expected = reference_find(graphemes, text)
    assert [(h.start, h.end) for h in hits] == [(s, e) for s, e, _ in expected]
    last = {" ".join(g.split()): str(n) for n, g in enumerate(graphemes) if g.split()}
    assert [h.entry.alias for h in hits] == [last[g] for _, _, g in expected]
