"""What OpenAI's clients list: ``GET /v1/models`` and ``GET /v1/audio/voices``.

Both take the API key like every route (``Authorization: Bearer KEY``, what the ``openai`` SDK
sends) and answer errors in OpenAI's flavour (:mod:`voicelane.api.openai_compat`).

``GET /v1/models``
    OpenAI's list: ``{"object": "list", "data": [{"id", "object": "model", "created",
    "owned_by"}]}`` — OpenAI's speech models (``tts-1``, ``tts-1-hd``, ``gpt-4o-mini-tts``; any
    of them is accepted by ``/v1/audio/speech``) and the engines served (``espeak``,
    ``piper``, ``chattts``), all owned by ``voicelane``.

``GET /v1/audio/voices``
    ``{"object": "list", "data": [...]}``, each ``{"id", "object": "audio.voice", "name",
    "engine", "languages", "maps_to"}``: first OpenAI's names (``engine`` the engine of the
    voice it maps to, or null for ``auto``; ``maps_to`` that voicelane voice), then every
    voice of the engines that published theirs, ids qualified by their engine
    (``piper:en_US-joe-medium``; ``maps_to`` null). A tenant's own voices: ``GET /v1/voices``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from voicelane.api.deps import State, Tenant
from voicelane.api.openai_compat import OpenAIRoute
from voicelane.api.openai_voices import OPENAI_VOICE_NAMES, voice_map
from voicelane.core.engines import qualified, split_voice
from voicelane.core.rules import EngineCapabilities

router = APIRouter(tags=["openai"], route_class=OpenAIRoute)

OPENAI_SPEECH_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
OWNER = "voicelane"
CREATED = 1735689600
"""The models' ``created`` (2025-01-01 UTC): a fixed date, so the list does not change."""


def model_list(engines: tuple[str, ...]) -> dict[str, Any]:
    """OpenAI's model list: its speech models, then the engines served."""
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": CREATED, "owned_by": OWNER}
            for name in (*OPENAI_SPEECH_MODELS, *engines)
        ],
    }


def voice_list(mapping: dict[str, str], published: list[EngineCapabilities]) -> dict[str, Any]:
    """OpenAI's names with the voices they map to, then the engines' voices (module
    docstring)."""
    languages = {
        qualified(caps.engine, info.id): list(info.languages)
        for caps in published
        for info in caps.voices
    }
    data: list[dict[str, Any]] = []
    for name in (*OPENAI_VOICE_NAMES, *sorted(set(mapping) - set(OPENAI_VOICE_NAMES))):
        target = mapping.get(name, "auto")
        engine, _ = split_voice(target)
        data.append(
            {
                "id": name,
                "object": "audio.voice",
                "name": name,
                "engine": engine,
                "languages": languages.get(target, []),
                "maps_to": target,
            }
        )
    for caps in published:
        for info in caps.voices:
            voice = qualified(caps.engine, info.id)
            data.append(
                {
                    "id": voice,
                    "object": "audio.voice",
                    "name": info.name or info.id,
                    "engine": caps.engine,
                    "languages": list(info.languages),
                    "maps_to": None,
                }
            )
    return {"object": "list", "data": data}


@router.get("/v1/models", summary="OpenAI's model list: its speech models and the engines")
async def list_models(state: State, _tenant: Tenant) -> dict[str, Any]:
    return model_list(state.engines.engines)


@router.get("/v1/audio/voices", summary="OpenAI's voice names, what each maps to, every voice")
async def list_voices(state: State, _tenant: Tenant) -> dict[str, Any]:
    published = await state.engines.published()
    return voice_list(voice_map(state.settings.openai_voices, published), published)
