"""Word timings: when each word of the original input is heard.

An engine that knows where its words start (espeak-ng reports word events with sample
positions) gives :class:`~voicelane.workers.engines.base.WordEvent` offsets into the text it
was given; the segment's map (:attr:`voicelane.core.speech_text.SpokenSegment.mapping`) turns
them into spans of the **original** input, so ``$3.5M`` spoken as five words is one
:class:`WordTiming` whose span slices ``$3.5M`` out of what the user wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["WordTiming"]


@dataclass(frozen=True, slots=True)
class WordTiming:
    text: str
    """The original input's characters ``[char_start, char_end)``."""
    start_ms: int
    end_ms: int
    """From the start of the audio as delivered (pauses and earlier segments included)."""
    char_start: int
    char_end: int

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "char_start": self.char_start,
            "char_end": self.char_end,
        }
