"""From what a user wrote to what an engine is given: one function, every lane.

:func:`prepare_text` is the only way text reaches an engine: the embedded renderer, the batch
lane's planner and the real-time worker call it, and so do ``voicelane text`` and
``POST /v1/text`` that show its result: what they print is what the engine gets.

The steps, each a rewrite with a map back to the input (:mod:`voicelane.core.text_map`):

1. **SSML**: not yet (issue 20, item 4): ``ssml=True`` is refused with a clear error;
   plain text is one block.
2. **Lexicons**: not yet (issue 20, item 5).
3. **Normalization** (on unless ``normalize=False``;
   :func:`voicelane.core.normalize.normalize_text`): numbers, money, dates, times, phone
   numbers, percentages, symbols... become words, in Chinese or English by their context.
4. **Segmentation** (:func:`voicelane.core.text.split_sentences`) of the normalized text,
   so a segment's engine text stays within ``max_segment_chars``.
5. **The engine's alphabet** (:mod:`voicelane.core.text_profiles`): what the engine cannot
   speak is spelled (``é`` → ``e`` on ChatTTS) or removed and reported: a
   :class:`TextWarning` with the character and its position in the input.

Each :class:`SpokenSegment` carries its engine text, its span in the input, and a map from
every offset of its engine text back to the input, so a word an engine times maps to the
input's own characters (``$3.5M`` is one span, spoken as four words).

A text is refused (:meth:`PreparedText.check_speakable`) when nothing of it can be spoken.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from voicelane.common.errors import InvalidInputError
from voicelane.core.normalize import normalize_text
from voicelane.core.text import (
    DEFAULT_MAX_SEGMENT_CHARS,
    Segment,
    split_sentences,
)
from voicelane.core.text_map import MapBuilder, Mapped, Piece, identity
from voicelane.core.text_profiles import TextProfile

__all__ = [
    "MAX_WARNINGS",
    "PreparedText",
    "SpokenSegment",
    "TextOptions",
    "TextWarning",
    "Voicing",
    "looks_like_ssml",
    "prepare_text",
    "spoken_segment_text",
]

MAX_WARNINGS = 100
"""Warnings listed per text; the rest are counted (:attr:`PreparedText.warnings_dropped`)."""

_WS_RUN = re.compile(r"[\s\u200b\u2060\ufeff]+")
_HAS_LETTER = re.compile(r"[^\W\d_]")
_SPEAK_START = re.compile(r"\A[\s\ufeff]*<speak[\s>/]")


@dataclass(frozen=True, slots=True)
class TextWarning:
    """Something of the input that is not spoken as written."""

    code: str
    """``unspeakable`` (a character the engine cannot say, removed), ``ignored-element``
    (an SSML tag not in our subset: its content is spoken), ``phoneme-unsupported``, ...."""
    message: str
    position: int
    """Code point offset in the original input."""
    char: str = ""
    """The character at fault, for ``unspeakable``."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        out["position"] = self.position
        if self.char:
            out["char"] = self.char
        return out


@dataclass(frozen=True, slots=True)
class TextOptions:
    """How a request's text is read."""

    normalize: bool = True
    ssml: bool | None = None
    """True: the text is SSML (refused until the SSML reader lands); None or False: plain."""

    def to_fields(self) -> dict[str, str]:
        """As string fields (a Redis hash, the lane's request)."""
        return {
            "normalize": "1" if self.normalize else "0",
            "ssml": "" if self.ssml is None else ("1" if self.ssml else "0"),
        }

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> TextOptions:
        """The inverse of :meth:`to_fields`; absent fields (records written before these
        options existed) read as the defaults."""
        ssml = fields.get("ssml", "")
        return cls(
            normalize=fields.get("normalize", "1") != "0",
            ssml=None if ssml == "" else ssml == "1",
        )


