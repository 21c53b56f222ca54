"""Wyoming's events ↔ the gateway's terms (``voicelane.api.wyoming_events``)."""

from __future__ import annotations

import pytest
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.info import Info
from wyoming.tts import SynthesizeTextFormat, SynthesizeVoice

from voicelane.api.wyoming_events import (
    PROGRAM_NAME,
    PcmFramer,
    error_event,
    requested_voice,
    tts_info,
    wants_ssml,
)
from voicelane.common.errors import (
    InvalidInputError,
    NoCapacityError,
    UnknownVoiceError,
)
from voicelane.core.rules import EngineCapabilities, VoiceInfo

PIPER = EngineCapabilities(
    engine="piper",
    sample_rate_hz=22050,
    min_speed=0.5,
    max_speed=2.0,
    voices=(VoiceInfo("en_US-joe-medium", "Joe", ("en_US",)),),
)
ESPEAK = EngineCapabilities(
    engine="espeak",
    sample_rate_hz=22050,
    min_speed=0.5,
    max_speed=2.5,
    voices=(
        VoiceInfo("en-us", "English (America)", ("en-us",)),
        VoiceInfo("cmn", "Chinese (Mandarin)", ("cmn", "zh")),
        VoiceInfo("de", "German", ("de",)),
    ),
)
CHATTTS = EngineCapabilities(
    engine="chattts",
    sample_rate_hz=24000,
    min_speed=0.5,
    max_speed=2.0,
    voices=(VoiceInfo("default", "Default", ("zh", "en")),),
    seed_voices=True,
)
ENGINES = (PIPER, ESPEAK, CHATTTS)


def test_info_lists_every_engines_voices_qualified_with_their_languages() -> None:
    info = Info.from_event(tts_info(ENGINES, version="1.2.3").event())  # through the wire form
    (program,) = info.tts
    assert program.name == PROGRAM_NAME
    assert program.supports_synthesize_streaming
    assert program.version == "1.2.3"
    assert [(v.name, v.languages, v.description) for v in program.voices] == [
        ("piper:en_US-joe-medium", ["en_US"], "Joe"),
        ("espeak:en-us", ["en-us"], "English (America)"),
        ("espeak:cmn", ["cmn", "zh"], "Chinese (Mandarin)"),
        ("espeak:de", ["de"], "German"),
        ("chattts:default", ["zh", "en"], "Default"),
    ]
    assert all(v.installed for v in program.voices)
    assert not info.asr and not info.wake


def test_info_before_any_engine_published_lists_no_voices() -> None:
    (program,) = tts_info(()).tts
    assert program.voices == []
    assert program.supports_synthesize_streaming


@pytest.mark.parametrize(
    ("voice", "expected"),
    [
        (None, None),
        (SynthesizeVoice(), None),
        (SynthesizeVoice(name="espeak:de"), "espeak:de"),
        (SynthesizeVoice(name="de"), "de"),
        (SynthesizeVoice(name="auto"), "auto"),
        (SynthesizeVoice(name="chattts:default", speaker="42"), "chattts:seed:42"),
        (SynthesizeVoice(name="default", speaker="seed:7"), "chattts:seed:7"),
        (SynthesizeVoice(language="de"), "espeak:de"),
        (SynthesizeVoice(language="en-US"), "piper:en_US-joe-medium"),
        (SynthesizeVoice(language="en_us"), "piper:en_US-joe-medium"),
        (SynthesizeVoice(language="zh"), "espeak:cmn"),
        (SynthesizeVoice(language="en"), "chattts:default"),  # exactly "en" first
    ],
)
def test_a_wyoming_voice_names_the_gateways_voice(
    voice: SynthesizeVoice | None, expected: str | None
) -> None:
    assert requested_voice(voice, ENGINES) == expected


def test_a_language_prefix_matches_a_regional_voice() -> None:
    assert requested_voice(SynthesizeVoice(language="en"), (PIPER,)) == "piper:en_US-joe-medium"


@pytest.mark.parametrize(
    "voice",
    [
        SynthesizeVoice(language="xx"),
        SynthesizeVoice(name="espeak:de", speaker="3"),
        SynthesizeVoice(name="chattts:default", speaker="alice"),
        SynthesizeVoice(name="nobody", speaker="3"),
    ],
)
def test_a_voice_no_engine_has_is_refused(voice: SynthesizeVoice) -> None:
    with pytest.raises(UnknownVoiceError) as refused:
        requested_voice(voice, ENGINES)
    assert refused.value.field == "voice"


def test_text_format_says_whether_the_text_is_ssml() -> None:
    assert wants_ssml(None) is None
    assert wants_ssml("text") is False
    assert wants_ssml(SynthesizeTextFormat.SSML) is True
    assert wants_ssml("ssml") is True
    with pytest.raises(InvalidInputError) as refused:
        wants_ssml("markdown")
    assert refused.value.field == "text_format"


def test_an_error_is_an_error_event_with_voicelanes_code() -> None:
    error = Error.from_event(error_event(NoCapacityError("no real-time capacity")))
    assert (error.text, error.code) == ("no real-time capacity", "no_capacity")


def test_pcm_becomes_chunks_of_the_stated_size_and_format() -> None:
    framer = PcmFramer(22050, samples_per_chunk=4)
    start = AudioStart.from_event(framer.start())
    assert (start.rate, start.width, start.channels) == (22050, 2, 1)
    pcm = bytes(range(40))  # 20 samples, arriving in uneven pieces
    events = [*framer.feed(pcm[:3]), *framer.feed(pcm[3:19]), *framer.feed(pcm[19:])]
    events += framer.flush()
    chunks = [AudioChunk.from_event(e) for e in events]
    assert [len(c.audio) for c in chunks] == [8, 8, 8, 8, 8]
    assert b"".join(c.audio for c in chunks) == pcm
    assert all((c.rate, c.width, c.channels) == (22050, 2, 1) for c in chunks)
    assert framer.bytes_out == len(pcm)
    assert AudioStop.is_type(framer.stop().type)


def test_the_rest_of_a_cycle_is_flushed_in_whole_samples() -> None:
    framer = PcmFramer(24000, samples_per_chunk=1024)
    assert framer.feed(b"\x01\x02\x03\x04\x05") == []
    (last,) = framer.flush()
    assert AudioChunk.from_event(last).audio == b"\x01\x02\x03\x04"
    assert framer.flush() == [], "nothing left, not even the stray byte"
