"""Which kind of document some bytes are: by their content first, then by the name or the
content type they came with, else plain text.

Content: a zip archive whose first member is ``mimetype`` saying ``application/epub+zip``
→ epub (any other zip: an error, unless the name or type says EPUB: then epub, and the EPUB
reader says what is wrong); ``<speak`` (after an XML declaration, comments, whitespace)
→ ssml; ``<!DOCTYPE html``, ``<html`` (likewise) → html. Name / type: ``.md``,
``.markdown``, ``text/markdown`` → markdown; ``.html``, ``.htm``, ``.xhtml``,
``text/html``, ``application/xhtml+xml`` → html; ``.ssml``, ``application/ssml+xml`` →
ssml; ``.epub``, ``application/epub+zip`` → epub, and a file so named or typed that is not
a zip archive is refused.
"""

from __future__ import annotations

import posixpath
import re

from voicelane.common.errors import InvalidDocumentError

__all__ = ["detect_kind", "is_zip"]

_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_LEADING = re.compile(rb"\A(?:\xef\xbb\xbf)?(?:\s+|<\?xml[^>]{0,200}\?>|<!--.{0,4000}?-->)*", re.S)
_HTML_START = re.compile(rb"<!doctype\s+html|<html[\s>]", re.I)
_SSML_START = re.compile(rb"<speak[\s>/]")
_BY_EXTENSION = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".ssml": "ssml",
    ".epub": "epub",
    ".txt": "text",
}
_BY_CONTENT_TYPE = {
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "application/ssml+xml": "ssml",
    "application/epub+zip": "epub",
    "text/plain": "text",
}


def is_zip(data: bytes) -> bool:
    return data.startswith(_ZIP_MAGIC)


def _is_epub_zip(data: bytes) -> bool:
    """The EPUB's first member, stored: ``mimetype`` = ``application/epub+zip`` (OCF)."""
    if not data.startswith(b"PK\x03\x04") or len(data) < 30:
        return False
    name_length = int.from_bytes(data[26:28], "little")
    extra_length = int.from_bytes(data[28:30], "little")
    name = data[30 : 30 + name_length]
    body = 30 + name_length + extra_length
    return name == b"mimetype" and data[body : body + 20] == b"application/epub+zip"


def _named(filename: str | None, content_type: str | None) -> str | None:
    if filename:
        extension = posixpath.splitext(filename.replace("\\", "/").lower())[1]
        if extension in _BY_EXTENSION:
            return _BY_EXTENSION[extension]
    if content_type:
        media_type = content_type.split(";", 1)[0].strip().lower()
        if media_type in _BY_CONTENT_TYPE:
            return _BY_CONTENT_TYPE[media_type]
    return None


def detect_kind(
    data: bytes, *, filename: str | None = None, content_type: str | None = None
) -> str:
    """One of :data:`~voicelane.core.documents.model.DOCUMENT_KINDS` (module docstring)."""
    named = _named(filename, content_type)
    if is_zip(data):
        if _is_epub_zip(data) or named == "epub":
            return "epub"
        raise InvalidDocumentError(
            "a zip archive that is not an EPUB (its first member is not a 'mimetype'"
            " saying application/epub+zip)",
            field="file",
        )
    if named == "epub":
        said = (
            "named .epub"
            if filename and filename.lower().endswith(".epub")
            else ("typed application/epub+zip")
        )
        raise InvalidDocumentError(f"file {said} is not a zip archive", field="file")
    head = data[:8192]
    lead = _LEADING.match(head)
    rest = head[lead.end() if lead else 0 :]
    if _SSML_START.match(rest):
        return "ssml"
    if _HTML_START.match(rest):
        return "html"
    return named or "text"
