"""What the workers' engines accept, as the fronts see it, and which engine a voice names.

Workers publish their engine's :class:`~voicelane.core.rules.EngineCapabilities` (voices, speed
range) in Redis (:meth:`voicelane.core.lane.worker.RealtimeWorkerClient.publish_capabilities`);
the fronts read them here, cached for ``ttl_s``, and check every request against them
(:mod:`voicelane.core.rules`). Before any worker of the ``espeak`` engine ran, its capabilities are
computed locally (espeak ships with the package and loads in milliseconds); for any other
engine a front cannot know them until a worker published them, and answers UNAVAILABLE.

A deployment serves one or more engines (``VOICELANE_ENGINES``, in order of preference);
:class:`EngineCatalog` resolves a request's voice to one of them (:meth:`EngineCatalog.resolve`):

* ``engine:voice`` (``piper:en_US-joe-medium``, ``chattts:seed:42``): that engine, which must be
  served here;
* ``auto`` (or none): the first served engine with a voice for the text's language (Chinese
  characters: Mandarin; otherwise English), else the first served engine;
* a bare id: the first served engine that has that voice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from voicelane.common.errors import UnavailableError, UnknownVoiceError
from voicelane.core.engines import split_voice
from voicelane.core.lane.front import RealtimeClient
from voicelane.core.rules import DEFAULT_VOICE, EngineCapabilities, check_voice, has_voice, shown
from voicelane.core.speakers import SpeakerDef
from voicelane.core.text import contains_cjk

ESPEAK = "espeak"
DEFAULT_TTL_S = 10.0


class EngineRegistry:
    """The capabilities of one engine, read from Redis and cached for ``ttl_s``."""

    def __init__(self, lane: RealtimeClient, engine: str, *, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.lane = lane
        self.engine = engine
        self.ttl_s = ttl_s
        self._cached: tuple[float, EngineCapabilities] | None = None
        self._local: EngineCapabilities | None = None
        self._lock = asyncio.Lock()

    async def capabilities(self) -> EngineCapabilities:
        """The engine's capabilities; :class:`UnavailableError` if nobody can tell yet."""
        cached = self._cached
        if cached is not None and time.monotonic() - cached[0] < self.ttl_s:
            return cached[1]
        async with self._lock:
            cached = self._cached
            if cached is not None and time.monotonic() - cached[0] < self.ttl_s:
                return cached[1]
            capabilities = await self._load()
            self._cached = (time.monotonic(), capabilities)
            return capabilities

    async def _load(self) -> EngineCapabilities:
        try:
            published = await self.lane.capabilities(self.engine)
        except ValueError:
            raise UnavailableError(
                f"the published capabilities of the {self.engine} engine are unreadable"
            ) from None
        if published is not None:
            return published
        if self.engine == ESPEAK:
            if self._local is None:
                self._local = await asyncio.to_thread(_espeak_capabilities)
            return self._local
        raise UnavailableError(f"no {self.engine} worker has published its voices yet")


CJK_LANGUAGES = ("cmn", "zh", "yue")
"""Voice languages that read Chinese characters (``auto`` for a text that holds some)."""


@dataclass(frozen=True, slots=True)
class ResolvedVoice:
    """A request's voice, resolved: the engine that renders it and the engine's own id."""

    caps: EngineCapabilities
    voice: str
    """The engine's voice id (``en-us``, ``seed:42``), or ``custom:<digest>`` with
    :attr:`speaker`."""
    speaker: SpeakerDef | None = None
    requested: str = ""
    """The voice as the client named it ("" when it named none)."""

    @property
    def engine(self) -> str:
        return self.caps.engine


def speaks_language(caps: EngineCapabilities, *, cjk: bool) -> bool:
    """Whether one of the engine's voices reads Chinese characters (``cjk``), or English."""
    for info in caps.voices:
        for language in info.languages:
            code = language.lower().replace("_", "-")
            if cjk and code.split("-")[0] in CJK_LANGUAGES:
                return True
            if not cjk and code.split("-")[0] == "en":
                return True
    return False


class EngineCatalog:
    """The engines this deployment serves, each one's capabilities, and voice resolution."""

    def __init__(
        self, lane: RealtimeClient, engines: Sequence[str], *, ttl_s: float = DEFAULT_TTL_S
    ) -> None:
        if not engines:
            raise ValueError("a catalog needs at least one engine")
        self.lane = lane
        self.engines = tuple(engines)
        self._registries = {name: EngineRegistry(lane, name, ttl_s=ttl_s) for name in engines}

    @property
    def default_engine(self) -> str:
        return self.engines[0]

    async def capabilities(self, engine: str | None = None) -> EngineCapabilities:
        """``engine``'s capabilities (None: the default engine's); UnavailableError when no
        worker of it published them yet, UnknownVoiceError when it is not served here."""
        return await self._registries[self.served(engine or self.default_engine)].capabilities()

    def served(self, engine: str, *, voice: str | None = None) -> str:
        """``engine``, if served here; else UnknownVoiceError naming the engines served."""
        if engine not in self._registries:
            what = f"voice {shown(voice)}: the" if voice else "the"
            raise UnknownVoiceError(
                f"{what} {engine} engine is not served here (engines: {', '.join(self.engines)})",
                field="voice",
            )
        return engine

    async def published(self) -> list[EngineCapabilities]:
        """The capabilities of every served engine that can tell them now, in order."""
        found = []
        for name in self.engines:
            try:
                found.append(await self.capabilities(name))
            except UnavailableError:
                continue
        return found

    async def resolve(self, voice: str | None, *, text: str = "") -> ResolvedVoice:
        """The engine and the engine's voice id for a request's ``voice`` (module docstring);
        UnknownVoiceError when no served engine has it, UnavailableError when its engine's
        workers have not published their voices yet."""
        requested = voice or ""
        voice = voice or DEFAULT_VOICE
        engine, local = split_voice(voice)
        if engine is not None:
            caps = await self.capabilities(self.served(engine, voice=voice))
            return ResolvedVoice(caps, check_voice(local, caps), requested=requested)
        if voice == DEFAULT_VOICE:
            return ResolvedVoice(await self._auto_engine(text), DEFAULT_VOICE, requested=requested)
        for caps in await self.published():
            if has_voice(voice, caps):
                return ResolvedVoice(caps, voice, requested=requested)
        raise UnknownVoiceError(
            f"voice {shown(voice)} is unknown to every engine served here "
            f"({', '.join(self.engines)}); GET /v1/voices, ListVoices or `voicelane voices` "
            "lists the voices",
            field="voice",
        )

    async def _auto_engine(self, text: str) -> EngineCapabilities:
        if len(self.engines) == 1:
            return await self.capabilities()
        cjk = contains_cjk(text)
        published = await self.published()
        for caps in published:
            if speaks_language(caps, cjk=cjk):
                return caps
        return await self.capabilities()


def _espeak_capabilities() -> EngineCapabilities:
    from voicelane.workers.engines import create_engine

    return create_engine(ESPEAK).capabilities()
