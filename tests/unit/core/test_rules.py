"""The request rules (core/rules.py): defaults, ranges, fields named in every refusal, and the
engines' own validation agreeing with what the fronts check."""

from __future__ import annotations

import json
import math

import pytest

from voicelane.common.audio.stream import StreamEncoding, stream_sample_rates
from voicelane.common.defaults import DEFAULT_SAMPLE_RATE_HZ
from voicelane.common.errors import InvalidInputError, TextTooLargeError, UnknownVoiceError
from voicelane.core.rules import (
    DEFAULT_SPEED,
    DEFAULT_VOICE,
    MAX_SEED,
    ConversationText,
    EngineCapabilities,
    VoiceInfo,
    check_request_id,
    check_sample_rate,
    check_speech_options,
    check_speech_text,
    check_speed,
    check_voice,
    seed_of,
    split_speed,
)
from voicelane.core.text import has_speakable_text, split_sentences
from voicelane.workers.engines import Utterance
from voicelane.workers.engines.espeak import EspeakEngine

CAPS = EngineCapabilities(
    engine="test",
    sample_rate_hz=22050,
    min_speed=0.5,
    max_speed=2.5,
    voices=(VoiceInfo("auto", "Automatic", ("en",)), VoiceInfo("en-us")),
)
SEEDED = EngineCapabilities("seeded", 24000, 0.1, 1.9, (VoiceInfo("auto"),), seed_voices=True)
OPUS_RATES = stream_sample_rates(StreamEncoding.OPUS)


def refusal(error: pytest.ExceptionInfo[InvalidInputError], field: str) -> None:
    assert error.value.field == field
    assert error.value.message.startswith(field), error.value.message


