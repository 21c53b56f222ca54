"""Word timings: when each word of the original input is heard.

An engine that knows where its words start (espeak-ng reports word events with sample
positions) gives :class:`~voicelane.workers.engines.base.WordEvent` offsets into the text it
was given; the segment's map (:attr:`voicelane.core.speech_text.SpokenSegment.mapping`) turns
them into spans of the **original** input, so ``$3.5M`` spoken as five words is one
:class:`WordTiming` whose span slices ``$3.5M`` out of what the user wrote.

Engines that know no word times (ChatTTS) give sentence timings instead: one
:class:`WordTiming` per segment, over the segment's span.

Times are of the audio *as delivered* (resampled, with pauses, SSML breaks and every earlier
segment in front): the renderer says where each segment's audio starts and how long its
voiced part lasts (:func:`segment_word_timings`), after trimming silence at a break.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from voicelane.core.text_map import Mapped

__all__ = [
    "MarkTiming",
    "SentenceTiming",
    "TimedSegment",
    "WordStart",
    "WordTiming",
    "mark_times_ms",
    "segment_word_timings",
    "trimmed_span",
]


class WordStart(Protocol):
    """An engine's word event (``voicelane.workers.engines.base.WordEvent`` has it): a word
    ``[char_start, char_end)`` of the engine text starts at ``sample`` of its audio."""

    @property
    def char_start(self) -> int: ...
    @property
    def char_end(self) -> int: ...
    @property
    def sample(self) -> int: ...


class TimedSegment(Protocol):
    """What word timings need of a segment (``SpokenSegment`` has it)."""

    @property
    def text(self) -> str: ...
    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...
    @property
    def mapping(self) -> Mapped: ...


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


@dataclass(frozen=True, slots=True)
class SentenceTiming:
    """A spoken segment (a sentence, or the part of a long one the splitter cut) and when
    its speech is heard: from its voiced onset to the end of its voiced audio."""

    text: str
    """The original input's characters ``[char_start, char_end)``."""
    start_ms: int
    end_ms: int
    char_start: int
    char_end: int
    words: tuple[WordTiming, ...] = ()
    """Its words (engines that time words; else empty)."""


@dataclass(frozen=True, slots=True)
class MarkTiming:
    """An SSML ``mark`` and when it is reached in the delivered audio."""

    name: str
    time_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "time_ms": self.time_ms}


def segment_word_timings(
    segment: TimedSegment,
    words: Sequence[WordStart],
    *,
    rate_hz: int,
    start_ms: float,
    voiced_ms: float,
    source: str,
    source_offset: int = 0,
) -> list[WordTiming]:
    """The words of one segment, timed in the delivered audio and spanning ``source`` (the
    original input).

    ``words``: the engine's word events for the segment's text (samples at ``rate_hz`` from
    the start of its audio as delivered: a caller that trimmed leading silence shifts them);
    ``start_ms``: where that audio starts in the delivered output; ``voiced_ms``: how long it
    lasts until its voiced part ends (the last word ends there).

    Engine words that map into one replaced span of the input (``$3.5M`` spoken as "three
    point five million dollars") become one timing over that span: the start of its first
    word, the end of its last. Each timing ends where the next one starts. No word events
    (an engine without word times): one timing for the whole segment. ``source_offset``:
    ``source`` is the input from that offset on (a job's chunk holds its own part only);
    spans stay offsets into the whole input.
    """
    end_ms = start_ms + max(0.0, voiced_ms)
    spans: list[tuple[int, int, float]] = []  # (source start, source end, start ms)
    for word in sorted(words, key=lambda w: (w.sample, w.char_start)):
        src_start, src_end = segment.mapping.source_span(word.char_start, word.char_end)
        src_start, src_end = trimmed_span(source, src_start, src_end, source_offset)
        if src_end <= src_start:
            continue  # nothing of the input (an inserted word): the previous word's time
        at_ms = min(end_ms, start_ms + max(0, word.sample) * 1000.0 / rate_hz)
        if spans and src_start < spans[-1][1] and src_end > spans[-1][0]:
            first_start, first_end, first_ms = spans[-1]
            spans[-1] = (min(first_start, src_start), max(first_end, src_end), first_ms)
            continue
        spans.append((src_start, src_end, at_ms))
    if not spans:
        src_start, src_end = trimmed_span(source, segment.start, segment.end, source_offset)
        return [
            WordTiming(
                source[src_start - source_offset : src_end - source_offset],
                round(start_ms),
                round(end_ms),
                src_start,
                src_end,
            )
        ]
    out: list[WordTiming] = []
    for index, (src_start, src_end, at_ms) in enumerate(spans):
        next_ms = spans[index + 1][2] if index + 1 < len(spans) else end_ms
        begin = round(at_ms)
        out.append(
            WordTiming(
                source[src_start - source_offset : src_end - source_offset],
                begin,
                max(begin, round(next_ms)),
                src_start,
                src_end,
            )
        )
    return out


def mark_times_ms(
    marks: Sequence[tuple[str, int]],
    words: Sequence[WordStart],
    *,
    rate_hz: int,
    start_ms: float,
    voiced_ms: float,
) -> list[MarkTiming]:
    """SSML marks of one segment (``(name, offset in its engine text)``) with their audio
    times: the start of the first word at or after the mark's offset; the end of the
    segment's voiced audio when no word follows it (same clock and arguments as
    :func:`segment_word_timings`)."""
    end_ms = start_ms + max(0.0, voiced_ms)
    ordered = sorted(words, key=lambda w: w.char_start)
    out: list[MarkTiming] = []
    for name, offset in marks:
        after = next((w for w in ordered if w.char_start >= offset), None)
        at_ms = end_ms if after is None else start_ms + max(0, after.sample) * 1000.0 / rate_hz
        out.append(MarkTiming(name, round(min(at_ms, end_ms))))
    return out


def trimmed_span(source: str, start: int, end: int, offset: int = 0) -> tuple[int, int]:
    """``[start, end)`` without whitespace at either end (``source`` holds the input from
    ``offset`` on; the span is in the whole input's offsets)."""
    start, end = max(offset, start), min(offset + len(source), end)
    while start < end and source[start - offset].isspace():
        start += 1
    while end > start and source[end - 1 - offset].isspace():
        end -= 1
    return start, end
