"""EPUB 2 and 3 → :class:`~voicelane.core.documents.model.Document`, reading the container
ourselves (:mod:`.archive`) rather than with ebooklib/lxml, which parse XML with entity
expansion and read every member into memory without caps.

Order: the archive's names and member count (:class:`.archive.SafeArchive`); ``mimetype``
must say ``application/epub+zip``; ``META-INF/container.xml`` → the package document (OPF);
``META-INF/encryption.xml``, if any, must not encrypt a content document, the nav document
or the NCX (font obfuscation is fine) — else "encrypted (DRM)"; the OPF's metadata
(``dc:title``, ``dc:creator`` — authors only, where roles are given — ``dc:language``),
manifest and spine. Every href in the OPF and the table of contents is resolved inside the
archive; one that leaves it is refused. XML files (container, OPF, NCX, nav, encryption)
are read with :mod:`voicelane.core.safe_xml`, a DOCTYPE without internal subset allowed
(EPUB 2 writes one), HTML's named entities decoded, any internal subset refused.

**Reading**: the spine in order, ``linear="no"`` items and the nav document skipped, each
XHTML file through :mod:`.html_prose`; files are separated like blocks.

**Chapters**: the table of contents (EPUB 3 nav ``epub:type="toc"``, else the EPUB 2 NCX
``navMap``) flattened in order, nested entries with their depth as ``level``; a nav entry
without a link (a ``span``) is no chapter, its children still are. An entry
``file.xhtml#frag`` starts where the element with that id starts reading (the first
character of prose at or after it); without a fragment, or a fragment not found, at the
file's first character; a file that is skipped or has no text gives the next file's start.
An entry whose start is not after the previous kept entry's (it would begin at the same
place, or earlier) is dropped, as is one pointing outside the spine: starts strictly
increase. A book whose table of contents is empty: its h1..h3 headings, as for HTML.

**Cover**: the manifest item with ``properties="cover-image"`` (EPUB 3), else the one named
by ``<meta name="cover" content="ID">`` (EPUB 2); JPEG or PNG (by media type and by its
bytes), up to :data:`.model.MAX_COVER_BYTES`, else no cover.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from voicelane.common.errors import InvalidDocumentError
from voicelane.core.documents.archive import SafeArchive, resolve_href
from voicelane.core.documents.html_prose import chapters_from_headings, read_html_into
from voicelane.core.documents.model import (
    COVER_MEDIA_TYPES,
    MAX_COVER_BYTES,
    Chapter,
    Cover,
    Document,
    DocumentLimits,
)
from voicelane.core.documents.prose import ProseWriter
from voicelane.core.safe_xml import XmlElement, XmlError, parse_xml

__all__ = ["EPUB_MIMETYPE", "epub_document"]

EPUB_MIMETYPE = b"application/epub+zip"
CONTAINER = "META-INF/container.xml"
ENCRYPTION = "META-INF/encryption.xml"
OPF_MEDIA_TYPE = "application/oebps-package+xml"
NCX_MEDIA_TYPE = "application/x-dtbncx+xml"
CONTENT_MEDIA_TYPES = frozenset({"application/xhtml+xml", "text/html"})
FONT_OBFUSCATION = frozenset(
    {"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"}
)
"""Encryption that only obfuscates fonts: the text is not encrypted."""
MAX_XML_FILE_BYTES = 16 * 1024 * 1024
"""container.xml, the OPF, the NCX, encryption.xml: bigger is refused."""
_MAGIC = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}
KIND = "EPUB"


def _fail(message: str) -> InvalidDocumentError:
    return InvalidDocumentError(f"{KIND}: {message}", field="file")


@dataclass(frozen=True, slots=True)
class _Item:
    id: str
    path: str
    """Archive path; "" for a remote resource (never read)."""
    media_type: str
    properties: frozenset[str]


@dataclass(slots=True)
class _Package:
    path: str
    title: str | None = None
    author: str | None = None
    language: str | None = None
    manifest: dict[str, _Item] = field(default_factory=dict)
    spine: list[tuple[_Item, bool]] = field(default_factory=list)
    """Items in reading order, with whether they are linear."""
    ncx_id: str | None = None
    cover_id: str | None = None


@dataclass(frozen=True, slots=True)
class _TocEntry:
    title: str
    path: str
    fragment: str
    level: int


# ---- XML files ------------------------------------------------------------------------------


def _decode(raw: bytes, path: str) -> str:
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return raw.decode("utf-16")
        except UnicodeDecodeError:
            raise _fail(f"{path!r} is not valid UTF-16") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise _fail(
            f"{path!r} is not valid UTF-8 (byte 0x{raw[error.start]:02x} at offset {error.start})"
        ) from None


def _xml(archive: SafeArchive, path: str, limits: DocumentLimits) -> XmlElement:
    source = _decode(archive.read(path, max_bytes=MAX_XML_FILE_BYTES), path)
    try:
        return parse_xml(
            source,
            max_chars=len(source) + 1,
            max_depth=limits.max_depth,
            max_elements=limits.max_elements,
            allow_doctype=True,
            html_entities=True,
        )
    except XmlError as error:
        where = f"{path!r} (line {error.line}, column {error.column})"
        if "internal subset" in error.reason or "entit" in error.reason:
            raise _fail(f"DTD with entity declarations in {where}") from None
        raise _fail(f"{where}: {error.reason}") from None


def _children(element: XmlElement, name: str) -> list[XmlElement]:
    return [c for c in element.children if isinstance(c, XmlElement) and c.name == name]


def _descendants(element: XmlElement, name: str) -> list[XmlElement]:
    """Elements called ``name`` under ``element``, in document order (iterative: the depth
    is capped, but a stack costs nothing)."""
    found: list[XmlElement] = []
    stack: list[XmlElement] = [element]
    while stack:
        current = stack.pop()
        if current is not element and current.name == name:
            found.append(current)
        stack.extend(reversed([c for c in current.children if isinstance(c, XmlElement)]))
    return found


def _attr(element: XmlElement, name: str) -> str | None:
    """An attribute by its local name, whatever its prefix (``opf:role``, ``epub:type``)."""
    value = element.attrs.get(name)
    if value is not None:
        return value
    for key, candidate in element.attrs.items():
        if key.rpartition(":")[2] == name:
            return candidate
    return None


def _clean(text: str) -> str | None:
    return " ".join(text.split()) or None


def _href_target(base: str, href: str) -> tuple[str, str] | None:
    """An href as (archive path, fragment); None for a remote one. Leaving the archive is
    an error."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc:
        return None
    path = unquote(parts.path)
    target = resolve_href(base, path, kind=KIND) if path else base
    return target, unquote(parts.fragment)


