"""Text rewritten with a map back to where each part came from.

Every step between what a user wrote and what an engine is given (whitespace clean-up,
lexicons, text normalization) is a rewrite: :class:`Mapped` holds its output and the
:class:`Piece` objects that say which output range came from which source range. A piece is
either *exact* (output equals the source, character for character: offsets inside it map one
to one) or a replacement (``$3.5M`` → ``three point five million dollars``: any part of the
output maps to the whole source range). Maps compose (:meth:`Mapped.then`), so a word the
engine reports maps back through every step to a span of the original input.

Build one with :class:`MapBuilder`::

    b = MapBuilder("I paid $3")
    b.keep(0, 7)                 # "I paid " unchanged
    b.replace(7, 9, "three dollars")
    mapped = b.build()           # mapped.text == "I paid three dollars"
    mapped.source_span(7, 12)    # (7, 9): "three" came from "$3"
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "MapBuilder",
    "Mapped",
    "Piece",
    "concat",
    "identity",
    "replacement",
    "sliced",
    "translate",
]


@dataclass(frozen=True, slots=True)
class Piece:
    """Output ``[out_start, out_end)`` came from source ``[src_start, src_end)``."""

    out_start: int
    out_end: int
    src_start: int
    src_end: int
    exact: bool
    """Output equals source here, character for character (same length)."""


@dataclass(frozen=True, slots=True)
class Mapped:
    """``text`` and the pieces, in order, that cover it (and a range of the source)."""

    text: str
    pieces: tuple[Piece, ...]
    source_length: int
    _starts: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_starts", tuple(p.out_start for p in self.pieces))

    def source_offset(self, out: int, *, end: bool = False) -> int:
        """The source offset of output offset ``out``: inside an exact piece one to one;
        inside a replacement its source start (``end``: its source end). Offsets past the
        last piece map to the end of the source."""
        if not self.pieces:
            return 0 if not end else self.source_length
        index = bisect_right(self._starts, out) - 1
        if end:
            # An end offset belongs to the piece it closes, not the one it opens.
            index = bisect_right(self._starts, out - 1) - 1 if out > 0 else 0
        if index < 0:
            return self.pieces[0].src_start
        piece = self.pieces[index]
        if out >= piece.out_end:
            return piece.src_end
        if piece.exact:
            return piece.src_start + (out - piece.out_start)
        return piece.src_end if end else piece.src_start

    def source_span(self, start: int, end: int) -> tuple[int, int]:
        """The source range output ``[start, end)`` came from: a word inside a replacement
        maps to the whole replaced source (``$3.5M`` is one span even when it is spoken as
        four words)."""
        if end <= start:
            offset = self.source_offset(start)
            return offset, offset
        return self.source_offset(start), self.source_offset(end, end=True)

    def then(self, later: Mapped) -> Mapped:
        """This rewrite followed by ``later`` (whose source is this output): one map from
        this map's source to ``later``'s output."""
        pieces: list[Piece] = []
        for piece in later.pieces:
            if piece.exact:
                # Split where this map's pieces change, so exactness survives.
                out = piece.out_start
                src = piece.src_start
                while src < piece.src_end:
                    index = bisect_right(self._starts, src) - 1
                    inner = self.pieces[index] if index >= 0 else None
                    stop = piece.src_end if inner is None else min(piece.src_end, inner.out_end)
                    stop = max(stop, src + 1)
                    start_src, end_src = self.source_span(src, stop)
                    exact = inner is not None and inner.exact
                    pieces.append(Piece(out, out + (stop - src), start_src, end_src, exact))
                    out += stop - src
                    src = stop
            else:
                start_src, end_src = self.source_span(piece.src_start, piece.src_end)
                pieces.append(Piece(piece.out_start, piece.out_end, start_src, end_src, False))
        return Mapped(later.text, tuple(_merge(pieces)), self.source_length)


def _merge(pieces: list[Piece]) -> list[Piece]:
    """Adjacent exact pieces that continue each other become one."""
    merged: list[Piece] = []
    for piece in pieces:
        if piece.out_end == piece.out_start and piece.src_end == piece.src_start:
            continue
        last = merged[-1] if merged else None
        if (
            last is not None
            and last.exact
            and piece.exact
            and last.out_end == piece.out_start
            and last.src_end == piece.src_start
        ):
            merged[-1] = Piece(last.out_start, piece.out_end, last.src_start, piece.src_end, True)
        else:
            merged.append(piece)
    return merged


def identity(text: str) -> Mapped:
    """``text`` unchanged."""
    pieces = (Piece(0, len(text), 0, len(text), True),) if text else ()
    return Mapped(text, pieces, len(text))


class MapBuilder:
    """Build a :class:`Mapped` left to right over a source string.

    Call :meth:`keep` and :meth:`replace` with source ranges in increasing order; a source
    range left out between two calls is deleted (its output is empty, it maps nowhere).
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self._out: list[str] = []
        self._pieces: list[Piece] = []
        self._out_length = 0
        self._src_position = 0

    def keep(self, src_start: int, src_end: int) -> None:
        """Copy ``source[src_start:src_end]`` to the output unchanged."""
        self._check(src_start, src_end)
        if src_end > src_start:
            self._add(self.source[src_start:src_end], src_start, src_end, exact=True)
        self._src_position = src_end

    def replace(self, src_start: int, src_end: int, text: str) -> None:
        """Write ``text`` for ``source[src_start:src_end]`` (``src_start == src_end``:
        an insertion, mapped to that point)."""
        self._check(src_start, src_end)
        if text:
            self._add(text, src_start, src_end, exact=False)
        self._src_position = src_end

    def build(self) -> Mapped:
        return Mapped("".join(self._out), tuple(_merge(self._pieces)), len(self.source))

    def _check(self, src_start: int, src_end: int) -> None:
        if not self._src_position <= src_start <= src_end <= len(self.source):
            raise ValueError(
                f"source range [{src_start}, {src_end}) is out of order "
                f"(at {self._src_position} of {len(self.source)})"
            )

    def _add(self, text: str, src_start: int, src_end: int, *, exact: bool) -> None:
        start = self._out_length
        self._out.append(text)
        self._out_length += len(text)
        self._pieces.append(Piece(start, self._out_length, src_start, src_end, exact))


