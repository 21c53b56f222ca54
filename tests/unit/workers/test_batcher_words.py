"""Word events through the batcher: ``submit_timed``'s :class:`TimedAudio`, a stream's word
events among its chunks, and the PCM-only paths (``submit``, reading chunks) unchanged.

Deterministic engines (``tests/support/engines.py``) that report one word event per word of
their text: the word's span, and its first character's sample (one sample per character).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

import numpy as np
import pytest

from tests.support.engines import (
    FakeClock,
    RecordingEngine,
    SteppingEngine,
    SteppingSession,
    audio_for,
    stepped_audio,
)
from voicelane.core.settings import BatcherSettings
from voicelane.workers.batching import Batcher, Priority, StreamWords
from voicelane.workers.engines.base import StepEvent, TimedAudio, Utterance, WordEvent

T = 5.0


def words_of(text: str) -> tuple[WordEvent, ...]:
    """One event per space-separated word, at its first character's sample."""
    out = []
    position = 0
    for word in text.split(" "):
        if word:
            out.append(WordEvent(position, position + len(word), position))
        position += len(word) + 1
    return tuple(out)


class WordsEngine(RecordingEngine):
    """:class:`RecordingEngine` that knows its words (:func:`words_of`); streamed, each
    step's words are those that start in its chunk."""

    word_timings = True

    def synthesize_timed(self, batch: Sequence[Utterance]) -> list[TimedAudio]:
        return [
            TimedAudio(pcm, words_of(u.text))
            for pcm, u in zip(self.synthesize(batch), batch, strict=True)
        ]

    def synthesize_stream_timed(self, batch: Sequence[Utterance]) -> Iterator[list[TimedAudio]]:
        done = [0] * len(batch)
        for step in self.synthesize_stream(batch):
            out = []
            for i, (chunk, u) in enumerate(zip(step, batch, strict=True)):
                start, done[i] = done[i], done[i] + len(chunk)
                words = tuple(w for w in words_of(u.text) if start <= w.sample < done[i])
                out.append(TimedAudio(chunk, words))
            yield out


@pytest.fixture
def batcher() -> Iterator[Batcher]:
    settings = BatcherSettings(max_batch=4, max_wait_realtime_s=0.0, max_wait_batch_s=0.0)
    with Batcher(WordsEngine(), settings, clock=FakeClock()) as started:
        yield started


def test_submit_timed_answers_the_audio_with_its_words(batcher: Batcher) -> None:
    utterance = Utterance("one two three", "a")
    timed = batcher.submit_timed(utterance).result(T)
    assert isinstance(timed, TimedAudio)
    np.testing.assert_array_equal(timed.pcm, audio_for(utterance))
    assert timed.words == words_of("one two three")
    assert [utterance.text[w.char_start : w.char_end] for w in timed.words] == [
        "one",
        "two",
        "three",
    ]


def test_submit_still_answers_the_bare_pcm(batcher: Batcher) -> None:
    utterance = Utterance("one two", "a")
    pcm = batcher.submit(utterance).result(T)
    assert isinstance(pcm, np.ndarray)
    np.testing.assert_array_equal(pcm, audio_for(utterance))


def test_an_engine_without_word_times_gives_none() -> None:
    engine = RecordingEngine()
    assert engine.word_timings is False
    assert engine.capabilities().word_timings is False
    settings = BatcherSettings(max_batch=1, max_wait_batch_s=0.0)
    with Batcher(engine, settings, clock=FakeClock()) as batcher:
        timed = batcher.submit_timed(Utterance("one two", "a")).result(T)
    assert timed.words == ()
    np.testing.assert_array_equal(timed.pcm, audio_for(Utterance("one two", "a")))


def test_a_stream_gives_each_chunks_words_before_it(batcher: Batcher) -> None:
    text = "aa bb cc dd"
    stream = batcher.submit_stream(Utterance(text, "a"), priority=Priority.REALTIME)
    events = []
    while (event := stream.read_event(T)) is not None:
        events.append(event)
    # Two steps (RecordingEngine's stream_chunks): words, chunk, words, chunk.
    kinds = ["words" if isinstance(e, StreamWords) else "pcm" for e in events]
    assert kinds == ["words", "pcm", "words", "pcm"]
    first, second = events[0], events[2]
    assert isinstance(first, StreamWords) and isinstance(second, StreamWords)
    first_chunk = events[1]
    assert isinstance(first_chunk, np.ndarray)
    assert all(w.sample < len(first_chunk) for w in first.words)
    assert all(w.sample >= len(first_chunk) for w in second.words)
    assert first.words + second.words == words_of(text)
    assert tuple(stream.words) == words_of(text)


def test_reading_chunks_skips_the_words_and_keeps_them(batcher: Batcher) -> None:
    text = "aa bb cc dd"
    stream = batcher.submit_stream(Utterance(text, "a"), priority=Priority.REALTIME)
    chunks = list(stream)
    assert all(isinstance(c, np.ndarray) for c in chunks)
    np.testing.assert_array_equal(np.concatenate(chunks), audio_for(Utterance(text, "a")))
    assert tuple(stream.words) == words_of(text)


def test_read_nowait_skips_words_too(batcher: Batcher) -> None:
    text = "aa bb"
    stream = batcher.submit_stream(Utterance(text, "a"), priority=Priority.REALTIME)
    chunks = [stream.read(T) for _ in range(2)]
    assert stream.read(T) is None
    assert stream.read_nowait() is None
    assert all(c is not None and c.size for c in chunks)
    assert tuple(stream.words) == words_of(text)


class _WordsSession(SteppingSession):
    def step(self, handles: Sequence[int]) -> list[StepEvent]:
        events = super().step(handles)
        return [replace(e, words=(WordEvent(0, 1, 0),)) if e.finished else e for e in events]


class _WordsStepping(SteppingEngine):
    def open_steps(self) -> SteppingSession:
        session = _WordsSession(self)
        self.sessions.append(session)
        return session


def test_continuous_batching_carries_a_steps_words() -> None:
    settings = BatcherSettings(max_batch=4, continuous=True)
    with Batcher(_WordsStepping(), settings, clock=FakeClock()) as batcher:
        assert batcher.continuous
        timed = batcher.submit_timed(Utterance("abc", "a")).result(T)
        stream = batcher.submit_stream(Utterance("xy", "a"), priority=Priority.REALTIME)
        played = np.concatenate(list(stream))
    np.testing.assert_array_equal(timed.pcm, stepped_audio(Utterance("abc", "a")))
    assert timed.words == (WordEvent(0, 1, 0),)
    np.testing.assert_array_equal(played, stepped_audio(Utterance("xy", "a")))
    assert stream.words == [WordEvent(0, 1, 0)]
