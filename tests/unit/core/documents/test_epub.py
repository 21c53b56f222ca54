"""EPUBs written by real producers (pandoc, ebooklib) and by hand (EPUB 2 with an NCX):
chapters equal the book's table of contents and start at their headings, metadata and
cover are right, and what is not prose is not read."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from tests.support.documents import (
    BuiltDocument,
    ebooklib_epub,
    epub2_ncx_epub,
    pandoc_epub,
    png_bytes,
    require_pandoc,
    zip_epub,
)
from voicelane.common.errors import InvalidDocumentError
from voicelane.core.documents.epub import epub_document
from voicelane.core.documents.model import Document, DocumentLimits

LIMITS = DocumentLimits(max_chars=1_000_000)


def _check_book(document: Document, book: BuiltDocument) -> None:
    assert tuple(c.title for c in document.chapters) == book.toc_titles
    assert tuple(c.level for c in document.chapters) == book.toc_levels
    starts = [c.start for c in document.chapters]
    assert starts == sorted(set(starts))
    assert all(0 <= start < len(document.text) for start in starts)
    for chapter in document.chapters:  # each starts at its heading's text
        assert document.text.startswith(chapter.title, chapter.start), chapter
    assert (document.title, document.author, document.language) == (
        book.title,
        book.author,
        book.language,
    )
    assert document.cover is not None
    assert document.cover.data == book.cover
    for text in book.absent:
        assert text not in document.text
    for text in book.present:
        assert text in document.text


def test_a_pandoc_book(tmp_path: Path) -> None:
    book = pandoc_epub(tmp_path)
    assert len(book.toc_titles) == 6  # pandoc's own nav, read by regex
    document = epub_document(book.data, limits=LIMITS)
    _check_book(document, book)
    assert document.cover is not None and document.cover.media_type == "image/png"
    # pandoc's title page comes before the first chapter, and is read.
    assert document.text.startswith("The Lighthouse Keeper")
    assert document.chapters[0].start > 0


def test_a_pandoc_book_reads_image_alt_text_when_asked(tmp_path: Path) -> None:
    book = pandoc_epub(tmp_path)
    limits = DocumentLimits(max_chars=1_000_000, read_alt_text=True)
    assert "A red lighthouse" in epub_document(book.data, limits=limits).text


def test_an_ebooklib_book_with_nav_and_ncx() -> None:
    book = ebooklib_epub()
    _check_book(epub_document(book.data, limits=LIMITS), book)


def test_an_epub2_with_ncx_doctypes_nbsp_and_a_linear_no_item() -> None:
    book = epub2_ncx_epub()
    document = epub_document(book.data, limits=LIMITS)
    _check_book(document, book)
    assert document.cover is not None and document.cover.media_type == "image/jpeg"
    # "Part One" (file start) and its first heading are the same place: one start each,
    # because the file's start is its heading's text.
    assert document.chapters[0].start == document.text.index("Part One")


def _book(files: dict[str, str], nav: str, spine: str, *, cover: bytes | None = None) -> bytes:
    manifest = (
        '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
    )
    for name in files:
        manifest += f'<item id="{name}" href="{name}.xhtml" media-type="application/xhtml+xml"/>'
    if cover is not None:
        manifest += '<item id="img" href="c.gif" media-type="image/gif" properties="cover-image"/>'
    opf = f"""<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">
<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>T</dc:title></metadata>
<manifest>{manifest}</manifest><spine>{spine}</spine></package>"""
    members = {
        "META-INF/container.xml": (
            b'<container xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
            b'<rootfile full-path="content.opf" media-type="application/oebps-package+xml"/>'
            b"</rootfiles></container>"
        ),
        "content.opf": opf.encode(),
        "nav.xhtml": (
            '<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">'
            f'<body><nav epub:type="toc"><ol>{nav}</ol></nav></body></html>'
        ).encode(),
    }
    for name, body in files.items():
        members[f"{name}.xhtml"] = f"<html><body>{body}</body></html>".encode()
    if cover is not None:
        members["c.gif"] = cover
    return zip_epub(members)


def test_entries_at_the_same_place_or_on_skipped_files_keep_only_distinct_starts() -> None:
    data = _book(
        {"a": "<p>Alpha text.</p>", "b": "<p>Beta text.</p>", "skip": "<p>Skipped.</p>"},
        nav=(
            '<li><a href="a.xhtml">A</a></li>'
            '<li><a href="a.xhtml#missing">A again</a></li>'  # same place as A: dropped
            '<li><a href="skip.xhtml">Skipped</a></li>'  # linear="no": the next file, B
            '<li><a href="b.xhtml">B</a></li>'  # B's start is taken: dropped
            '<li><span>Heading only</span><ol><li><a href="b.xhtml#x">Nested</a></li></ol></li>'
        ),
        spine='<itemref idref="a"/><itemref idref="skip" linear="no"/><itemref idref="b"/>',
    )
    document = epub_document(data, limits=LIMITS)
    assert "Skipped." not in document.text
    assert [(c.title, c.start, c.level) for c in document.chapters] == [
        ("A", 0, 1),
        ("Skipped", document.text.index("Beta"), 1),
    ]


def test_a_book_without_toc_entries_gets_its_headings() -> None:
    data = _book(
        {"a": "<h1>One</h1><p>x</p><h2>Two</h2><p>y</p>"},
        nav="",
        spine='<itemref idref="nav"/><itemref idref="a"/>',
    )
    document = epub_document(data, limits=LIMITS)
    assert [(c.title, c.level) for c in document.chapters] == [("One", 1), ("Two", 2)]
    assert document.text == "One\n\nx\n\nTwo\n\ny"  # the nav document is not read


def test_a_cover_that_is_not_jpeg_or_png_is_left_out() -> None:
    data = _book({"a": "<p>x</p>"}, nav="", spine='<itemref idref="a"/>', cover=b"GIF89a...")
    assert epub_document(data, limits=LIMITS).cover is None


def _replace_member(data: bytes, name: str, content: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = {n: archive.read(n) for n in archive.namelist() if n != "mimetype"}
    members[name] = content
    return zip_epub(members)


def test_a_png_named_as_jpeg_is_no_cover() -> None:
    forged = _replace_member(epub2_ncx_epub().data, "OEBPS/images/cover.jpg", png_bytes())
    assert epub_document(forged, limits=LIMITS).cover is None


def test_a_spine_item_missing_from_the_archive_is_named() -> None:
    book = epub2_ncx_epub()
    with zipfile.ZipFile(io.BytesIO(book.data)) as archive:
        members = {n: archive.read(n) for n in archive.namelist() if n != "mimetype"}
    del members["OEBPS/part1.xhtml"]
    with pytest.raises(
        InvalidDocumentError,
        match=r"^EPUB: 'OEBPS/part1.xhtml' \(in the spine\) is not in the archive$",
    ):
        epub_document(zip_epub(members), limits=LIMITS)


def test_pandoc_missing_fails_under_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tests.support.documents.shutil.which", lambda _name: None)
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="required when CI is set"):
        require_pandoc()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="pandoc is not installed"):
        require_pandoc()
