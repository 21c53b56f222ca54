"""Pronunciation lexicons: a word as written → what to say instead (an alias) or how to say
it (phonemes).

A :class:`Lexicon` is what a request applies: the entries of the lexicons it names (or the
tenant's default), resolved by the front at submission, so every worker reads the text
alike and a job keeps the lexicons as they were when it was submitted.
:meth:`Lexicon.find` lists where its entries occur in a text; the text pipeline
(:func:`voicelane.core.speech_text.prepare_text`) rewrites them, mapped back to the input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["Lexicon", "LexiconEntry", "LexiconHit"]


@dataclass(frozen=True, slots=True)
class LexiconEntry:
    graphemes: tuple[str, ...]
    """The spellings it applies to (whole words, case-sensitive as in W3C PLS)."""
    alias: str | None = None
    """Text to say instead."""
    phoneme: str | None = None
    """How to say it, in ``alphabet``."""
    alphabet: str = "ipa"
    """``ipa`` or ``x-sampa``."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"graphemes": list(self.graphemes)}
        if self.alias is not None:
            out["alias"] = self.alias
        if self.phoneme is not None:
            out["phoneme"] = self.phoneme
            out["alphabet"] = self.alphabet
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LexiconEntry:
        return cls(
            graphemes=tuple(data["graphemes"]),
            alias=data.get("alias"),
            phoneme=data.get("phoneme"),
            alphabet=data.get("alphabet", "ipa"),
        )


@dataclass(frozen=True, slots=True)
class LexiconHit:
    """``text[start:end]`` is one of ``entry``'s graphemes."""

    start: int
    end: int
    entry: LexiconEntry


@dataclass(frozen=True, slots=True)
class Lexicon:
    entries: tuple[LexiconEntry, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.entries)

    def to_json(self) -> str:
        return json.dumps(
            [e.to_json() for e in self.entries], ensure_ascii=False, separators=(",", ":")
        )

    @classmethod
    def from_json(cls, raw: str) -> Lexicon:
        return cls(tuple(LexiconEntry.from_json(e) for e in json.loads(raw)) if raw else ())

    def find(self, text: str) -> list[LexiconHit]:
        """Where the entries' graphemes occur in ``text`` as whole words, left to right,
        never overlapping (the longest grapheme wins where several start at one place; a
        later entry for the same grapheme replaces an earlier one, as in PLS)."""
        raise NotImplementedError("lexicon matching lands with issue 20 item 5")


def read_lexicon(document: str, *, source: str = "lexicon") -> Lexicon:
    """A lexicon file: W3C PLS (XML) or the JSON form."""
    raise NotImplementedError(source)
