"""HTML and XHTML → prose, with the stdlib's :class:`html.parser.HTMLParser`: no DTD is ever
processed and character references decode from a fixed table, so no entity can expand. The
parser builds no tree; this module keeps a stack of open elements, capped at
``max_depth``, and counts elements up to ``max_elements``: time is linear in the size.

Tag soup is met halfway: void elements (``br``, ``img``...) never open, an end tag closes
up to its nearest open match (an unmatched one is ignored), and a new ``p``/``li``/``dt``/
``dd``/``tr``/``td``/``th`` closes an open one of its kind; anything else left open is still
open, and counts towards the depth cap.

Blocks (``p``, headings, ``li``, table cells, ``div``...) each start a paragraph of the
prose; everything else is inline. **Not read** (nor anything inside): ``head``, ``script``,
``style``, ``template``, ``noscript``, ``nav``, ``svg``, ``math``, form controls, media
fallbacks; elements marked ``hidden``/``aria-hidden="true"``/``display:none``; footnote
markers (``epub:type``/``role`` ``noteref``/``doc-noteref``, a ``<sup>`` holding only
a link to a fragment or only digits, a link to a fragment whose text is only digits and
brackets, ``<a href="#fn1">[1]</a>``); note bodies (``epub:type`` footnote(s), endnote(s),
rearnote(s), ``role`` doc-footnote, doc-endnote(s)); page numbers (``epub:type`` pagebreak,
``role`` doc-pagebreak); a printed table of contents (``epub:type`` toc, ``role`` doc-toc);
images (their ``alt`` is read with ``read_alt_text``); link URLs (the link's text is read).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

from voicelane.common.errors import InvalidDocumentError
from voicelane.core.documents.model import Chapter, Document, DocumentLimits
from voicelane.core.documents.prose import ProseWriter

__all__ = ["HtmlFacts", "chapters_from_headings", "html_document", "read_html_into"]

MAX_HEADING_CHAPTER_LEVEL = 3
"""h1..h3 become chapters (pandoc's default toc-depth)."""

BLOCKS = frozenset(
    {
        "address",
        "article",
        "aside",
        "blockquote",
        "body",
        "caption",
        "center",
        "dd",
        "details",
        "dialog",
        "dir",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hgroup",
        "hr",
        "html",
        "legend",
        "li",
        "main",
        "menu",
        "ol",
        "p",
        "pre",
        "section",
        "summary",
        "table",
        "tbody",
        "td",
        "tfoot",
        "th",
        "thead",
        "tr",
        "ul",
    }
)
VOID = frozenset(
    {
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "keygen",
        "link",
        "meta",
        "param",
        "source",
        "track",
        "wbr",
    }
)
SKIPPED_TAGS = frozenset(
    {
        "audio",
        "button",
        "canvas",
        "datalist",
        "embed",
        "head",
        "iframe",
        "math",
        "nav",
        "noscript",
        "object",
        "script",
        "select",
        "style",
        "svg",
        "template",
        "textarea",
        "video",
    }
)
SKIPPED_TYPES = frozenset(
    {
        "endnote",
        "endnotes",
        "footnote",
        "footnotes",
        "noteref",
        "pagebreak",
        "rearnote",
        "rearnotes",
        "toc",
    }
)
SKIPPED_ROLES = frozenset(
    {"doc-endnote", "doc-endnotes", "doc-footnote", "doc-noteref", "doc-pagebreak", "doc-toc"}
)
_CLOSED_BY = {
    "p": frozenset({"p"}),
    "li": frozenset({"li"}),
    "dt": frozenset({"dt", "dd"}),
    "dd": frozenset({"dt", "dd"}),
    "tr": frozenset({"tr", "td", "th"}),
    "td": frozenset({"td", "th"}),
    "th": frozenset({"td", "th"}),
}
"""A start tag → the open elements (on top of the stack) it closes."""
_NOTE_MARK = re.compile(r"[\s\d\[\]().,*†‡§-]*")
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}

Attrs = dict[str, str]


@dataclass(slots=True)
class HtmlFacts:
    """What an HTML document says about itself."""

    title: str | None = None
    author: str | None = None
    language: str | None = None


@dataclass(slots=True)
class _Open:
    tag: str
    skip: bool
    block: bool
    heading: bool


