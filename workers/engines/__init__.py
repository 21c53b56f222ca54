"""Speech engines behind one interface; chosen per worker by name.

Engines are imported lazily: ``import workers`` never imports an ML framework.
"""

from __future__ import annotations

from core.errors import InvalidInputError

from .base import Engine, PcmF32, Utterance, VoiceInfo

ENGINE_NAMES = ("espeak",)


def create_engine(name: str) -> Engine:
    """Build the engine called ``name`` (not yet loaded: the owning thread calls ``load``)."""
    if name == "espeak":
        from .espeak import EspeakEngine

        return EspeakEngine()
    raise InvalidInputError(f"unknown engine {name!r} (available: {', '.join(ENGINE_NAMES)})")


__all__ = ["ENGINE_NAMES", "Engine", "PcmF32", "Utterance", "VoiceInfo", "create_engine"]
