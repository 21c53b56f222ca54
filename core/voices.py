"""A tenant's own voices: the record, its JSON, the mix grammar, and what a voice resolves to.

A tenant makes a voice of one engine (``POST /v1/voices``) from one of four things
(:data:`voicelane.core.speakers.VOICE_KINDS`): a **seed** (ChatTTS draws a speaker from it), an
**embedding** (ChatTTS's ``spk_emb`` string), a reference **clip** with its transcript
(zero-shot), or a **mix** of voices of that engine with weights. A request then names the
voice (``"voice": "alice"``) or a mix directly (``"voice": "alice(2)+bob(1)"``); the front
resolves it at submission into a :class:`~voicelane.core.speakers.SpeakerDef`
(:func:`resolve_voice`, :func:`to_speaker`).

**The mix grammar.** ``part ("+" part)*``, a part being ``voice`` or ``voice(weight)``:
``voice`` is a tenant voice's name or one of the engine's own voice ids — anything but
whitespace, ``(``, ``)`` and ``+``, so ids with colons parse (``seed:42(2)+alice``,
``chattts:seed:7``); ``weight`` a decimal number from :data:`MIN_WEIGHT` to
:data:`MAX_WEIGHT` (default 1). At most :data:`MAX_MIX_PARTS` parts, each voice once. The
JSON form is a list of ``{"voice": ..., "weight"?: ...}`` (:func:`mix_from_json`).

**Flattening.** A part that is a tenant voice stands for its speaker: a seed voice for
``seed:N``, an embedding voice for ``emb:<spk_emb>``, a mix voice for its own (already flat)
sources, each weight multiplied by the part's; a clip voice cannot be mixed (zero-shot speaks
from one clip). Any other part is one of the engine's voice ids, passed on as it is (less a
leading ``{engine}:``). A stored mix voice keeps its sources flattened at creation
(:attr:`TenantVoice.mix_sources`), so it never depends on the voices it was made of: deleting
``alice`` leaves a mix made with her as it was.

Import-light: no numpy, no Redis, no engine.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from voicelane.common.errors import InvalidInputError, UnknownVoiceError
from voicelane.core.rules import DEFAULT_VOICE, MAX_SEED, SEED_VOICE_PREFIX, shown
from voicelane.core.speakers import EMBEDDING_PREFIX, VOICE_KINDS, SpeakerDef
from voicelane.core.text_input import CONTROL_CHARS

__all__ = [
    "MAX_DESCRIPTION_CHARS",
    "MAX_MIX_CHARS",
    "MAX_MIX_PARTS",
    "MAX_MIX_SOURCES",
    "MAX_SPK_EMB_CHARS",
    "MAX_TRANSCRIPT_CHARS",
    "MAX_WEIGHT",
    "MIN_WEIGHT",
    "NAME_PATTERN",
    "RESERVED_NAMES",
    "MixPart",
    "ResolvedVoice",
    "TenantVoice",
    "VoiceClip",
    "VoiceLookup",
    "check_description",
    "check_seed",
    "check_spk_emb",
    "check_transcript",
    "check_voice_name",
    "clip_ref",
    "flatten_mix",
    "format_mix",
    "is_mix",
    "is_voice_name",
    "mix_from_json",
    "parse_clip_ref",
    "parse_mix",
    "resolve_voice",
    "to_speaker",
]

NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
"""A tenant voice's name: lowercase letters, digits, ``_`` and ``-``, at most 64, no colon (an
engine's voice ids may have one: ``seed:42``), so a name never looks like an engine's id."""
RESERVED_NAMES = frozenset({DEFAULT_VOICE, "custom"})
"""Names a voice cannot take: ``auto`` (every engine's default voice) and ``custom`` (the
path ``GET /v1/voices/custom``, the tenant's voices until the engines' listing shows them)."""
MAX_MIX_PARTS = 8
"""Parts of one mix (as written: a mix voice among them counts once)."""
MAX_MIX_SOURCES = 32
"""Distinct speakers a mix flattens to (mixes of mixes)."""
MAX_MIX_CHARS = 1024
"""Longest mix text."""
MIN_WEIGHT = 0.01
MAX_WEIGHT = 100.0
MAX_SPK_EMB_CHARS = 16_384
"""Longest ``spk_emb`` string (ChatTTS's are about a thousand characters)."""
MAX_TRANSCRIPT_CHARS = 1000
"""Longest transcript of a reference clip (30 s of speech is some 500 characters)."""
MAX_DESCRIPTION_CHARS = 256

_MIX_PART = re.compile(r"\s*([^\s()+]+)\s*(?:\(\s*([^()]*?)\s*\))?\s*")
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?|\.[0-9]+")
_SHA256 = re.compile(r"[0-9a-f]{64}")
# base16384 (the encoding of ChatTTS's spk_emb strings): 14 bits a character, U+4E00..U+8DFF,
# and one of U+3D01..U+3D06 at the end saying how many bytes the last characters hold.
_B14_CHARS = re.compile(r"[\u4e00-\u8dff]+[\u3d01-\u3d06]?")


# ---- the record -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MixPart:
    """One part of a mix as written: a voice (a tenant voice's name or an engine voice id) and
    its weight."""

    voice: str
    weight: float = 1.0

    def to_json(self) -> dict[str, Any]:
        return {"voice": self.voice, "weight": self.weight}


@dataclass(frozen=True, slots=True)
class VoiceClip:
    """A clip voice's reference clip as stored: the audio itself is kept apart, by its SHA-256
    (:mod:`voicelane.core.ledger.voices`)."""

    sha256: str
    """Of the stored audio (Ogg Opus, :mod:`voicelane.core.voice_clips`)."""
    transcript: str
    duration_s: float
    size_bytes: int
    """Of the stored audio."""

    def to_json(self) -> dict[str, Any]:
        return {
            "sha256": self.sha256,
            "transcript": self.transcript,
            "duration_s": self.duration_s,
            "size_bytes": self.size_bytes,
        }


@dataclass(frozen=True, slots=True)
class TenantVoice:
    """One tenant voice. Exactly the field of its kind is set: ``seed``, ``spk_emb``, ``clip``,
    or ``mix`` with ``mix_sources``."""

    name: str
    engine: str
    kind: str
    seed: int | None = None
    spk_emb: str = ""
    clip: VoiceClip | None = None
    mix: tuple[MixPart, ...] = ()
    """A mix's parts as written."""
    mix_sources: tuple[tuple[str, float], ...] = ()
    """A mix flattened at creation: ``(source, weight)`` with sources ``seed:N``,
    ``emb:<spk_emb>`` or the engine's voice ids, weights summing to 1."""
    description: str = ""
    created_at: float = 0.0
    """Unix seconds."""

    def __post_init__(self) -> None:
        if self.kind not in VOICE_KINDS:
            raise ValueError(f"unknown voice kind {self.kind!r}")
        present = {
            "seed": self.seed is not None,
            "embedding": bool(self.spk_emb),
            "clip": self.clip is not None,
            "mix": bool(self.mix) and bool(self.mix_sources),
        }
        if not present[self.kind] or any(v for k, v in present.items() if k != self.kind):
            raise ValueError(f"a {self.kind} voice holds its {self.kind} and nothing else")
        if self.kind != "mix" and (self.mix or self.mix_sources):
            raise ValueError("only a mix voice has mix parts")

    def _fields(self) -> dict[str, Any]:
        """What both the store and the REST view hold of it."""
        data: dict[str, Any] = {
            "name": self.name,
            "engine": self.engine,
            "kind": self.kind,
            "description": self.description,
            "created_at": self.created_at,
        }
        if self.seed is not None:
            data["seed"] = self.seed
        if self.spk_emb:
            data["spk_emb"] = self.spk_emb
        if self.clip is not None:
            data["clip"] = self.clip.to_json()
        if self.mix:
            data["mix"] = [part.to_json() for part in self.mix]
        return data

    def to_json(self) -> str:
        """What the store keeps (and :meth:`from_json` reads back)."""
        data = self._fields()
        if self.mix:
            data["mix_sources"] = [[source, weight] for source, weight in self.mix_sources]
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str | bytes) -> TenantVoice:
        """Raises ValueError (KeyError, TypeError included) on anything malformed."""
        data = json.loads(raw)
        clip = data.get("clip")
        return cls(
            name=str(data["name"]),
            engine=str(data["engine"]),
            kind=str(data["kind"]),
            seed=int(data["seed"]) if data.get("seed") is not None else None,
            spk_emb=str(data.get("spk_emb", "")),
            clip=(
                VoiceClip(
                    str(clip["sha256"]),
                    str(clip["transcript"]),
                    float(clip["duration_s"]),
                    int(clip["size_bytes"]),
                )
                if clip is not None
                else None
            ),
            mix=tuple(MixPart(str(p["voice"]), float(p["weight"])) for p in data.get("mix", ())),
            mix_sources=tuple((str(s), float(w)) for s, w in data.get("mix_sources", ())),
            description=str(data.get("description", "")),
            created_at=float(data.get("created_at", 0.0)),
        )

    def view(self) -> dict[str, Any]:
        """What the REST API shows of it (``GET /v1/voices/{name}``)."""
        view = self._fields()
        if self.mix:
            view["mix_text"] = format_mix(self.mix)
        return view


