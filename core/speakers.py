"""Voices an engine does not list: a tenant's own voice or a mix, as the workers receive it.

A request names a voice; the front resolves it at submission (a tenant's voice, a mix such as
``alice(2)+bob(1)``) into a :class:`SpeakerDef` that travels with the job or the stream, so
what a worker renders never depends on the tenant's voice list changing afterwards. An engine
that can make such voices (ChatTTS: speaker embeddings and zero-shot from a reference clip)
reads it from :attr:`voicelane.workers.engines.base.Utterance.speaker`.

Import-light: no numpy, no engine.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

from voicelane.common.errors import InvalidInputError

VOICE_KINDS = ("seed", "embedding", "clip", "mix")
"""What a tenant's voice can be made from (an engine publishes the kinds it supports)."""
EMBEDDING_PREFIX = "emb:"
"""A part's source that is a speaker embedding given inline (ChatTTS's ``spk_emb`` string)."""


@dataclass(frozen=True, slots=True)
class SpeakerPart:
    """One part of a mix: a speaker and its weight."""

    source: str
    """``seed:N``, one of the engine's own voice ids, or ``emb:<spk_emb string>``."""
    weight: float
    """Normalized: the parts of a :class:`SpeakerDef` sum to 1."""


@dataclass(frozen=True, slots=True)
class SpeakerDef:
    """A speaker made of weighted parts (mixed embeddings), or one reference clip
    (zero-shot). Exactly one of ``parts`` and ``clip_ref`` is set."""

    parts: tuple[SpeakerPart, ...] = ()
    clip_ref: str = ""
    """``{tenant}/{sha256}``: the reference clip in the voice store (fetched by the worker)."""
    clip_transcript: str = ""
    """What is said in the clip (zero-shot needs it)."""

    def __post_init__(self) -> None:
        if bool(self.parts) == bool(self.clip_ref):
            raise InvalidInputError("a speaker is either weighted parts or a reference clip")
        if self.clip_ref and not self.clip_transcript.strip():
            raise InvalidInputError("a reference clip needs its transcript", field="transcript")
        for part in self.parts:
            if not (math.isfinite(part.weight) and part.weight > 0):
                raise InvalidInputError("a mix's weights must be positive", field="voice")

    @classmethod
    def mix(cls, parts: list[tuple[str, float]]) -> SpeakerDef:
        """Weighted parts, normalized to sum to 1 (same source twice: weights added)."""
        merged: dict[str, float] = {}
        for source, weight in parts:
            if not (math.isfinite(weight) and weight > 0):
                raise InvalidInputError("a mix's weights must be positive", field="voice")
            merged[source] = merged.get(source, 0.0) + weight
        total = sum(merged.values())
        return cls(parts=tuple(SpeakerPart(s, round(w / total, 6)) for s, w in merged.items()))

    def to_json(self) -> str:
        """Canonical JSON (stable: the digest and the batch key depend on it)."""
        if self.clip_ref:
            data: dict[str, object] = {"clip": self.clip_ref, "transcript": self.clip_transcript}
        else:
            data = {"parts": [[p.source, p.weight] for p in self.parts]}
        return json.dumps(data, separators=(",", ":"), sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str | bytes) -> SpeakerDef:
        """Raises ValueError on anything malformed."""
        try:
            data = json.loads(raw)
            if "clip" in data:
                return cls(clip_ref=str(data["clip"]), clip_transcript=str(data["transcript"]))
            return cls(parts=tuple(SpeakerPart(str(s), float(w)) for s, w in data["parts"]))
        except (KeyError, TypeError, InvalidInputError) as error:
            raise ValueError(f"malformed speaker: {error}") from None

    @property
    def digest(self) -> str:
        """16 hex digits naming this speaker (logs, caches, the voice id workers see)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]
