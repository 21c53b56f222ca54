"""detect_kind: content first, then the name or content type, else text."""

from __future__ import annotations

import pytest

from tests.support.documents import epub2_ncx_epub, zip_epub
from voicelane.common.errors import InvalidDocumentError
from voicelane.core.documents import detect_kind


def test_an_epub_is_found_by_its_mimetype_member_whatever_its_name() -> None:
    assert detect_kind(epub2_ncx_epub().data, filename="book.txt") == "epub"


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b'<?xml version="1.0"?>\n<!-- c -->\n<speak version="1.1">Hi</speak>', "ssml"),
        (b"\xef\xbb\xbf  <speak>Hi</speak>", "ssml"),
        (b"<!DOCTYPE html><p>x</p>", "html"),
        (b'<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml">', "html"),
        (b"<HTML><body>x</body></HTML>", "html"),
        (b"# Heading\n\nplain", "text"),
        (b"<p>inline html in a text</p>", "text"),
    ],
)
def test_content_decides_first(data: bytes, kind: str) -> None:
    assert detect_kind(data) == kind


@pytest.mark.parametrize(
    ("filename", "content_type", "kind"),
    [
        ("notes.md", None, "markdown"),
        ("NOTES.MARKDOWN", None, "markdown"),
        (None, "text/markdown; charset=utf-8", "markdown"),
        ("page.xhtml", None, "html"),
        (None, "text/html", "html"),
        ("x.ssml", None, "ssml"),
        ("x.txt", "text/markdown", "text"),
        (None, None, "text"),
    ],
)
def test_then_the_name_or_content_type(
    filename: str | None, content_type: str | None, kind: str
) -> None:
    assert detect_kind(b"# Title\n\nText.", filename=filename, content_type=content_type) == kind


def test_html_content_wins_over_a_markdown_name() -> None:
    assert detect_kind(b"<!doctype html><p>x", filename="a.md") == "html"


def test_a_file_named_epub_that_is_not_a_zip_is_refused() -> None:
    with pytest.raises(InvalidDocumentError, match=r"^file named .epub is not a zip archive$"):
        detect_kind(b"just text", filename="book.epub")
    with pytest.raises(InvalidDocumentError, match="typed application/epub\\+zip"):
        detect_kind(b"just text", content_type="application/epub+zip")


def test_a_zip_that_is_not_an_epub_is_refused_unless_it_claims_to_be_one() -> None:
    data = zip_epub({"a.txt": b"x"}, mimetype=b"application/zip")
    with pytest.raises(InvalidDocumentError, match="zip archive that is not an EPUB"):
        detect_kind(data, filename="a.zip")
    assert detect_kind(data, filename="a.epub") == "epub"  # the EPUB reader says what is wrong
