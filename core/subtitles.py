"""Subtitles of a job: its sentences, timed in the delivered audio, as WebVTT, SRT or JSON.

One cue per sentence, in the order the audio speaks them, never split. A cue's text is the
user's **original** input (``text``, the characters ``[char_start, char_end)``), not the
normalized form the engine spoke; the JSON keeps it exactly, with the word timings where the
engine knows them (:mod:`voicelane.core.word_timings`).

**Cues.** :func:`normalize_cues` makes any list of timed sentences a valid cue list: sorted by
start, never overlapping, inside ``[0, duration_ms]``, each at least 1 ms long where the audio
leaves room. :class:`Subtitles` stores its sentences normalized, so its three formats agree
and :meth:`Subtitles.from_json` gives back exactly what :meth:`Subtitles.to_json` wrote.

**Cue text in VTT and SRT.** Whitespace runs (line breaks included) become one space, control
characters are dropped, and the text is wrapped on spaces at :data:`LINE_CHARS` characters a
line (the BBC's and Netflix's 42). The convention of at most two lines a cue cannot hold here,
as a sentence is never split: a long sentence is a tall cue. A word longer than a line stays
whole; a line that would be only a number (``12``) joins the line before it, because an SRT
reader takes such a line for the next cue's number. WebVTT escapes ``&``, ``<`` and ``>`` (so
``-->`` never appears in a cue); SRT has no escapes, so ``-->`` is written ``->`` there and
markup-like text (``<b>``) is left as the user wrote it (players that style SRT may style it).

**Times.** ``HH:MM:SS.mmm`` (WebVTT) and ``HH:MM:SS,mmm`` (SRT). Hours take as many digits as
they need: a 120-hour book ends at ``120:00:00.000``, which WebVTT allows (two or more digits)
and ``webvtt-py`` and ``srt`` read; SRT has no written rule, and players that expect two digits
may not.

Import-light: no numpy, no Redis, no engine.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from voicelane.common.errors import InvalidInputError
from voicelane.core.rules import shown
from voicelane.core.word_timings import WordTiming

__all__ = [
    "LINE_CHARS",
    "SUBTITLE_FORMATS",
    "SUBTITLE_MEDIA_TYPES",
    "SubtitleChapter",
    "Subtitles",
    "TimedSentence",
    "cue_lines",
    "cue_text",
    "normalize_cues",
    "parse_subtitle_format",
]

SUBTITLE_FORMATS = ("vtt", "srt", "json")
SUBTITLE_MEDIA_TYPES = {
    "vtt": "text/vtt; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "json": "application/json",
}
LINE_CHARS = 42
"""Characters (code points) a cue line holds before it wraps: the common broadcast limit."""

_CONTROLS = {
    code: (" " if chr(code).isspace() else None)
    for code in (*range(0x00, 0x20), *range(0x7F, 0xA0))
}
"""C0 and C1 control characters: the whitespace ones become a space, the rest are dropped."""
_BARE_NUMBER = re.compile(r"-?[0-9]+\.?[0-9]*")
"""A line SRT readers take for a cue number (the ``srt`` library's index pattern)."""
_SRT_ARROW = re.compile(r"--+>")


@dataclass(frozen=True, slots=True)
class TimedSentence:
    text: str
    """The original input's characters ``[char_start, char_end)`` (not normalized)."""
    start_ms: int
    """When its speech starts in the delivered audio."""
    end_ms: int
    """When its speech ends."""
    char_start: int
    char_end: int
    words: tuple[WordTiming, ...] = ()
    """Its words, timed; empty where the engine knows no word times."""
    chapter: int | None = None
    """Index into :attr:`Subtitles.chapters`, if the job has chapters."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "text": self.text,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "char_start": self.char_start,
            "char_end": self.char_end,
        }
        if self.chapter is not None:
            out["chapter"] = self.chapter
        out["words"] = [word.to_json() for word in self.words]
        return out


@dataclass(frozen=True, slots=True)
class SubtitleChapter:
    title: str
    start_ms: int
    end_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "start_ms": self.start_ms, "end_ms": self.end_ms}


@dataclass(frozen=True, slots=True)
class Subtitles:
    """A job's timed sentences and what they are timed against.

    ``sentences`` are stored as :func:`normalize_cues` makes them (sorted, not overlapping,
    inside the audio), whatever was passed; chapter times are clamped to the audio.
    """

    sentences: tuple[TimedSentence, ...]
    duration_ms: int
    """Of the delivered audio."""
    word_timings: bool
    """Whether the sentences' words are the engine's word times (not sentence times)."""
    chapters: tuple[SubtitleChapter, ...] = ()

    def __post_init__(self) -> None:
        if self.duration_ms < 0:
            raise ValueError(f"duration_ms is negative: {self.duration_ms}")
        chapters = tuple(
            replace(c, start_ms=_clamp(c.start_ms, 0, self.duration_ms)) for c in self.chapters
        )
        chapters = tuple(
            replace(c, end_ms=_clamp(c.end_ms, c.start_ms, self.duration_ms)) for c in chapters
        )
        for sentence in self.sentences:
            if sentence.chapter is not None and not 0 <= sentence.chapter < len(chapters):
                raise ValueError(
                    f"sentence at {sentence.char_start} names chapter {sentence.chapter}; "
                    f"there are {len(chapters)}"
                )
        object.__setattr__(self, "sentences", normalize_cues(self.sentences, self.duration_ms))
        object.__setattr__(self, "chapters", chapters)

    # ---- formats ---------------------------------------------------------------------------

    def to_vtt(self) -> str:
        """WebVTT: the header, the chapters as a ``NOTE`` block (when there are any), then one
        cue per sentence with its 1-based number as the identifier (the SRT cue's number)."""
        blocks = ["WEBVTT"]
        if self.chapters:
            lines = ["NOTE chapters"]
            for number, chapter in enumerate(self.chapters, 1):
                title = _SRT_ARROW.sub("->", cue_text(chapter.title))
                lines.append(
                    f"{number} {_timestamp(chapter.start_ms, '.')} - "
                    f"{_timestamp(chapter.end_ms, '.')} {title}".rstrip()
                )
            blocks.append("\n".join(lines))
        for number, sentence in enumerate(self.sentences, 1):
            text = "\n".join(_vtt_escape(line) for line in cue_lines(sentence.text))
            timing = f"{_timestamp(sentence.start_ms, '.')} --> {_timestamp(sentence.end_ms, '.')}"
            blocks.append(f"{number}\n{timing}\n{text}".rstrip("\n"))
        return "\n\n".join(blocks) + "\n"

    def to_srt(self) -> str:
        """SRT: numbered from 1, a blank line after each cue. Chapters have no place in it."""
        out: list[str] = []
        for number, sentence in enumerate(self.sentences, 1):
            text = "\n".join(_SRT_ARROW.sub("->", line) for line in cue_lines(sentence.text))
            timing = f"{_timestamp(sentence.start_ms, ',')} --> {_timestamp(sentence.end_ms, ',')}"
            out.append(f"{number}\n{timing}\n{text}".rstrip("\n") + "\n\n")
        return "".join(out)

    def to_json(self) -> dict[str, Any]:
        return {
            "duration_ms": self.duration_ms,
            "word_timings": self.word_timings,
            "chapters": [chapter.to_json() for chapter in self.chapters],
            "sentences": [sentence.to_json() for sentence in self.sentences],
        }

    def render(self, fmt: str) -> tuple[bytes, str]:
        """The file in ``fmt`` (any of :data:`SUBTITLE_FORMATS`) as UTF-8, and its media type."""
        fmt = parse_subtitle_format(fmt)
        if fmt == "vtt":
            text = self.to_vtt()
        elif fmt == "srt":
            text = self.to_srt()
        else:
            text = json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8", "replace"), SUBTITLE_MEDIA_TYPES[fmt]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Subtitles:
        """What :meth:`to_json` wrote (stored with the job); ValueError when it is not that."""
        try:
            return cls(
                sentences=tuple(_sentence_from_json(s) for s in _list(data["sentences"])),
                duration_ms=_int(data["duration_ms"]),
                word_timings=_bool(data["word_timings"]),
                chapters=tuple(
                    SubtitleChapter(_str(c["title"]), _int(c["start_ms"]), _int(c["end_ms"]))
                    for c in _list(data.get("chapters", []))
                ),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not subtitles JSON: {exc!r}") from None


def parse_subtitle_format(name: str) -> str:
    """``name`` as one of :data:`SUBTITLE_FORMATS` (case and surrounding spaces ignored), or
    :class:`~voicelane.common.errors.InvalidInputError` naming the ones there are."""
    fmt = name.strip().lower()
    if fmt not in SUBTITLE_FORMATS:
        raise InvalidInputError(
            f"format: {shown(name)} is not a subtitle format; use {', '.join(SUBTITLE_FORMATS)}",
            field="format",
        )
    return fmt


# ---- cues ------------------------------------------------------------------------------------


def normalize_cues(
    sentences: Sequence[TimedSentence], duration_ms: int
) -> tuple[TimedSentence, ...]:
    """``sentences`` as cues a player can show one after another.

    Times are clamped to ``[0, duration_ms]`` (an end before its start is moved to the start);
    cues are sorted by start (ties keep their order); a start before the previous cue's end is
    moved to it, and an end past the next cue's start is cut to it; a cue shorter than 1 ms is
    lengthened to 1 ms, pushing later ones on, except at the very end of the audio, where
    cues that start at ``duration_ms`` stay 0 ms long. Words are clamped inside their
    sentence. Idempotent: normalized cues come back as they are.
    """
    duration_ms = max(0, duration_ms)
    clamped = sorted(
        (
            (start, max(start, _clamp(s.end_ms, 0, duration_ms)), s)
            for s in sentences
            for start in (_clamp(s.start_ms, 0, duration_ms),)
        ),
        key=lambda item: item[0],
    )
    out: list[TimedSentence] = []
    previous_end_ms = 0
    for index, (clamped_start_ms, clamped_end_ms, sentence) in enumerate(clamped):
        next_start_ms = clamped[index + 1][0] if index + 1 < len(clamped) else duration_ms
        start_ms = max(clamped_start_ms, previous_end_ms)
        end_ms = max(min(clamped_end_ms, next_start_ms), min(start_ms + 1, duration_ms))
        words = tuple(_clamped_word(word, start_ms, end_ms) for word in sentence.words)
        if (start_ms, end_ms, words) == (sentence.start_ms, sentence.end_ms, sentence.words):
            out.append(sentence)
        else:
            out.append(replace(sentence, start_ms=start_ms, end_ms=end_ms, words=words))
        previous_end_ms = end_ms
    return tuple(out)


def cue_text(text: str) -> str:
    """``text`` on one line: control characters dropped, whitespace runs one space."""
    return " ".join(text.translate(_CONTROLS).split())


def cue_lines(text: str, width: int = LINE_CHARS) -> list[str]:
    """:func:`cue_text` of ``text`` wrapped on spaces at ``width`` characters a line (a longer
    word on a line of its own); a line after the first that would be only a number joins the
    line before it. Joined with spaces, the lines give back :func:`cue_text`."""
    lines: list[str] = []
    for word in cue_text(text).split(" "):
        if not word:
            continue
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    out: list[str] = []
    for line in lines:
        if out and _BARE_NUMBER.fullmatch(line):
            out[-1] += " " + line
        else:
            out.append(line)
    return out


# ---- helpers ---------------------------------------------------------------------------------


def _clamp(value: int, low: int, high: int) -> int:
    return min(max(value, low), high)


def _clamped_word(word: WordTiming, start_ms: int, end_ms: int) -> WordTiming:
    word_start = _clamp(word.start_ms, start_ms, end_ms)
    word_end = _clamp(word.end_ms, word_start, end_ms)
    if (word_start, word_end) == (word.start_ms, word.end_ms):
        return word
    return replace(word, start_ms=word_start, end_ms=word_end)


def _timestamp(ms: int, separator: str) -> str:
    """``HH:MM:SS.mmm`` (``separator`` before the milliseconds); hours grow past two digits."""
    seconds, millis = divmod(max(0, ms), 1000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{separator}{millis:03d}"


def _vtt_escape(line: str) -> str:
    return line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _sentence_from_json(data: dict[str, Any]) -> TimedSentence:
    chapter = data.get("chapter")
    return TimedSentence(
        text=_str(data["text"]),
        start_ms=_int(data["start_ms"]),
        end_ms=_int(data["end_ms"]),
        char_start=_int(data["char_start"]),
        char_end=_int(data["char_end"]),
        words=tuple(
            WordTiming(
                _str(w["text"]),
                _int(w["start_ms"]),
                _int(w["end_ms"]),
                _int(w["char_start"]),
                _int(w["char_end"]),
            )
            for w in _list(data.get("words", []))
        ),
        chapter=None if chapter is None else _int(chapter),
    )


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"an integer expected, got {value!r:.40}")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a string expected, got {value!r:.40}")
    return value


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"true or false expected, got {value!r:.40}")
    return value


def _list(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"a list expected, got {value!r:.40}")
    return value