@dataclass(slots=True)
class _Held:
    """A ``<sup>``, or a link to a fragment, held back until its end tag says whether it
    is a footnote marker."""

    tag: str
    depth: int = 1
    events: list[tuple[str, str, Attrs]] = field(default_factory=list)


def _skipped(tag: str, attrs: Attrs) -> bool:
    if tag in SKIPPED_TAGS or "hidden" in attrs or attrs.get("aria-hidden") == "true":
        return True
    types = attrs.get("epub:type")
    if types and not SKIPPED_TYPES.isdisjoint(types.split()):
        return True
    roles = attrs.get("role")
    if roles and not SKIPPED_ROLES.isdisjoint(roles.split()):
        return True
    style = attrs.get("style") or ""
    return "display:none" in style.replace(" ", "").lower()


def _is_note_marker(tag: str, events: list[tuple[str, str, Attrs]]) -> bool:
    """A sup's content is only digits (and brackets), or only a link to a fragment; a
    link's to a fragment only digits (and brackets): ``<a href="#fn1">[1]</a>``."""
    if tag == "a":
        text = "".join(value for kind, value, _ in events if kind == "data")
        return bool(text.strip()) and _NOTE_MARK.fullmatch(text) is not None
    text_outside_links: list[str] = []
    link_depth = 0
    linked = False
    for kind, value, attrs in events:
        if kind == "start" and value == "a" and "#" in attrs.get("href", ""):
            link_depth += 1
            linked = True
        elif kind == "end" and value == "a" and link_depth:
            link_depth -= 1
        elif kind == "data" and not link_depth:
            text_outside_links.append(value)
    outside = "".join(text_outside_links)
    if linked:
        return not outside.strip()
    return bool(outside.strip()) and _NOTE_MARK.fullmatch(outside) is not None


class _ProseParser(HTMLParser):
    def __init__(
        self, writer: ProseWriter, *, file: str, limits: DocumentLimits, kind: str
    ) -> None:
        super().__init__(convert_charrefs=True)
        self.writer = writer
        self.file = file
        self.limits = limits
        self.kind = kind
        self.stack: list[_Open] = []
        self.skipping = 0
        self.elements = 0
        self.facts = HtmlFacts()
        self._title: list[str] | None = None
        self._held: _Held | None = None

    # -- HTMLParser's events: counted, then held back inside a sup, else handled
    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements += 1
        if self.elements > self.limits.max_elements:
            raise InvalidDocumentError(
                f"{self.kind} has more than {self.limits.max_elements:,} elements", field="file"
            )
        values = {name: value or "" for name, value in attrs}
        if self._held is not None:
            if tag == self._held.tag:
                self._held.depth += 1
            self._held.events.append(("start", tag, values))
            return
        if not self.skipping and (tag == "sup" or (tag == "a" and "#" in values.get("href", ""))):
            self._held = _Held(tag)
            self._start(tag, values)  # its id and its place in the stack, now
            return
        self._start(tag, values)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        held = self._held
        if held is not None:
            if tag == held.tag:
                held.depth -= 1
                if not held.depth:
                    self._held = None
                    self._replay(held)
                    return
            held.events.append(("end", tag, {}))
            return
        self._end(tag)

    def handle_data(self, data: str) -> None:
        if self._held is not None:
            self._held.events.append(("data", data, {}))
            return
        self._data(data)

    def handle_decl(self, decl: str) -> None:
        if "[" in decl:
            raise InvalidDocumentError(
                f"{self.kind}: a DTD with an internal subset (entity declarations) is not allowed",
                field="file",
            )

    def _replay(self, held: _Held) -> None:
        """What was held, handled now (or dropped: a footnote marker), and its end."""
        if not _is_note_marker(held.tag, held.events):
            for kind, value, attrs in held.events:
                if kind == "start":
                    self._start(value, attrs)
                elif kind == "end":
                    self._end(value)
                else:
                    self._data(value)
        self._end(held.tag)

    # -- the work
    def _start(self, tag: str, attrs: Attrs) -> None:
        writer = self.writer
        if tag == "html":
            self.facts.language = attrs.get("lang") or attrs.get("xml:lang") or None
        element_id = attrs.get("id") or (attrs.get("name") if tag == "a" else None)
        if element_id:
            writer.anchor((self.file, element_id))
        if tag in VOID:
            self._void(tag, attrs)
            return
        stack = self.stack
        while stack and stack[-1].tag in _CLOSED_BY.get(tag, ()):
            self._close(stack.pop())
        if tag in BLOCKS and stack and stack[-1].tag == "p":
            self._close(stack.pop())
        if len(stack) >= self.limits.max_depth:
            raise InvalidDocumentError(
                f"{self.kind} nested deeper than {self.limits.max_depth} elements", field="file"
            )
        skip = _skipped(tag, attrs)
        heading = tag in _HEADINGS and not skip and not self.skipping
        block = tag in BLOCKS
        stack.append(_Open(tag, skip, block, heading))
        if skip:
            self.skipping += 1
        if tag == "title" and self.facts.title is None and not self._in("body"):
            self._title = []
        if self.skipping:
            return
        if heading:
            writer.begin_heading(_HEADINGS[tag])
        elif block:
            writer.end_block()

    def _void(self, tag: str, attrs: Attrs) -> None:
        if tag == "meta" and attrs.get("name", "").lower() == "author" and attrs.get("content"):
            self.facts.author = self.facts.author or attrs["content"].strip() or None
        if self.skipping or _skipped(tag, attrs):
            return
        if tag == "br":
            self.writer.write(" ")
        elif tag == "hr":
            self.writer.end_block()
        elif tag == "img" and self.limits.read_alt_text and attrs.get("alt", "").strip():
            self.writer.write(f" {attrs['alt']} ")

    def _in(self, tag: str) -> bool:
        return any(open_.tag == tag for open_ in self.stack)

    def _end(self, tag: str) -> None:
        stack = self.stack
        for index in range(len(stack) - 1, -1, -1):
            if stack[index].tag == tag:
                while len(stack) > index:
                    self._close(stack.pop())
                return

    def _close(self, element: _Open) -> None:
        if element.tag == "title" and self._title is not None:
            self.facts.title = " ".join("".join(self._title).split()) or None
            self._title = None
        if element.skip:
            self.skipping -= 1
            return
        if self.skipping:
            return
        if element.heading:
            self.writer.end_heading()
        elif element.block:
            self.writer.end_block()

    def _data(self, data: str) -> None:
        if self._title is not None:
            self._title.append(data)
        if not self.skipping:
            self.writer.write(data)

    def finish(self) -> None:
        self.close()
        if self._held is not None:  # never closed: what it held is read
            held, self._held = self._held, None
            self._replay(held)
        while self.stack:
            self._close(self.stack.pop())


