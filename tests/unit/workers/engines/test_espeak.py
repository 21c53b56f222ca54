"""The espeak engine: real libespeak-ng 1.52 speech, English and Mandarin, rate, voices."""

from __future__ import annotations

import numpy as np
import pytest

from voicelane.common.errors import InvalidInputError, UnknownVoiceError
from voicelane.core.rules import DEFAULT_VOICE as AUTO_VOICE
from voicelane.workers.batching import Batcher, Priority
from voicelane.workers.engines import Utterance, create_engine
from voicelane.workers.engines.espeak import EspeakEngine


@pytest.fixture(scope="module")
def engine() -> EspeakEngine:
    built = create_engine("espeak")
    assert isinstance(built, EspeakEngine)
    return built


def seconds(engine: EspeakEngine, text: str, voice: str = "auto", speed: float = 1.0) -> float:
    (pcm,) = engine.synthesize([Utterance(text, voice, speed)])
    return len(pcm) / engine.sample_rate_hz


def test_sample_rate_is_espeaks(engine: EspeakEngine) -> None:
    assert engine.sample_rate_hz == 22050


def test_voices_include_auto_english_and_mandarin(engine: EspeakEngine) -> None:
    ids = {v.id for v in engine.voices()}
    assert {AUTO_VOICE, "en-us", "en-gb", "cmn", "yue"} <= ids
    cmn = next(v for v in engine.voices() if v.id == "cmn")
    assert cmn.languages == ("cmn",)
    assert len(ids) > 100


def test_english_speech_is_real_audio(engine: EspeakEngine) -> None:
    (pcm,) = engine.synthesize([Utterance("Hello world, this is a test.", "en-us")])
    assert pcm.dtype == np.float32
    assert 1.0 < len(pcm) / engine.sample_rate_hz < 4.0
    assert 0.05 < float(np.abs(pcm).max()) <= 1.0
    assert float(np.sqrt(np.mean(pcm**2))) > 0.01  # not silence


def test_mandarin_is_spoken_as_mandarin_not_spelled(engine: EspeakEngine) -> None:
    text = "今天天气很好，我们去公园散步。"
    mandarin = seconds(engine, text, "cmn")
    # 14 syllables of Mandarin take a few seconds; English espeak reads Han characters as
    # long "Chinese letter" descriptions, which takes far longer.
    assert 1.5 < mandarin < 6.0
    assert seconds(engine, text, "en-us") > 1.5 * mandarin


def test_auto_picks_mandarin_for_chinese_and_english_otherwise(engine: EspeakEngine) -> None:
    chinese = "你好，世界。"
    english = "Good morning, everyone."
    assert seconds(engine, chinese, "auto") == pytest.approx(seconds(engine, chinese, "cmn"), 0.05)
    assert seconds(engine, english, "auto") == pytest.approx(
        seconds(engine, english, "en-us"), 0.05
    )


def test_speed_changes_the_rate(engine: EspeakEngine) -> None:
    text = "The quick brown fox jumps over the lazy dog near the river bank."
    normal = seconds(engine, text, "en-us", 1.0)
    fast = seconds(engine, text, "en-us", 2.0)
    slow = seconds(engine, text, "en-us", 0.6)
    assert fast < 0.7 * normal
    assert slow > 1.3 * normal


def test_a_batch_returns_one_output_per_utterance_in_order(engine: EspeakEngine) -> None:
    batch = [
        Utterance("One.", "en-us"),
        Utterance("一二三四五六七八九十。", "cmn"),
        Utterance("Three, four, five, six, seven.", "en-us"),
    ]
    outputs = engine.synthesize(batch)
    assert len(outputs) == 3
    lengths = [len(o) for o in outputs]
    assert lengths[0] < lengths[2] and lengths[0] < lengths[1]


def test_unknown_voice_and_bad_speed_are_permanent_errors(engine: EspeakEngine) -> None:
    with pytest.raises(UnknownVoiceError, match="klingon"):
        engine.validate(Utterance("x", "klingon"))
    with pytest.raises(InvalidInputError, match="speed"):
        engine.validate(Utterance("x", "en-us", speed=9.0))
    engine.validate(Utterance("x", "cmn", speed=1.5))


def test_through_the_batcher_whole_and_streamed(engine: EspeakEngine) -> None:
    with Batcher(engine) as batcher:
        whole = batcher.submit(Utterance("Batched speech.", "en-us")).result(10)
        stream = batcher.submit_stream(
            Utterance("Streamed speech.", "en-us"), priority=Priority.REALTIME
        )
        streamed = np.concatenate(list(stream))
    assert len(whole) > 0.5 * engine.sample_rate_hz
    assert len(streamed) > 0.5 * engine.sample_rate_hz
