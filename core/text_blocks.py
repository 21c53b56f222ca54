"""What a document is made of before it becomes an engine's segments.

Plain text is one :class:`Block`; an SSML document is many (:mod:`voicelane.core.ssml_text`):
a block is text spoken with one :class:`Voicing`, made of :class:`Run` objects each mapped to
the input, followed by an optional exact pause (an SSML ``break``).
:func:`voicelane.core.speech_text.prepare_text` reads each run (lexicons and normalization
unless it is verbatim; phonemes for the engines that take them), joins them, and cuts the
block into sentences.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from voicelane.core.text_map import Mapped

__all__ = ["PLAIN", "Block", "Run", "Voicing"]


@dataclass(frozen=True, slots=True)
class Voicing:
    """What SSML changes about how a segment sounds (the request's own voice and speed
    apply where these are unset / 1.0)."""

    voice: str | None = None
    """SSML ``voice``: another voice of the same engine for this segment."""
    rate: float = 1.0
    """SSML ``prosody rate``: multiplies the request's speed (clamped to the engine's range)."""
    volume_db: float = 0.0
    """SSML ``prosody volume``: gain applied to the segment's audio."""
    pitch_semitones: float = 0.0
    """SSML ``prosody pitch``, on engines that render pitch (``TextProfile.pitch``)."""

    @property
    def plain(self) -> bool:
        return self == PLAIN


PLAIN = Voicing()


@dataclass(frozen=True, slots=True)
class Run:
    """A piece of a block: text mapped to the input, or a mark."""

    mapped: Mapped
    verbatim: bool = False
    """Already words (an SSML ``say-as`` reading, a ``sub`` alias): neither lexicons nor
    normalization apply."""
    phonemes: str | None = None
    """IPA: said this way by engines that take phonemes; others say ``mapped.text`` (the
    written word or its alias)."""
    mark: str | None = None
    """An SSML ``mark`` here (``mapped`` is empty)."""


@dataclass(slots=True)
class Block:
    runs: list[Run] = field(default_factory=list)
    voicing: Voicing = PLAIN
    pause_after_ms: int | None = None
    """An SSML ``break`` after the block: exactly this silence (breaks in a row add up)."""
    paragraph_end: bool = False
    """The block ends a paragraph (SSML ``</p>``)."""
