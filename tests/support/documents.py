"""Documents for tests: EPUBs written by real third-party producers (pandoc, ebooklib), an
EPUB 2 with an NCX written by hand, and hostile archives, each with what a reader should
find in it. Every builder returns a :class:`BuiltDocument` (or bytes with a reason)."""

from __future__ import annotations

import io
import os
import re
import shutil
import struct
import subprocess
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "BuiltDocument",
    "Hostile",
    "bomb_by_ratio",
    "bomb_by_total",
    "drm_epub",
    "dtd_entity_epub",
    "ebooklib_epub",
    "epub2_ncx_epub",
    "hostile_documents",
    "no_text_epub",
    "not_a_zip_named_epub",
    "pandoc_epub",
    "png_bytes",
    "require_pandoc",
    "too_many_members_epub",
    "traversal_epub",
    "zip_epub",
]

MIB = 1024 * 1024


@dataclass(frozen=True)
class BuiltDocument:
    data: bytes
    toc_titles: tuple[str, ...] = ()
    toc_levels: tuple[int, ...] = ()
    title: str | None = None
    author: str | None = None
    language: str | None = None
    cover: bytes | None = None
    absent: tuple[str, ...] = ()
    """Text in the file that must not be read aloud (footnotes, nav, scripts...)."""
    present: tuple[str, ...] = ()
    """Text that must be read."""


@dataclass(frozen=True)
class Hostile:
    name: str
    data: bytes
    filename: str
    error: str
    """A regular expression the error message must match."""
    too_large: bool = False
    """A TextTooLargeError rather than InvalidDocumentError."""
    limits: dict[str, Any] = field(default_factory=dict)
    """DocumentLimits fields to set (the defaults otherwise; max_chars 1,000,000)."""


def png_bytes(width: int = 2, height: int = 2, rgb: tuple[int, int, int] = (255, 0, 0)) -> bytes:
    """A tiny valid PNG (no imaging library needed)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    row = b"\x00" + bytes(rgb) * width
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


# ---- pandoc ---------------------------------------------------------------------------------


def require_pandoc() -> str:
    """pandoc's path; missing → skip, or fail when CI is set (the test must run there)."""
    found = shutil.which("pandoc")
    if found is None:
        message = "pandoc is not installed: the pandoc EPUB tests cannot run"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (required when CI is set)")
        pytest.skip(message)
    return found


PANDOC_MARKDOWN = """\
---
title: The Lighthouse Keeper
author: Ada Writer
lang: en-GB
---

# The First Night

The keeper climbed the stairs at dusk.[^1] The lamp was cold.

![A red lighthouse](lighthouse.png)

## The Lamp Room

Brass and glass caught the last of the light.

## The Logbook

Every ship that passed was written down.

# The Storm

Waves broke over the rocks all night.

### A Small Hour

At three the wind dropped for a moment.

# Morning

The sea was calm again.

[^1]: Footnote body that is never read aloud.
"""