# ---- checks ---------------------------------------------------------------------------------


def is_voice_name(text: str) -> bool:
    """``text`` has the shape of a tenant voice's name (it may still name no voice)."""
    return NAME_PATTERN.fullmatch(text) is not None and text not in RESERVED_NAMES


def check_voice_name(name: str, *, field: str = "name") -> str:
    """``name`` if a voice may be called so (:data:`NAME_PATTERN`, not reserved), else
    InvalidInputError naming ``field``."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InvalidInputError(
            f"{field}: {shown(str(name))} is not a voice name (1 to 64 of a-z 0-9 _ -, "
            "starting with a letter or digit)",
            field=field,
        )
    if name in RESERVED_NAMES:
        raise InvalidInputError(f"{field}: {name!r} is reserved", field=field)
    return name


def check_seed(seed: object, *, field: str = "seed") -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise InvalidInputError(f"{field}: a seed is an integer from 0 to {MAX_SEED}", field=field)
    return seed


def check_spk_emb(spk_emb: object, *, field: str = "spk_emb") -> str:
    """A ChatTTS speaker embedding string: base16384 text (what
    ``Chat.sample_random_speaker()`` returns), at most :data:`MAX_SPK_EMB_CHARS` characters,
    that decodes to an embedding (its size is the model's: the worker checks it)."""
    if not isinstance(spk_emb, str) or not spk_emb.strip():
        raise InvalidInputError(f"{field}: an embedding is a non-empty string", field=field)
    text = spk_emb.strip()
    if len(text) > MAX_SPK_EMB_CHARS:
        raise InvalidInputError(
            f"{field}: {len(text):,} characters; at most {MAX_SPK_EMB_CHARS:,}", field=field
        )
    if not _B14_CHARS.fullmatch(text):
        raise InvalidInputError(
            f"{field}: not a ChatTTS speaker embedding (base16384 text, as "
            "Chat.sample_random_speaker() returns)",
            field=field,
        )
    from voicelane.core.speaker_embedding import decode_spk_emb  # numpy: only here

    try:
        decode_spk_emb(text)
    except InvalidInputError as error:
        detail = str(error).removeprefix("voice").lstrip(" :")
        raise InvalidInputError(f"{field}: {detail}", field=field) from None
    return text


def check_transcript(transcript: object, *, field: str = "transcript") -> str:
    """What is said in a reference clip: not blank, no control characters, at most
    :data:`MAX_TRANSCRIPT_CHARS` (whitespace runs become one space)."""
    if not isinstance(transcript, str) or not transcript.strip():
        raise InvalidInputError(
            f"{field}: a clip voice needs the transcript of its clip", field=field
        )
    return _short_text(transcript, MAX_TRANSCRIPT_CHARS, field)


def check_description(description: object, *, field: str = "description") -> str:
    if description is None:
        return ""
    if not isinstance(description, str):
        raise InvalidInputError(f"{field}: a description is a string", field=field)
    return _short_text(description, MAX_DESCRIPTION_CHARS, field)


def _short_text(text: str, max_chars: int, field: str) -> str:
    if CONTROL_CHARS.search(text):
        raise InvalidInputError(f"{field}: control characters are not allowed", field=field)
    text = " ".join(text.split())
    if len(text) > max_chars:
        raise InvalidInputError(
            f"{field}: {len(text):,} characters; at most {max_chars:,}", field=field
        )
    return text


def clip_ref(tenant: str, sha256: str) -> str:
    """``{tenant}/{sha256}``: how a :class:`SpeakerDef` names a stored reference clip."""
    return f"{tenant}/{sha256}"


def parse_clip_ref(ref: str) -> tuple[str, str]:
    """``(tenant, sha256)`` of a clip reference; ValueError when it is not one."""
    tenant, _, sha256 = ref.rpartition("/")
    if not tenant or ":" in tenant or not _SHA256.fullmatch(sha256):
        raise ValueError(f"not a clip reference: {ref[:80]!r}")
    return tenant, sha256


# ---- the mix grammar ------------------------------------------------------------------------


def is_mix(voice: str) -> bool:
    """``voice`` is written as a mix (``a+b``, ``a(2)``), not as one voice's name or id."""
    return "+" in voice or "(" in voice or ")" in voice


def parse_mix(text: str, *, field: str = "voice") -> tuple[MixPart, ...]:
    """``"alice(2)+bob(1)"`` → its parts (the grammar in the module docstring);
    InvalidInputError naming ``field`` for anything malformed."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError(f"{field}: a mix names at least one voice", field=field)
    if len(text) > MAX_MIX_CHARS:
        raise InvalidInputError(
            f"{field}: a mix of {len(text):,} characters; at most {MAX_MIX_CHARS:,}", field=field
        )
    pieces = text.split("+")
    _check_part_count(len(pieces), field)
    parts: list[MixPart] = []
    for number, piece in enumerate(pieces, 1):
        if not piece.strip():
            raise InvalidInputError(f"{field}: part {number} of the mix is empty", field=field)
        match = _MIX_PART.fullmatch(piece)
        if match is None:
            raise InvalidInputError(
                f"{field}: part {number} {shown(piece.strip())} is not voice or voice(weight)",
                field=field,
            )
        voice, weight_text = match.groups()
        weight = 1.0 if weight_text is None else _weight_text(weight_text, voice, field)
        parts.append(MixPart(voice, weight))
    return _distinct(parts, field)


def mix_from_json(data: object, *, field: str = "mix") -> tuple[MixPart, ...]:
    """The JSON form ``[{"voice": "alice", "weight": 2}, {"voice": "bob"}]`` (or the text form
    as a string) → its parts; InvalidInputError naming ``field``."""
    if isinstance(data, str):
        return parse_mix(data, field=field)
    if not isinstance(data, list) or not data:
        raise InvalidInputError(
            f"{field}: a mix is a list of {{voice, weight}} or a text such as 'a(2)+b'",
            field=field,
        )
    _check_part_count(len(data), field)
    parts: list[MixPart] = []
    for index, item in enumerate(data):
        where = f"{field}.{index}"
        if not isinstance(item, dict) or not set(item) <= {"voice", "weight"}:
            raise InvalidInputError(
                f"{where}: a part is an object with 'voice' and optionally 'weight'", field=field
            )
        voice = item.get("voice")
        if not isinstance(voice, str) or not voice or _MIX_PART.fullmatch(voice) is None:
            raise InvalidInputError(f"{where}: 'voice' must name one voice", field=field)
        if "(" in voice:
            raise InvalidInputError(f"{where}: 'voice' must name one voice", field=field)
        weight = item.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise InvalidInputError(f"{where}: 'weight' must be a number", field=field)
        parts.append(MixPart(voice, _check_weight(float(weight), voice, field)))
    return _distinct(parts, field)


def format_mix(parts: Sequence[MixPart]) -> str:
    """The text form of ``parts`` (weight 1 left out): what :func:`parse_mix` reads back."""
    return "+".join(
        part.voice if part.weight == 1 else f"{part.voice}({part.weight:g})" for part in parts
    )


def _check_part_count(count: int, field: str) -> None:
    if count > MAX_MIX_PARTS:
        raise InvalidInputError(
            f"{field}: a mix of {count} voices; at most {MAX_MIX_PARTS}", field=field
        )


def _weight_text(text: str, voice: str, field: str) -> float:
    if not _DECIMAL.fullmatch(text):
        raise InvalidInputError(
            f"{field}: the weight of {shown(voice)} is {shown(text)}, not a decimal number",
            field=field,
        )
    return _check_weight(float(text), voice, field)


def _check_weight(weight: float, voice: str, field: str) -> float:
    if not (math.isfinite(weight) and MIN_WEIGHT <= weight <= MAX_WEIGHT):
        raise InvalidInputError(
            f"{field}: the weight of {shown(voice)} is {weight:g}; weights go from "
            f"{MIN_WEIGHT:g} to {MAX_WEIGHT:g}",
            field=field,
        )
    return weight


def _distinct(parts: list[MixPart], field: str) -> tuple[MixPart, ...]:
    seen: set[str] = set()
    for part in parts:
        if part.voice in seen:
            raise InvalidInputError(
                f"{field}: {shown(part.voice)} is named twice in the mix", field=field
            )
        seen.add(part.voice)
    return tuple(parts)


# ---- resolution -----------------------------------------------------------------------------

VoiceLookup = Callable[[str], TenantVoice | None]
"""The tenant's voice of that name, or None (a name of another tenant's is None too)."""


@dataclass(frozen=True, slots=True)
class ResolvedVoice:
    """What a request's voice resolved to."""

    engine: str | None
    """The engine the voice is of: its tenant voices'; None when the mix names only engine
    voice ids (the caller routes by those)."""
    speaker: SpeakerDef
    engine_voices: tuple[str, ...] = ()
    """The mix's parts that are the engine's own voice ids, as the speaker carries them: the
    caller checks them against that engine's capabilities (``rules.check_voice``)."""


