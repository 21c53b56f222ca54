"""One sentence of a real-time stream, between the engine and the encoder: the silence cut at
its edges around an SSML ``break``, and its words and marks put on the stream's clock.

* :class:`Edges` takes the engine's chunks as they come. Around a break (a segment with
  ``pause_after_ms``, and the one after it) the engine's own silence goes: the leading silence
  of the segment after a break, the trailing silence of the segment before one (held back
  until more sound or the end shows whether it is trailing), so that the break's silence is
  *exactly* what separates the words. It also records where the speech starts and ends, in
  samples of the utterance.
* :class:`SentenceTimes` turns the engine's word events (samples from the utterance's start;
  offsets in the engine's text) into :class:`~voicelane.core.word_timings.WordTiming` values
  of the **whole request's** text with times on the stream's clock (``pts_ms``: the
  sentence's first delivered sample is ``start_ms``; the trimmed lead is taken off), and the
  segment's SSML marks into :class:`~voicelane.core.marks.MarkTiming` values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from voicelane.core.marks import MarkTiming
from voicelane.core.speech_text import SpokenSegment
from voicelane.core.word_timings import WordTiming
from voicelane.workers.engines import PcmF32, WordEvent

SILENCE_THRESHOLD = 10 ** (-45 / 20)
"""Amplitude below which audio counts as silence at a segment's edges (-45 dBFS)."""
EDGE_FRAME_S = 0.005
"""Silence is cut in whole frames of this length (what a click would need is left alone)."""

_EMPTY = np.zeros(0, dtype=np.float32)


def silence_edges(pcm: PcmF32, sample_rate_hz: int) -> tuple[int, int]:
    """Samples of silence ``(leading, trailing)`` of ``pcm``: whole 5 ms frames whose peak
    stays below :data:`SILENCE_THRESHOLD`. All silent: ``(len(pcm), 0)``."""
    frame = max(1, round(sample_rate_hz * EDGE_FRAME_S))
    loud = np.flatnonzero(np.abs(pcm) >= SILENCE_THRESHOLD)
    if len(loud) == 0:
        return len(pcm), 0
    lead = (int(loud[0]) // frame) * frame
    end = min(len(pcm), -(-(int(loud[-1]) + 1) // frame) * frame)
    return lead, len(pcm) - end


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
    out as soon as they are known: the words after the chunk they came with went through
    :class:`Edges` (:meth:`take`), the rest at the end (:meth:`finish`)."""

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
        self._spoken_to = 0
        """The end (in the source) of the last word given out: a later engine word inside
        it (``$3.5M`` spoken as four words) is part of that word."""

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
        events, self._new = self._new, []
        return self._words(events, edges), self._timed_marks(edges, final=False)

    def finish(self, edges: Edges) -> tuple[list[WordTiming], list[MarkTiming]]:
        """The rest at the end of the segment: marks after its last word are at the end of
        its speech (at its start, for a mark before the text on an engine without words)."""
        events, self._new = self._new, []
        return self._words(events, edges), self._timed_marks(edges, final=True)

    def _ms(self, sample: int, edges: Edges) -> int:
        """The stream time of utterance sample ``sample`` (within the delivered audio)."""
        delivered = min(max(0, sample - edges.cut_lead), edges.delivered)
        return round(self.start_ms + delivered * 1000 / self.rate_hz)

    def _words(self, events: Sequence[WordEvent], edges: Edges) -> list[WordTiming]:
        """One word per word of the input (the engine's words from one input word are one),
        from its first engine word's start to the next input word's start."""
        spoken = len(self.segment.text)
        groups: list[tuple[int, int, int]] = []  # (source start, source end, first sample)
        for event in events:
            start = max(0, min(spoken, event.char_start))
            end = max(start, min(spoken, event.char_end))
            src_start, src_end = self.segment.mapping.source_span(start, end)
            if src_end <= src_start or src_start < self._spoken_to:
                continue  # nothing of the input, or inside a word given out before
            if groups and src_start < groups[-1][1]:  # the same input word, spoken on
                first, last, sample = groups[-1]
                groups[-1] = (first, max(last, src_end), sample)
                continue
            groups.append((src_start, src_end, event.sample))
        if groups:
            self._spoken_to = groups[-1][1]
        speech_end = self._ms(edges.speech_end, edges)
        out: list[WordTiming] = []
        offset = self.source.offset
        for index, (src_start, src_end, sample) in enumerate(groups):
            start_ms = self._ms(sample, edges)
            following = groups[index + 1][2] if index + 1 < len(groups) else None
            end_ms = speech_end if following is None else self._ms(following, edges)
            out.append(
                WordTiming(
                    text=self.source.text[src_start:src_end],
                    start_ms=start_ms,
                    end_ms=max(start_ms, end_ms),
                    char_start=offset + src_start,
                    char_end=offset + src_end,
                )
            )
        return out

    def _timed_marks(self, edges: Edges, *, final: bool) -> list[MarkTiming]:
        """The marks whose time is known, in order: the start of the first engine word at
        or after a mark's offset; at the end, the end of the speech for the others."""
        out: list[MarkTiming] = []
        while self._marks:
            name, offset = self._marks[0]
            word = next((e for e in self.events if e.char_start >= offset), None)
            if word is not None:
                sample = word.sample
            elif not final:
                break  # its word may be still to come
            elif offset <= 0 and not self.events:
                sample = edges.speech_start if edges.speech_start is not None else 0
            else:
                sample = edges.speech_end
            out.append(MarkTiming(name, self._ms(sample, edges)))
            self._marks.pop(0)
        return out


def apply_gain_db(pcm: PcmF32, gain_db: float) -> PcmF32:
    """``pcm`` louder or softer by ``gain_db`` (clipped to [-1, 1]); -96 dB and below: silence."""
    if gain_db <= -96:
        return np.zeros_like(pcm)
    out = pcm * np.float32(10 ** (gain_db / 20))
    return np.clip(out, -1.0, 1.0, out=out)
