"""The engines a deployment can run, and how a voice id names one. Import-light.

A stack may serve several engines at once (ChatTTS on its GPUs, Piper and espeak on CPU
workers): each has its own render queue (batch lane), its own request stream and capacity
(real-time lane) and its own published capabilities. A voice id names its engine with a
prefix — ``piper:en_US-joe-medium``, ``espeak:en-us``, ``chattts:seed:42`` — or leaves it
out: ``auto`` and a bare id are resolved by the fronts (:mod:`voicelane.api.engines`).
"""

from __future__ import annotations

import importlib.util

from voicelane.common.errors import ConfigError

ENGINE_NAMES = ("espeak", "piper", "chattts")
"""Every engine voicelane knows, in no particular order."""
CPU_ENGINES = frozenset({"espeak", "piper"})
"""Engines that run on the CPU by default: for them a core is the device."""
ENGINE_SEPARATOR = ":"
RENDER_QUEUE_PREFIX = "render."
DEFAULT_STACK_ENGINES = ("piper", "espeak")
"""What ``voicelane up`` serves when no engine is configured, those installed: Piper first,
so ``auto`` speaks English with its neural voice (intelligible where espeak is barely:
docs/benchmarks.md, "issue 21: engines"), espeak for everything else (Mandarin...)."""
_EXTRA_MODULES = {"piper": "piper", "chattts": "ChatTTS"}


def engine_installed(name: str) -> bool:
    """Whether ``name``'s extra is installed (its module can be found; nothing is imported)."""
    module = _EXTRA_MODULES.get(name)
    return module is None or importlib.util.find_spec(module) is not None


def split_voice(voice: str) -> tuple[str | None, str]:
    """``piper:en_US-joe-medium`` → (``piper``, ``en_US-joe-medium``); a voice that names
    no known engine → (None, voice) — ``seed:42`` is ChatTTS's voice id, not an engine's
    name. ``espeak:`` alone → (``espeak``, ``auto``)."""
    engine, separator, rest = voice.partition(ENGINE_SEPARATOR)
    if separator and engine in ENGINE_NAMES:
        return engine, rest or "auto"
    return None, voice


def qualified(engine: str, voice: str) -> str:
    """The voice id with its engine: what ``GET /v1/voices`` lists."""
    return f"{engine}{ENGINE_SEPARATOR}{voice}"


def render_queue(engine: str) -> str:
    """The Celery queue of the chunks of ``engine``'s jobs (``render.piper``)."""
    return RENDER_QUEUE_PREFIX + engine


def parse_engines(value: str, *, field: str = "engines") -> tuple[str, ...]:
    """``"piper,espeak"`` → (``piper``, ``espeak``): known, no duplicates, at least one."""
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in ENGINE_NAMES]
    if unknown or not names or len(set(names)) != len(names):
        raise ConfigError(
            f"{field} {value!r} must list engines once each, from: {', '.join(ENGINE_NAMES)}"
        )
    return names