@dataclass(frozen=True, slots=True)
class FlatMix:
    """A mix flattened (:func:`flatten_mix`)."""

    engine: str | None
    sources: tuple[tuple[str, float], ...]
    """``(source, weight)``, merged by source, weights summing to 1."""
    engine_voices: tuple[str, ...]


def flatten_mix(
    parts: Sequence[MixPart],
    *,
    lookup: VoiceLookup | Mapping[str, TenantVoice],
    engine: str | None = None,
    field: str = "voice",
) -> FlatMix:
    """A mix's parts as the speakers they stand for (the module docstring's flattening).

    ``engine``: the engine the mix must be of (a creation names it; a request may not know it
    yet): a tenant voice of another engine is refused, and a leading ``{engine}:`` is taken
    off an engine voice id. Raises InvalidInputError (or UnknownVoiceError) naming ``field``."""
    find = lookup.get if isinstance(lookup, Mapping) else lookup
    weighted: list[tuple[str, float]] = []
    engine_voices: list[str] = []
    engines: dict[str, str] = {}
    for part in parts:
        voice = find(part.voice) if is_voice_name(part.voice) else None
        if voice is None:
            source = _engine_voice(part.voice, engine, field)
            weighted.append((source, part.weight))
            engine_voices.append(source)
            continue
        engines.setdefault(voice.engine, voice.name)
        if voice.kind == "clip":
            raise InvalidInputError(
                f"{field}: {voice.name!r} is a clip voice, which cannot be mixed (zero-shot "
                "speaks from one clip)",
                field=field,
            )
        weighted.extend((source, part.weight * share) for source, share in _sources(voice))
    if engine is not None:
        for other, name in engines.items():
            if other != engine:
                raise InvalidInputError(
                    f"{field}: {name!r} is a voice of the {other} engine, not of {engine}; "
                    "a mix is of one engine",
                    field=field,
                )
    elif len(engines) > 1:
        (first, a), (second, b) = list(engines.items())[:2]
        raise InvalidInputError(
            f"{field}: {a!r} is a {first} voice and {b!r} a {second} voice; a mix is of one engine",
            field=field,
        )
    merged: dict[str, float] = {}
    for source, weight in weighted:
        merged[source] = merged.get(source, 0.0) + weight
    if len(merged) > MAX_MIX_SOURCES:
        raise InvalidInputError(
            f"{field}: the mix flattens to {len(merged)} speakers; at most {MAX_MIX_SOURCES}",
            field=field,
        )
    total = sum(merged.values())
    sources = tuple((source, round(weight / total, 6)) for source, weight in merged.items())
    resolved_engine = engine if engine is not None else next(iter(engines), None)
    return FlatMix(resolved_engine, sources, tuple(dict.fromkeys(engine_voices)))