def pandoc_epub(tmp_path: Path) -> BuiltDocument:
    """An EPUB 3 written by Debian's pandoc from Markdown: a title block, nested chapters,
    an image, a footnote and a cover. Its TOC titles are read back from its own nav.xhtml
    (independently of the reader under test)."""
    pandoc = require_pandoc()
    cover = png_bytes(4, 6, (0, 0, 255))
    (tmp_path / "cover.png").write_bytes(cover)
    (tmp_path / "lighthouse.png").write_bytes(png_bytes(3, 3))
    (tmp_path / "book.md").write_text(PANDOC_MARKDOWN, encoding="utf-8")
    subprocess.run(
        [pandoc, "book.md", "-o", "book.epub", "--toc", "--epub-cover-image=cover.png"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=120,
    )
    data = (tmp_path / "book.epub").read_bytes()
    titles, levels = _nav_toc(data)
    return BuiltDocument(
        data=data,
        toc_titles=titles,
        toc_levels=levels,
        title="The Lighthouse Keeper",
        author="Ada Writer",
        language="en-GB",
        cover=cover,
        absent=("Footnote body", "Table of Contents", "A red lighthouse"),
        present=("The keeper climbed the stairs at dusk.", "The sea was calm again."),
    )


def _nav_toc(data: bytes) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The titles and depths of the entries of the ``epub:type="toc"`` nav, by regex."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        name = next(n for n in archive.namelist() if n.endswith("nav.xhtml"))
        nav = archive.read(name).decode("utf-8")
    toc = re.search(r'<nav epub:type="toc".*?</nav>', nav, re.S)
    assert toc is not None, "pandoc wrote no toc nav"
    titles: list[str] = []
    levels: list[int] = []
    depth = 0
    for match in re.finditer(r"<ol[^>]*>|</ol>|<a [^>]*>(.*?)</a>", toc.group(0), re.S):
        token = match.group(0)
        if token.startswith("<ol"):
            depth += 1
        elif token == "</ol>":
            depth -= 1
        else:
            titles.append(re.sub(r"<[^>]+>", "", match.group(1)).strip())
            levels.append(depth)
    return tuple(titles), tuple(levels)


# ---- ebooklib ---------------------------------------------------------------------------------


def ebooklib_epub() -> BuiltDocument:
    """An EPUB 3 with nav and NCX, a cover, metadata and a nested TOC, written by ebooklib
    (used here only to write)."""
    from ebooklib import epub  # type: ignore[import-untyped]

    book = epub.EpubBook()
    book.set_identifier("voicelane-test-ebooklib")
    book.set_title("Tides and Currents")
    book.set_language("fr")
    book.add_author("Jean Marin")
    cover = png_bytes(5, 5, (0, 128, 0))
    book.set_cover("cover.png", cover)
    chapters = []
    bodies = [
        ("intro.xhtml", "Introduction", "<p>Before the tide, the harbour sleeps.</p>"),
        (
            "tides.xhtml",
            "Tides",
            '<p>The moon pulls the sea.<sup><a href="#n1">1</a></sup></p>'
            '<h2 id="spring">Spring tides</h2><p>Spring tides are the highest.</p>'
            '<span epub:type="pagebreak" role="doc-pagebreak" title="7">7</span>'
            '<aside epub:type="footnote" id="n1"><p>Note text not read.</p></aside>',
        ),
        (
            "currents.xhtml",
            "Currents",
            "<p>Currents carry warmth north.</p><script>var hidden = 1;</script>",
        ),
    ]
    for file_name, title, body in bodies:
        item = epub.EpubHtml(title=title, file_name=file_name, lang="fr")
        item.content = f"<h1>{title}</h1>{body}"
        book.add_item(item)
        chapters.append(item)
    book.toc = [
        epub.Link("intro.xhtml", "Introduction", "intro"),
        (
            epub.Section("Tides", href="tides.xhtml"),
            [epub.Link("tides.xhtml#spring", "Spring tides", "spring")],
        ),
        epub.Link("currents.xhtml", "Currents", "currents"),
    ]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *chapters]
    out = io.BytesIO()
    epub.write_epub(out, book)
    return BuiltDocument(
        data=out.getvalue(),
        toc_titles=("Introduction", "Tides", "Spring tides", "Currents"),
        toc_levels=(1, 1, 2, 1),
        title="Tides and Currents",
        author="Jean Marin",
        language="fr",
        cover=cover,
        absent=("Note text not read", "var hidden", "7"),
        present=("The moon pulls the sea.", "Currents carry warmth north."),
    )


# ---- by hand: EPUB 2, and the hostile ones ------------------------------------------------------

CONTAINER_XML = """<?xml version="1.0" encoding="UTF-8"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
  <rootfiles>
    <rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>
  </rootfiles>
</container>"""


def zip_epub(
    members: dict[str, bytes],
    *,
    mimetype: bytes = b"application/epub+zip",
    compression: int = zipfile.ZIP_DEFLATED,
) -> bytes:
    """An EPUB-shaped zip: ``mimetype`` first and stored, then ``members`` in order."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr(zipfile.ZipInfo("mimetype"), mimetype, zipfile.ZIP_STORED)
        for name, data in members.items():
            archive.writestr(zipfile.ZipInfo(name), data, compression)
    return out.getvalue()


def _opf(
    manifest: str, spine: str, *, doctype: str = "", version: str = "2.0", extra: str = ""
) -> bytes:
    return f"""<?xml version="1.0" encoding="UTF-8"?>{doctype}
