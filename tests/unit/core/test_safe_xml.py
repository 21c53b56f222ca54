"""The hardened XML reader: hostile documents are refused with a line and column, spans of
text point at the characters they came from, whatever the document holds."""

from __future__ import annotations

import itertools

import pytest

from voicelane.core.safe_xml import XmlElement, XmlError, XmlText, parse_xml

MAX = 1_000_000

BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol9 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
]>
<speak>&lol9;</speak>"""

EXTERNAL_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE speak [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<speak>&xxe;</speak>"""


def texts(element: XmlElement) -> list[XmlText]:
    return [child for child in element.children if isinstance(child, XmlText)]


def elements(element: XmlElement) -> list[XmlElement]:
    return [child for child in element.children if isinstance(child, XmlElement)]


# ---- hostile input ---------------------------------------------------------------------------


def test_billion_laughs_is_refused_at_its_doctype() -> None:
    with pytest.raises(XmlError, match="DOCTYPE") as caught:
        parse_xml(BILLION_LAUGHS, max_chars=MAX)
    assert (caught.value.line, caught.value.column) == (2, 1)


def test_an_external_entity_is_refused_and_nothing_is_read() -> None:
    with pytest.raises(XmlError, match="DOCTYPE") as caught:
        parse_xml(EXTERNAL_ENTITY, max_chars=MAX)
    assert caught.value.line == 2
    assert "root" not in str(caught.value)


def test_an_external_dtd_reference_is_refused() -> None:
    source = '<!DOCTYPE speak SYSTEM "http://example.com/evil.dtd"><speak>x</speak>'
    with pytest.raises(XmlError, match="DOCTYPE"):
        parse_xml(source, max_chars=MAX)


def test_an_entity_reference_without_a_definition_is_refused() -> None:
    with pytest.raises(XmlError, match="undefined entity") as caught:
        parse_xml("<speak>\n  a &nbsp; b</speak>", max_chars=MAX)
    assert (caught.value.line, caught.value.column) == (2, 5)


def test_ten_thousand_nested_elements_are_refused_at_the_depth_cap() -> None:
    source = "<speak>" + "<p>" * 10_000 + "x" + "</p>" * 10_000 + "</speak>"
    with pytest.raises(XmlError, match="nested deeper than 64") as caught:
        parse_xml(source, max_chars=MAX)
    # The 65th element: "<speak>" then 63 "<p>" fit, the 64th "<p>" does not.
    assert (caught.value.line, caught.value.column) == (1, 8 + 63 * 3)


def test_more_elements_than_the_cap_are_refused() -> None:
    source = "<speak>" + "<b/>" * 101 + "</speak>"
    with pytest.raises(XmlError, match="more than 100 elements"):
        parse_xml(source, max_chars=MAX, max_elements=100)


def test_a_ten_megabyte_document_is_refused_before_parsing_naming_where_the_cap_falls() -> None:
    line = "<s>" + "a" * 96 + "</s>\n"  # 104 characters
    source = "<speak>\n" + line * 100_000 + "</speak>"
    assert len(source) > 10_000_000
    with pytest.raises(XmlError, match="longer than 1000000 characters") as caught:
        parse_xml(source, max_chars=MAX)
    # Character 1,000,000 lies on line 2 + (1,000,000 - 8) // 104.
    assert caught.value.line == 2 + (MAX - 8) // 104
    assert caught.value.column == (MAX - 8) % 104 + 1


def test_an_unclosed_tag_names_its_line_and_column() -> None:
    with pytest.raises(XmlError, match=r"no element found|unclosed") as caught:
        parse_xml("<speak>\n  <p>Hello\n", max_chars=MAX)
    assert caught.value.line == 3


def test_a_mismatched_end_tag_names_the_column_in_code_points() -> None:
    # "é" is two bytes and "中" three in UTF-8: columns count characters.
    with pytest.raises(XmlError, match="mismatched tag") as caught:
        parse_xml("<speak>é中<a></speak>", max_chars=MAX)
    assert (caught.value.line, caught.value.column) == (1, 15)


