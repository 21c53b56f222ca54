"""A request's voice as every front resolves it at submission: a tenant's voice or a mix.

A request's ``voice`` may name one of the tenant's own voices (``alice``) or a mix
(``alice(2)+seed:7``, :mod:`voicelane.core.voices`). :class:`VoiceResolver` turns it into the
:class:`~voicelane.core.voices.ResolvedVoice` (its engine and the
:class:`~voicelane.core.speakers.SpeakerDef` that travels with the job or stream), or None for
an engine's own voice id (``auto``, ``seed:42``, ``en-us``: the request goes on as it is).
Anything that cannot be a tenant voice nor a mix is answered without Redis; the rest is read
from the ledger off the event loop and kept for ``ttl_s`` (one second): a voice created or
deleted reaches new requests within that time.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio.to_thread

from voicelane.core.ledger.voices import Voices
from voicelane.core.voices import ResolvedVoice, is_mix, is_voice_name

__all__ = ["VoiceLookup", "VoiceResolver"]

VoiceLookup = Callable[[str, str, str | None], ResolvedVoice | None]
"""``(tenant, voice, engine or None) → what it resolves to`` — the ledger's
``voices.resolve``; raises InvalidInputError (field ``voice``) for a malformed mix."""

_Key = tuple[str, str, str | None]
DEFAULT_TTL_S = 1.0
_MAX_CACHED = 1024


class VoiceResolver:
    def __init__(self, lookup: VoiceLookup | None, *, ttl_s: float = DEFAULT_TTL_S) -> None:
        self._lookup = lookup
        self._ttl_s = ttl_s
        self._cache: dict[_Key, tuple[float, ResolvedVoice | None]] = {}

    async def resolve(
        self, tenant: str, voice: str | None, *, engine: str | None = None
    ) -> ResolvedVoice | None:
        """What ``voice`` stands for (see the module docstring); None for an engine's own
        voice (or none given), and for any voice when this front has no voice store."""
        if not voice or self._lookup is None or not (is_mix(voice) or is_voice_name(voice)):
            return None
        key = (tenant, voice, engine)
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        lookup = self._lookup
        resolved = await anyio.to_thread.run_sync(lambda: lookup(tenant, voice, engine))
        if len(self._cache) >= _MAX_CACHED:
            self._cache.clear()
        self._cache[key] = (now + self._ttl_s, resolved)
        return resolved

    @classmethod
    def over(cls, voices: Voices, *, ttl_s: float = DEFAULT_TTL_S) -> VoiceResolver:
        """Over the ledger's voices (:meth:`voicelane.core.ledger.voices.Voices.resolve`)."""

        def lookup(tenant: str, voice: str, engine: str | None) -> ResolvedVoice | None:
            return voices.resolve(tenant, voice, engine=engine)

        return cls(lookup, ttl_s=ttl_s)
