"""The embedded pipeline: text → batcher → engine → resample → audio file, atomically."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from tests.support.engines import RecordingEngine
from voicelane.common.audio import AudioFormat, probe, resampled_length
from voicelane.common.audio.files import M4B_MAX_EXTRA_SAMPLES
from voicelane.common.errors import (
    EngineError,
    InvalidInputError,
    OutputError,
    UnsupportedFormatError,
)
from voicelane.core.settings import BatcherSettings, EmbeddedSettings
from voicelane.core.text import split_sentences
from voicelane.workers.engines import Utterance
from voicelane.workers.engines.espeak import EspeakEngine
from voicelane.workers.render import EmbeddedRenderer

TEXT = (
    "The first paragraph has two sentences. Here is the second one.\n\n"
    "第二段是中文。它也有两句话。\n\n"
    "And a last paragraph, in English again."
)


@pytest.fixture(scope="module")
def renderer() -> Iterator[EmbeddedRenderer]:
    with EmbeddedRenderer(EmbeddedSettings(engine="espeak")) as r:
        yield r


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("fmt", list(AudioFormat))
def test_every_format_renders_and_decodes_to_the_reported_duration(
    renderer: EmbeddedRenderer, tmp_path: Path, fmt: AudioFormat
) -> None:
    out = tmp_path / f"speech.{fmt.extension}"
    result = renderer.render(TEXT, out, fmt=fmt, sample_rate_hz=24000)
    info = probe(out)
    assert info.sample_rate_hz == 24000 and info.channels == 1
    tolerance_s = 0.05 if fmt is AudioFormat.MP3 else 0.021
    if fmt is AudioFormat.M4B:  # the last AAC frame's padding stays (docs/audio.md)
        tolerance_s = (M4B_MAX_EXTRA_SAMPLES + 1) / 24000
    assert info.duration_s == pytest.approx(result.duration_s, abs=tolerance_s)
    assert leftovers(tmp_path) == [out.name]
    assert result.segments == 5


def test_duration_is_the_engines_audio_plus_paragraph_pauses(tmp_path: Path) -> None:
    engine = EspeakEngine()
    settings = EmbeddedSettings(paragraph_pause_s=0.5)
    segments = split_sentences(TEXT, settings.max_segment_chars)
    engine_samples = [len(engine.synthesize([Utterance(s.text, "auto")])[0]) for s in segments]
    with EmbeddedRenderer(settings, engine=engine) as renderer:
        result = renderer.render(
            TEXT, tmp_path / "a.wav", fmt=AudioFormat.WAV, sample_rate_hz=16000
        )
    expected_s = (
        sum(resampled_length(n, engine.sample_rate_hz, 16000) for n in engine_samples) / 16000
        + 2 * 0.5
    )  # two paragraph breaks inside the text, none after the last
    # espeak may vary a few samples between runs of the same text in one process.
    assert result.duration_s == pytest.approx(expected_s, rel=0.01)
    assert probe(tmp_path / "a.wav").duration_s == pytest.approx(result.duration_s, abs=1e-3)


def test_progress_is_reported_per_segment(renderer: EmbeddedRenderer, tmp_path: Path) -> None:
    calls: list[tuple[int, int, float]] = []
    renderer.render(
        TEXT,
        tmp_path / "p.ogg",
        fmt=AudioFormat.OGG,
        progress=lambda d, t, a: calls.append((d, t, a)),
    )
    assert [c[0] for c in calls] == list(range(1, 6))
    assert all(c[1] == 5 for c in calls)
    audio = [c[2] for c in calls]
    assert audio == sorted(audio) and audio[0] > 0


def test_failure_midway_leaves_no_file_behind(tmp_path: Path) -> None:
    def fail_on_third(batch: Sequence[Utterance]) -> BaseException | None:
        return EngineError("engine died") if any("third" in u.text for u in batch) else None

    engine = RecordingEngine(voices=("a",), fail_when=fail_on_third)
    settings = EmbeddedSettings(
        voice="a", sample_rate_hz=16000, batcher=BatcherSettings(max_batch=1)
    )
    with EmbeddedRenderer(settings, engine=engine) as renderer, pytest.raises(EngineError):
        renderer.render(
            "One first. Two second. Three third. Four fourth.",
            tmp_path / "x.ogg",
            fmt=AudioFormat.OGG,
        )
    assert leftovers(tmp_path) == []


def test_an_existing_file_is_only_replaced_on_success(tmp_path: Path) -> None:
    engine = RecordingEngine(voices=("a",), fail_when=lambda b: EngineError("no"))
    out = tmp_path / "keep.wav"
    out.write_bytes(b"previous render")
    with (
        EmbeddedRenderer(EmbeddedSettings(voice="a"), engine=engine) as renderer,
        pytest.raises(EngineError),
    ):
        renderer.render("Some text.", out, fmt=AudioFormat.WAV, sample_rate_hz=16000)
    assert out.read_bytes() == b"previous render"
    assert leftovers(tmp_path) == ["keep.wav"]


def test_in_flight_segments_are_bounded_by_the_window(tmp_path: Path) -> None:
    engine = RecordingEngine(voices=("a",))
    settings = EmbeddedSettings(voice="a", render_window=3)
    text = " ".join(f"Sentence number {i}." for i in range(40))
    with EmbeddedRenderer(settings, engine=engine) as renderer:
        renderer.render(text, tmp_path / "w.wav", fmt=AudioFormat.WAV, sample_rate_hz=8000)
    assert sum(len(b) for b in engine.batches) == 40
    assert max(len(b) for b in engine.batches) <= 3


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"voice": "nobody"}, InvalidInputError, "is unknown to the espeak engine"),
        ({"sample_rate_hz": 44100}, UnsupportedFormatError, "44100"),
    ],
)
def test_bad_options_fail_before_any_work(
    renderer: EmbeddedRenderer,
    tmp_path: Path,
    kwargs: dict[str, object],
    error: type,
    message: str,
) -> None:
    with pytest.raises(error, match=message):
        renderer.render("Text.", tmp_path / "o.ogg", fmt=AudioFormat.OGG, **kwargs)  # type: ignore[arg-type]
    assert leftovers(tmp_path) == []


def test_punctuation_only_text_has_nothing_to_speak(
    renderer: EmbeddedRenderer, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInputError, match="nothing to speak"):
        renderer.render("... --- !!!", tmp_path / "o.ogg", fmt=AudioFormat.OGG)
    assert leftovers(tmp_path) == []


def test_unwritable_outputs_are_output_errors(renderer: EmbeddedRenderer, tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="No such file or directory"):
        renderer.render("Text.", tmp_path / "missing" / "o.ogg", fmt=AudioFormat.OGG)
    with pytest.raises(OutputError, match="is a directory"):
        renderer.render("Text.", tmp_path, fmt=AudioFormat.OGG)


def test_long_text_renders_with_flat_memory_window(
    renderer: EmbeddedRenderer, tmp_path: Path
) -> None:
    text = "这是一个测试句子。This is a test sentence. " * 300
    result = renderer.render(text, tmp_path / "long.ogg", fmt=AudioFormat.OGG)
    assert result.segments >= 600
    assert probe(tmp_path / "long.ogg").duration_s == pytest.approx(result.duration_s, abs=0.021)
    assert np.isfinite(result.speed_x)
