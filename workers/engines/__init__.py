"""Speech engines behind one interface; chosen per worker by name.

Engines are imported lazily: ``import workers`` never imports an ML framework.
"""

from __future__ import annotations

from core.errors import InvalidInputError

from .base import Engine, PcmF32, Utterance, VoiceInfo

ENGINE_NAMES = ("espeak", "chattts")


def create_engine(name: str) -> Engine:
    """Build the engine called ``name`` (not yet loaded: the owning thread calls ``load``)."""
    if name == "espeak":
        from .espeak import EspeakEngine

        return EspeakEngine()
    if name == "chattts":  # the `chattts` extra: torch is imported here, never before
        from .chattts_config import require_chattts_extra

        require_chattts_extra()
        from .chattts import ChatTTSEngine

        return ChatTTSEngine.from_settings()
    raise InvalidInputError(f"unknown engine {name!r} (available: {', '.join(ENGINE_NAMES)})")


__all__ = ["ENGINE_NAMES", "Engine", "PcmF32", "Utterance", "VoiceInfo", "create_engine"]
