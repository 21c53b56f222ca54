"""Writing prose as it is read aloud: blocks separated by a blank line, inline whitespace
collapsed to one space, and places (an element's id, a heading) pinned to the offset of the
first character written after them.

The readers (:mod:`.html_prose`, and through it Markdown and EPUB) walk their documents and
call :class:`ProseWriter`; the writer alone decides offsets, so every reader's chapters agree
with its text. It stops as soon as the text passes ``max_chars`` (a TextTooLargeError), so a
huge document costs no more than the limit.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from dataclasses import dataclass

from voicelane.common.errors import TextTooLargeError

__all__ = ["BLOCK_SEPARATOR", "Heading", "ProseWriter"]

BLOCK_SEPARATOR = "\n\n"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Control characters (tab, LF and CR aside) cannot be spoken: dropped."""


@dataclass(frozen=True, slots=True)
class Heading:
    level: int
    title: str
    start: int


class ProseWriter:
    """Accumulates prose; see the module docstring. ``source`` names the document in the
    too-large message ("HTML", "EPUB")."""

    def __init__(self, *, max_chars: int, source: str) -> None:
        self.max_chars = max_chars
        self.source = source
        self._parts: list[str] = []
        self.length = 0
        """Characters written so far."""
        self._in_block = False
        self._space = False
        self._pending: list[Hashable] = []
        self.anchors: dict[Hashable, int] = {}
        """Where each anchored place starts: the first character written after it."""
        self._headings: list[tuple[int, Hashable, int]] = []
        self._open_heading: tuple[int, Hashable] | None = None

    # -- writing
    def _emit(self, piece: str) -> None:
        self._parts.append(piece)
        self.length += len(piece)
        if self.length > self.max_chars:
            raise TextTooLargeError(
                f"{self.source} has more than {self.max_chars:,} characters to read"
                f" (the limit is {self.max_chars:,})",
                field="file",
            )

    def write(self, text: str) -> None:
        """Inline text: whitespace runs become one space, none at a block's edges."""
        if _CONTROL.search(text):
            text = _CONTROL.sub(" ", text)
        words = text.split()
        if not words:
            if text and self._in_block:
                self._space = True
            return
        if self._in_block:
            if self._space or text[0].isspace():
                self._emit(" ")
        else:
            if self.length:
                self._emit(BLOCK_SEPARATOR)
            self._in_block = True
        if self._pending:
            for key in self._pending:
                self.anchors.setdefault(key, self.length)
            self._pending.clear()
        self._emit(" ".join(words))
        self._space = text[-1].isspace()

    def end_block(self) -> None:
        """The current block (if any) is over: the next text starts a new one."""
        self._in_block = False
        self._space = False

    # -- places
    def anchor(self, key: Hashable) -> None:
        """Pin ``key`` to the next character written (the first anchoring wins)."""
        if key not in self.anchors:
            self._pending.append(key)

    def begin_heading(self, level: int) -> None:
        self.end_block()
        key = ("heading", len(self._headings))
        self._open_heading = (level, key)
        self.anchor(key)

    def end_heading(self) -> None:
        if self._open_heading is not None:
            level, key = self._open_heading
            self._headings.append((level, key, self.length))
            self._open_heading = None
        self.end_block()

    # -- results
    def text(self) -> str:
        return "".join(self._parts)

    def headings(self, text: str) -> list[Heading]:
        """The headings that have text, in order (``text`` is :meth:`text`'s result)."""
        found: list[Heading] = []
        for level, key, end in self._headings:
            start = self.anchors.get(key)
            if start is not None and start < end:
                found.append(Heading(level, text[start:end], start))
        return found
