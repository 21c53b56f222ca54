"""voicelane.api.openai_voices: OpenAI's names → real voices, by setting and per-engine default."""

from __future__ import annotations

from voicelane.api.openai_voices import (
    ESPEAK_ENGLISH,
    OPENAI_VOICE_NAMES,
    SEED_VOICES,
    default_voices,
    english_voices,
    is_mapped_name,
    mapped_voice,
    voice_map,
)
from voicelane.core.rules import EngineCapabilities, VoiceInfo


def caps(
    engine: str, *voices: tuple[str, tuple[str, ...]], seeds: bool = False
) -> EngineCapabilities:
    return EngineCapabilities(
        engine=engine,
        voices=tuple(
            VoiceInfo(id=v, languages=langs) for v, langs in (("auto", ("en-us",)), *voices)
        ),
        min_speed=0.5,
        max_speed=2.0,
        sample_rate_hz=22050,
        seed_voices=seeds,
    )


ESPEAK = caps("espeak", *((v, (v,)) for v in (*ESPEAK_ENGLISH, "en-shaw", "de", "cmn")))
PIPER = caps("piper", ("en_US-joe-medium", ("en-us",)), ("de_DE-thorsten-medium", ("de-de",)))
CHATTTS = caps("chattts", ("seed:0", ("zh", "en")), seeds=True)


def test_the_sdk_lists_thirteen_names_marin_and_cedar_among_them() -> None:
    assert len(OPENAI_VOICE_NAMES) == 13 and {"marin", "cedar"} <= set(OPENAI_VOICE_NAMES)


def test_espeak_alone_gives_twelve_names_its_eight_english_voices_in_turn() -> None:
    mapping = default_voices([ESPEAK])
    assert mapping["alloy"] == "auto"
    others = [mapping[name] for name in OPENAI_VOICE_NAMES[1:]]
    assert others[:8] == [f"espeak:{v}" for v in ESPEAK_ENGLISH]  # each voice before repeats
    assert others[8:] == [f"espeak:{v}" for v in ESPEAK_ENGLISH[:4]]
    assert "espeak:en-shaw" not in others  # Shavian script: not for reading Latin text


def test_piper_first_then_espeak_so_that_every_name_is_not_the_same_voice() -> None:
    mapping = default_voices([PIPER, ESPEAK])
    assert mapping["ash"] == "piper:en_US-joe-medium"  # English voices only
    assert mapping["ballad"] == "espeak:en-us"
    assert len(set(mapping.values())) == 1 + 1 + len(ESPEAK_ENGLISH)


def test_a_seed_voice_engine_gives_each_name_its_own_seed() -> None:
    mapping = default_voices([CHATTTS, ESPEAK])
    assert english_voices(CHATTTS) == [f"seed:{n}" for n in range(SEED_VOICES)]
    assert [mapping[name] for name in OPENAI_VOICE_NAMES[1:]] == [
        f"chattts:seed:{n}" for n in range(12)
    ]  # twelve seeds: espeak is not needed


def test_no_engine_published_yet_means_auto() -> None:
    assert set(default_voices([]).values()) == {"auto"}


def test_the_setting_wins_and_may_add_aliases() -> None:
    mapping = voice_map({"Ash": "espeak:en-gb", "narrator": "piper:en_US-joe-medium"}, [ESPEAK])
    assert mapped_voice("ash", mapping) == "espeak:en-gb"
    assert mapped_voice("ASH", mapping) == "espeak:en-gb"
    assert mapped_voice("narrator", mapping) == "piper:en_US-joe-medium"
    assert mapped_voice("marin", mapping) == "espeak:en-us-nyc"  # default kept


def test_other_voices_pass_as_they_are_and_unmapped_names_are_auto() -> None:
    assert mapped_voice("piper:en_US-joe-medium", {}) == "piper:en_US-joe-medium"
    assert mapped_voice("Emma", {}) == "Emma"  # a tenant's voice keeps its case
    assert mapped_voice("cedar", {}) == "auto"
    assert mapped_voice(None, {}) == "auto" and mapped_voice("", {}) == "auto"


def test_only_openais_names_and_the_settings_are_mapped_names() -> None:
    assert is_mapped_name("Marin", {}) and is_mapped_name("narrator", {"narrator": "seed:1"})
    assert not is_mapped_name("espeak:en-us", {}) and not is_mapped_name(None, {})
