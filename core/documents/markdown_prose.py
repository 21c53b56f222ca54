"""Markdown → prose, with markdown-it-py (CommonMark, plus tables and strikethrough).

The Markdown is rendered to HTML with these changes, then read by :mod:`.html_prose` (so
both formats follow one set of rules):

* **not read**: raw HTML blocks, and raw inline tags (the text between them is read: it is
  part of the sentence); code blocks, fenced or indented (code read aloud is noise; inline
  ``code`` is read, it is part of the sentence); footnote references (``[^1]``) and footnote
  definitions (a paragraph starting ``[^1]:``), as pandoc writes them;
* pandoc-style front matter (``---`` / ``title: ...`` / ``author: ...`` / ``lang: ...`` /
  ``---`` or ``...``; simple ``key: value`` lines, quotes stripped, no YAML library) gives the
  metadata and is not read; without a title there, the first h1 is the title;
* chapters: every heading h1..h3, in order, with its level.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.token import Token

from voicelane.common.errors import InvalidDocumentError
from voicelane.core.documents.html_prose import chapters_from_headings, read_html_into
from voicelane.core.documents.model import Document, DocumentLimits
from voicelane.core.documents.prose import ProseWriter

__all__ = ["markdown_document", "split_front_matter"]

_FRONT_MATTER = re.compile(
    r"\A(?:\ufeff)?---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S | re.M
)
_KEY_VALUE = re.compile(r"^([A-Za-z][\w-]*)[ \t]*:[ \t]*(.*?)[ \t]*$")
_FOOTNOTE_REF = re.compile(r"\[\^[^\]\s]+\]")
_FOOTNOTE_DEFINITION = re.compile(r"\A\[\^[^\]\s]+\]:")


def split_front_matter(source: str) -> tuple[dict[str, str], str]:
    """pandoc-style front matter's simple ``key: value`` lines (keys lower-cased), and the
    Markdown after it. No front matter: ``({}, source)``."""
    match = _FRONT_MATTER.match(source)
    if match is None:
        return {}, source
    values: dict[str, str] = {}
    for line in match.group(1).splitlines():
        pair = _KEY_VALUE.match(line)
        if pair is None:
            continue
        key, value = pair.group(1).lower(), pair.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        if value and key not in values:
            values[key] = value
    return values, source[match.end() :]


def _drop_footnotes(state: StateCore) -> None:
    """A core rule between block and inline parsing: definitions out, references out."""
    tokens = state.tokens
    kept: list[Token] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if (
            token.type == "paragraph_open"
            and index + 2 < len(tokens)
            and tokens[index + 1].type == "inline"
            and _FOOTNOTE_DEFINITION.match(tokens[index + 1].content)
        ):
            index += 3  # paragraph_open, inline, paragraph_close
            continue
        if token.type == "inline" and "[^" in token.content:
            token.content = _FOOTNOTE_REF.sub("", token.content)
        kept.append(token)
        index += 1
    state.tokens = kept


def _nothing(_self: Any, _tokens: Sequence[Token], _index: int, _options: Any, _env: Any) -> str:
    return ""


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    md.core.ruler.after("block", "voicelane_footnotes", _drop_footnotes)
    for rule in ("html_block", "html_inline", "fence", "code_block"):
        md.add_render_rule(rule, _nothing)
    return md


_MARKDOWN = _parser()


def markdown_document(source: str, *, limits: DocumentLimits) -> Document:
    """A Markdown text as a :class:`Document` (see the module docstring)."""
    meta, body = split_front_matter(source)
    html = _MARKDOWN.render(body)
    writer = ProseWriter(max_chars=limits.max_chars, source="Markdown")
    read_html_into(writer, html, file="", limits=limits, kind="Markdown")
    text = writer.text()
    if not text:
        raise InvalidDocumentError("Markdown has no readable text", field="file")
    chapters = chapters_from_headings(writer, text)
    title = meta.get("title") or next((c.title for c in chapters if c.level == 1), None)
    return Document(
        kind="markdown",
        text=text,
        chapters=chapters,
        title=title,
        author=meta.get("author"),
        language=meta.get("lang") or meta.get("language"),
    )
