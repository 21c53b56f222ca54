"""Configuration of the ChatTTS engine — importable without torch.

* The engine's settings are :class:`~voicelane.core.settings.ChatTTSSettings`, the
  ``chattts`` section of the process's settings (``VOICELANE_CHATTTS__*``; docs/chattts.md).
* :class:`ModelLoadError`: a checkpoint or configuration that cannot be loaded; one line that
  names the offending file. It is the operator's configuration error: permanent, and the CLI
  exits with status 2 as for any other bad input.
* The checkpoint manifest ``voicelane-chattts.json`` and file verification (existence, then
  sha256, before ChatTTS sees the directory, so the error can name the file).
* The voices file (named speaker embeddings) and seed voices (``seed:1234``).
* :func:`utterance_options`: everything one utterance asks of ChatTTS, validated.

The engine itself (torch, ChatTTS) is in :mod:`voicelane.workers.engines.chattts`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from voicelane.common.errors import (
    EngineNotInstalledError,
    InvalidInputError,
    ModelLoadError,
    UnknownVoiceError,
)
from voicelane.core.rules import DEFAULT_VOICE, MAX_SEED, SEED_VOICE_PREFIX, check_speed, seed_of
from voicelane.core.settings import ChatTTSSettings
from voicelane.core.speaker_embedding import SpeakerValues, decode_spk_emb
from voicelane.core.speakers import EMBEDDING_PREFIX, SpeakerDef
from voicelane.core.voices import check_transcript

from .base import Utterance, VoiceInfo

MANIFEST_NAME = "voicelane-chattts.json"
ASSET_FILES = (
    "asset/Decoder.safetensors",
    "asset/DVAE.safetensors",
    "asset/Embed.safetensors",
    "asset/Vocos.safetensors",
    "asset/gpt/config.json",
    "asset/gpt/model.safetensors",
    "asset/tokenizer/special_tokens_map.json",
    "asset/tokenizer/tokenizer_config.json",
    "asset/tokenizer/tokenizer.json",
)
"""Every file ChatTTS loads, relative to ``VOICELANE_CHATTTS__DIR``."""
CONFIG_SECTIONS = frozenset({"gpt", "embed", "decoder", "dvae", "vocos", "spk_stat"})
"""The ChatTTS config sections a manifest may replace."""

VOICE_LANGUAGES = ("cmn", "en")
DEFAULT_SPEED_LEVEL = 5
"""ChatTTS's ``[speed_5]``: the default prompt."""
MIN_SPEED = 0.1
MAX_SPEED = 1.9
CUSTOM_VOICE_PREFIX = "custom:"
"""The voice id of an utterance that carries a :class:`SpeakerDef`: ``custom:<digest>``."""

_VOICE_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
_SHA256_PATTERN = re.compile(r"^[0-9a-f]{64}$")
_HASH_BLOCK_BYTES = 1 << 20


# ---- errors ------------------------------------------------------------------------------


def require_chattts_extra() -> None:
    """Raise :class:`EngineNotInstalledError` unless torch and ChatTTS can be imported."""
    missing = [name for name in ("torch", "ChatTTS") if importlib.util.find_spec(name) is None]
    if missing:
        raise EngineNotInstalledError(
            f"the chattts engine needs the chattts extra ({', '.join(missing)} missing): "
            "run scripts/install-chattts.sh"
        )


# ---- checkpoint ---------------------------------------------------------------------------


def sha256_key(relative: str) -> str:
    """The key of a file in ChatTTS's ``Chat.sha256_map``: ``asset/gpt/config.json`` →
    ``sha256_asset_gpt_config_json``."""
    return "sha256_" + relative.replace("/", "_").replace(".", "_")


@dataclass(frozen=True, slots=True)
class Manifest:
    """``voicelane-chattts.json``: the files' hashes and the config sections to replace."""

    path: Path
    sha256: dict[str, str]
    config: dict[str, Any]