<package xmlns="http://www.idpf.org/2007/opf" version="{version}" unique-identifier="id">
  <metadata xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:opf="http://www.idpf.org/2007/opf">
    <dc:identifier id="id">test</dc:identifier>
    <dc:title>The Old Mill</dc:title>
    <dc:creator opf:role="aut">Mary Miller</dc:creator>
    <dc:creator opf:role="ill">Ian Illustrator</dc:creator>
    <dc:language>de-CH</dc:language>
    <meta name="cover" content="cover"/>{extra}
  </metadata>
  <manifest>{manifest}</manifest>
  <spine toc="ncx">{spine}</spine>
</package>""".encode()


XHTML_DOCTYPE = (
    '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN"'
    ' "http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">'
)


def _xhtml(body: str, *, title: str = "x") -> bytes:
    return (
        f'<?xml version="1.0" encoding="utf-8"?>\n{XHTML_DOCTYPE}\n'
        f'<html xmlns="http://www.w3.org/1999/xhtml"><head><title>{title}</title>'
        f"<style>p {{ margin: 0 }}</style></head><body>{body}</body></html>"
    ).encode()


def epub2_ncx_epub() -> BuiltDocument:
    """An EPUB 2: OPF 2.0, NCX with a DOCTYPE (no internal subset), XHTML 1.1 with a DOCTYPE
    and ``&nbsp;``, a linear="no" item, a JPEG cover named by ``<meta name="cover">``."""
    cover = b"\xff\xd8\xff\xe0" + b"\x00" * 60 + b"\xff\xd9"
    ncx = b"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE ncx PUBLIC "-//NISO//DTD ncx 2005-1//EN" "http://www.daisy.org/z3986/2005/ncx-2005-1.dtd">
<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1">
  <head><meta name="dtb:uid" content="test"/></head>
  <docTitle><text>The Old Mill</text></docTitle>
  <navMap>
    <navPoint id="p1" playOrder="1"><navLabel><text>Part One</text></navLabel>
      <content src="part1.xhtml"/>
      <navPoint id="p1c1" playOrder="2"><navLabel><text>The Wheel</text></navLabel>
        <content src="part1.xhtml#wheel"/></navPoint>
      <navPoint id="p1c2" playOrder="3"><navLabel><text>The&nbsp;Stones</text></navLabel>
        <content src="part1.xhtml#stones"/></navPoint>
    </navPoint>
    <navPoint id="p2" playOrder="4"><navLabel><text>Part Two</text></navLabel>
      <content src="text/part%202.xhtml"/></navPoint>
  </navMap>
</ncx>"""
    manifest = """
    <item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>
    <item id="title" href="title.xhtml" media-type="application/xhtml+xml"/>
    <item id="ads" href="ads.xhtml" media-type="application/xhtml+xml"/>
    <item id="p1" href="part1.xhtml" media-type="application/xhtml+xml"/>
    <item id="p2" href="text/part%202.xhtml" media-type="application/xhtml+xml"/>
    <item id="cover" href="images/cover.jpg" media-type="image/jpeg"/>"""
    spine = """
    <itemref idref="title"/><itemref idref="ads" linear="no"/>
    <itemref idref="p1"/><itemref idref="p2"/>"""
    members = {
        "META-INF/container.xml": CONTAINER_XML.encode(),
        "OEBPS/content.opf": _opf(manifest, spine),
        "OEBPS/toc.ncx": ncx,
        "OEBPS/title.xhtml": _xhtml("<p>The Old Mill, a story.</p>"),
        "OEBPS/ads.xhtml": _xhtml("<p>Advertisement never read.</p>"),
        "OEBPS/part1.xhtml": _xhtml(
            "<h1>Part One</h1><p>By the river&nbsp;stood a mill.</p>"
            '<div id="wheel"><h2>The Wheel</h2><p>It turned all day.</p></div>'
            '<h2 id="stones">The Stones</h2><p>They ground the grain.<a href="#fn">[1]</a></p>'
        ),
        "OEBPS/text/part 2.xhtml": _xhtml("<h1>Part Two</h1><p>Years later, it stopped.</p>"),
        "OEBPS/images/cover.jpg": cover,
    }
    return BuiltDocument(
        data=zip_epub(members),
        toc_titles=("Part One", "The Wheel", "The Stones", "Part Two"),
        toc_levels=(1, 2, 2, 1),
        title="The Old Mill",
        author="Mary Miller",
        language="de-CH",
        cover=cover,
        absent=("Advertisement", "[1]", "margin"),
        present=("The Old Mill, a story.", "By the river stood a mill.", "Years later"),
    )


