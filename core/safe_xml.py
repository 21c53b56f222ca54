"""A hardened XML reader for documents users send (SSML, W3C PLS lexicons).

:func:`parse_xml` builds a small tree with expat and refuses, with the line and column of the
fault, everything a hostile document uses:

* a document type declaration (``<!DOCTYPE``): no DTD, so no entity definitions, no billion
  laughs, no external entities or references;
* an entity reference other than XML's five (``&amp;`` ...) and character references;
* more than ``max_chars`` characters (checked before parsing), more than ``max_depth``
  nested elements, more than ``max_elements`` elements.

Text keeps its place in the source: every :class:`XmlText` is one run of character data with
the code-point span ``[start, end)`` of the source it came from (``&amp;`` decodes to ``&``
but spans its five source characters), so what is spoken maps back to what was written.
Comments and processing instructions are skipped. Namespace prefixes stay in the tag
(``amazon:effect``); :attr:`XmlElement.name` is the part after the prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from xml.parsers import expat

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_ELEMENTS",
    "XmlElement",
    "XmlError",
    "XmlText",
    "parse_xml",
]

DEFAULT_MAX_DEPTH = 64
DEFAULT_MAX_ELEMENTS = 50_000


class XmlError(ValueError):
    """A document that is malformed or refused; ``line`` and ``column`` are 1-based."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"line {line}, column {column}: {message}")
        self.reason = message
        self.line = line
        self.column = column


@dataclass(slots=True)
class XmlText:
    text: str
    start: int
    end: int
    """Code-point span of the source it came from."""

    @property
    def exact(self) -> bool:
        """The text is the source span as written (no references decoded)."""
        return self.end - self.start == len(self.text)


@dataclass(slots=True)
class XmlElement:
    tag: str
    """As written, prefix included (``speak``, ``amazon:effect``)."""
    attrs: dict[str, str]
    line: int
    column: int
    """1-based position of the start tag."""
    start: int
    """Code-point offset of the start tag in the source."""
    children: list[XmlElement | XmlText] = field(default_factory=list)
    end: int = 0
    """Code-point offset just past the end tag (or the empty tag)."""

    @property
    def name(self) -> str:
        """The tag without its namespace prefix."""
        return self.tag.rpartition(":")[2]

    def text(self) -> str:
        """All character data inside, in order."""
        return "".join(
            child.text if isinstance(child, XmlText) else child.text() for child in self.children
        )


class _Builder:
    def __init__(self, source: str, max_depth: int, max_elements: int) -> None:
        self.source = source
        self.max_depth = max_depth
        self.max_elements = max_elements
        self.root: XmlElement | None = None
        self.stack: list[XmlElement] = []
        self.elements = 0
        self.parser = expat.ParserCreate()
        p = self.parser
        p.buffer_text = False
        p.ordered_attributes = False
        p.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        p.StartElementHandler = self._start
        p.EndElementHandler = self._end
        p.CharacterDataHandler = self._data
        p.StartDoctypeDeclHandler = self._doctype
        p.EntityDeclHandler = self._entity
        p.ExternalEntityRefHandler = self._external
        p.SkippedEntityHandler = self._skipped
        # Byte offsets (expat's) → code points, when the source is not ASCII.
        self._ascii = source.isascii()
        self._encoded = b"" if self._ascii else source.encode("utf-8")
        self._pending_text: list[tuple[str, int]] = []
        """Character data runs since the last markup: (text, byte offset)."""

    # -- positions
    def _char_offset(self, byte_offset: int) -> int:
        if self._ascii:
            return byte_offset
        return len(self._encoded[:byte_offset].decode("utf-8", errors="ignore"))

    def _fail(self, message: str) -> None:
        raise XmlError(message, self.parser.CurrentLineNumber, self.parser.CurrentColumnNumber + 1)

    # -- handlers
    def _flush_text(self, until_byte: int) -> None:
        """Give the pending runs their spans: each ends where the next event starts."""
        runs = self._pending_text
        if not runs:
            return
        self._pending_text = []
        if not self.stack:
            return  # text outside the root element: whitespace only (expat checks)
        parent = self.stack[-1]
        for index, (text, byte_start) in enumerate(runs):
            byte_end = runs[index + 1][1] if index + 1 < len(runs) else until_byte
            start, end = self._char_offset(byte_start), self._char_offset(byte_end)
            last = parent.children[-1] if parent.children else None
            joins = isinstance(last, XmlText) and last.end == start and last.exact
            if joins and isinstance(last, XmlText) and end - start == len(text):
                last.text += text
                last.end = end
            else:
                parent.children.append(XmlText(text, start, end))

    def _start(self, tag: str, attrs: dict[str, str]) -> None:
        here = self.parser.CurrentByteIndex
        self._flush_text(here)
        self.elements += 1
        if self.elements > self.max_elements:
            self._fail(f"more than {self.max_elements} elements")
        if len(self.stack) >= self.max_depth:
            self._fail(f"elements nested deeper than {self.max_depth}")
        element = XmlElement(
            tag=tag,
            attrs=dict(attrs),
            line=self.parser.CurrentLineNumber,
            column=self.parser.CurrentColumnNumber + 1,
            start=self._char_offset(here),
        )
        if self.stack:
            self.stack[-1].children.append(element)
        else:
            self.root = element
        self.stack.append(element)

    def _end(self, _tag: str) -> None:
        here = self.parser.CurrentByteIndex
        self._flush_text(here)
        element = self.stack.pop()
        offset = self._char_offset(here)
        if self.source.startswith("</", offset):
            # An end tag: it runs to its ">".
            close = self.source.find(">", offset)
            element.end = close + 1 if close >= 0 else len(self.source)
        else:
            element.end = offset  # an empty tag: expat reports its end just past "/>"

    def _data(self, text: str) -> None:
        self._pending_text.append((text, self.parser.CurrentByteIndex))

    def _doctype(self, *_args: object) -> None:
        self._fail("a document type declaration (DOCTYPE) is not allowed")

    def _entity(self, *_args: object) -> None:
        self._fail("entity declarations are not allowed")

    def _external(self, *_args: object) -> int:
        self._fail("external entities are not allowed")
        return 0

    def _skipped(self, name: str, _is_parameter: int) -> None:
        self._fail(f"undefined entity &{name};")


def parse_xml(
    source: str,
    *,
    max_chars: int,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
) -> XmlElement:
    """The root element of ``source``, or :class:`XmlError` (see the module docstring)."""
    if len(source) > max_chars:
        raise XmlError(f"document is longer than {max_chars} characters", 1, 1)
    builder = _Builder(source, max_depth, max_elements)
    try:
        builder.parser.Parse(source.encode("utf-8"), True)
    except expat.ExpatError as error:
        message = expat.ErrorString(error.code) if error.code else str(error)
        raise XmlError(message, error.lineno, error.offset + 1) from None
    except RecursionError:  # pragma: no cover - the depth cap comes first
        raise XmlError("document nested too deeply", 1, 1) from None
    if builder.root is None:  # pragma: no cover - expat refuses a document without one
        raise XmlError("no root element", 1, 1)
    return builder.root
