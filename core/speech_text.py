"""From what a user wrote to what an engine is given: one function, every lane.

:func:`prepare_text` is the only way text reaches an engine: the embedded renderer, the batch
lane's planner and the real-time worker call it, and so do ``voicelane text`` and
``POST /v1/text`` that show its result: what they print is what the engine gets.

The steps, each a rewrite with a map back to the input (:mod:`voicelane.core.text_map`);
SSML and lexicons (issue 20, items 4 and 5) will come before them:

1. **Normalization** (on unless ``normalize=False``;
   :func:`voicelane.core.normalize.normalize_text`): numbers, money, dates, times, phone
   numbers, percentages, symbols... become words, in Chinese or English by their context.
2. **Segmentation** (:func:`voicelane.core.text.split_sentences`) of the normalized text,
   so a segment's engine text stays within ``max_segment_chars``.
3. **The engine's alphabet** (:mod:`voicelane.core.text_profiles`): what the engine cannot
   speak is spelled (``é`` → ``e`` on ChatTTS) or removed and reported: a
   :class:`TextWarning` with the character and its position in the input.

Each :class:`SpokenSegment` carries its engine text, its span in the input, and a map from
every offset of its engine text back to the input, so a word an engine times maps to the
input's own characters (``$3.5M`` is one span, spoken as five words).

A text is refused (:meth:`PreparedText.check_speakable`) when nothing of it can be spoken.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from voicelane.common.errors import InvalidInputError
from voicelane.core.lexicon import Lexicon
from voicelane.core.normalize import normalize_text
from voicelane.core.text import (
    DEFAULT_MAX_SEGMENT_CHARS,
    Segment,
    has_speakable_text,
    split_sentences,
)
from voicelane.core.text_map import MapBuilder, Mapped, identity
from voicelane.core.text_profiles import TextProfile

__all__ = [
    "MAX_WARNINGS",
    "PLAIN",
    "TEXT_OPTION_FIELDS",
    "PreparedText",
    "SpokenSegment",
    "TextOptions",
    "TextWarning",
    "Voicing",
    "prepare_text",
]

MAX_WARNINGS = 100
"""Warnings listed per text; the rest are counted (:attr:`PreparedText.warnings_dropped`)."""

_WS_RUN = re.compile(r"[\s\u200b\u2060\ufeff]+")
_HAS_LETTER = re.compile(r"[^\W\d_]")


@dataclass(frozen=True, slots=True)
class TextWarning:
    """Something of the input that is not spoken as written."""

    code: str
    """``unspeakable``: a character the engine cannot say, left out."""
    message: str
    position: int
    """Code point offset in the original input."""
    char: str = ""
    """The character at fault, for ``unspeakable``."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        out["position"] = self.position  # after the message, as the docs show it
        if self.char:
            out["char"] = self.char
        return out


@dataclass(frozen=True, slots=True)
class TextOptions:
    """How a request's text is read."""

    normalize: bool = True
    ssml: bool | None = None
    """True: the text is SSML; False: plain text; None: SSML when it starts with ``<speak``."""
    lexicon: Lexicon = Lexicon()  # noqa: RUF009 - frozen, shared default
    """The entries of the lexicons the request applies, resolved by the front at submission
    (so every worker reads the text alike, and a job keeps them as they were)."""
    lexicon_names: tuple[str, ...] = ()
    """The names of those lexicons (shown in the job record)."""

    def to_fields(self) -> dict[str, str]:
        """As string fields (a Redis hash, the lane's request)."""
        fields = {
            "normalize": "1" if self.normalize else "0",
            "ssml": "" if self.ssml is None else ("1" if self.ssml else "0"),
        }
        if self.lexicon:
            fields["lexicon"] = self.lexicon.to_json()
        if self.lexicon_names:
            fields["lexicon_names"] = ",".join(self.lexicon_names)
        return fields

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> TextOptions:
        """The inverse of :meth:`to_fields`; absent fields (records written before these
        options existed) read as the defaults."""
        ssml = fields.get("ssml", "")
        names = fields.get("lexicon_names", "")
        return cls(
            normalize=fields.get("normalize", "1") != "0",
            ssml=None if ssml == "" else ssml == "1",
            lexicon=Lexicon.from_json(fields.get("lexicon", "")),
            lexicon_names=tuple(names.split(",")) if names else (),
        )


TEXT_OPTION_FIELDS = ("normalize", "ssml", "lexicon", "lexicon_names")
"""The names :meth:`TextOptions.to_fields` may write."""


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
class SpokenSegment:
    """One piece for the engine: its text and where it came from."""

    text: str
    """Exactly what the engine is given."""
    start: int
    end: int
    """The span ``[start, end)`` of the original input it speaks."""
    paragraph_end: bool
    mapping: Mapped = field(repr=False, compare=False)
    """Engine-text offsets → input offsets (``mapping.source_span(a, b)``)."""
    pause_after_ms: int | None = None
    """An SSML ``break``: exactly this much silence follows (replacing the engine's own
    pause there and the paragraph pause); None: the usual pauses."""
    voicing: Voicing = PLAIN
    marks: tuple[tuple[str, int], ...] = ()
    """SSML marks ``(name, offset in the engine text)``: reported with their audio time (the
    start of the first word at or after the offset; the segment's end when none)."""


