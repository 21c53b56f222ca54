"""The public entry points: read_document (bytes) and document_from_text (a str)."""

from __future__ import annotations

import pytest

from tests.support.documents import epub2_ncx_epub
from voicelane.common.errors import InvalidDocumentError, InvalidInputError, TextTooLargeError
from voicelane.core.documents import (
    DOCUMENT_KINDS,
    DocumentLimits,
    document_from_text,
    read_document,
)

LIMITS = DocumentLimits(max_chars=1_000)


def test_kinds() -> None:
    assert DOCUMENT_KINDS == ("text", "markdown", "html", "epub", "ssml")


def test_text_and_ssml_are_taken_as_given() -> None:
    text = read_document(b"Hello  there.\n\nTwo.", limits=LIMITS)
    assert (text.kind, text.text, text.chapters) == ("text", "Hello  there.\n\nTwo.", ())
    ssml = read_document(b"<speak>Hi <break/> there</speak>", limits=LIMITS)
    assert (ssml.kind, ssml.text) == ("ssml", "<speak>Hi <break/> there</speak>")


@pytest.mark.parametrize(
    ("data", "message"),
    [(b"", "is empty"), (b"a\x00b", "looks binary"), (b"caf\xe9", "not valid UTF-8")],
)
def test_text_follows_decode_texts_rules(data: bytes, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        read_document(data, limits=LIMITS)


def test_markdown_and_html_bytes_that_do_not_decode_are_invalid_documents() -> None:
    with pytest.raises(InvalidDocumentError, match=r"^Markdown is not valid UTF-8"):
        read_document(b"# caf\xe9", filename="a.md", limits=LIMITS)


def test_a_kind_given_is_used_and_an_epub_by_detection() -> None:
    assert read_document(b"# T\n\nx", kind="markdown", limits=LIMITS).chapters[0].title == "T"
    book = read_document(epub2_ncx_epub().data, limits=DocumentLimits(max_chars=10_000))
    assert book.kind == "epub" and book.title == "The Old Mill"


def test_epub_kind_on_bytes_that_are_not_a_zip() -> None:
    with pytest.raises(InvalidDocumentError, match=r"^EPUB is not a zip archive$"):
        read_document(b"text", kind="epub", limits=LIMITS)


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(InvalidDocumentError, match="unknown document kind 'pdf'"):
        read_document(b"x", kind="pdf", limits=LIMITS)


def test_document_from_text() -> None:
    markdown = document_from_text("# Title\n\nBody *text*.", "markdown", limits=LIMITS)
    assert (markdown.text, markdown.title) == ("Title\n\nBody text.", "Title")
    html = document_from_text("<h2>A</h2><p>b</p>", "html", limits=LIMITS)
    assert [c.title for c in html.chapters] == ["A"]
    assert document_from_text("plain", "text", limits=LIMITS).text == "plain"
    with pytest.raises(InvalidDocumentError, match="EPUB must be uploaded as a file"):
        document_from_text("x", "epub", limits=LIMITS)
    with pytest.raises(InvalidDocumentError, match="lone surrogate"):
        document_from_text("a\ud800", "html", limits=LIMITS)


def test_too_much_text_is_413() -> None:
    with pytest.raises(TextTooLargeError):
        read_document(b"x" * 1_001, limits=LIMITS)
    with pytest.raises(TextTooLargeError):
        document_from_text("<p>" + "word " * 300 + "</p>", "html", limits=LIMITS)