def replacement(text: str, src_start: int, src_end: int, source_length: int) -> Mapped:
    """``text`` said for source ``[src_start, src_end)`` as a whole (an alias, a
    say-as reading)."""
    pieces = (Piece(0, len(text), src_start, src_end, False),) if text else ()
    return Mapped(text, pieces, source_length)


def concat(parts: Sequence[Mapped], source_length: int) -> Mapped:
    """Rewrites of one source, one after another: their texts joined, their maps kept."""
    texts: list[str] = []
    pieces: list[Piece] = []
    length = 0
    for part in parts:
        if not part.text:
            continue
        for p in part.pieces:
            pieces.append(
                Piece(p.out_start + length, p.out_end + length, p.src_start, p.src_end, p.exact)
            )
        texts.append(part.text)
        length += len(part.text)
    return Mapped("".join(texts), tuple(_merge(pieces)), source_length)


def sliced(mapped: Mapped, start: int, end: int) -> Mapped:
    """``mapped.text[start:end]`` with its map to ``mapped``'s source."""
    builder = MapBuilder(mapped.text)
    builder.keep(start, end)
    inner = builder.build()
    return mapped.then(inner)


def translate(text: str, table: Mapping[str, str]) -> Mapped:
    """``text`` with each character in ``table`` replaced by its entry (one character for
    another, or a string), every other character kept."""
    builder = MapBuilder(text)
    position = 0
    for index, char in enumerate(text):
        if char in table:
            builder.keep(position, index)
            builder.replace(index, index + 1, table[char])
            position = index + 1
    builder.keep(position, len(text))
    return builder.build()
