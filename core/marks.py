"""SSML marks as they are reported back: a ``<mark name="..."/>`` and when it is reached.

A mark's time is the start of the first word at or after it in the audio as delivered (the
end of its segment's speech when no word follows in that segment; the end of the audio for
marks after the last word: :attr:`voicelane.core.speech_text.PreparedText.trailing_marks`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MarkTiming"]


@dataclass(frozen=True, slots=True)
class MarkTiming:
    name: str
    time_ms: int
    """From the start of the audio as delivered (the stream's clock: ``pts_ms``)."""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "time_ms": self.time_ms}
