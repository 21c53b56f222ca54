"""From what a user wrote to what an engine is given: one function, every lane.

:func:`prepare_text` is the only way text reaches an engine: the embedded renderer, the batch
lane's planner and the real-time worker call it, and so do ``voicelane text`` and
``POST /v1/text`` that show its result: what they print is what the engine gets.

The steps, each a rewrite with a map back to the input (:mod:`voicelane.core.text_map`):

1. **SSML** (``ssml=True``, or a text that starts with ``<speak``;
   :mod:`voicelane.core.ssml_text`): the document becomes blocks of runs, each block with
   its voicing and the exact pause after it; plain text is one block.
2. **Lexicons** (the request's, resolved at submission): a word of an entry is said as its
   alias, or as its phonemes on engines that take phonemes (espeak-ng's ``[[...]]``); other
   engines say the alias or the word as written, with a warning.
3. **Normalization** (on unless ``normalize=False``;
   :func:`voicelane.core.normalize.normalize_text`): numbers, money, dates, times, phone
   numbers, percentages, symbols... become words, in Chinese or English by their context.
   Not for SSML's verbatim runs (``say-as``, ``sub``) nor phonemes.
4. **Segmentation** (:func:`voicelane.core.text.split_sentences`) of each block, so a
   segment's engine text stays within ``max_segment_chars``.
5. **The engine's alphabet** (:mod:`voicelane.core.text_profiles`): what the engine cannot
   speak is spelled (``é`` → ``e`` on ChatTTS) or removed and reported: a
   :class:`TextWarning` with the character and its position in the input.

Each :class:`SpokenSegment` carries its engine text, its span in the input, and a map from
every offset of its engine text back to the input, so a word an engine times maps to the
input's own characters (``$3.5M`` is one span, spoken as five words).

A text is refused (:meth:`PreparedText.check_speakable`) when nothing of it can be spoken.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from voicelane.common.errors import InvalidInputError
from voicelane.core.lexicon import Lexicon
from voicelane.core.normalize import normalize_text
from voicelane.core.phonemes import ipa_to_espeak, xsampa_to_ipa
from voicelane.core.rules import EngineCapabilities, check_voice
from voicelane.core.ssml import looks_like_ssml
from voicelane.core.ssml_text import ssml_blocks
from voicelane.core.text import (
    DEFAULT_MAX_SEGMENT_CHARS,
    Segment,
    has_speakable_text,
    split_sentences,
)
from voicelane.core.text_blocks import PLAIN, Block, Run, Voicing
from voicelane.core.text_map import (
    MapBuilder,
    Mapped,
    concat,
    identity,
    replacement,
    sliced,
    translate,
)
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
    "looks_like_ssml",
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

    def reads_as_ssml(self, text: str) -> bool:
        """Whether ``text`` is read as SSML: ``ssml`` true, or unset and the text starts
        like an XML document (:func:`~voicelane.core.ssml.looks_like_ssml`)."""
        return self.ssml if self.ssml is not None else looks_like_ssml(text)

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

    def check(self, caps: EngineCapabilities, *, field: str = "text") -> None:
        """Refuse, at submission, what would fail later: nothing to speak, or an SSML
        ``voice`` the engine does not have."""
        self.check_speakable(field=field)
        for voice in sorted({s.voicing.voice for s in self.segments if s.voicing.voice}):
            check_voice(voice, caps, field=field)

    def to_json(self, source: str, *, engine: str) -> dict[str, Any]:
        """What ``voicelane text --json`` and ``POST /v1/text`` show: each segment's engine
        text, its span in ``source`` (the input) and what SSML set for it."""
        return {
            "engine": engine,
            "ssml": self.ssml,
            "segments": [_segment_json(s, source) for s in self.segments],
            "trailing_marks": list(self.trailing_marks),
            "warnings": self.warnings_json(),
        }

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
    field: str = "text",
) -> PreparedText:
    """``text`` (checked input: :func:`voicelane.core.rules.check_speech_text`) as the
    engine of ``profile`` will be given it (see the module docstring). Raises
    :class:`~voicelane.common.errors.InvalidInputError` naming ``field`` (the request's own
    name for its text) for SSML that cannot be read."""
    collector = _Collector(profile, options, max_segment_chars, len(text))
    is_ssml = options.reads_as_ssml(text)
    if is_ssml:
        blocks, notes = ssml_blocks(text, field=field)
        for note in notes:
            collector.warn(TextWarning(note.code, note.message, note.position))
    else:
        blocks = [Block([Run(identity(text))], paragraph_end=True)]
    for block in blocks:
        collector.block(block)
    collector.end()
    return PreparedText(
        segments=tuple(collector.segments),
        warnings=tuple(collector.warnings),
        warnings_dropped=collector.dropped,
        unspeakable_chars=collector.unspeakable,
        ssml=is_ssml,
        trailing_marks=tuple(collector.pending_marks),
    )


@dataclass
class _Collector:
    """Turns blocks into the engine's segments, keeping count of what the engine cannot
    speak."""

    profile: TextProfile
    options: TextOptions
    max_segment_chars: int
    source_length: int
    segments: list[SpokenSegment] = field(default_factory=list)
    warnings: list[TextWarning] = field(default_factory=list)
    dropped: int = 0
    unspeakable: int = 0
    pending_marks: list[str] = field(default_factory=list)
    """Marks after the last segment so far (they go with the next segment's start)."""

    def warn(self, warning: TextWarning) -> None:
        if len(self.warnings) >= MAX_WARNINGS:
            self.dropped += 1
        else:
            self.warnings.append(warning)

    # -- blocks
    def block(self, block: Block) -> None:
        """Read a block's runs, cut it into sentences, add its segments."""
        parts: list[Mapped] = []
        marks: list[tuple[str, int]] = []
        length = 0
        for run in block.runs:
            if run.mark is not None:
                marks.append((run.mark, length))
                continue
            read = self._read(run)
            if not read.text:
                continue
            if length and parts[-1].text[-1:].isalnum() and read.text[:1].isalnum():
                # Words of two runs that would touch (two <s> elements, a tag between words).
                at = read.pieces[0].src_start if read.pieces else 0
                parts.append(replacement(" ", at, at, self.source_length))
                length += 1
            parts.append(read)
            length += len(read.text)
        mapped = concat(parts, self.source_length)
        added: list[SpokenSegment] = []
        waiting = [(name, 0) for name in self.pending_marks]
        """Marks not placed yet: (name, offset in the block's text)."""
        waiting_in_block = list(marks)
        pieces = split_sentences(mapped.text, self.max_segment_chars) if parts else []
        self._report_dropped(mapped, pieces)
        for piece in pieces:
            spoken = self._segment(mapped, piece, block.voicing)
            if spoken is None:
                continue  # its marks go with the next segment
            mine = [m for m in waiting_in_block if m[1] < piece.end]
            waiting_in_block = [m for m in waiting_in_block if m[1] >= piece.end]
            placed = [(name, 0) for name, _ in waiting] + [
                (name, min(len(spoken.text), max(0, at - piece.start))) for name, at in mine
            ]
            waiting = []
            if placed:
                spoken = replace(spoken, marks=tuple(placed))
            added.append(spoken)
        if added:
            last = added[-1]
            # Marks after the block's last sentence: at its end.
            ends = tuple((name, len(last.text)) for name, _ in waiting_in_block)
            added[-1] = replace(
                last,
                marks=last.marks + ends,
                paragraph_end=last.paragraph_end or block.paragraph_end,
            )
            self.pending_marks = []
        else:
            self.pending_marks.extend(name for name, _ in marks)
        self.segments.extend(added)
        if block.pause_after_ms is not None:
            self._pause(block.pause_after_ms)
        elif block.paragraph_end and self.segments and not added:
            self.segments[-1] = replace(self.segments[-1], paragraph_end=True)

    def end(self) -> None:
        """Marks after the last word of the whole text are trailing marks (at the end of
        the audio), wherever their block ended."""
        if not self.segments:
            return
        last = self.segments[-1]
        after = [name for name, at in last.marks if at >= len(last.text)]
        if after:
            inside = tuple(m for m in last.marks if m[1] < len(last.text))
            self.segments[-1] = replace(last, marks=inside)
            self.pending_marks = after + self.pending_marks

    def _report_dropped(self, mapped: Mapped, pieces: list[Segment]) -> None:
        """Sentences segmentation leaves out have no letter or digit: punctuation, or
        symbols such as emoji, which are reported (never dropped in silence)."""
        text = mapped.text
        starts = [*(p.start for p in pieces), len(text)]
        gaps = zip([0, *(p.end for p in pieces)], starts, strict=True)
        for gap_start, gap_end in gaps:
            for offset in range(gap_start, gap_end):
                char = text[offset]
                if unicodedata.category(char)[0] in "LNS":
                    self._unspeakable(char, mapped.source_offset(offset))

    def _pause(self, time_ms: int) -> None:
        if not self.segments:
            return  # a break before anything is spoken: silence before nothing
        last = self.segments[-1]
        self.segments[-1] = replace(last, pause_after_ms=(last.pause_after_ms or 0) + time_ms)

    # -- runs
    def _read(self, run: Run) -> Mapped:
        """A run as the engine reads it, mapped to the input."""
        if run.phonemes is not None:
            return self._phonemes(run.mapped, run.phonemes)
        if run.verbatim:
            return self._guard(run.mapped)
        lexicon = self.options.lexicon
        hits = lexicon.find(run.mapped.text) if lexicon else []
        if not hits:
            return self._normalized(run.mapped)
        parts: list[Mapped] = []
        position = 0
        for hit in hits:
            if hit.start > position:
                parts.append(self._normalized(sliced(run.mapped, position, hit.start)))
            word = sliced(run.mapped, hit.start, hit.end)
            start, end = word.source_span(0, len(word.text))
            entry = hit.entry
            if entry.phoneme is not None and self.profile.phonemes:
                parts.append(self._phonemes(word, _as_ipa(entry.phoneme, entry.alphabet)))
            elif entry.alias is not None:
                alias = replacement(entry.alias, start, end, self.source_length)
                parts.append(self._normalized(alias))
            else:
                parts.append(self._phonemes(word, _as_ipa(entry.phoneme or "", entry.alphabet)))
            position = hit.end
        if position < len(run.mapped.text):
            parts.append(self._normalized(sliced(run.mapped, position, len(run.mapped.text))))
        return concat(parts, self.source_length)

    def _normalized(self, mapped: Mapped) -> Mapped:
        if self.options.normalize:
            mapped = mapped.then(normalize_text(mapped.text))
        return self._guard(mapped)

    def _guard(self, mapped: Mapped) -> Mapped:
        """On an engine that reads ``[[phonemes]]``, brackets the user wrote are not phonemes:
        they become parentheses."""
        if not self.profile.phonemes or not ("[" in mapped.text or "]" in mapped.text):
            return mapped
        return mapped.then(translate(mapped.text, _BRACKETS))

    def _phonemes(self, word: Mapped, ipa: str) -> Mapped:
        """``word`` said as ``ipa``: espeak-ng's ``[[...]]`` on an engine that takes phonemes,
        else the word as written (with a warning)."""
        start, end = word.source_span(0, len(word.text))
        if self.profile.phonemes:
            spelled = "[[" + ipa_to_espeak(ipa).replace(" ", "") + "]]"
            return replacement(spelled, start, end, self.source_length)
        self.warn(
            TextWarning(
                "phonemes-unsupported",
                f"the {self.profile.engine} engine does not take phonemes: "
                f"{word.text!r} at {start} is read as written",
                start,
            )
        )
        return self._normalized(word)

    # -- segments
    def _segment(self, mapped: Mapped, piece: Segment, voicing: Voicing) -> SpokenSegment | None:
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
        if voicing.pitch_semitones and not self.profile.pitch:
            voicing = replace(voicing, pitch_semitones=0.0)
        start, end = aligned.source_span(0, len(aligned.text))
        return SpokenSegment(
            aligned.text, start, end, piece.paragraph_end, aligned, voicing=voicing
        )

    def _unspeakable(self, char: str, position: int) -> None:
        self.unspeakable += 1
        self.warn(
            TextWarning(
                "unspeakable",
                f"{char!r} (U+{ord(char):04X}) at {position} cannot be spoken by the "
                f"{self.profile.engine} engine; it was left out",
                position,
                char,
            )
        )


def _segment_json(segment: SpokenSegment, source: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "text": segment.text,
        "start": segment.start,
        "end": segment.end,
        "source": source[segment.start : segment.end],
        "paragraph_end": segment.paragraph_end,
    }
    if segment.pause_after_ms is not None:
        out["pause_after_ms"] = segment.pause_after_ms
    voicing = segment.voicing
    if voicing.voice is not None:
        out["voice"] = voicing.voice
    if voicing.rate != 1.0:
        out["rate"] = voicing.rate
    if voicing.volume_db:
        out["volume_db"] = voicing.volume_db
    if voicing.pitch_semitones:
        out["pitch_semitones"] = voicing.pitch_semitones
    if segment.marks:
        out["marks"] = [{"name": name, "offset": offset} for name, offset in segment.marks]
    return out


def _as_ipa(phoneme: str, alphabet: str) -> str:
    return phoneme if alphabet == "ipa" else xsampa_to_ipa(phoneme)


_BRACKETS = {"[": "(", "]": ")"}


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
