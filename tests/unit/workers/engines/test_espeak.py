"""The espeak engine: real libespeak-ng 1.52 speech, English and Mandarin, rate, voices."""

from __future__ import annotations

import numpy as np
import pytest

from voicelane.common.errors import InvalidInputError, UnknownVoiceError
from voicelane.core.rules import DEFAULT_VOICE as AUTO_VOICE
from voicelane.workers.batching import Batcher, Priority
from voicelane.workers.engines import Utterance, WordEvent, create_engine
from voicelane.workers.engines.espeak import (
    ONSET_SEARCH_S,
    EspeakEngine,
    audible_starts,
    pitch_value,
    range_value,
)


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


# ---- word events, pitch, phonemes ------------------------------------------------------------


def test_word_events_slice_the_words_of_the_text_in_order(engine: EspeakEngine) -> None:
    text = "Hello, world. I paid three point five million dollars; naïve café."
    (timed,) = engine.synthesize_timed([Utterance(text, "en-us")])
    assert engine.word_timings and engine.capabilities().word_timings
    spoken = [text[w.char_start : w.char_end] for w in timed.words]
    assert spoken == [
        "Hello", "world", "I", "paid", "three", "point", "five", "million", "dollars",
        "naïve", "café",
    ]  # fmt: skip
    samples = [w.sample for w in timed.words]
    assert samples == sorted(samples) and len(set(samples)) == len(samples)
    assert samples[0] < 0.05 * engine.sample_rate_hz and samples[-1] < len(timed.pcm)
    # A whole clause (and its comma pause) lies between "Hello" and "world".
    assert samples[1] > 0.3 * engine.sample_rate_hz
    (plain,) = engine.synthesize([Utterance(text, "en-us")])
    assert len(plain) == pytest.approx(len(timed.pcm), rel=0.01)  # the same speech


def test_word_events_of_mandarin_cover_whole_words(engine: EspeakEngine) -> None:
    text = "第一句话是中文，你好。"
    (timed,) = engine.synthesize_timed([Utterance(text, "cmn")])
    spoken = [text[w.char_start : w.char_end] for w in timed.words]
    # espeak reads 第一句 as one word of its dictionary (its event says one character long).
    assert spoken[0] == "第一句"
    assert "".join(spoken) == "第一句话是中文你好"


def test_word_events_come_through_the_batcher(engine: EspeakEngine) -> None:
    with Batcher(engine) as batcher:
        timed = batcher.submit_timed(Utterance("One two three.", "en-us")).result(10)
        stream = batcher.submit_stream(Utterance("Four five.", "en-us"))
        chunks = list(stream)
    assert [(w.char_start, w.char_end) for w in timed.words] == [(0, 3), (4, 7), (8, 13)]
    assert [(w.char_start, w.char_end) for w in stream.words] == [(0, 4), (5, 9)]
    assert sum(len(c) for c in chunks) > stream.words[-1].sample


def test_pitch_semitones_map_onto_espeaks_pitch_table() -> None:
    assert pitch_value(0) == 50
    assert pitch_value(12) == 100 and pitch_value(-12) == 0
    assert pitch_value(6) == 75 and pitch_value(-6) == 25
    assert pitch_value(40) == 100 and pitch_value(-40) == 0
    # The contour's swing scales with its base (espeakRANGE is linear, 50 the normal).
    assert range_value(0) == 50 and range_value(12) == 100 and range_value(-12) == 25
    assert range_value(-7) == 33 and range_value(40) == 100


def _median_f0_hz(pcm: np.ndarray, rate_hz: int) -> float:
    """The median fundamental of the voiced 40 ms frames (autocorrelation peak, 60-500 Hz)."""
    frame = int(0.04 * rate_hz)
    found = []
    for start in range(0, len(pcm) - frame, frame):
        x = pcm[start : start + frame].astype(np.float64)
        if np.sqrt(np.mean(x**2)) < 0.05:
            continue
        x = x - x.mean()
        corr = np.correlate(x, x, "full")[frame - 1 :]
        low, high = rate_hz // 500, rate_hz // 60
        lag = low + int(np.argmax(corr[low:high]))
        if corr[lag] > 0.3 * corr[0]:
            found.append(rate_hz / lag)
    assert len(found) > 5, "too few voiced frames"
    return float(np.median(found))


def test_pitch_param_raises_and_lowers_the_voice(engine: EspeakEngine) -> None:
    text = "A long vowel sound, aaaah, and another one, ooooh, spoken slowly."

    def f0(semitones: float) -> float:
        params = (("pitch_semitones", semitones),) if semitones else ()
        (pcm,) = engine.synthesize([Utterance(text, "en-us", params=params)])
        return _median_f0_hz(pcm, engine.sample_rate_hz)

    normal, up, down = f0(0), f0(7), f0(-7)
    # 7 semitones: x1.5 up, x0.67 down (espeak shifts the base pitch; the contour rides on it).
    assert 1.3 < up / normal < 1.7, (normal, up)
    assert 0.55 < down / normal < 0.8, (normal, down)


def test_phoneme_mnemonics_in_double_brackets_are_spoken_as_phonemes(
    engine: EspeakEngine,
) -> None:
    (phonemes,) = engine.synthesize_timed([Utterance("Say [[h@l'oU]] now.", "en-us")])
    (word,) = engine.synthesize_timed([Utterance("Say hello now.", "en-us")])
    # Read as phonemes: three words, about as long as "hello"; spelled out, the brackets'
    # letters would be six more words ("h", "at", "l", ...).
    assert len(phonemes.words) == 3
    assert abs(len(phonemes.pcm) - len(word.pcm)) < 0.25 * len(word.pcm)


def test_audible_starts_move_each_word_to_its_first_loud_sample_within_reach() -> None:
    rate_hz = 1000
    reach = round(ONSET_SEARCH_S * rate_hz)  # 150 samples
    pcm = np.zeros(2000, dtype=np.float32)
    pcm[120] = 0.5  # heard 20 samples after the first word's event
    pcm[420] = 0.5  # the second word's event is at 400, the third's at 410: not moved past it
    pcm[1000 + reach + 5] = 0.5  # beyond the fourth word's reach: it stays where espeak put it
    pcm[1900] = -0.5  # loud by magnitude; the last word's window runs to its reach
    events = [
        WordEvent(0, 3, 100),
        WordEvent(4, 7, 400),
        WordEvent(8, 9, 410),
        WordEvent(10, 12, 1000),
        WordEvent(13, 15, 1800),
    ]
    moved = audible_starts(events, pcm, rate_hz)
    assert [e.sample for e in moved] == [120, 400, 420, 1000, 1900]
    assert [(e.char_start, e.char_end) for e in moved] == [
        (e.char_start, e.char_end) for e in events
    ]
    assert audible_starts(events, np.zeros(2000, dtype=np.float32), rate_hz) == tuple(events)