def checkpoint_dir(settings: ChatTTSSettings) -> Path:
    if settings.dir is None:
        raise ModelLoadError(
            "VOICELANE_CHATTTS__DIR is not set: point it at a ChatTTS checkpoint directory"
        )
    directory = settings.dir.expanduser()
    if not directory.is_dir():
        what = "is not a directory" if directory.exists() else "no such directory"
        raise ModelLoadError(f"VOICELANE_CHATTTS__DIR={directory}: {what}")
    return directory


def read_manifest(directory: Path) -> Manifest | None:
    """The manifest beside ``asset/``, or None for the official release (no manifest)."""
    path = directory / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelLoadError(f"{path}: unreadable manifest ({error})") from None
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path}: the manifest must be a JSON object")
    sha256 = data.get("sha256")
    config = data.get("config", {})
    if not isinstance(sha256, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and _SHA256_PATTERN.match(v)
        for k, v in sha256.items()
    ):
        raise ModelLoadError(f"{path}: 'sha256' must map file keys to 64 hex digits")
    if not isinstance(config, dict):
        raise ModelLoadError(f"{path}: 'config' must be an object")
    unknown = sorted(set(config) - CONFIG_SECTIONS)
    if unknown:
        raise ModelLoadError(
            f"{path}: unknown config section {unknown[0]!r} "
            f"(known: {', '.join(sorted(CONFIG_SECTIONS))})"
        )
    return Manifest(path=path, sha256=dict(sha256), config=dict(config))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_HASH_BLOCK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def verify_checkpoint(directory: Path, sha256_map: Mapping[str, str], source: str) -> None:
    """Check that every file ChatTTS loads is there and has its expected sha256.

    ``source`` says where the hashes come from (the manifest's path, or the official
    release's map), for the error message. All files are checked for existence before any is
    hashed, so a missing file is reported at once.
    """
    for relative in ASSET_FILES:
        path = directory / relative
        if not path.is_file():
            raise ModelLoadError(f"{path}: missing (a ChatTTS checkpoint needs {relative})")
        if sha256_key(relative) not in sha256_map:
            raise ModelLoadError(f"{source}: no sha256 for {relative}")
    for relative in ASSET_FILES:
        path = directory / relative
        expected = sha256_map[sha256_key(relative)]
        try:
            actual = file_sha256(path)
        except OSError as error:
            raise ModelLoadError(f"{path}: unreadable ({error.strerror or error})") from None
        if actual != expected:
            raise ModelLoadError(
                f"{path}: sha256 mismatch (corrupted or not this checkpoint's file: "
                f"expected {expected[:12]}..., found {actual[:12]}...; hashes from {source})"
            )


# ---- voices -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NamedVoice:
    """A voice from the voices file: a speaker embedding and what to list about it."""

    info: VoiceInfo
    embedding: tuple[float, ...] | None = None
    """The speaker embedding, hidden-size floats; or None when given as ``spk_emb``."""
    spk_emb: str | None = None
    """The same in ChatTTS's own string form (``Chat.sample_random_speaker()``)."""


def _voice_error(path: Path, name: str, message: str) -> ModelLoadError:
    return ModelLoadError(f"{path}: voice {name!r}: {message}")