@dataclass(frozen=True, slots=True)
class Voicing:
    """What SSML changes about how a segment sounds (the request's own voice and speed
    apply where these are unset / 1.0)."""

    voice: str | None = None
    rate: float = 1.0
    """Multiplies the request's speed."""
    volume_db: float = 0.0
    pitch_semitones: float = 0.0

    @property
    def plain(self) -> bool:
        return self == _PLAIN


_PLAIN = Voicing()


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
    pause there); None: the usual pauses."""
    voicing: Voicing = _PLAIN
    marks: tuple[tuple[str, int], ...] = ()
    """SSML marks ``(name, offset in the engine text)``: reported with their audio time."""


@dataclass(frozen=True, slots=True)
class PreparedText:
    segments: tuple[SpokenSegment, ...]
    warnings: tuple[TextWarning, ...]
    warnings_dropped: int = 0
    """Warnings beyond :data:`MAX_WARNINGS`, not listed."""
    unspeakable_chars: int = 0
    """Characters removed because the engine cannot speak them (the metric's increment)."""
    ssml: bool = False
    trailing_marks: tuple[str, ...] = ()
    """Marks after the last spoken word (reported at the end of the audio)."""

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


def looks_like_ssml(text: str) -> bool:
    """The text starts (after whitespace) with a ``<speak`` tag."""
    return _SPEAK_START.match(text) is not None


# ---- the pipeline -------------------------------------------------------------------------


@dataclass
class _Block:
    """Consecutive runs that share one voicing, mapped to the input."""

    parts: list[Mapped] = field(default_factory=list)
    voicing: Voicing = _PLAIN
    marks: list[tuple[str, int]] = field(default_factory=list)
    """(name, offset in the block's text)."""


@dataclass
class _Collector:
    profile: TextProfile
    max_segment_chars: int
    source_length: int
    segments: list[SpokenSegment] = field(default_factory=list)
    warnings: list[TextWarning] = field(default_factory=list)
    dropped: int = 0
    unspeakable: int = 0
    pending_marks: list[str] = field(default_factory=list)

    def warn(self, warning: TextWarning) -> None:
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(warning)
        else:
            self.dropped += 1

    def pause(self, time_ms: int) -> None:
        """An SSML break after what was spoken so far (breaks in a row add up)."""
        if not self.segments:
            return  # nothing spoken yet: a leading break is silence before nothing
        last = self.segments[-1]
        total = (last.pause_after_ms or 0) + time_ms
        self.segments[-1] = replace(last, pause_after_ms=total)

    def paragraph(self) -> None:
        if self.segments and not self.segments[-1].paragraph_end:
            self.segments[-1] = replace(self.segments[-1], paragraph_end=True)

    def block(self, block: _Block, *, paragraph_ends: bool) -> None:
        """Segment one block and add its segments."""
        if not block.parts:
            for name, _ in block.marks:
                self.pending_marks.append(name)
            return
        text, mapping = _concat(block.parts, self.source_length)
        marks = sorted(block.marks, key=lambda m: m[1])
        pieces = split_sentences(text, self.max_segment_chars) if text.strip() else []
        added: list[SpokenSegment] = []
        for piece in pieces:
            spoken = self._segment(text, mapping, piece, block.voicing)
            if spoken is None:
                continue
            seg_marks = [(name, 0) for name in self.pending_marks]
            self.pending_marks = []
            while marks and marks[0][1] < piece.end:
                name, offset = marks.pop(0)
                seg_marks.append((name, _offset_in(piece, text, offset)))
            if seg_marks:
                spoken = replace(spoken, marks=tuple(seg_marks))
            added.append(spoken)
        self.pending_marks.extend(name for name, _ in marks)
        if not paragraph_ends:
            # Inside SSML, paragraphs end where a ``p`` does (:meth:`paragraph`).
            added = [replace(s, paragraph_end=False) for s in added]
        self.segments.extend(added)

    def _segment(
        self, text: str, mapping: Mapped, piece: Segment, voicing: Voicing
    ) -> SpokenSegment | None:
        aligned = mapping.then(_align(text, piece))
        filtered = _filter(aligned.text, self.profile)
        if filtered is not None:
            out, removed = filtered
            for offset, char in removed:
                self.unspeakable += 1
                position = aligned.source_offset(offset)
                self.warn(
                    TextWarning(
                        "unspeakable",
                        f"{char!r} (U+{ord(char):04X}) at {position} cannot be spoken by the "
                        f"{self.profile.engine} engine; it was left out",
                        position,
                        char,
                    )
                )
            aligned = aligned.then(out)
        aligned = _tidy(aligned)
        if _HAS_LETTER.search(aligned.text) is None and not (
            self.profile.speaks_digits and any(c.isdigit() for c in aligned.text)
        ):
            return None
        start, end = aligned.source_span(0, len(aligned.text))
        return SpokenSegment(
            text=aligned.text,
            start=start,
            end=end,
            paragraph_end=piece.paragraph_end,
            mapping=aligned,
            voicing=voicing,
        )


def prepare_text(
    text: str,
    *,
    profile: TextProfile,
    options: TextOptions = TextOptions(),
    max_segment_chars: int = DEFAULT_MAX_SEGMENT_CHARS,
    field: str = "text",
) -> PreparedText:
    """``text`` (checked input: :func:`voicelane.core.rules.check_speech_text`) as the
    engine of ``profile`` will be given it (see the module docstring)."""
    collector = _Collector(profile, max_segment_chars, len(text))
    is_ssml = bool(options.ssml)
    if is_ssml:
        # The SSML reader (issue 20, item 4) has not landed: say so rather than speak tags.
        raise InvalidInputError(f"{field}: SSML is not supported yet", field=field)
    else:
        block = _Block(parts=[_speak_run(text, identity(text), options, collector)])
        collector.block(block, paragraph_ends=True)
    trailing = tuple(collector.pending_marks)
    return PreparedText(
        segments=tuple(collector.segments),
        warnings=tuple(collector.warnings),
        warnings_dropped=collector.dropped,
        unspeakable_chars=collector.unspeakable,
        ssml=is_ssml,
        trailing_marks=trailing,
    )


def spoken_segment_text(
    text: str, *, profile: TextProfile, options: TextOptions = TextOptions()
) -> PreparedText:
    """One sentence of plain text that arrives on its own (a conversation's next sentence):
    :func:`prepare_text` without SSML."""
    return prepare_text(text, profile=profile, options=replace(options, ssml=False))


def _speak_run(text: str, to_source: Mapped, options: TextOptions, collector: _Collector) -> Mapped:
    """A run of plain text → normalization, mapped to the input."""
    mapped = to_source
    if options.normalize:
        mapped = mapped.then(normalize_text(mapped.text))
    return mapped


def _concat(parts: Sequence[Mapped], source_length: int) -> tuple[str, Mapped]:
    """Runs mapped to the input, one after another (a space between two runs that would
    otherwise touch, as between ``<s>`` elements)."""
    texts: list[str] = []
    pieces: list[Piece] = []
    length = 0
    for part in parts:
        if not part.text:
            continue
        if texts and not texts[-1][-1:].isspace() and not part.text[:1].isspace():
            src = part.pieces[0].src_start if part.pieces else 0
            pieces.append(Piece(length, length + 1, src, src, False))
            texts.append(" ")
            length += 1
        for p in part.pieces:
            pieces.append(
                Piece(p.out_start + length, p.out_end + length, p.src_start, p.src_end, p.exact)
            )
        texts.append(part.text)
        length += len(part.text)
    text = "".join(texts)
    return text, Mapped(text, tuple(pieces), source_length)


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


def _offset_in(piece: Segment, text: str, offset: int) -> int:
    """A block offset as an offset in the segment's text (approximate across whitespace)."""
    return max(0, min(len(piece.text), offset - piece.start))


def clamp_rate(rate: float, low: float, high: float) -> float:
    """An SSML rate times the request's speed, within the engine's range."""
    if not math.isfinite(rate):
        return 1.0
    return min(high, max(low, rate))
