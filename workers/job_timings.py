"""A job chunk's timings as stored beside its audio, and read back by the assembler.

A render worker times every segment of its chunk (:class:`voicelane.workers.render.Timeline`)
in the chunk's own clock, and stores them as JSON next to the part, under the attempt's own
key like its audio (``{tenant}/{job}/parts/{n:06d}.{token}.json``,
:func:`voicelane.workers.jobs.timings_key`), written before the part's audio: a committed
part always has the timings of the render that made it, and no other attempt writes them.
The assembler shifts each chunk's timings by where its audio lands in the file (earlier
chunks, chapter pauses) and turns them into subtitles.

The JSON: ``{"v": 1, "samples": N, "word_timings": bool, "sentences": [[text, start_ms,
end_ms, char_start, char_end, [[text, start_ms, end_ms, char_start, char_end], ...]], ...]}``
(lists, not objects: a book has a few hundred thousand words).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from voicelane.core.word_timings import SentenceTiming, WordTiming
from voicelane.workers.render import Timeline

__all__ = ["ChunkTimings", "chunk_timings_json", "read_chunk_timings", "shifted"]


@dataclass(frozen=True, slots=True)
class ChunkTimings:
    sentences: tuple[SentenceTiming, ...]
    word_timings: bool
    """Whether the words are the engine's own word times."""
    samples: int
    """The chunk's audio length, in samples at the job's rate."""


def chunk_timings_json(timeline: Timeline, samples: int) -> bytes:
    data = {
        "v": 1,
        "samples": samples,
        "word_timings": timeline.word_timings,
        "sentences": [[*_word(s), [_word(w) for w in s.words]] for s in timeline.sentences],
    }
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()


def _word(timing: WordTiming | SentenceTiming) -> list[Any]:
    return [timing.text, timing.start_ms, timing.end_ms, timing.char_start, timing.char_end]


def read_chunk_timings(raw: bytes) -> ChunkTimings:
    data = json.loads(raw)
    sentences = tuple(
        SentenceTiming(
            str(s[0]),
            int(s[1]),
            int(s[2]),
            int(s[3]),
            int(s[4]),
            tuple(WordTiming(str(w[0]), int(w[1]), int(w[2]), int(w[3]), int(w[4])) for w in s[5]),
        )
        for s in data["sentences"]
    )
    return ChunkTimings(sentences, bool(data["word_timings"]), int(data["samples"]))


def shifted(sentence: SentenceTiming, offset_ms: int) -> SentenceTiming:
    """``sentence`` (and its words) ``offset_ms`` later."""
    return replace(
        sentence,
        start_ms=sentence.start_ms + offset_ms,
        end_ms=sentence.end_ms + offset_ms,
        words=tuple(
            replace(w, start_ms=w.start_ms + offset_ms, end_ms=w.end_ms + offset_ms)
            for w in sentence.words
        ),
    )