# ---- the container and the package ----------------------------------------------------------


def _check_mimetype(archive: SafeArchive) -> None:
    if "mimetype" not in archive:
        raise _fail("no 'mimetype' member (not an EPUB)")
    if archive.read("mimetype", max_bytes=1024).strip() != EPUB_MIMETYPE:
        raise _fail("'mimetype' does not say application/epub+zip")


def _package_path(archive: SafeArchive, limits: DocumentLimits) -> str:
    if CONTAINER not in archive:
        raise _fail(f"no {CONTAINER}")
    container = _xml(archive, CONTAINER, limits)
    for rootfile in _descendants(container, "rootfile"):
        full_path = rootfile.attrs.get("full-path")
        media_type = rootfile.attrs.get("media-type", OPF_MEDIA_TYPE)
        if full_path and media_type == OPF_MEDIA_TYPE:
            path = resolve_href("", full_path, kind=KIND)
            if path not in archive:
                raise _fail(f"package document {path!r} is not in the archive")
            return path
    raise _fail(f"{CONTAINER} names no package document")


def _read_package(archive: SafeArchive, path: str, limits: DocumentLimits) -> _Package:
    root = _xml(archive, path, limits)
    package = _Package(path)
    metadata = next(iter(_descendants(root, "metadata")), None)
    if metadata is not None:
        _read_metadata(metadata, package)
    for manifest in _children(root, "manifest"):
        for item in _children(manifest, "item"):
            item_id, href = item.attrs.get("id"), item.attrs.get("href")
            if not item_id or href is None:
                continue
            target = _href_target(path, href)
            package.manifest[item_id] = _Item(
                item_id,
                target[0] if target else "",
                item.attrs.get("media-type", "").strip().lower(),
                frozenset(item.attrs.get("properties", "").split()),
            )
    for spine in _children(root, "spine"):
        package.ncx_id = spine.attrs.get("toc") or None
        for itemref in _children(spine, "itemref"):
            idref = itemref.attrs.get("idref", "")
            found = package.manifest.get(idref)
            if found is None:
                raise _fail(f"the spine names {idref!r}, which is not in the manifest")
            package.spine.append((found, itemref.attrs.get("linear", "yes").strip() != "no"))
    if not package.spine:
        raise _fail(f"{path!r} has no spine")
    return package


