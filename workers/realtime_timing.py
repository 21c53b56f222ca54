"""One sentence of a real-time stream, between the engine and the encoder: the silence cut at
its edges around an SSML ``break``, and its words and marks put on the stream's clock.

* :class:`Edges` takes the engine's chunks as they come. Around a break (a segment with
  ``pause_after_ms``, and the one after it) the engine's own silence goes: the leading silence
  of the segment after a break, the trailing silence of the segment before one (held back
  until more sound or the end shows whether it is trailing), so that the break's silence is
  *exactly* what separates the words. It also records where the sound starts and ends, in
  samples of the utterance.
* :class:`SentenceTimes` turns the engine's word events (samples from the utterance's start;
  offsets in the engine's text) into :class:`~voicelane.core.word_timings.WordTiming` values
  of the **whole request's** text with times on the stream's clock (``pts_ms``: the segment's
  first delivered sample is ``start_ms``; the cut lead is taken off), and the segment's SSML
  marks into :class:`~voicelane.core.word_timings.MarkTiming` values — by the same rules as
  the embedded renderer and the batch lane (``segment_word_timings``, ``mark_times_ms`` of
  :mod:`voicelane.core.word_timings`), as soon as each is known: words with the chunk they
  came with, not at the end of the sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from voicelane.common.audio import silence_edges
from voicelane.core.speech_text import SpokenSegment
from voicelane.core.word_timings import (
    MarkTiming,
    WordTiming,
    mark_times_ms,
    segment_word_timings,
)
from voicelane.workers.engines import PcmF32, WordEvent

_EMPTY = np.zeros(0, dtype=np.float32)


class Edges:
    """A segment's audio with its silent edges cut where a break is (see the module
    docstring); positions are samples of the utterance (the engine's rate)."""

    def __init__(self, sample_rate_hz: int, *, trim_lead: bool, trim_tail: bool) -> None:
        self.rate_hz = sample_rate_hz
        self.trim_tail = trim_tail
        self.received = 0
        """Samples the engine gave so far."""
        self.cut_lead = 0
        """Samples cut at the start (the first delivered sample is utterance sample
        ``cut_lead``)."""
        self.delivered = 0
        """Samples handed on so far."""
        self.speech_start: int | None = None
        self.speech_end = 0
        """Utterance samples ``[speech_start, speech_end)`` hold all its sound so far (whole
        5 ms frames); ``speech_start`` is None while only silence came."""
        self.leading = trim_lead
        """Still cutting the leading silence: where the delivered audio starts is not known
        yet."""
        self._held: PcmF32 = _EMPTY

    def take(self, chunk: PcmF32) -> PcmF32:
        """What of ``chunk`` goes on now."""
        first = self.received
        self.received += len(chunk)
        lead, tail = silence_edges(chunk, self.rate_hz)
        if lead < len(chunk):
            self.speech_end = first + len(chunk) - tail
            if self.speech_start is None:
                self.speech_start = first + lead
        if self.leading:
            if lead >= len(chunk):  # only silence so far: all of it goes
                self.cut_lead += len(chunk)
                return _EMPTY
            self.leading = False
            self.cut_lead += lead
            chunk = chunk[lead:]
        if self.trim_tail:  # hold back what may be the trailing silence
            combined = np.concatenate([self._held, chunk]) if len(self._held) else chunk
            _, tail = silence_edges(combined, self.rate_hz)
            keep = len(combined) - tail
            self._held = combined[keep:]
            chunk = combined[:keep]
        return self._deliver(chunk)

    def finish(self) -> PcmF32:
        """The end of the utterance: what was held back (nothing, when it is a trailing
        silence that a break replaces)."""
        held, self._held = self._held, _EMPTY
        self.leading = False
        return _EMPTY if self.trim_tail else self._deliver(held)

    def _deliver(self, pcm: PcmF32) -> PcmF32:
        self.delivered += len(pcm)
        return pcm


@dataclass(frozen=True, slots=True)
class SentenceSource:
    """Where a segment's spans point: the input its map refers to (a sentence of plain
    text, or a whole SSML document) and that input's offset in the request's text."""

    text: str
    offset: int


class SentenceTimes:
    """The words and marks of one segment on the stream's clock (module docstring), given
    out as soon as they are known: a chunk's words once it went through :class:`Edges`
    (:meth:`take`), the rest at the end (:meth:`finish`). An engine without word events
    gets one timing for the whole segment (sentence timings), at its end."""

    def __init__(
        self,
        segment: SpokenSegment,
        source: SentenceSource,
        *,
        start_ms: float,
        sample_rate_hz: int,
    ) -> None:
        self.segment = segment
        self.source = source
        self.start_ms = start_ms
        """When the segment's first delivered sample is heard (the stream's clock)."""
        self.rate_hz = sample_rate_hz
        self.events: list[WordEvent] = []
        """Every word event of the segment so far."""
        self._new: list[WordEvent] = []
        self._marks = list(segment.marks)
        """Marks not timed yet, in order."""
        self._given_to = 0
        """The end (in the source) of the last word given out: an engine word that maps
        inside it (``$3.5M`` spoken across two chunks) is part of that word."""

    def add(self, events: Sequence[WordEvent]) -> None:
        """Word events of the engine (they come before the chunk they belong with)."""
        self.events.extend(events)
        self._new.extend(events)

    def take(self, edges: Edges) -> tuple[list[WordTiming], list[MarkTiming]]:
        """What is known once a chunk went through ``edges``: the words that came with it
        (each to the next one's start, the last to the end of the sound so far: for an engine
        that gives whole utterances, espeak, exactly its end) and the marks they time."""
        if edges.leading:  # where the delivered audio starts is not known yet
            return [], []
        words = self._words(edges) if self._new else []
        timed = 0
        for _, offset in self._marks:
            if not any(e.char_start >= offset for e in self.events):
                break  # its word may be still to come (and the marks after it wait too)
            timed += 1
        return words, self._timed_marks(timed, edges)

    def finish(self, edges: Edges) -> tuple[list[WordTiming], list[MarkTiming]]:
        """The rest at the end of the segment: marks after its last word are at the end of
        its sound; an engine without word events gets the segment's sentence timing."""
        words = self._words(edges) if self._new or not self.events else []
        return words, self._timed_marks(len(self._marks), edges)

    def _clock(self, edges: Edges) -> tuple[list[WordEvent], float]:
        """Word events with samples of the delivered audio (the cut lead off), and how long
        the segment's delivered audio lasts until its sound ends."""
        shifted = [replace(e, sample=max(0, e.sample - edges.cut_lead)) for e in self.events]
        voiced = min(max(0, edges.speech_end - edges.cut_lead), edges.delivered)
        return shifted, voiced * 1000 / self.rate_hz

    def _words(self, edges: Edges) -> list[WordTiming]:
        new, self._new = self._new, []
        shifted, voiced_ms = self._clock(edges)
        timings = segment_word_timings(
            self.segment,
            shifted[len(self.events) - len(new) :],
            rate_hz=self.rate_hz,
            start_ms=self.start_ms,
            voiced_ms=voiced_ms,
            source=self.source.text,
        )
        out = []
        offset = self.source.offset
        for timing in timings:
            if timing.char_start < self._given_to:
                continue  # inside a word given out with an earlier chunk
            self._given_to = timing.char_end
            out.append(
                replace(
                    timing, char_start=offset + timing.char_start, char_end=offset + timing.char_end
                )
            )
        return out

    def _timed_marks(self, count: int, edges: Edges) -> list[MarkTiming]:
        if count == 0:
            return []
        marks, self._marks = self._marks[:count], self._marks[count:]
        shifted, voiced_ms = self._clock(edges)
        return mark_times_ms(
            marks, shifted, rate_hz=self.rate_hz, start_ms=self.start_ms, voiced_ms=voiced_ms
        )
