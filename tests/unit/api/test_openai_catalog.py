"""voicelane.api.routes.openai_catalog: OpenAI's model list and the voice list."""

from __future__ import annotations

from voicelane.api.openai_voices import OPENAI_VOICE_NAMES, voice_map
from voicelane.api.routes.openai_catalog import model_list, voice_list
from voicelane.core.rules import EngineCapabilities, VoiceInfo

PIPER = EngineCapabilities(
    engine="piper",
    voices=(
        VoiceInfo("auto", "Automatic", ("en-us",)),
        VoiceInfo("en_US-joe-medium", "joe (medium, English)", ("en-us",)),
    ),
    min_speed=0.5,
    max_speed=2.0,
    sample_rate_hz=22050,
)


def test_models_are_openais_speech_models_and_the_engines_in_openais_shape() -> None:
    listed = model_list(("piper", "espeak"))
    assert listed["object"] == "list"
    ids = [model["id"] for model in listed["data"]]
    assert ids == ["tts-1", "tts-1-hd", "gpt-4o-mini-tts", "piper", "espeak"]
    for model in listed["data"]:
        assert set(model) == {"id", "object", "created", "owned_by"}
        assert model["object"] == "model" and isinstance(model["created"], int)


def test_voices_list_openais_names_with_their_voice_then_the_engines_voices() -> None:
    mapping = voice_map({"narrator": "piper:en_US-joe-medium"}, [PIPER])
    data = voice_list(mapping, [PIPER])["data"]
    names = [v["id"] for v in data[: len(OPENAI_VOICE_NAMES) + 1]]
    assert names == [*OPENAI_VOICE_NAMES, "narrator"]
    by_id = {v["id"]: v for v in data}
    assert by_id["alloy"]["maps_to"] == "auto" and by_id["alloy"]["engine"] is None
    assert by_id["ash"] == {
        "id": "ash", "object": "audio.voice", "name": "ash", "engine": "piper",
        "languages": ["en-us"], "maps_to": "piper:en_US-joe-medium",
    }  # fmt: skip
    joe = by_id["piper:en_US-joe-medium"]
    assert joe["name"] == "joe (medium, English)" and joe["maps_to"] is None
    assert "piper:auto" in by_id