def _parse_voice(path: Path, name: str, entry: object) -> NamedVoice:
    if not _VOICE_NAME_PATTERN.match(name) or name == DEFAULT_VOICE:
        raise _voice_error(path, name, "names are letters, digits, '_', '.', '-' (not 'auto')")
    if isinstance(entry, str):
        entry = {"spk_emb": entry}
    if not isinstance(entry, dict):
        raise _voice_error(path, name, "expected an object or a ChatTTS speaker string")
    embedding = entry.get("embedding")
    spk_emb = entry.get("spk_emb")
    if (embedding is None) == (spk_emb is None):
        raise _voice_error(path, name, "give exactly one of 'embedding' and 'spk_emb'")
    if embedding is not None and not (
        isinstance(embedding, list)
        and embedding
        and all(isinstance(x, int | float) and not isinstance(x, bool) for x in embedding)
    ):
        raise _voice_error(path, name, "'embedding' must be a non-empty list of numbers")
    if spk_emb is not None and not (isinstance(spk_emb, str) and spk_emb):
        raise _voice_error(path, name, "'spk_emb' must be a non-empty string")
    languages = entry.get("languages", list(VOICE_LANGUAGES))
    if not (isinstance(languages, list) and all(isinstance(x, str) for x in languages)):
        raise _voice_error(path, name, "'languages' must be a list of strings")
    info = VoiceInfo(
        id=name,
        name=str(entry.get("name", name)),
        languages=tuple(languages),
        gender=str(entry.get("gender", "unknown")),
    )
    return NamedVoice(
        info=info,
        embedding=tuple(float(x) for x in embedding) if embedding is not None else None,
        spk_emb=spk_emb,
    )


def read_voices_file(path: Path) -> dict[str, NamedVoice]:
    """``{"voices": {name: {"embedding": [...]} | {"spk_emb": "..."} | "..."}}``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelLoadError(f"VOICELANE_CHATTTS__VOICES_FILE={path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelLoadError(f"{path}: unreadable voices file ({error})") from None
    voices = data.get("voices") if isinstance(data, dict) else None
    if not isinstance(voices, dict):
        raise ModelLoadError(f'{path}: expected {{"voices": {{name: voice, ...}}}}')
    return {name: _parse_voice(path, name, entry) for name, entry in voices.items()}


def seed_voice_info(seed: int) -> VoiceInfo:
    return VoiceInfo(
        id=f"{SEED_VOICE_PREFIX}{seed}",
        name=f"Random speaker drawn with seed {seed}",
        languages=VOICE_LANGUAGES,
    )


# ---- per-utterance options ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sampling:
    """What must be identical for every row of one ChatTTS call (part of the batch key)."""

    temperature: float
    top_p: float
    top_k: int
    repetition_penalty: float


@functools.lru_cache(maxsize=256)
def decoded_embedding(spk_emb: str) -> SpeakerValues:
    """A ``spk_emb`` string's values (read-only; cached: an utterance is parsed several times
    on its way, and a tenant's voice comes back often). InvalidInputError when malformed."""
    values = decode_spk_emb(spk_emb)
    values.setflags(write=False)
    return values


@dataclass(frozen=True, slots=True)
class UtteranceOptions:
    voice: str
    """The resolved voice id (``auto`` replaced by the default voice; ``custom:<digest>``
    for a :attr:`speaker`)."""
    speed_level: int
    """ChatTTS's ``[speed_N]`` prompt, 0 to 9."""
    seed: int | None
    sampling: Sampling
    min_new_tokens: int
    max_new_tokens: int
    """Per item: items of one batch may have different budgets."""
    speaker: SpeakerDef | None = None
    """A tenant's voice or a mix (checked: every part's source resolves, ``auto`` and
    named voices replaced by what they mean; embeddings decode)."""

    @property
    def batch_key(self) -> tuple[object, ...]:
        return ("chattts", self.voice, self.speed_level, self.seed, self.sampling)


class _Param:
    """One accepted entry of ``Utterance.params``: its type and range."""

    def __init__(self, kind: type, low: float, high: float) -> None:
        self.kind = kind
        self.low = low
        self.high = high

    def parse(self, name: str, value: object) -> float | int:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidInputError(f"parameter {name} must be a number")
        if self.kind is int and not float(value).is_integer():
            raise InvalidInputError(f"parameter {name} must be an integer")
        number = int(value) if self.kind is int else float(value)
        if not self.low <= number <= self.high:
            raise InvalidInputError(
                f"parameter {name}={value} is out of range ({self.low:g} to {self.high:g})"
            )
        return number


