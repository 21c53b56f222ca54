"""Speech engines behind one interface; chosen per worker by name.

Engines are imported lazily: ``import workers`` never imports an ML framework.
"""

from __future__ import annotations

from voicelane.common.errors import ConfigError, InvalidInputError
from voicelane.core.engines import ENGINE_NAMES
from voicelane.core.settings import ChatTTSSettings, PiperSettings

from .base import Engine, PcmF32, TimedAudio, Utterance, VoiceInfo, WordEvent

CPU_ONLY_ENGINES = frozenset({"espeak"})


def create_engine(
    name: str,
    *,
    device: str = "cpu",
    chattts: ChatTTSSettings | None = None,
    piper: PiperSettings | None = None,
) -> Engine:
    """Build the engine called ``name`` (not yet loaded: the owning thread calls ``load``).

    ``device`` is the process's (``VOICELANE_DEVICE``, a worker's ``--device``: ``cpu`` or
    ``cuda:N``); ``chattts`` and ``piper`` the process's settings of those engines
    (``settings.chattts``, ``settings.piper``; None: the defaults). A device the engine cannot
    use is a
    :class:`~voicelane.common.errors.ConfigError` now, not a surprise at the first batch.
    """
    if name in CPU_ONLY_ENGINES and device != "cpu":
        raise ConfigError(
            f"the {name} engine runs on the CPU; device {device} needs a GPU engine "
            "(VOICELANE_ENGINE=chattts), or use --device cpu"
        )
    if name == "espeak":
        from .espeak import EspeakEngine

        return EspeakEngine()
    if name == "chattts":  # the `chattts` extra: torch is imported here, never before
        from .chattts_config import require_chattts_extra

        require_chattts_extra()
        from .chattts import ChatTTSEngine

        engine = ChatTTSEngine(chattts or ChatTTSSettings(), device=device)
        engine.check_device()
        return engine
    if name == "piper":  # the `piper` extra: onnxruntime is imported here, never before
        from .piper import PiperEngine, require_piper_extra

        require_piper_extra()
        return PiperEngine(piper or PiperSettings(), device=device)
    raise InvalidInputError(f"unknown engine {name!r} (available: {', '.join(ENGINE_NAMES)})")


__all__ = [
    "ENGINE_NAMES",
    "Engine",
    "PcmF32",
    "TimedAudio",
    "Utterance",
    "VoiceInfo",
    "WordEvent",
    "create_engine",
]