def _minimal_members(body: bytes = b"", *, opf: bytes | None = None) -> dict[str, bytes]:
    manifest = '<item id="c1" href="c1.xhtml" media-type="application/xhtml+xml"/>'
    return {
        "META-INF/container.xml": CONTAINER_XML.encode(),
        "OEBPS/content.opf": opf or _opf(manifest, '<itemref idref="c1"/>'),
        "OEBPS/c1.xhtml": body or _xhtml("<p>Some text.</p>"),
    }


def bomb_by_ratio(claimed_bytes: int = 200 * MIB) -> bytes:
    """A content document of zeros far more compressible than the ratio cap allows (built
    small: the deflate stream of 200 MiB of spaces is about 200 KiB)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr(zipfile.ZipInfo("mimetype"), b"application/epub+zip")
        for name, data in _minimal_members().items():
            if name != "OEBPS/c1.xhtml":
                archive.writestr(zipfile.ZipInfo(name), data, zipfile.ZIP_DEFLATED)
        info = zipfile.ZipInfo("OEBPS/c1.xhtml")
        info.compress_type = zipfile.ZIP_DEFLATED
        with archive.open(info, "w", force_zip64=True) as member:
            block = b" " * MIB
            for _ in range(claimed_bytes // MIB):
                member.write(block)
    return out.getvalue()


def bomb_by_total(members: int = 300, member_bytes: int = MIB - 4096) -> bytes:
    """Many content documents, each just under the ratio cap's 1 MiB floor (so exempt from
    it) and each deflating to about 1 KiB: 300 of them claim about 300 MiB, over the
    256 MiB total, in an archive of about 400 KiB."""
    manifest = "".join(
        f'<item id="c{i}" href="c{i}.xhtml" media-type="application/xhtml+xml"/>'
        for i in range(members)
    )
    spine = "".join(f'<itemref idref="c{i}"/>' for i in range(members))
    body = _xhtml("<p>a" + " " * (member_bytes - 400) + "</p>")
    out = {
        "META-INF/container.xml": CONTAINER_XML.encode(),
        "OEBPS/content.opf": _opf(manifest, spine),
    }
    out.update({f"OEBPS/c{i}.xhtml": body for i in range(members)})
    return zip_epub(out)


def member_over_cap_epub(member_bytes: int = 3 * MIB) -> bytes:
    """A content document of hex digits (deflates about 2:1, under any ratio cap) bigger
    than a lowered ``max_member_bytes``."""
    body = _xhtml("<p>" + os.urandom(member_bytes // 2).hex() + "</p>")
    return zip_epub(_minimal_members(body))


def traversal_epub(name: str = "../../etc/passwd") -> bytes:
    members = _minimal_members()
    members[name] = b"root:x:0:0"
    return zip_epub(members)


def href_traversal_epub() -> bytes:
    """Every member name is fine, but the OPF points a spine item out of the archive."""
    manifest = '<item id="c1" href="../../../etc/passwd" media-type="application/xhtml+xml"/>'
    return zip_epub(_minimal_members(opf=_opf(manifest, '<itemref idref="c1"/>')))


def dtd_entity_epub() -> bytes:
    """Billion laughs in the OPF's internal subset."""
    doctype = '\n<!DOCTYPE package [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]>'
    manifest = '<item id="c1" href="c1.xhtml" media-type="application/xhtml+xml"/>'
    opf = _opf(manifest, '<itemref idref="c1"/>', doctype=doctype, extra="<x>&lol2;</x>")
    return zip_epub(_minimal_members(opf=opf))


def no_text_epub() -> bytes:
    body = _xhtml('<div><img src="a.png" alt="only a picture"/></div><nav><p>Contents</p></nav>')
    return zip_epub(_minimal_members(body))


def not_a_zip_named_epub() -> bytes:
    return b"This is plain text pretending to be an EPUB.\n"


