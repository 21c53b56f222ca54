"""The voices a front may accept: what the workers registered, or espeak's own list.

GPU workers register their engine's voice ids in Redis under ``vl:voices:{engine}`` (a JSON
list, see ``workers/runtime.py``). Before any worker of the ``espeak`` engine ran, the list
is computed locally (espeak ships with the package and loads in milliseconds); for any other
engine a front cannot know the voices until a worker registered them.

Registry entries hold ids only; for ``espeak`` the local catalogue supplies names and
languages, for other engines they stay empty.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import redis.asyncio as aredis

from core.errors import UnavailableError
from core.lane import VOICES_KEY

ESPEAK = "espeak"
DEFAULT_TTL_S = 10.0


@dataclass(frozen=True, slots=True)
class VoiceEntry:
    id: str
    name: str = ""
    languages: tuple[str, ...] = ()


class VoiceRegistry:
    """The voices of one engine, read from Redis and cached for ``ttl_s``."""

    def __init__(self, client: aredis.Redis, engine: str, *, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.redis = client
        self.engine = engine
        self.ttl_s = ttl_s
        self._cached: tuple[float, tuple[VoiceEntry, ...]] | None = None
        self._local: dict[str, VoiceEntry] | None = None
        self._lock = asyncio.Lock()

    async def voices(self) -> tuple[VoiceEntry, ...]:
        """The engine's voices; :class:`UnavailableError` if nobody can tell yet."""
        cached = self._cached
        if cached is not None and time.monotonic() - cached[0] < self.ttl_s:
            return cached[1]
        async with self._lock:
            cached = self._cached
            if cached is not None and time.monotonic() - cached[0] < self.ttl_s:
                return cached[1]
            voices = await self._load()
            self._cached = (time.monotonic(), voices)
            return voices

    async def voice_ids(self) -> frozenset[str]:
        return frozenset(v.id for v in await self.voices())

    async def _load(self) -> tuple[VoiceEntry, ...]:
        raw = cast(bytes | None, await self.redis.get(VOICES_KEY.format(engine=self.engine)))
        if raw is not None:
            ids = _parse_ids(raw)
            local = await self._local_catalogue() if self.engine == ESPEAK else {}
            return tuple(local.get(i, VoiceEntry(i)) for i in ids)
        if self.engine == ESPEAK:
            return tuple((await self._local_catalogue()).values())
        raise UnavailableError(f"no {self.engine} worker has registered its voices yet")

    async def _local_catalogue(self) -> dict[str, VoiceEntry]:
        if self._local is None:
            self._local = await asyncio.to_thread(_espeak_catalogue)
        return self._local


def _parse_ids(raw: bytes) -> list[str]:
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UnavailableError("the registered voice list is unreadable")
    return list(cast(Sequence[str], value))


def _espeak_catalogue() -> dict[str, VoiceEntry]:
    from workers.engines import create_engine

    return {
        v.id: VoiceEntry(v.id, v.name, tuple(v.languages)) for v in create_engine(ESPEAK).voices()
    }