def test_text_outside_the_root_is_refused() -> None:
    with pytest.raises(XmlError):
        parse_xml("<speak>a</speak> trailing", max_chars=MAX)


# ---- spans -----------------------------------------------------------------------------------


def test_a_reference_decodes_but_spans_its_source_characters() -> None:
    source = "<speak>Tom &amp; Jerry &#233;&#x4e2d;</speak>"
    root = parse_xml(source, max_chars=MAX)
    runs = texts(root)
    assert "".join(run.text for run in runs) == "Tom & Jerry é中"
    for run in runs:
        if run.exact:
            assert source[run.start : run.end] == run.text
    amp = next(run for run in runs if run.text == "&")
    assert source[amp.start : amp.end] == "&amp;"
    assert not amp.exact
    assert source[runs[-1].start : runs[-1].end] == "&#x4e2d;"


def test_a_character_reference_with_thousands_of_leading_zeros_reads() -> None:
    reference = "&#" + "0" * 5000 + "65;"
    source = f"<speak>a {reference} &#x{'0' * 5000}42;</speak>"
    runs = texts(parse_xml(source, max_chars=MAX))
    assert "".join(run.text for run in runs) == "a A B"
    letter = next(run for run in runs if run.text == "A")
    assert source[letter.start : letter.end] == reference


def test_spans_of_non_ascii_text_are_code_points() -> None:
    source = "<speak>é中文 <b>😀 x</b> ü</speak>"
    root = parse_xml(source, max_chars=MAX)
    first = texts(root)[0]
    assert first.text == "é中文 "
    assert source[first.start : first.end] == "é中文 "
    inner = texts(elements(root)[0])[0]
    assert source[inner.start : inner.end] == "😀 x"
    last = texts(root)[-1]
    assert source[last.start : last.end] == " ü"


def test_an_xml_declaration_naming_another_encoding_does_not_garble_the_text() -> None:
    source = '<?xml version="1.0" encoding="ISO-8859-1"?>\n<speak>café</speak>'
    root = parse_xml(source, max_chars=MAX)
    run = texts(root)[0]
    assert run.text == "café"
    assert source[run.start : run.end] == "café"


def test_comments_cdata_and_instructions_end_the_text_before_them() -> None:
    source = "<speak>a<!-- note -->b<![CDATA[<c>]]>d<?pi x?>e</speak>"
    root = parse_xml(source, max_chars=MAX)
    runs = texts(root)
    assert [run.text for run in runs] == ["a", "b", "<c>", "d", "e"]
    for run in runs:
        assert source[run.start : run.end] == run.text


def test_a_crlf_line_end_reads_as_one_newline_spanning_both_characters() -> None:
    source = "<speak>a\r\nb</speak>"
    runs = texts(parse_xml(source, max_chars=MAX))
    assert "".join(run.text for run in runs) == "a\nb"
    newline = next(run for run in runs if run.text == "\n")
    assert source[newline.start : newline.end] == "\r\n"


def test_a_lone_cr_reads_as_a_newline_that_is_not_the_source_as_written() -> None:
    source = "<speak>a\rb</speak>"
    runs = texts(parse_xml(source, max_chars=MAX))
    newline = next(run for run in runs if run.text == "\n")
    assert source[newline.start : newline.end] == "\r"
    assert not newline.exact
    assert all(run.exact for run in runs if run is not newline)


def test_empty_tags_span_themselves_even_before_an_end_tag() -> None:
    source = '<speak><a/>x<b x=">"/></speak>'
    root = parse_xml(source, max_chars=MAX)
    first, second = elements(root)
    assert source[first.start : first.end] == "<a/>"
    assert source[second.start : second.end] == '<b x=">"/>'
    assert second.attrs == {"x": ">"}
    assert texts(root)[0].text == "x"
    assert source[root.start : root.end] == source