def too_many_members_epub(count: int = 5000) -> bytes:
    members = _minimal_members()
    members.update({f"OEBPS/f{i}.txt": b"" for i in range(count)})
    return zip_epub(members, compression=zipfile.ZIP_STORED)


def drm_epub() -> bytes:
    members = _minimal_members()
    members["META-INF/encryption.xml"] = b"""<?xml version="1.0"?>
<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container"
  xmlns:enc="http://www.w3.org/2001/04/xmlenc#">
  <enc:EncryptedData>
    <enc:EncryptionMethod Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>
    <enc:CipherData><enc:CipherReference URI="OEBPS/c1.xhtml"/></enc:CipherData>
  </enc:EncryptedData>
</encryption>"""
    return zip_epub(members)


def wrong_mimetype_epub() -> bytes:
    return zip_epub(_minimal_members(), mimetype=b"application/zip")


def deep_xhtml_epub(depth: int = 10_000) -> bytes:
    return zip_epub(_minimal_members(_xhtml("<div>" * depth + "deep" + "</div>" * depth)))


def hostile_documents() -> list[Hostile]:
    """Every hostile upload tested, with the error its message must name (docs/security.md,
    "Hostile documents", has one row per case)."""
    deep_html = ("<div>" * 10_000 + "deep" + "</div>" * 10_000).encode()
    return [
        Hostile(
            "zip bomb by ratio (200 MiB of spaces in ~200 KiB)",
            bomb_by_ratio(),
            "bomb.epub",
            r"'OEBPS/c1.xhtml' unpacks to over 200 times its packed size",
        ),
        Hostile(
            "zip bomb by total (300 members under the ratio floor, ~300 MiB)",
            bomb_by_total(),
            "total.epub",
            r"members unpack to over 256 MiB in all",
        ),
        Hostile(
            "member over the member cap",
            member_over_cap_epub(),
            "big.epub",
            r"member 'OEBPS/c1.xhtml' unpacks to over 2 MiB",
            limits={"max_member_bytes": 2 * MIB},
        ),
        Hostile(
            "path traversal in a member name",
            traversal_epub(),
            "t.epub",
            r"path '\.\./\.\./etc/passwd' leaves the archive",
        ),
        Hostile("absolute member name", traversal_epub("/etc/passwd"), "t.epub", r"absolute"),
        Hostile("backslashes in a member name", traversal_epub("OEBPS\\..\\x"), "t.epub", r"plain"),
        Hostile(
            "drive letter in a member name", traversal_epub("C:/x.xhtml"), "t.epub", r"absolute"
        ),
        Hostile(
            "OPF href out of the archive",
            href_traversal_epub(),
            "t.epub",
            r"path '\.\./\.\./\.\./etc/passwd' leaves the archive",
        ),
        Hostile(
            "DTD entities in the OPF",
            dtd_entity_epub(),
            "d.epub",
            r"DTD with entity declarations in 'OEBPS/content.opf' \(line 2, column 1\)",
        ),
        Hostile("no readable text", no_text_epub(), "n.epub", r"^EPUB has no readable text$"),
        Hostile(
            "plain text named .epub",
            not_a_zip_named_epub(),
            "book.epub",
            r"^file named \.epub is not a zip archive$",
        ),
        Hostile(
            "too many members",
            too_many_members_epub(),
            "m.epub",
            r"EPUB has 5,00\d members; the limit is 4,096",
        ),
        Hostile("encrypted content (DRM)", drm_epub(), "drm.epub", r"encrypted \(DRM\)"),
        Hostile(
            "mimetype not application/epub+zip",
            wrong_mimetype_epub(),
            "w.epub",
            r"'mimetype' does not say application/epub\+zip",
        ),
        Hostile(
            "XHTML nested 10,000 deep",
            deep_xhtml_epub(),
            "deep.epub",
            r"'OEBPS/c1.xhtml' nested deeper than 256 elements",
        ),
        Hostile("HTML nested 10,000 deep", deep_html, "deep.html", r"^HTML nested deeper than 256"),
        Hostile(
            "HTML whose prose is over max_chars",
            b"<p>" + b"word " * 300_000 + b"</p>",
            "long.html",
            r"more than 1,000,000 characters",
            too_large=True,
        ),
    ]