def _close_tail(source: str) -> str:
    """``source`` with every ``<`` after its last ``>`` written as ``&lt;``: markup there
    cannot end, and CPython's parser (before 3.13.4 / 3.12.11) rescans to the end for each
    such ``<`` (``"</" * 500_000`` took minutes); as text, which is what the parser makes of
    it at the end anyway, it costs one pass."""
    last = source.rfind(">")
    if source.find("<", last + 1) < 0:
        return source
    return source[: last + 1] + source[last + 1 :].replace("<", "&lt;")


def read_html_into(
    writer: ProseWriter, source: str, *, file: str, limits: DocumentLimits, kind: str = "HTML"
) -> HtmlFacts:
    """Write ``source``'s prose to ``writer``; element ids become anchors ``(file, id)``.
    ``kind`` names the document in errors ("HTML nested deeper than 256 elements")."""
    parser = _ProseParser(writer, file=file, limits=limits, kind=kind)
    parser.feed(_close_tail(source))
    parser.finish()
    return parser.facts


def chapters_from_headings(writer: ProseWriter, text: str) -> tuple[Chapter, ...]:
    """Every heading h1..h3 that has text, in order, with its level."""
    return tuple(
        Chapter(heading.title, heading.start, heading.level)
        for heading in writer.headings(text)
        if heading.level <= MAX_HEADING_CHAPTER_LEVEL
    )


def html_document(source: str, *, limits: DocumentLimits) -> Document:
    """An HTML page as a :class:`Document`: its prose, its h1..h3 as chapters, its
    ``<title>``, ``<meta name="author">`` and ``<html lang>``."""
    writer = ProseWriter(max_chars=limits.max_chars, source="HTML")
    facts = read_html_into(writer, source, file="", limits=limits)
    text = writer.text()
    if not text:
        raise InvalidDocumentError("HTML has no readable text", field="file")
    return Document(
        kind="html",
        text=text,
        chapters=chapters_from_headings(writer, text),
        title=facts.title,
        author=facts.author,
        language=facts.language,
    )
