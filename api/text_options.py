"""How a request's text is read, as every front resolves it at submission.

A request says whether its text is normalized (``normalize``, default true), whether it is
SSML (``ssml``: true, false, or unset — SSML when it starts with ``<speak``), and which of
its tenant's pronunciation lexicons apply (``lexicons``: names; unset — the tenant's default
lexicon, if it set one; an empty list — none). :class:`TextOptionsResolver` turns that into
:class:`~voicelane.core.speech_text.TextOptions` with the lexicons' entries as they are now,
so every worker reads the text alike and a job keeps them as they were when it was
submitted. The lexicons are read from the ledger off the event loop and kept for
``ttl_s`` (one second): a change to a lexicon reaches new requests within that time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import anyio.to_thread

from voicelane.common.errors import InvalidInputError
from voicelane.core.lexicon import Lexicon
from voicelane.core.speech_text import TextOptions

__all__ = ["LexiconLookup", "TextOptionsResolver"]

LexiconLookup = Callable[[str, Sequence[str] | None], tuple[Lexicon, tuple[str, ...]]]
"""``(tenant, names or None) → (the merged entries, the names applied)`` — the ledger's
``lexicons.resolve``; raises InvalidInputError (field ``lexicons``) for an unknown name."""

_Key = tuple[str, tuple[str, ...] | None]
DEFAULT_TTL_S = 1.0
_MAX_CACHED = 1024


class TextOptionsResolver:
    def __init__(self, lookup: LexiconLookup | None, *, ttl_s: float = DEFAULT_TTL_S) -> None:
        self._lookup = lookup
        self._ttl_s = ttl_s
        self._cache: dict[_Key, tuple[float, Lexicon, tuple[str, ...]]] = {}

    async def resolve(
        self,
        tenant: str,
        *,
        normalize: bool = True,
        ssml: bool | None = None,
        lexicons: Sequence[str] | None = None,
    ) -> TextOptions:
        lexicon, names = await self._lexicon(tenant, lexicons)
        return TextOptions(normalize=normalize, ssml=ssml, lexicon=lexicon, lexicon_names=names)

    async def _lexicon(
        self, tenant: str, names: Sequence[str] | None
    ) -> tuple[Lexicon, tuple[str, ...]]:
        if names is not None and not names:
            return Lexicon(), ()
        if self._lookup is None:
            if names:
                raise InvalidInputError(
                    f"unknown lexicon {names[0]!r} (this front has no lexicon store)",
                    field="lexicons",
                )
            return Lexicon(), ()
        key = (tenant, None if names is None else tuple(names))
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1], cached[2]
        lookup = self._lookup
        lexicon, applied = await anyio.to_thread.run_sync(lambda: lookup(tenant, key[1]))
        if len(self._cache) >= _MAX_CACHED:
            self._cache.clear()
        self._cache[key] = (now + self._ttl_s, lexicon, applied)
        return lexicon, applied