def to_speaker(voice: TenantVoice, *, tenant: str) -> SpeakerDef:
    """The speaker a tenant voice stands for: seed → ``seed:N``; embedding → ``emb:...``;
    clip → its reference clip (``{tenant}/{sha256}``) and transcript; mix → its sources
    (flattened when it was made)."""
    if voice.clip is not None:
        return SpeakerDef(
            clip_ref=clip_ref(tenant, voice.clip.sha256), clip_transcript=voice.clip.transcript
        )
    return SpeakerDef.mix(list(_sources(voice)))


def resolve_voice(
    voice: str,
    *,
    tenant: str,
    lookup: VoiceLookup | Mapping[str, TenantVoice],
    engine: str | None = None,
    field: str = "voice",
) -> ResolvedVoice | None:
    """A request's ``voice`` as a speaker: a tenant voice's name → its speaker
    (:func:`to_speaker`); a mix (``alice(2)+seed:7``) → the flattened mix; anything else
    (an engine's own voice id, ``auto``) → None: the request goes on as today.

    ``engine``: the engine the request is for, when known (a tenant voice of another engine
    is then refused: UnknownVoiceError). Malformed mixes, clip voices in a mix and mixes across
    engines: InvalidInputError naming ``field``."""
    find = lookup.get if isinstance(lookup, Mapping) else lookup
    if is_mix(voice):
        flat = flatten_mix(parse_mix(voice, field=field), lookup=find, engine=engine, field=field)
        return ResolvedVoice(flat.engine, SpeakerDef.mix(list(flat.sources)), flat.engine_voices)
    own = find(voice) if is_voice_name(voice) else None
    if own is None:
        return None
    if engine is not None and own.engine != engine:
        raise UnknownVoiceError(
            f"{field} {voice!r} is a voice of the {own.engine} engine, not of {engine}",
            field=field,
        )
    return ResolvedVoice(own.engine, to_speaker(own, tenant=tenant))


def _sources(voice: TenantVoice) -> tuple[tuple[str, float], ...]:
    """A voice that can be mixed, as weighted sources summing to 1."""
    if voice.seed is not None:
        return ((f"{SEED_VOICE_PREFIX}{voice.seed}", 1.0),)
    if voice.spk_emb:
        return ((f"{EMBEDDING_PREFIX}{voice.spk_emb}", 1.0),)
    if voice.mix_sources:
        return voice.mix_sources
    raise InvalidInputError(f"voice {voice.name!r} cannot be mixed", field="voice")


def _engine_voice(voice: str, engine: str | None, field: str) -> str:
    """A mix part that is no tenant voice: one of the engine's ids (less ``{engine}:``)."""
    if engine is not None and voice.startswith(f"{engine}:"):
        voice = voice[len(engine) + 1 :]
    if voice == DEFAULT_VOICE:
        raise InvalidInputError(
            f"{field}: 'auto' picks a voice by the text; it cannot be mixed", field=field
        )
    if voice.startswith(EMBEDDING_PREFIX):
        raise InvalidInputError(
            f"{field}: an embedding is mixed as a voice made from it (POST /v1/voices)",
            field=field,
        )
    return voice