# ---- text ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["...", "!!! ??? ---", "***", "…", "。！", "🙂🙂", " - "])
def test_text_without_letters_or_digits_is_refused_naming_the_field(text: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        check_speech_text(text, max_chars=100, field="input")
    refusal(caught, "input")
    assert split_sentences(text) == []  # what a worker would find: nothing to speak


@pytest.mark.parametrize("text", ["a", "7", "中", "Hi!", "— ok —", "ｘ"])
def test_anything_with_a_letter_or_digit_is_speakable(text: str) -> None:
    assert has_speakable_text(text)
    assert check_speech_text(text, max_chars=100) == text
    assert split_sentences(text)  # and a worker finds something to speak


def test_the_text_limit_is_inclusive_and_over_it_is_too_large() -> None:
    assert check_speech_text("a" * 50, max_chars=50) == "a" * 50
    with pytest.raises(TextTooLargeError) as caught:
        check_speech_text("a" * 51, max_chars=50)
    refusal(caught, "text")


@pytest.mark.parametrize("text", ["", "   \n", "a\x00b", "\x01\x02\x03 ab"])
def test_empty_and_binary_text_is_refused_naming_the_field(text: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        check_speech_text(text, max_chars=100)
    refusal(caught, "text")


# ---- voice ---------------------------------------------------------------------------------


def test_no_voice_is_the_default_voice() -> None:
    assert check_voice(None, CAPS) == check_voice("", CAPS) == DEFAULT_VOICE == "auto"
    assert check_voice("en-us", CAPS) == "en-us"


def test_an_unknown_voice_is_refused_naming_the_field() -> None:
    with pytest.raises(UnknownVoiceError) as caught:
        check_voice("xx" * 100, CAPS)
    refusal(caught, "voice")
    assert len(caught.value.message) < 200  # the value is cut short in the message


def test_seed_voices_only_where_the_engine_draws_speakers_from_seeds() -> None:
    assert check_voice("seed:42", SEEDED) == "seed:42"
    assert check_voice(f"seed:{MAX_SEED}", SEEDED)
    assert seed_of("seed:0") == 0 and seed_of("en-us") is None
    for bad in ("seed:x", "seed:-1", "seed:01", f"seed:{MAX_SEED + 1}", "seed:"):
        with pytest.raises(UnknownVoiceError) as caught:
            check_voice(bad, SEEDED)
        refusal(caught, "voice")
    with pytest.raises(UnknownVoiceError):
        check_voice("seed:42", CAPS)


# ---- speed and sample rate -----------------------------------------------------------------


def test_speed_range_is_inclusive_and_unset_is_the_default() -> None:
    assert check_speed(None, 0.5, 2.5) == DEFAULT_SPEED == 1.0
    assert check_speed(0.5, 0.5, 2.5) == 0.5
    assert check_speed(2.5, 0.5, 2.5) == 2.5
    assert check_speed(1.100000023841858, 0.5, 2.5) == 1.1  # a float32 from gRPC
    for bad in (0.25, 0.499, 2.501, 4.0, -1.0, math.nan, math.inf, -math.inf):
        with pytest.raises(InvalidInputError) as caught:
            check_speed(bad, 0.5, 2.5)
        refusal(caught, "speed")


def test_sample_rates_follow_the_encoding() -> None:
    assert check_sample_rate(None, OPUS_RATES, encoding="opus") == DEFAULT_SAMPLE_RATE_HZ
    assert [r for r in (8000, 12000, 16000, 24000, 48000) if r in OPUS_RATES] == list(OPUS_RATES)
    for bad in (22050, 44100, 96000, 0, -8000):
        with pytest.raises(InvalidInputError) as caught:
            check_sample_rate(bad, OPUS_RATES, encoding="opus")
        refusal(caught, "sample_rate_hz")
        assert "8000" in caught.value.message  # lists what is allowed
    wav_rates = stream_sample_rates(StreamEncoding.WAV)
    assert check_sample_rate(22050, wav_rates, encoding="wav") == 22050
    with pytest.raises(InvalidInputError):
        check_sample_rate(True, wav_rates, encoding="wav")


def test_speech_options_apply_every_default() -> None:
    options = check_speech_options(
        CAPS,
        voice=None,
        speed=None,
        sample_rate_hz=None,
        allowed_rates=OPUS_RATES,
        encoding="opus",
    )
    assert (options.voice, options.speed, options.sample_rate_hz) == ("auto", 1.0, 24000)
    assert options.tempo == 1.0


def _speed_options(
    speed: float | None, *, stretch: bool, caps: EngineCapabilities = CAPS
) -> tuple[float, float]:
    options = check_speech_options(
        caps,
        voice=None,
        speed=speed,
        sample_rate_hz=None,
        allowed_rates=OPUS_RATES,
        encoding="opus",
        stretch_speed=stretch,
    )
    return options.speed, options.tempo


def test_speeds_beyond_the_engine_are_refused_unless_the_request_allows_stretching() -> None:
    for speed in (0.25, 0.4, 3.0, 4.0):
        with pytest.raises(InvalidInputError, match=r"out of range \(0\.5 to 2\.5\)") as caught:
            _speed_options(speed, stretch=False)
        refusal(caught, "speed")
    # Allowed: the engine renders the nearest speed it can, the rest is the tempo.
    assert _speed_options(4.0, stretch=True) == (2.5, 4.0 / 2.5)
    assert _speed_options(0.25, stretch=True) == (0.5, 0.5)
    assert _speed_options(3.0, stretch=True) == (2.5, 3.0 / 2.5)
    # Within the engine's range nothing is stretched, allowed or not.
    for asked in (0.5, 1.0, 1.7, 2.5, None):
        engine_speed = 1.0 if asked is None else asked
        assert _speed_options(asked, stretch=True) == (engine_speed, 1.0)
        assert _speed_options(asked, stretch=False) == (engine_speed, 1.0)
    # Stretching has OpenAI's range (0.25 to 4), whatever the engine: one of speed 1 only too.
    fixed = EngineCapabilities("fixed", 24000, 1.0, 1.0, (VoiceInfo("auto"),))
    assert _speed_options(0.25, stretch=True, caps=fixed) == (1.0, 0.25)
    assert _speed_options(4.0, stretch=True, caps=fixed) == (1.0, 4.0)
    for bad in (0.249, 4.001, 0.0, -1.0, math.nan, math.inf):
        with pytest.raises(InvalidInputError, match=r"out of range \(0\.25 to 4\)") as caught:
            _speed_options(bad, stretch=True)
        refusal(caught, "speed")
    # An engine whose own range is wider keeps it.
    assert _speed_options(0.1, stretch=True, caps=SEEDED) == (0.1, 1.0)
    assert _speed_options(4.0, stretch=True, caps=SEEDED) == (1.9, 4.0 / 1.9)


def test_split_speed_is_the_engine_speed_times_the_tempo() -> None:
    for speed in (0.25, 0.3, 0.5, 1.0, 2.0, 2.5, 3.3, 4.0):
        engine_speed, tempo = split_speed(speed, CAPS)
        assert CAPS.min_speed <= engine_speed <= CAPS.max_speed
        assert engine_speed * tempo == pytest.approx(speed)


def test_request_ids() -> None:
    assert check_request_id("abc_DEF-123") == "abc_DEF-123"
    for bad in ("", "a b", "x" * 65, "ü", "a/b"):
        with pytest.raises(InvalidInputError) as caught:
            check_request_id(bad)
        refusal(caught, "request_id")


# ---- capabilities --------------------------------------------------------------------------


def test_capabilities_survive_their_json() -> None:
    for caps in (CAPS, SEEDED):
        assert EngineCapabilities.from_json(caps.to_json()) == caps
    for bad in ("", "[]", "{}", '{"engine": "x"}'):
        with pytest.raises((ValueError, KeyError, TypeError)):
            EngineCapabilities.from_json(bad)


def test_word_timings_travel_with_the_capabilities() -> None:
    timed = EngineCapabilities("timed", 22050, 0.5, 2.0, (VoiceInfo("auto"),), word_timings=True)
    assert EngineCapabilities.from_json(timed.to_json()).word_timings is True
    assert EngineCapabilities.from_json(CAPS.to_json()).word_timings is False
    # What a worker published before word timings existed reads as "none".
    old = json.loads(timed.to_json())
    del old["word_timings"]
    assert EngineCapabilities.from_json(json.dumps(old)).word_timings is False
    assert EspeakEngine().capabilities().word_timings is True


def test_the_espeak_engine_refuses_exactly_what_the_rules_refuse() -> None:
    engine = EspeakEngine()
    caps = engine.capabilities()
    assert (caps.engine, caps.min_speed, caps.max_speed) == ("espeak", 0.5, 2.5)
    for speed in (0.25, 0.49, 0.5, 1.0, 2.5, 2.51, 4.0):
        for voice in ("auto", "en-us", "cmn", "no-such-voice", "seed:1"):
            try:
                check_voice(voice, caps)
                check_speed(speed, caps.min_speed, caps.max_speed)
                rules_accept = True
            except InvalidInputError:
                rules_accept = False
            try:
                engine.validate(Utterance("check", voice, speed))
                engine_accepts = True
            except InvalidInputError:
                engine_accepts = False
            assert rules_accept == engine_accepts, (voice, speed)


# ---- conversations -------------------------------------------------------------------------


def test_conversation_text_counts_everything_received() -> None:
    text = ConversationText(10)
    assert text.accept("\ufeffhello") == "hello"
    assert text.accept("\x07 ok") == " ok"  # a stray control character is dropped
    with pytest.raises(TextTooLargeError) as caught:
        text.accept("abcdef")
    refusal(caught, "text_delta")
    with pytest.raises(InvalidInputError) as binary:
        ConversationText(100).accept("a\x00")
    refusal(binary, "text_delta")