def _read_metadata(metadata: XmlElement, package: _Package) -> None:
    roles: dict[str, str] = {}
    for meta in _children(metadata, "meta"):
        refines = meta.attrs.get("refines", "")
        if meta.attrs.get("property") == "role" and refines.startswith("#"):
            roles[refines[1:]] = meta.text().strip()
        if meta.attrs.get("name") == "cover" and meta.attrs.get("content"):
            package.cover_id = package.cover_id or meta.attrs["content"].strip()
    titles = [_clean(title.text()) for title in _children(metadata, "title")]
    package.title = next((title for title in titles if title), None)
    languages = [_clean(language.text()) for language in _children(metadata, "language")]
    package.language = next((language for language in languages if language), None)
    authors: list[str] = []
    everyone: list[str] = []
    for creator in _children(metadata, "creator"):
        name = _clean(creator.text())
        if not name:
            continue
        everyone.append(name)
        role = _attr(creator, "role") or roles.get(creator.attrs.get("id", ""), "aut")
        if role.strip() == "aut":
            authors.append(name)
    package.author = ", ".join(authors or everyone[:1]) or None


def _check_encryption(archive: SafeArchive, package: _Package, limits: DocumentLimits) -> None:
    if ENCRYPTION not in archive:
        return
    protected = {item.path for item, _ in package.spine}
    protected |= {
        item.path
        for item in package.manifest.values()
        if "nav" in item.properties or item.media_type == NCX_MEDIA_TYPE
    }
    for data in _descendants(_xml(archive, ENCRYPTION, limits), "EncryptedData"):
        methods = _descendants(data, "EncryptionMethod")
        algorithm = methods[0].attrs.get("Algorithm", "") if methods else ""
        if algorithm in FONT_OBFUSCATION:
            continue
        for reference in _descendants(data, "CipherReference"):
            uri = reference.attrs.get("URI", "")
            target = _href_target("", uri)
            if target and target[0] in protected:
                raise _fail(f"{target[0]!r} is encrypted (DRM); it cannot be read")


# ---- the table of contents ------------------------------------------------------------------


def _nav_toc(archive: SafeArchive, package: _Package, limits: DocumentLimits) -> list[_TocEntry]:
    nav_item = next(
        (i for i in package.manifest.values() if "nav" in i.properties and i.path), None
    )
    if nav_item is None or nav_item.path not in archive:
        return []
    root = _xml(archive, nav_item.path, limits)
    for nav in _descendants(root, "nav"):
        if "toc" in (_attr(nav, "type") or "").split():
            lists = _descendants(nav, "ol")
            if not lists:
                return []
            entries: list[_TocEntry] = []
            _walk_nav_list(lists[0], 1, nav_item.path, entries)
            return entries
    return []


def _walk_nav_list(ol: XmlElement, level: int, base: str, entries: list[_TocEntry]) -> None:
    for li in _children(ol, "li"):
        for child in li.children:
            if not isinstance(child, XmlElement):
                continue
            if child.name == "a":
                title, href = _clean(child.text()), child.attrs.get("href")
                target = _href_target(base, href) if href else None
                if title and target:
                    entries.append(_TocEntry(title, target[0], target[1], level))
            elif child.name == "ol":
                _walk_nav_list(child, level + 1, base, entries)


