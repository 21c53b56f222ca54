"""An uploaded document → the prose to read aloud, its chapters and its metadata.

Kinds (:data:`DOCUMENT_KINDS`): plain text and SSML are taken as given (decoded);
Markdown (:mod:`.markdown_prose`), HTML (:mod:`.html_prose`) and EPUB 2/3 (:mod:`.epub`)
become prose: one block (paragraph, heading, list item, table cell...) per paragraph,
blocks separated by a blank line, inline whitespace collapsed, with chapters (headings h1..h3,
or the EPUB's table of contents) and metadata. What is not prose (navigation, scripts,
styles, footnote markers and bodies, page numbers, images) is not read. Hostile input
(zip bombs, paths leaving the archive, DTDs and entities, deep or huge markup, a file that
only claims to be an EPUB, no readable text) is an
:class:`~voicelane.common.errors.InvalidDocumentError` (400) naming the fault; too much
prose a :class:`~voicelane.common.errors.TextTooLargeError` (413). Pure functions: nothing is
written anywhere. docs/documents.md has the rules in full.
"""

from __future__ import annotations

from voicelane.common.errors import InvalidDocumentError, InvalidInputError, TextTooLargeError
from voicelane.core.documents.detect import detect_kind, is_zip
from voicelane.core.documents.epub import epub_document
from voicelane.core.documents.html_prose import html_document
from voicelane.core.documents.markdown_prose import markdown_document
from voicelane.core.documents.model import (
    DOCUMENT_KINDS,
    Chapter,
    Cover,
    Document,
    DocumentLimits,
)
from voicelane.core.text_input import check_encodable, check_text, decode_text

__all__ = [
    "DOCUMENT_KINDS",
    "Chapter",
    "Cover",
    "Document",
    "DocumentLimits",
    "detect_kind",
    "document_from_text",
    "read_document",
]

_NAMES = {"text": "text", "markdown": "Markdown", "html": "HTML", "ssml": "SSML", "epub": "EPUB"}


def _check_kind(kind: str) -> None:
    if kind not in DOCUMENT_KINDS:
        raise InvalidDocumentError(
            f"unknown document kind {kind!r}; expected one of {', '.join(DOCUMENT_KINDS)}",
            field="kind",
        )


def _decode_source(data: bytes, kind: str) -> str:
    """Markdown/HTML bytes → str by decode_text's rules (empty, binary, bad UTF-8), as
    InvalidDocumentError; the markup itself is not size-checked (the prose is)."""
    try:
        return decode_text(data, max_chars=len(data) + 1, source=_NAMES[kind], field="file")
    except TextTooLargeError:  # pragma: no cover - max_chars exceeds any decoded length
        raise
    except InvalidInputError as error:
        raise InvalidDocumentError(str(error), field="file") from None


def _prose(source: str, kind: str, limits: DocumentLimits) -> Document:
    if kind == "markdown":
        return markdown_document(source, limits=limits)
    return html_document(source, limits=limits)


def read_document(
    data: bytes,
    *,
    kind: str | None = None,
    filename: str | None = None,
    content_type: str | None = None,
    limits: DocumentLimits,
) -> Document:
    """``data`` as a :class:`Document`; ``kind`` None: :func:`detect_kind`. text and ssml
    follow :func:`voicelane.core.text_input.decode_text` (its errors, field "file")."""
    if kind is None:
        kind = detect_kind(data, filename=filename, content_type=content_type)
    _check_kind(kind)
    if kind == "epub":
        if not is_zip(data):
            raise InvalidDocumentError("EPUB is not a zip archive", field="file")
        return epub_document(data, limits=limits)
    if kind in ("text", "ssml"):
        text = decode_text(data, max_chars=limits.max_chars, source=_NAMES[kind], field="file")
        return Document(kind=kind, text=text)
    return _prose(_decode_source(data, kind), kind, limits)


def document_from_text(text: str, kind: str, *, limits: DocumentLimits) -> Document:
    """A str (a JSON field) as ``kind`` (markdown, html, ssml or text; epub is bytes only)."""
    _check_kind(kind)
    if kind == "epub":
        raise InvalidDocumentError("an EPUB must be uploaded as a file, not sent as text")
    if kind in ("text", "ssml"):
        return Document(kind=kind, text=check_text(text, max_chars=limits.max_chars))
    try:
        check_encodable(text, source=_NAMES[kind])
    except InvalidInputError as error:
        raise InvalidDocumentError(str(error)) from None
    return _prose(text.removeprefix("\ufeff"), kind, limits)