@dataclass(frozen=True, slots=True)
class PreparedText:
    segments: tuple[SpokenSegment, ...]
    warnings: tuple[TextWarning, ...]
    warnings_dropped: int = 0
    """Warnings beyond :data:`MAX_WARNINGS`, not listed."""
    unspeakable_chars: int = 0
    """Characters removed because the engine cannot speak them (the metric's increment)."""
    ssml: bool = False
    """The input was read as SSML."""
    trailing_marks: tuple[str, ...] = ()
    """SSML marks after the last spoken word: reported at the end of the audio."""

    def check_speakable(self, *, field: str = "text") -> None:
        """Refuse a text with nothing the engine can speak."""
        if not self.segments:
            raise InvalidInputError(
                f"{field} has nothing to speak (no letters or digits the engine can say)",
                field=field,
            )

    def warnings_json(self) -> list[dict[str, Any]]:
        out = [w.to_json() for w in self.warnings]
        if self.warnings_dropped:
            out.append(
                {"code": "more", "message": f"{self.warnings_dropped} more warnings not listed"}
            )
        return out


# ---- the pipeline -------------------------------------------------------------------------


def prepare_text(
    text: str,
    *,
    profile: TextProfile,
    options: TextOptions = TextOptions(),
    max_segment_chars: int = DEFAULT_MAX_SEGMENT_CHARS,
) -> PreparedText:
    """``text`` (checked input: :func:`voicelane.core.rules.check_speech_text`) as the
    engine of ``profile`` will be given it (see the module docstring)."""
    mapped = normalize_text(text) if options.normalize else identity(text)
    collector = _Collector(profile)
    segments = [
        spoken
        for piece in split_sentences(mapped.text, max_segment_chars)
        if (spoken := collector.segment(mapped, piece)) is not None
    ]
    return PreparedText(
        segments=tuple(segments),
        warnings=tuple(collector.warnings),
        warnings_dropped=collector.dropped,
        unspeakable_chars=collector.unspeakable,
    )


@dataclass
class _Collector:
    """Turns the normalized text's sentences into the engine's segments, keeping count of
    what the engine cannot speak."""

    profile: TextProfile
    warnings: list[TextWarning] = field(default_factory=list)
    dropped: int = 0
    unspeakable: int = 0

    def segment(self, mapped: Mapped, piece: Segment) -> SpokenSegment | None:
        """One sentence of ``mapped.text`` for the engine; None when nothing of it is left
        that the engine can say."""
        aligned = mapped.then(_align(mapped.text, piece))
        filtered = _filter(aligned.text, self.profile)
        if filtered is not None:
            out, removed = filtered
            for offset, char in removed:
                self._unspeakable(char, aligned.source_offset(offset))
            aligned = _tidy(aligned.then(out))
        speakable = (
            has_speakable_text(aligned.text)
            if self.profile.speaks_digits
            else _HAS_LETTER.search(aligned.text) is not None
        )
        if not speakable:
            return None
        start, end = aligned.source_span(0, len(aligned.text))
        return SpokenSegment(aligned.text, start, end, piece.paragraph_end, aligned)

    def _unspeakable(self, char: str, position: int) -> None:
        self.unspeakable += 1
        if len(self.warnings) >= MAX_WARNINGS:
            self.dropped += 1
            return
        self.warnings.append(
            TextWarning(
                "unspeakable",
                f"{char!r} (U+{ord(char):04X}) at {position} cannot be spoken by the "
                f"{self.profile.engine} engine; it was left out",
                position,
                char,
            )
        )


def _align(text: str, segment: Segment) -> Mapped:
    """``text`` → ``segment.text`` (its span, whitespace normalized): runs of whitespace map
    to the one space they became, deleted characters (zero-width, spaces between CJK) to
    nothing."""
    builder = MapBuilder(text)
    start, end = segment.start, segment.end
    out = segment.text
    if text[start:end] == out:
        builder.keep(start, end)
        return builder.build()
    position = start
    j = 0
    for match in _WS_RUN.finditer(text, start, end):
        run_start, run_end = match.span()
        # Characters before the run are kept as they are.
        builder.keep(position, run_start)
        j += run_start - position
        if j < len(out) and out[j] == " ":
            builder.replace(run_start, run_end, " ")
            j += 1
        else:
            builder.replace(run_start, run_end, "")
        position = run_end
    builder.keep(position, end)
    return builder.build()


def _tidy(mapped: Mapped) -> Mapped:
    """No space at either end, no two in a row (what removing characters can leave)."""
    text = mapped.text
    if not (text.startswith(" ") or text.endswith(" ") or "  " in text):
        return mapped
    builder = MapBuilder(text)
    position = 0
    for match in re.finditer(r" {2,}|^ +| +$", text):
        run_start, run_end = match.span()
        builder.keep(position, run_start)
        inner = run_start > 0 and run_end < len(text)
        builder.replace(run_start, run_end, " " if inner else "")
        position = run_end
    builder.keep(position, len(text))
    return mapped.then(builder.build())


@lru_cache(maxsize=4096)
def _spelled(profile: TextProfile, char: str) -> str | None:
    return profile.spell(char)


def _filter(text: str, profile: TextProfile) -> tuple[Mapped, list[tuple[int, str]]] | None:
    """What the engine cannot say: spelled, or removed (listed as ``(offset, char)``).
    None when every character is spoken as it is (the common case: one pass over the set
    of characters)."""
    bad = [c for c in set(text) if _spelled(profile, c) != c]
    if not bad:
        return None
    pattern = re.compile("[" + "".join(re.escape(c) for c in bad) + "]")
    builder = MapBuilder(text)
    removed: list[tuple[int, str]] = []
    position = 0
    for match in pattern.finditer(text):
        offset = match.start()
        char = match.group()
        builder.keep(position, offset)
        spelled = _spelled(profile, char)
        if spelled is None:
            removed.append((offset, char))
            builder.replace(offset, offset + 1, " ")
        else:
            builder.replace(offset, offset + 1, spelled)
        position = offset + 1
    builder.keep(position, len(text))
    return builder.build(), removed