def _ncx_toc(archive: SafeArchive, package: _Package, limits: DocumentLimits) -> list[_TocEntry]:
    item = package.manifest.get(package.ncx_id or "")
    if item is None or item.media_type != NCX_MEDIA_TYPE:
        item = next((i for i in package.manifest.values() if i.media_type == NCX_MEDIA_TYPE), None)
    if item is None or not item.path or item.path not in archive:
        return []
    root = _xml(archive, item.path, limits)
    nav_map = next(iter(_descendants(root, "navMap")), None)
    entries: list[_TocEntry] = []
    if nav_map is not None:
        _walk_nav_points(nav_map, 1, item.path, entries)
    return entries


def _walk_nav_points(parent: XmlElement, level: int, base: str, entries: list[_TocEntry]) -> None:
    for point in _children(parent, "navPoint"):
        labels = _descendants(point, "text")
        contents = _children(point, "content")
        title = _clean(labels[0].text()) if labels else None
        src = contents[0].attrs.get("src") if contents else None
        target = _href_target(base, src) if src else None
        if title and target:
            entries.append(_TocEntry(title, target[0], target[1], level))
        _walk_nav_points(point, level + 1, base, entries)


def _chapters(
    entries: list[_TocEntry], writer: ProseWriter, spine_paths: list[str]
) -> tuple[Chapter, ...]:
    anchors = writer.anchors
    spine_index = {path: index for index, path in reversed(list(enumerate(spine_paths)))}
    # Where reading resumes from each spine position: that file's start, else the next's.
    resume: list[int | None] = [None] * (len(spine_paths) + 1)
    for index in range(len(spine_paths) - 1, -1, -1):
        resume[index] = anchors.get((spine_paths[index], ""), resume[index + 1])

    def start_of(entry: _TocEntry) -> int | None:
        if entry.fragment and (entry.path, entry.fragment) in anchors:
            return anchors[(entry.path, entry.fragment)]
        index = spine_index.get(entry.path)
        return None if index is None else resume[index]

    chapters: list[Chapter] = []
    for entry in entries:
        start = start_of(entry)
        if start is None or (chapters and start <= chapters[-1].start):
            continue
        chapters.append(Chapter(entry.title, start, entry.level))
    return tuple(chapters)


# ---- the cover ------------------------------------------------------------------------------


def _cover(archive: SafeArchive, package: _Package) -> Cover | None:
    item = next((i for i in package.manifest.values() if "cover-image" in i.properties), None)
    if item is None and package.cover_id:
        item = package.manifest.get(package.cover_id)
    if item is None or item.media_type not in COVER_MEDIA_TYPES or item.path not in archive:
        return None
    try:
        data = archive.read(item.path, max_bytes=MAX_COVER_BYTES)
    except InvalidDocumentError:
        return None  # too big, encrypted, corrupt: the book is read without it
    if not data.startswith(_MAGIC[item.media_type]):
        return None
    return Cover(data, item.media_type)


# ---- the book -------------------------------------------------------------------------------


def epub_document(data: bytes, *, limits: DocumentLimits) -> Document:
    """An EPUB as a :class:`Document` (see the module docstring)."""
    archive = SafeArchive(data, limits=limits, kind=KIND)
    _check_mimetype(archive)
    package = _read_package(archive, _package_path(archive, limits), limits)
    _check_encryption(archive, package, limits)
    writer = ProseWriter(max_chars=limits.max_chars, source=KIND)
    spine_paths: list[str] = []
    for item, linear in package.spine:
        if not item.path:
            continue  # a remote resource
        spine_paths.append(item.path)
        if not linear or "nav" in item.properties or item.media_type not in CONTENT_MEDIA_TYPES:
            continue
        if item.path not in archive:
            raise _fail(f"{item.path!r} (in the spine) is not in the archive")
        source = _decode(archive.read(item.path), item.path)
        writer.end_block()
        writer.anchor((item.path, ""))
        read_html_into(writer, source, file=item.path, limits=limits, kind=f"{KIND}: {item.path!r}")
    text = writer.text()
    if not text:
        raise InvalidDocumentError("EPUB has no readable text", field="file")
    entries = _nav_toc(archive, package, limits) or _ncx_toc(archive, package, limits)
    if entries:
        chapters = _chapters(entries, writer, spine_paths)
    else:
        chapters = chapters_from_headings(writer, text)
    return Document(
        kind="epub",
        text=text,
        chapters=chapters,
        title=package.title,
        author=package.author,
        language=package.language,
        cover=_cover(archive, package),
    )
