"""Piper's voices: the directory, the voice wheels, ids, languages, rates (no model loaded)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from voicelane.common.errors import ConfigError
from voicelane.workers.engines.piper_voices import find_voice_files

from .conftest import require_piper_extra


def write_voice(directory: Path, name: str, **overrides: Any) -> None:
    config: dict[str, Any] = {
        "audio": {"sample_rate": 22050, "quality": "medium"},
        "espeak": {"voice": "en-us"},
        "language": {"code": "en_US", "name_english": "English"},
        "phoneme_type": "espeak",
        "phoneme_id_map": {"_": [0], "^": [1], "$": [2]},
        "num_symbols": 3,
        "num_speakers": 1,
        "dataset": name.split("-")[1],
    }
    config.update(overrides)
    (directory / f"{name}.onnx").write_bytes(b"not read here")
    (directory / f"{name}.onnx.json").write_text(json.dumps(config))


def test_a_directory_lists_its_voices_by_file_stem_with_language_and_rate(tmp_path: Path) -> None:
    write_voice(tmp_path, "en_US-joe-medium")
    write_voice(
        tmp_path, "de_DE-thorsten-medium", language={"code": "de_DE"}, espeak={"voice": "de"}
    )
    (tmp_path / "stray.onnx").write_bytes(b"")  # no config beside it: not a voice
    files = find_voice_files(tmp_path)
    assert [f.id for f in files] == ["de_DE-thorsten-medium", "en_US-joe-medium"]
    assert [f.language for f in files] == ["de-de", "en-us"]
    assert {f.sample_rate_hz for f in files} == {22050}
    (info, speaker), = files[1].voice_infos()  # fmt: skip
    assert (info.id, info.languages, speaker) == ("en_US-joe-medium", ("en-us",), None)
    assert info.name == "joe (medium, English)"


def test_multi_speaker_voices_are_named_by_speaker(tmp_path: Path) -> None:
    write_voice(
        tmp_path,
        "en_US-many-medium",
        num_speakers=3,
        speaker_id_map={"alice": 0, "bob": 2, "carol": 1},
        default_speaker_id=2,
    )
    write_voice(tmp_path, "en_GB-numbered-low", num_speakers=2)
    numbered, many = find_voice_files(tmp_path)
    ids = {info.id: speaker for info, speaker in many.voice_infos()}
    assert ids == {
        "en_US-many-medium": 2,
        "en_US-many-medium#alice": 0,
        "en_US-many-medium#bob": 2,
        "en_US-many-medium#carol": 1,
    }
    assert {info.id for info, _ in numbered.voice_infos()} == {
        "en_GB-numbered-low",
        "en_GB-numbered-low#0",
        "en_GB-numbered-low#1",
    }


def test_mixed_sample_rates_are_refused(tmp_path: Path) -> None:
    write_voice(tmp_path, "en_US-joe-medium")
    write_voice(tmp_path, "en_US-small-low", audio={"sample_rate": 16000})
    with pytest.raises(ConfigError, match="different sample rates"):
        find_voice_files(tmp_path)


def test_a_missing_or_empty_directory_and_a_bad_config_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        find_voice_files(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="no Piper voice"):
        find_voice_files(tmp_path)
    write_voice(tmp_path, "en_US-broken-medium")
    (tmp_path / "en_US-broken-medium.onnx.json").write_text("{")
    with pytest.raises(ConfigError, match="unreadable"):
        find_voice_files(tmp_path)


def test_voices_of_another_phonemizer_are_refused(tmp_path: Path) -> None:
    write_voice(tmp_path, "zh_CN-chaowen-medium", phoneme_type="pinyin")
    with pytest.raises(ConfigError, match="phoneme type 'pinyin'"):
        find_voice_files(tmp_path)


def test_without_a_directory_the_voice_wheels_are_found() -> None:
    require_piper_extra()
    files = find_voice_files(None)
    assert "en_US-joe-medium" in {f.id for f in files}
    joe = next(f for f in files if f.id == "en_US-joe-medium")
    assert joe.model_path.is_file()
    assert joe.sample_rate_hz == 22050
    assert joe.language == "en-us"
