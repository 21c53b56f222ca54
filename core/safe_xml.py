"""A hardened XML reader for documents users send (SSML, W3C PLS lexicons).

:func:`parse_xml` builds a small tree with expat and refuses, with the line and column of the
fault, everything a hostile document uses:

* a document type declaration (``<!DOCTYPE``): no DTD, so no entity definitions, no billion
  laughs, no external entities or references;
* an entity reference other than XML's five (``&amp;`` ...) and character references;
* more than ``max_chars`` characters (checked before parsing; the error names the line and
  column where the limit falls), more than ``max_depth`` nested elements, more than
  ``max_elements`` elements.

The source is read as UTF-8 whatever its XML declaration says (it is already a ``str``), so
lines and columns count code points, as offsets do. Time is linear in the document's size.

Text keeps its place in the source: every :class:`XmlText` is one run of character data with
the code-point span ``[start, end)`` of the source it came from (``&amp;`` decodes to ``&``
but spans its five source characters), so what is spoken maps back to what was written.
Comments and processing instructions are skipped. Namespace prefixes stay in the tag
(``amazon:effect``); :attr:`XmlElement.name` is the part after the prefix.

Two opt-ins, for documents that real producers write that way (EPUB 2's NCX and XHTML), off by
default (SSML and lexicons keep refusing every DOCTYPE):

* ``allow_doctype``: a DOCTYPE *without an internal subset* (``<!DOCTYPE ncx PUBLIC "..."
  "...">``) is accepted. Its external DTD is never loaded; a DOCTYPE with an internal subset
  (``[...]``, where entities are declared) is still refused, as are entity declarations;
* ``html_entities``: HTML's named character references (``&nbsp;``, ``&eacute;``) decode to
  their characters (a fixed table, :data:`html.entities.html5`); any other name is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.entities import html5 as html5_entities
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
    decoded: bool = False
    """A reference or line end the parser decoded (``&amp;`` → ``&``, CR → LF)."""

    @property
    def exact(self) -> bool:
        """The text is the source span as written (no references decoded)."""
        return not self.decoded and self.end - self.start == len(self.text)


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


_START_TAG_END = re.compile(r"""(?:[^>"']|"[^"]*"|'[^']*')*>""")
"""The rest of a start tag, to its ``>`` (which may appear inside quoted values)."""
_REFERENCE = re.compile(r"&(?:#x[0-9a-fA-F]+|#[0-9]+|amp|lt|gt|quot|apos);|\r\n?")
_CDATA_LINE_END = re.compile(r"\r\n?")
_REFERENCE_HTML = re.compile(r"&(?:#x[0-9a-fA-F]+|#[0-9]+|[A-Za-z][A-Za-z0-9]*);|\r\n?")
"""References when HTML's named entities are read (``html_entities``)."""
_NAMED = {"&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&apos;": "'"}


def _decode(reference: str) -> str:
    """An XML reference or line end as the parser reads it."""
    if reference[0] == "\r":
        return "\n"
    # expat has checked it names a character: leading zeros aside, it has a few digits.
    if reference.startswith("&#x"):
        return chr(int(reference[3:-1].lstrip("0") or "0", 16))
    if reference.startswith("&#"):
        return chr(int(reference[2:-1].lstrip("0") or "0"))
    return _NAMED.get(reference) or html5_entities.get(reference[1:], reference)


class _Builder:
    def __init__(
        self,
        source: str,
        max_depth: int,
        max_elements: int,
        *,
        allow_doctype: bool = False,
        html_entities: bool = False,
    ) -> None:
        self.source = source
        self.allow_doctype = allow_doctype
        self.html_entities = html_entities
        self.max_depth = max_depth
        self.max_elements = max_elements
        self.root: XmlElement | None = None
        self.stack: list[XmlElement] = []
        self.elements = 0
        # The source is handed to expat as UTF-8 whatever its XML declaration says, so
        # offsets are UTF-8 byte offsets and columns count code points.
        self.parser = expat.ParserCreate(encoding="UTF-8")
        p = self.parser
        # expat hands over character data in one piece per run between markup (not one call
        # per line and per reference); spans come from the source between the markup.
        p.buffer_text = True
        p.ordered_attributes = False
        p.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        p.StartElementHandler = self._start
        p.EndElementHandler = self._end
        p.CharacterDataHandler = self._data
        p.CommentHandler = self._comment
        p.ProcessingInstructionHandler = self._instruction
        p.StartCdataSectionHandler = self._cdata_start
        p.EndCdataSectionHandler = self._cdata_end
        p.StartDoctypeDeclHandler = self._doctype
        p.EntityDeclHandler = self._entity
        p.UnparsedEntityDeclHandler = self._entity
        p.ExternalEntityRefHandler = self._external
        p.SkippedEntityHandler = self._skipped
        if html_entities:
            # As if an (unread) external DTD declared them: expat then hands names it does
            # not know to _skipped instead of failing, and _skipped looks them up.
            p.UseForeignDTD(True)
        self.encoded = source.encode("utf-8")
        self._ascii = len(self.encoded) == len(source)
        # Byte offsets (expat's) → code points, when the source is not ASCII: offsets only
        # grow, so a cursor converts each byte once (linear in the document's size).
        self._cursor_byte = 0
        self._cursor_char = 0
        self._text: list[str] = []
        """Character data since the last markup, as expat decoded it."""
        self._text_start = 0
        """Where the source after the last markup starts (code points)."""
        self._in_cdata = False
        self._last_start: XmlElement | None = None
        """The element whose start tag was the last event (an empty tag ends right after)."""

    # -- positions
    def _here(self) -> int:
        """The code-point offset of the current event."""
        byte_offset = self.parser.CurrentByteIndex
        if self._ascii:
            return byte_offset
        if byte_offset < self._cursor_byte:  # pragma: no cover - expat's offsets only grow
            self._cursor_byte = self._cursor_char = 0
        chunk = self.encoded[self._cursor_byte : byte_offset]
        self._cursor_char += len(chunk.decode("utf-8", errors="ignore"))
        self._cursor_byte = byte_offset
        return self._cursor_char

    def _fail(self, message: str) -> None:
        raise XmlError(message, self.parser.CurrentLineNumber, self.parser.CurrentColumnNumber + 1)

    # -- text
    def _flush_text(self, until: int) -> None:
        """Give the character data since the last markup its spans: the source
        ``[_text_start, until)`` as written becomes one :class:`XmlText`; each decoded
        reference (``&amp;``) or CR line end in it one of its own."""
        if not self._text:
            return
        text = "".join(self._text)
        self._text = []
        if not self.stack:
            return  # text outside the root element: whitespace only (expat checks)
        children = self.stack[-1].children
        start = self._text_start
        if len(text) == until - start and self.source.startswith(text, start):
            children.append(XmlText(text, start, until))  # as written: the common case
            return
        if self._in_cdata:
            pattern = _CDATA_LINE_END
        else:
            pattern = _REFERENCE_HTML if self.html_entities else _REFERENCE
        pieces: list[XmlText] = []
        position = start
        for match in pattern.finditer(self.source, start, until):
            if match.start() > position:
                pieces.append(
                    XmlText(self.source[position : match.start()], position, match.start())
                )
            pieces.append(XmlText(_decode(match.group()), match.start(), match.end(), True))
            position = match.end()
        if until > position:
            pieces.append(XmlText(self.source[position:until], position, until))
        if "".join(piece.text for piece in pieces) != text:  # pragma: no cover - defensive
            pieces = [XmlText(text, start, until, True)]
        children.extend(pieces)

    def _markup(self, end: int) -> None:
        """Markup ended at ``end``: the text before it is complete, the next starts there."""
        self._text_start = end
        self._last_start = None

    # -- handlers
    def _start(self, tag: str, attrs: dict[str, str]) -> None:
        here = self._here()
        if self._text:
            self._flush_text(here)
        self.elements += 1
        if self.elements > self.max_elements:
            self._fail(f"more than {self.max_elements} elements")
        stack = self.stack
        if len(stack) >= self.max_depth:
            self._fail(f"elements nested deeper than {self.max_depth}")
        parser = self.parser
        element = XmlElement(
            tag, attrs, parser.CurrentLineNumber, parser.CurrentColumnNumber + 1, here
        )
        if stack:
            stack[-1].children.append(element)
        else:
            self.root = element
        stack.append(element)
        tag_end = _START_TAG_END.match(self.source, here + 1 + len(tag))
        self._text_start = tag_end.end() if tag_end else here
        self._last_start = element

    def _end(self, _tag: str) -> None:
        here = self._here()
        if self._text:
            self._flush_text(here)
        element = self.stack.pop()
        # An empty tag: expat reports its end just past "/>", right after its start (a start
        # tag that is not empty never ends in "/>": attribute values are quoted).
        if self._last_start is element and self.source.startswith("/>", here - 2):
            element.end = here
        else:
            # An end tag: it runs to its ">".
            close = self.source.find(">", here)
            element.end = close + 1 if close >= 0 else len(self.source)
        self._text_start = element.end
        self._last_start = None

    def _data(self, text: str) -> None:
        self._text.append(text)

    def _comment(self, _text: str) -> None:
        here = self._here()
        self._flush_text(here)
        close = self.source.find("-->", here + 4)
        self._markup(close + 3 if close >= 0 else len(self.source))

    def _instruction(self, _target: str, _data: str) -> None:
        here = self._here()
        self._flush_text(here)
        close = self.source.find("?>", here + 2)
        self._markup(close + 2 if close >= 0 else len(self.source))

    def _cdata_start(self) -> None:
        here = self._here()
        self._flush_text(here)
        self._in_cdata = True
        self._markup(here + len("<![CDATA["))

    def _cdata_end(self) -> None:
        here = self._here()
        self._flush_text(here)
        self._in_cdata = False
        self._markup(here + len("]]>"))

    def _doctype(
        self, _name: str, _system_id: str | None, _public_id: str | None, has_internal_subset: int
    ) -> None:
        # expat reports it where its internal subset starts: name where it begins.
        if self.allow_doctype and not has_internal_subset:
            return  # an external DTD named, never loaded (parameter entities: never)
        here = self._here()
        start = self.source.rfind("<!DOCTYPE", 0, here + 1)
        start = here if start < 0 else start
        line = self.source.count("\n", 0, start) + 1
        column = start - (self.source.rfind("\n", 0, start) + 1) + 1
        if self.allow_doctype:
            message = "a DTD with an internal subset (entity declarations) is not allowed"
        else:
            message = "a document type declaration (DOCTYPE) is not allowed"
        raise XmlError(message, line, column)

    def _entity(self, *_args: object) -> None:  # pragma: no cover - only inside a DOCTYPE
        self._fail("entity declarations are not allowed")

    def _external(self, *_args: object) -> int:  # pragma: no cover - only inside a DOCTYPE
        self._fail("external entities are not allowed")
        return 0

    def _skipped(self, name: str, is_parameter: int) -> None:
        character = (
            html5_entities.get(name + ";") if self.html_entities and not is_parameter else None
        )
        if character is None:
            self._fail(f"undefined entity &{name};")
            return
        self._text.append(character)


def parse_xml(
    source: str,
    *,
    max_chars: int,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    allow_doctype: bool = False,
    html_entities: bool = False,
) -> XmlElement:
    """The root element of ``source``, or :class:`XmlError` (see the module docstring;
    ``allow_doctype`` and ``html_entities`` are the EPUB opt-ins described there)."""
    if len(source) > max_chars:
        # Where the document crosses the limit, so the message names a place like the others.
        line = source.count("\n", 0, max_chars) + 1
        column = max_chars - (source.rfind("\n", 0, max_chars) + 1) + 1
        raise XmlError(f"document is longer than {max_chars} characters", line, column)
    builder = _Builder(
        source, max_depth, max_elements, allow_doctype=allow_doctype, html_entities=html_entities
    )
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
