"""What a read document is: the prose to read aloud, its chapters and its metadata, and the
limits a reader works under. Plain frozen values; the readers are the other modules."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "COVER_MEDIA_TYPES",
    "DOCUMENT_KINDS",
    "MAX_COVER_BYTES",
    "Chapter",
    "Cover",
    "Document",
    "DocumentLimits",
]

DOCUMENT_KINDS = ("text", "markdown", "html", "epub", "ssml")
COVER_MEDIA_TYPES = ("image/jpeg", "image/png")
MAX_COVER_BYTES = 10 * 1024 * 1024
"""A bigger cover image is left out (the book is still read)."""


@dataclass(frozen=True, slots=True)
class Chapter:
    title: str
    start: int
    """Code-point offset into :attr:`Document.text` where the chapter's reading starts."""
    level: int = 1
    """Depth in the table of contents (1 = top)."""


@dataclass(frozen=True, slots=True)
class Cover:
    data: bytes
    media_type: str
    """``image/jpeg`` or ``image/png`` (other images: no cover)."""


@dataclass(frozen=True, slots=True)
class Document:
    kind: str
    """One of :data:`DOCUMENT_KINDS`."""
    text: str
    """What is read aloud. text/ssml: the input as given (decoded). markdown/html/epub: the
    prose, one block (paragraph, heading, list item, table cell...) per paragraph, blocks
    separated by ``"\\n\\n"``, inline whitespace collapsed to one space."""
    chapters: tuple[Chapter, ...] = ()
    """Reading order; starts strictly increasing, each ``< len(text)``."""
    title: str | None = None
    author: str | None = None
    language: str | None = None
    """As the document states it (BCP 47)."""
    cover: Cover | None = None


@dataclass(frozen=True, slots=True)
class DocumentLimits:
    max_chars: int
    """Of :attr:`Document.text`: more is a TextTooLargeError (413)."""
    max_archive_members: int = 4096
    max_unpacked_bytes: int = 256 * 1024 * 1024
    """All members read from an archive together, counted while inflating."""
    max_member_bytes: int = 64 * 1024 * 1024
    max_compression_ratio: float = 200.0
    """Per member, unpacked/packed bytes, once a member has unpacked past
    :data:`voicelane.core.documents.archive.RATIO_FLOOR_BYTES`."""
    max_depth: int = 256
    """Nested elements in HTML/XHTML (and the EPUB's XML files)."""
    max_elements: int = 2_000_000
    read_alt_text: bool = False
    """Images' alt text is read aloud."""