def test_elements_span_their_start_to_end_tags_and_know_their_line_and_column() -> None:
    source = '<speak>\n  <p xml:lang="en">Hi <em>you</em></p>\n</speak>'
    root = parse_xml(source, max_chars=MAX)
    paragraph = elements(root)[0]
    assert source[paragraph.start : paragraph.end] == '<p xml:lang="en">Hi <em>you</em></p>'
    assert (paragraph.line, paragraph.column) == (2, 3)
    assert paragraph.attrs == {"xml:lang": "en"}
    assert paragraph.text() == "Hi you"
    emphasis = elements(paragraph)[0]
    assert emphasis.name == "em"
    assert (emphasis.line, emphasis.column) == (2, 23)


def test_a_prefixed_tag_keeps_its_prefix_and_names_its_local_part() -> None:
    root = parse_xml(
        '<speak><amazon:effect name="whispered">x</amazon:effect></speak>', max_chars=MAX
    )
    effect = elements(root)[0]
    assert effect.tag == "amazon:effect"
    assert effect.name == "effect"


def test_a_large_document_of_many_runs_keeps_every_character() -> None:
    # Many lines and references: one pass, every character where it was.
    body = "line &amp; more\n" * 20_000
    source = "<speak>" + body + "</speak>"
    root = parse_xml(source, max_chars=MAX)
    runs = texts(root)
    assert "".join(run.text for run in runs) == body.replace("&amp;", "&")
    assert runs[0].start == 7
    assert runs[-1].end == len(source) - len("</speak>")
    for previous, current in itertools.pairwise(runs):
        assert previous.end == current.start


# ---- the EPUB opt-ins: a DOCTYPE without internal subset, HTML's named entities -------------

NCX_DOCTYPE = (
    '<?xml version="1.0"?>\n<!DOCTYPE ncx PUBLIC "-//NISO//DTD ncx 2005-1//EN"'
    ' "http://www.daisy.org/z3986/2005/ncx-2005-1.dtd">\n<ncx><text>a&amp;b</text></ncx>'
)


def test_a_doctype_without_internal_subset_is_refused_by_default() -> None:
    with pytest.raises(XmlError, match="DOCTYPE"):
        parse_xml(NCX_DOCTYPE, max_chars=MAX)


def test_a_doctype_without_internal_subset_is_read_when_allowed_and_its_dtd_never_loaded() -> None:
    root = parse_xml(NCX_DOCTYPE, max_chars=MAX, allow_doctype=True)
    assert root.name == "ncx"
    assert root.text() == "a&b"


@pytest.mark.parametrize("source", [BILLION_LAUGHS, EXTERNAL_ENTITY])
def test_an_internal_subset_is_refused_even_when_doctypes_are_allowed(source: str) -> None:
    with pytest.raises(XmlError, match="internal subset") as caught:
        parse_xml(source, max_chars=MAX, allow_doctype=True, html_entities=True)
    assert (caught.value.line, caught.value.column) == (2, 1)


def test_html_named_entities_decode_when_asked_with_their_source_spans() -> None:
    source = "<p>a&nbsp;b &eacute;&amp;</p>"
    root = parse_xml(source, max_chars=MAX, html_entities=True)
    assert root.text() == "a\u00a0b é&"
    nbsp = next(t for t in texts(root) if t.text == "\u00a0")
    assert source[nbsp.start : nbsp.end] == "&nbsp;"
    assert nbsp.decoded


def test_html_named_entities_also_decode_behind_an_allowed_doctype() -> None:
    source = '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" "x.dtd"><p>a&nbsp;b</p>'
    root = parse_xml(source, max_chars=MAX, allow_doctype=True, html_entities=True)
    assert root.text() == "a\u00a0b"


def test_an_unknown_entity_name_is_refused_even_with_html_entities() -> None:
    with pytest.raises(XmlError, match="undefined entity &bogus;"):
        parse_xml("<p>a &bogus; b</p>", max_chars=MAX, html_entities=True)


def test_without_the_opt_in_nbsp_is_still_an_undefined_entity_behind_a_doctype() -> None:
    source = '<!DOCTYPE p SYSTEM "x.dtd"><p>a&nbsp;b</p>'
    with pytest.raises(XmlError, match="undefined entity &nbsp;"):
        parse_xml(source, max_chars=MAX, allow_doctype=True)
