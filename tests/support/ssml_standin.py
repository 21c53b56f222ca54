"""A stand-in for the SSML reader, for the real-time lane's tests of what the worker does with
breaks, voicing and marks (the reader itself is tested with the text pipeline).

:class:`PreparedAs` replaces ``prepare_text`` in :mod:`voicelane.workers.realtime`: a document
(``ssml`` on) is read as plain text with its tags blanked out (spaces of the same length, so
spans still point into the document), then its segments are changed as the reader would have
changed them (``change``), and ``trailing_marks`` set. ``seen`` records the ``ssml`` option of
every call.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from voicelane.core.speech_text import PreparedText, SpokenSegment, TextOptions, prepare_text

Segments = tuple[SpokenSegment, ...]

_TAG = re.compile(r"<[^>]*>")


@dataclasses.dataclass
class PreparedAs:
    change: Callable[[Segments], Segments] = lambda segments: segments
    trailing_marks: tuple[str, ...] = ()
    seen: list[bool | None] = dataclasses.field(default_factory=list)

    def __call__(self, text: str, *, profile: Any, options: TextOptions) -> PreparedText:
        self.seen.append(options.ssml)
        plain = dataclasses.replace(options, ssml=False)
        if not options.ssml:
            return prepare_text(text, profile=profile, options=plain)
        blanked = _TAG.sub(lambda tag: " " * len(tag.group()), text)
        prepared = prepare_text(blanked, profile=profile, options=plain)
        return dataclasses.replace(
            prepared,
            segments=self.change(prepared.segments),
            ssml=True,
            trailing_marks=self.trailing_marks,
        )


def with_first(**changes: Any) -> Callable[[Segments], Segments]:
    """``change`` for :class:`PreparedAs`: the first segment gets ``changes``."""
    return lambda segments: (dataclasses.replace(segments[0], **changes), *segments[1:])