class UtteranceParser:
    """Turns an :class:`Utterance` into :class:`UtteranceOptions`; raises permanent errors."""

    PARAMS: ClassVar[dict[str, _Param]] = {
        "temperature": _Param(float, 1e-3, 5.0),
        "top_p": _Param(float, 1e-3, 1.0),
        "top_k": _Param(int, 1, 626),
        "repetition_penalty": _Param(float, 1e-3, 10.0),
        "min_new_tokens": _Param(int, 0, 8192),
        "max_new_tokens": _Param(int, 1, 8192),
    }

    def __init__(self, settings: ChatTTSSettings, named_voices: Mapping[str, object]) -> None:
        self.settings = settings
        self.named_voices = named_voices

    def resolve_voice(self, voice: str) -> str:
        if voice == DEFAULT_VOICE:
            voice = self.settings.default_voice
        if voice in self.named_voices or seed_of(voice) is not None:
            return voice
        raise UnknownVoiceError(
            f"unknown voice {voice!r}; `voicelane voices --engine chattts` lists the voices "
            "(and any seed:N is a voice)"
        )

    def resolve_speaker(self, speaker: SpeakerDef) -> SpeakerDef:
        """``speaker`` with every part's source resolved (``auto`` → the default voice),
        after checking that each is a seed voice, a named voice or a well-formed embedding,
        and that a clip's transcript is within bounds. Permanent errors otherwise."""
        if speaker.clip_ref:
            check_transcript(speaker.clip_transcript)
            return speaker
        parts = []
        for part in speaker.parts:
            if part.source.startswith(EMBEDDING_PREFIX):
                decoded_embedding(part.source.removeprefix(EMBEDDING_PREFIX))
                parts.append(part)
            else:
                parts.append(dataclasses.replace(part, source=self.resolve_voice(part.source)))
        return dataclasses.replace(speaker, parts=tuple(parts))

    def parse(self, utterance: Utterance) -> UtteranceOptions:
        settings = self.settings
        speaker = None
        if utterance.speaker is None:
            voice = self.resolve_voice(utterance.voice)
        else:
            speaker = self.resolve_speaker(utterance.speaker)
            voice = f"{CUSTOM_VOICE_PREFIX}{utterance.speaker.digest}"
        check_speed(utterance.speed, MIN_SPEED, MAX_SPEED)
        if utterance.seed is not None and not 0 <= utterance.seed <= MAX_SEED:
            raise InvalidInputError(f"seed must be from 0 to {MAX_SEED}")
        values: dict[str, float | int] = {}
        for name, value in utterance.params:
            param = self.PARAMS.get(name)
            if param is None:
                raise InvalidInputError(
                    f"unknown parameter {name!r} (known: {', '.join(sorted(self.PARAMS))})"
                )
            values[name] = param.parse(name, value)
        text_budget = settings.max_tokens_per_char * max(1, len(utterance.text))
        max_tokens = int(values.get("max_new_tokens", min(settings.max_new_tokens, text_budget)))
        max_tokens = min(max_tokens, settings.max_new_tokens)
        min_tokens = int(values.get("min_new_tokens", settings.min_new_tokens))
        return UtteranceOptions(
            voice=voice,
            speed_level=max(0, min(9, round(DEFAULT_SPEED_LEVEL * utterance.speed))),
            seed=utterance.seed,
            sampling=Sampling(
                temperature=float(values.get("temperature", settings.temperature)),
                top_p=float(values.get("top_p", settings.top_p)),
                top_k=int(values.get("top_k", settings.top_k)),
                repetition_penalty=float(
                    values.get("repetition_penalty", settings.repetition_penalty)
                ),
            ),
            min_new_tokens=max(1, min(min_tokens, max_tokens)),
            max_new_tokens=max_tokens,
            speaker=speaker,
        )
