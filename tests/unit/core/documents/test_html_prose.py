"""HTML → prose: blocks, collapsed whitespace, headings as chapters, metadata, and nothing
that is not prose read aloud; hostile markup refused or read in linear time."""

from __future__ import annotations

import pytest

from voicelane.common.errors import InvalidDocumentError, TextTooLargeError
from voicelane.core.documents.html_prose import html_document
from voicelane.core.documents.model import DocumentLimits

LIMITS = DocumentLimits(max_chars=1_000_000)

PAGE = """<!DOCTYPE html>
<html lang="fr-CA"><head><title>Le  Phare &amp; la mer</title>
<meta name="author" content="Anne Auteur"><style>p { color: red }</style>
<script>var secret = "script text";</script></head>
<body>
<nav><a href="/">Home menu</a></nav>
<p>Intro   before any
heading.</p>
<h1 id="one">First <em>part</em></h1>
<p>Text with a note<sup><a href="#fn1">1</a></sup> and x<sup>2</sup> and H<sub>2</sub>O.</p>
<p>Marked note<a href="#fn2" role="doc-noteref">[2]</a> and a
<a href="https://example.com/x">link text</a>.</p>
<span role="doc-pagebreak" title="12">12</span>
<h2>Second</h2><ul><li>one<li>two</ul>
<table><tr><td>cell a<td>cell b</table>
<h4>Too deep for a chapter</h4>
<p>Line<br>break and <img src="a.png" alt="a photo"> image.</p>
<div hidden>hidden text</div><template><p>template text</p></template>
<h3>Third</h3><p>End.</p>
<section role="doc-endnotes"><ol><li id="fn1">Note body one.</li></ol></section>
<aside epub:type="footnote" id="fn2">Note body two.</aside>
</body></html>"""


def test_the_prose_is_one_block_per_paragraph_with_whitespace_collapsed() -> None:
    document = html_document(PAGE, limits=LIMITS)
    assert document.text.split("\n\n") == [
        "Intro before any heading.",
        "First part",
        "Text with a note and x and H2O.",
        "Marked note and a link text.",
        "Second",
        "one",
        "two",
        "cell a",
        "cell b",
        "Too deep for a chapter",
        "Line break and image.",
        "Third",
        "End.",
    ]


@pytest.mark.parametrize(
    "absent",
    [
        "script text",
        "color",
        "Home menu",
        "Note body",
        "12",
        "hidden text",
        "template text",
        "a photo",
        "example.com",
        "Le Phare",
    ],
)
def test_what_is_not_prose_is_not_read(absent: str) -> None:
    assert absent not in html_document(PAGE, limits=LIMITS).text


def test_headings_h1_to_h3_are_chapters_starting_at_their_text() -> None:
    document = html_document(PAGE, limits=LIMITS)
    assert [(c.title, c.level) for c in document.chapters] == [
        ("First part", 1),
        ("Second", 2),
        ("Third", 3),
    ]
    for chapter in document.chapters:
        assert document.text.startswith(chapter.title, chapter.start)
    assert document.chapters[0].start > 0  # the text before the first heading is kept


def test_metadata_from_title_meta_author_and_html_lang() -> None:
    document = html_document(PAGE, limits=LIMITS)
    assert (document.title, document.author, document.language) == (
        "Le Phare & la mer",
        "Anne Auteur",
        "fr-CA",
    )


def test_alt_text_is_read_when_asked() -> None:
    limits = DocumentLimits(max_chars=1_000_000, read_alt_text=True)
    assert "Line break and a photo image." in html_document(PAGE, limits=limits).text


def test_a_superscript_that_is_not_a_note_marker_is_read() -> None:
    document = html_document("<p>the 4<sup>th</sup> of May</p>", limits=LIMITS)
    assert document.text == "the 4th of May"


def test_tag_soup_closes_paragraphs_and_list_items() -> None:
    document = html_document("<p>a<p>b<ul><li>c<li>d</ul></b></i>e", limits=LIMITS)
    assert document.text == "a\n\nb\n\nc\n\nd\n\ne"


def test_ten_thousand_nested_elements_are_refused_at_the_depth_cap() -> None:
    source = "<div>" * 10_000 + "x" + "</div>" * 10_000
    with pytest.raises(InvalidDocumentError, match=r"^HTML nested deeper than 256 elements$"):
        html_document(source, limits=LIMITS)


def test_two_hundred_thousand_unclosed_paragraphs_do_not_nest() -> None:
    document = html_document("<p>x" * 200_000, limits=LIMITS)
    assert document.text.count("x") == 200_000


def test_more_elements_than_the_cap_are_refused() -> None:
    limits = DocumentLimits(max_chars=1_000_000, max_elements=1000)
    with pytest.raises(InvalidDocumentError, match="more than 1,000 elements"):
        html_document("<b>x</b>" * 1001, limits=limits)


@pytest.mark.parametrize("source", ["</" * 300_000, "<!" * 300_000, "x" + "<" * 300_000])
def test_markup_that_never_ends_is_read_as_text_in_one_pass(source: str) -> None:
    # CPython 3.11's parser rescans to the end for each "<" that cannot end (minutes for
    # these); the tail after the last ">" is escaped first.
    document = html_document(source, limits=DocumentLimits(max_chars=10_000_000))
    assert document.text == source


def test_an_internal_dtd_subset_is_refused() -> None:
    with pytest.raises(InvalidDocumentError, match="internal subset"):
        html_document('<!DOCTYPE html [<!ENTITY a "b">]><p>&a;</p>', limits=LIMITS)


def test_no_readable_text_is_refused() -> None:
    with pytest.raises(InvalidDocumentError, match=r"^HTML has no readable text$"):
        html_document("<html><head><title>T</title></head><body><img alt=x></body>", limits=LIMITS)


def test_prose_over_max_chars_is_too_large() -> None:
    with pytest.raises(TextTooLargeError, match="more than 100 characters"):
        html_document("<p>" + "word " * 50 + "</p>", limits=DocumentLimits(max_chars=100))
