"""The ChatTTS engine on the CPU, on a tiny random-weight checkpoint, through the real batcher.

Random weights end an utterance at random points, so the tests fix every item's length with
``min_new_tokens == max_new_tokens`` (:func:`exact`), chosen per item from its text's length
(:func:`budget`: 4 steps per character). One step is 512 samples; a decode of N steps is
N x 512 - 256 samples (:func:`samples`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.unit.workers.engines.conftest import chattts_infer_codes, require_chattts_extra

require_chattts_extra()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from tests.support.chattts_checkpoint import MANIFEST_NAME, Checkpoint  # noqa: E402
from voicelane.common.errors import (  # noqa: E402
    ConfigError,
    EngineOutOfMemoryError,
    InvalidInputError,
    ModelLoadError,
    UnknownVoiceError,
    exit_status,
    is_permanent,
)
from voicelane.core.settings import (  # noqa: E402
    BatcherSettings,
    ChatTTSSettings,
    EmbeddedSettings,
    WorkerSettings,
)
from voicelane.workers.batching import AudioStream, Batcher, Priority  # noqa: E402
from voicelane.workers.engines import (  # noqa: E402
    PcmF32,
    Utterance,
    chattts_loop,
    chattts_model,
    create_engine,
)
from voicelane.workers.engines.chattts import ChatTTSEngine  # noqa: E402
from voicelane.workers.engines.chattts_config import Sampling, UtteranceParser  # noqa: E402
from voicelane.workers.engines.chattts_loop import Generation  # noqa: E402
from voicelane.workers.engines.chattts_model import Row, decorate_prompt  # noqa: E402

TIMEOUT_S = 60.0
VOICE = "seed:3"
STEP_SAMPLES = 512


def exact(steps: int) -> tuple[tuple[str, float | int | str], ...]:
    """Per-item params for exactly ``steps`` audio tokens."""
    return (("max_new_tokens", steps), ("min_new_tokens", steps))


def budget(text: str) -> int:
    return 4 * len(text)


def samples(steps: int) -> int:
    return steps * STEP_SAMPLES - 256


def settings_for(checkpoint: Checkpoint | Path, **overrides: object) -> ChatTTSSettings:
    directory = checkpoint.directory if isinstance(checkpoint, Checkpoint) else checkpoint
    return ChatTTSSettings(dir=directory, **overrides)


def read_all(stream: AudioStream) -> list[PcmF32]:
    chunks: list[PcmF32] = []
    while (chunk := stream.read(TIMEOUT_S)) is not None:
        chunks.append(chunk)
    return chunks


def max_difference(a: PcmF32, b: PcmF32) -> float:
    assert a.shape == b.shape
    return float(np.abs(a - b).max())


@pytest.fixture(scope="module")
def engine(chattts_checkpoint: Checkpoint) -> Iterator[ChatTTSEngine]:
    loaded = ChatTTSEngine(settings_for(chattts_checkpoint))
    loaded.load()
    yield loaded
    loaded.unload()


@pytest.fixture
def checkpoint_copy(chattts_checkpoint: Checkpoint, tmp_path: Path) -> Path:
    target = tmp_path / "checkpoint"
    shutil.copytree(chattts_checkpoint.directory, target)
    return target


# ---- batches, lengths, keys ---------------------------------------------------------------


TEXTS = ("Hi there.", "Good morning, everyone here.", "这是一个测试语音合成的句子，早上好。")


def test_three_texts_in_one_batch_come_back_with_their_own_lengths(
    chattts_checkpoint: Checkpoint,
) -> None:
    engine = ChatTTSEngine(settings_for(chattts_checkpoint))
    # Batch-class items start only when 3 are queued; a real-time item starts at once.
    config = BatcherSettings(
        max_batch=3, max_wait_batch_s=TIMEOUT_S, max_wait_realtime_s=0.0, continuous=False
    )
    utterances = [Utterance(t, VOICE, seed=11, params=exact(budget(t))) for t in TEXTS]
    with Batcher(engine, config) as batcher:
        futures = [batcher.submit(utterance) for utterance in utterances]
        outputs = [future.result(TIMEOUT_S) for future in futures]
        assert batcher.stats().batch_sizes == {3: 1}
        alone = batcher.submit(utterances[0], priority=Priority.REALTIME).result(TIMEOUT_S)
    assert [len(o) for o in outputs] == [samples(budget(t)) for t in TEXTS]
    assert len({len(o) for o in outputs}) == 3
    assert all(o.dtype == np.float32 and np.isfinite(o).all() for o in outputs)
    assert float(np.abs(outputs[0]).max()) > 0.0
    # No padding leaks into a short item: it is the same rendered alone.
    assert max_difference(outputs[0], alone) < 1e-5


def test_default_token_budget_follows_the_text_length(chattts_checkpoint: Checkpoint) -> None:
    settings = settings_for(chattts_checkpoint, max_tokens_per_char=10, max_new_tokens=300)
    parser = UtteranceParser(settings, {})
    assert parser.parse(Utterance("abcd", VOICE)).max_new_tokens == 40
    assert parser.parse(Utterance("x" * 100, VOICE)).max_new_tokens == 300
    assert parser.parse(Utterance("abcd", VOICE, params=exact(9999 % 8192))).max_new_tokens == 300
    only_min = parser.parse(Utterance("abcd", VOICE, params=(("min_new_tokens", 25),)))
    assert (only_min.min_new_tokens, only_min.max_new_tokens) == (25, 40)


def test_batch_keys_separate_voices_seeds_speeds_and_sampling(engine: ChatTTSEngine) -> None:
    base = Utterance("hello", "seed:1", seed=5)
    key = engine.batch_key(base)
    assert engine.batch_key(Utterance("other text", "seed:1", seed=5, params=exact(7))) == key
    for different in (
        Utterance("hello", "seed:2", seed=5),
        Utterance("hello", "seed:1", seed=6),
        Utterance("hello", "seed:1", seed=5, speed=1.5),
        Utterance("hello", "seed:1", seed=5, params=(("temperature", 0.5),)),
        Utterance("hello", "seed:1", seed=5, params=(("top_k", 5),)),
    ):
        assert engine.batch_key(different) != key
    # `auto` is the default voice: same key.
    auto = ChatTTSEngine(engine.settings.model_copy(update={"default_voice": "seed:1"}))
    assert auto.batch_key(Utterance("x", "auto", seed=5)) == auto.batch_key(base)


def test_different_voices_never_share_a_batch(chattts_checkpoint: Checkpoint) -> None:
    engine = ChatTTSEngine(settings_for(chattts_checkpoint))
    config = BatcherSettings(max_batch=4, max_wait_batch_s=0.0, continuous=False)
    with Batcher(engine, config) as batcher:
        futures = [
            batcher.submit(Utterance("Same text.", voice, seed=2, params=exact(12)))
            for voice in ("seed:1", "seed:2", "seed:1", "seed:2")
        ]
        outputs = [future.result(TIMEOUT_S) for future in futures]
        sizes = batcher.stats().batch_sizes
    assert sum(size * count for size, count in sizes.items()) == 4
    assert max(sizes) <= 2
    assert max_difference(outputs[0], outputs[2]) < 1e-5  # same voice, seed, text
    assert max_difference(outputs[0], outputs[1]) > 1e-4  # another speaker


def test_unknown_voices_and_bad_options_are_refused_permanently(engine: ChatTTSEngine) -> None:
    with Batcher(ChatTTSEngine(engine.settings)) as batcher:
        for voice in ("nobody", "seed:", "seed:abc", "seed:007", "seed:-1", f"seed:{2**63}"):
            with pytest.raises(UnknownVoiceError) as caught:
                batcher.submit(Utterance("x", voice))
            assert is_permanent(caught.value)
    for bad in (
        Utterance("x", VOICE, speed=3.0),
        Utterance("x", VOICE, params=(("bogus", 1),)),
        Utterance("x", VOICE, params=(("top_k", 2.5),)),
        Utterance("x", VOICE, params=(("temperature", 0.0),)),
    ):
        with pytest.raises(InvalidInputError):
            engine.validate(bad)
    engine.validate(Utterance("x", "auto"))
    engine.validate(Utterance("x", "seed:123456789"))


def test_speed_becomes_chattts_speed_prompt(engine: ChatTTSEngine) -> None:
    parser = UtteranceParser(engine.settings, {})
    levels = [parser.parse(Utterance("x", VOICE, speed=s)).speed_level for s in (0.2, 1.0, 1.6)]
    assert levels == [1, 5, 8]
    assert decorate_prompt(" [Stts]hi ", 8, True) == "[Stts][spk_emb][speed_8]hi[Ptts]"


# ---- faithful to ChatTTS -------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:.*past_key_values.*:FutureWarning")  # ChatTTS's own loop
def test_batch_of_one_matches_chattts_own_generation_and_decode(engine: ChatTTSEngine) -> None:
    """Same seed, same speaker: our loop's tokens are ChatTTS's, its audio ChatTTS's decode."""
    upstream = chattts_infer_codes(engine, "hello world", VOICE, 7, 40)
    upstream_audio = engine.model.chat._decode_to_wavs([upstream.hiddens[0].clone()], True)[0]

    speaker = engine.speaker_embedding(VOICE)
    row = Row(decorate_prompt("hello world", 5, True), speaker, 7, 40, 40)
    generation = Generation(engine.model, [row], Sampling(0.3, 0.7, 20, 1.05))
    generation.run()
    assert torch.equal(generation.tokens[0, :40], upstream.ids[0])
    assert torch.allclose(generation.hiddens[0, :40], upstream.hiddens[0], atol=1e-5)
    (ours,) = chattts_loop.decode_rows(engine.model, generation)
    assert max_difference(ours, upstream_audio) < 1e-5


def test_seed_voices_are_chattts_random_speakers(engine: ChatTTSEngine) -> None:
    chat = engine.model.chat
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1234)
        upstream = chat.speaker._decode(chat.sample_random_speaker())
    assert np.array_equal(engine.speaker_embedding("seed:1234").numpy(), upstream)
    assert not torch.equal(engine.speaker_embedding("seed:1"), engine.speaker_embedding("seed:2"))


def test_config_defaults_shared_by_every_chat_stay_untouched(engine: ChatTTSEngine) -> None:
    from ChatTTS.config import Config

    assert engine.model.hidden_size == 64
    assert Config().gpt.hidden_size == 768
    assert Config().decoder.idim == 384


# ---- streaming -----------------------------------------------------------------------------


def test_streamed_chunks_concatenate_to_the_whole_utterance(
    chattts_checkpoint: Checkpoint,
) -> None:
    engine = ChatTTSEngine(settings_for(chattts_checkpoint))
    utterance = Utterance("A longer utterance, streamed.", VOICE, seed=21, params=exact(150))
    with Batcher(engine) as batcher:
        whole = batcher.submit(utterance).result(TIMEOUT_S)
        chunks = read_all(batcher.submit_stream(utterance, priority=Priority.REALTIME))
    windows = engine.windows
    first_steps = windows.first_chunk_steps - windows.holdback_steps
    assert len(chunks) >= 5
    assert len(chunks[0]) == first_steps * STEP_SAMPLES
    streamed = np.concatenate(chunks)
    assert len(streamed) == len(whole) == samples(150)
    assert max_difference(streamed, whole) < 1e-4 * max(1.0, float(np.abs(whole).max()))


def test_windows_without_context_do_not_match(engine: ChatTTSEngine) -> None:
    """The comparison above is sensitive: no left context and 1 step of holdback differ."""
    narrow = chattts_loop.StreamWindows(
        first_chunk_steps=8, stream_chunk_steps=8, context_steps=0, holdback_steps=1
    )
    row = Row(decorate_prompt("x", 5, True), engine.speaker_embedding(VOICE), 3, 64, 64)
    generation = Generation(engine.model, [row], Sampling(0.3, 0.7, 20, 1.05))
    decoder = chattts_loop.StreamDecoder(engine.model, generation, narrow)
    chunks: list[PcmF32] = []
    while not generation.done:
        generation.step()
        if (step := decoder.pending()) is not None:
            chunks.append(step[0])
    (whole,) = chattts_loop.decode_rows(engine.model, generation)
    assert max_difference(np.concatenate(chunks), whole) > 1e-3


def test_a_streamed_batch_yields_one_array_per_item_per_step_group(
    engine: ChatTTSEngine,
) -> None:
    batch = [
        Utterance("short", VOICE, seed=4, params=exact(30)),
        Utterance("a longer one", VOICE, seed=4, params=exact(100)),
    ]
    steps = list(engine.synthesize_stream(batch))
    whole = engine.synthesize(batch)
    assert all(len(step) == 2 for step in steps)
    short_done = max(i for i, step in enumerate(steps) if step[0].size)
    assert all(step[0].size == 0 for step in steps[short_done + 1 :])
    assert any(step[1].size for step in steps[short_done + 1 :])
    for index in range(2):
        streamed = np.concatenate([step[index] for step in steps])
        assert max_difference(streamed, whole[index]) < 1e-4


def test_each_streamed_chunk_decodes_a_bounded_window(
    engine: ChatTTSEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decode cost stays flat: no chunk decodes more than context + chunk + holdback steps,
    however long the utterance (ChatTTS re-decodes the whole prefix every time)."""
    windows_steps: list[int] = []
    original = chattts_model.decode

    def recording_decode(model: chattts_model.LoadedModel, hiddens: torch.Tensor) -> np.ndarray:
        windows_steps.append(int(hiddens.shape[1]))
        return original(model, hiddens)

    monkeypatch.setattr(chattts_model, "decode", recording_decode)
    chunks = list(engine.synthesize_stream([Utterance("x", VOICE, seed=1, params=exact(400))]))
    w = engine.windows
    bound = w.context_steps + w.stream_chunk_steps + w.holdback_steps
    assert len(chunks) >= 400 // w.stream_chunk_steps - 1
    assert max(windows_steps) <= bound
    assert windows_steps[len(windows_steps) // 2] == bound


def test_closing_one_stream_stops_only_that_stream(
    engine: ChatTTSEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    released: list[int] = []
    original = Generation.release

    def recording_release(self: Generation) -> None:
        released.append(len(self.rows))
        original(self)

    monkeypatch.setattr(Generation, "release", recording_release)
    first = Utterance("first", VOICE, seed=8, params=exact(120))
    second = Utterance("second one", VOICE, seed=9, params=exact(120))
    a = engine.synthesize_stream([first])
    b = engine.synthesize_stream([second])
    b_chunks = [next(b)[0]]
    next(a)
    a.close()  # type: ignore[attr-defined]
    assert released == [1]
    b_chunks += [step[0] for step in b]
    (whole,) = engine.synthesize([second])
    assert max_difference(np.concatenate(b_chunks), whole) < 1e-4


def test_cancelling_a_stream_closes_the_engine_generator(
    chattts_checkpoint: Checkpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    released = threading.Event()
    original = Generation.release

    def recording_release(self: Generation) -> None:
        original(self)
        released.set()

    monkeypatch.setattr(Generation, "release", recording_release)
    engine = ChatTTSEngine(settings_for(chattts_checkpoint))
    with Batcher(engine, BatcherSettings(continuous=False)) as batcher:
        stream = batcher.submit_stream(Utterance("x", VOICE, seed=1, params=exact(2000)))
        assert stream.read(TIMEOUT_S) is not None
        stream.cancel()
        assert released.wait(TIMEOUT_S)


# ---- voices --------------------------------------------------------------------------------


def test_named_voices_from_a_voices_file(
    engine: ChatTTSEngine, chattts_checkpoint: Checkpoint, tmp_path: Path
) -> None:
    embedding = [float(x) for x in engine.speaker_embedding("seed:77").tolist()]
    spk_emb = engine.model.chat.sample_random_speaker()
    voices = {
        "voices": {
            "alice": {"embedding": embedding, "name": "Alice", "gender": "female"},
            "bob": spk_emb,
        }
    }
    path = tmp_path / "voices.json"
    path.write_text(json.dumps(voices))
    named = ChatTTSEngine(settings_for(chattts_checkpoint, voices_file=path))
    listed = {voice.id: voice for voice in named.voices()}
    assert {"auto", "alice", "bob", "seed:0", "seed:7"} <= set(listed)
    assert listed["alice"].name == "Alice" and listed["alice"].gender == "female"
    named.load()
    try:
        assert torch.equal(named.speaker_embedding("alice"), engine.speaker_embedding("seed:77"))
        alice, bob, seeded = named.synthesize(
            [Utterance("hello", v, seed=3, params=exact(20)) for v in ("alice", "bob", "seed:77")]
        )
    finally:
        named.unload()
    assert max_difference(alice, seeded) < 1e-5  # alice is seed:77's embedding
    assert max_difference(alice, bob) > 1e-4


def test_bad_voices_files_are_configuration_errors(
    chattts_checkpoint: Checkpoint, tmp_path: Path
) -> None:
    path = tmp_path / "voices.json"
    path.write_text(json.dumps({"voices": {"short": {"embedding": [0.1, 0.2]}}}))
    short = ChatTTSEngine(settings_for(chattts_checkpoint, voices_file=path))
    with pytest.raises(ModelLoadError, match=r"voices\.json: voice 'short': 2 values"):
        short.load()
    path.write_text("{not json")
    with pytest.raises(ModelLoadError, match="unreadable voices file"):
        ChatTTSEngine(settings_for(chattts_checkpoint, voices_file=path))
    path.write_text(json.dumps({"voices": {"seed:1": [0.5]}}))
    with pytest.raises(ModelLoadError, match="names are letters"):
        ChatTTSEngine(settings_for(chattts_checkpoint, voices_file=path))


# ---- loading -------------------------------------------------------------------------------


def test_a_missing_file_is_named(checkpoint_copy: Path) -> None:
    missing = checkpoint_copy / "asset" / "Vocos.safetensors"
    missing.unlink()
    engine = ChatTTSEngine(settings_for(checkpoint_copy))
    with pytest.raises(ModelLoadError) as caught:
        Batcher(engine).start(timeout_s=TIMEOUT_S)
    message = caught.value.message
    assert str(missing) in message and "missing" in message
    assert "\n" not in message
    assert exit_status(caught.value) == 2 and is_permanent(caught.value)
    assert not engine.loaded


def test_a_corrupted_file_is_named(checkpoint_copy: Path) -> None:
    corrupted = checkpoint_copy / "asset" / "gpt" / "model.safetensors"
    data = bytearray(corrupted.read_bytes())
    data[len(data) // 2] ^= 0xFF
    corrupted.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match=r"model\.safetensors: sha256 mismatch") as caught:
        ChatTTSEngine(settings_for(checkpoint_copy)).load()
    assert str(corrupted) in caught.value.message


def test_without_a_manifest_the_official_hashes_apply(checkpoint_copy: Path) -> None:
    (checkpoint_copy / MANIFEST_NAME).unlink()
    with pytest.raises(ModelLoadError, match=r"sha256 mismatch.*official ChatTTS release"):
        ChatTTSEngine(settings_for(checkpoint_copy)).load()


def test_manifest_fields_are_checked(checkpoint_copy: Path) -> None:
    manifest_path = checkpoint_copy / MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    manifest["config"]["gpt"]["hidden"] = 64
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(ModelLoadError, match=r"unknown field config\.gpt\.hidden"):
        ChatTTSEngine(settings_for(checkpoint_copy)).load()
    manifest["config"] = {"gpt": {"hidden_size": "64"}}
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(ModelLoadError, match=r"config\.gpt\.hidden_size must be a int"):
        ChatTTSEngine(settings_for(checkpoint_copy)).load()


def test_directory_and_settings_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="VOICELANE_CHATTTS__DIR is not set"):
        ChatTTSEngine(ChatTTSSettings(dir=None)).load()
    with pytest.raises(ModelLoadError, match="no such directory"):
        ChatTTSEngine(settings_for(tmp_path / "absent")).load()
    with pytest.raises(ValidationError, match=r"device\n +String should match pattern"):
        WorkerSettings(device="gpu")
    with pytest.raises(ModelLoadError, match="half needs a CUDA device"):
        ChatTTSEngine(ChatTTSSettings(half=True), device="cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ModelLoadError, match="CUDA is not available"):
            ChatTTSEngine(settings_for(tmp_path), device="cuda:0").load()


# ---- memory --------------------------------------------------------------------------------


OOM_ERRORS: dict[str, Callable[[], BaseException]] = {
    "OutOfMemoryError": lambda: torch.cuda.OutOfMemoryError("CUDA out of memory. Tried 2 GiB"),
    "RuntimeError": lambda: RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB"),
}


@pytest.mark.parametrize("kind", sorted(OOM_ERRORS))
def test_out_of_memory_becomes_engine_oom_and_the_batcher_splits(
    chattts_checkpoint: Checkpoint, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    engine = ChatTTSEngine(settings_for(chattts_checkpoint))
    config = BatcherSettings(max_batch=4, max_wait_batch_s=TIMEOUT_S, continuous=False)
    with Batcher(engine, config) as batcher:
        gpt = engine.model.gpt
        original = gpt.forward

        def forward(*args: object, **kwargs: torch.Tensor) -> object:
            if kwargs["inputs_embeds"].shape[0] > 2:
                raise OOM_ERRORS[kind]()
            return original(*args, **kwargs)

        monkeypatch.setattr(gpt, "forward", forward)
        futures = [
            batcher.submit(Utterance(f"item {i}", VOICE, seed=1, params=exact(10 + i)))
            for i in range(4)
        ]
        outputs = [future.result(TIMEOUT_S) for future in futures]
        stats = batcher.stats()
    assert [len(o) for o in outputs] == [samples(10 + i) for i in range(4)]
    assert stats.oom_events == 1
    assert stats.batch_sizes == {4: 1, 2: 2}
    assert stats.effective_max_batch == 2


def test_out_of_memory_while_streaming_and_other_errors(
    engine: ChatTTSEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpt = engine.model.gpt
    original = gpt.forward
    error: list[BaseException] = [torch.cuda.OutOfMemoryError("CUDA out of memory")]

    def forward(*args: object, **kwargs: object) -> object:
        if kwargs[engine.model.cache_keyword] is not None:  # fail after the prefill
            raise error[0]
        return original(*args, **kwargs)

    monkeypatch.setattr(gpt, "forward", forward)
    batch = [Utterance("x", VOICE, seed=1, params=exact(30))]
    with pytest.raises(EngineOutOfMemoryError, match="out of memory on cpu"):
        list(engine.synthesize_stream(batch))
    with pytest.raises(EngineOutOfMemoryError):
        engine.synthesize(batch)
    error[0] = RuntimeError("shape mismatch")
    with pytest.raises(RuntimeError, match="shape mismatch"):
        engine.synthesize(batch)


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_unload_and_reload_keep_resident_memory_flat(chattts_checkpoint: Checkpoint) -> None:
    """20 hot-swaps: RSS grows by less than 8 MB. A leaked tiny model costs ~2.6 MB of RSS
    per cycle (measured: ~53 MB over 20 cycles); allocator noise after warm-up is < 1 MB."""
    engine = ChatTTSEngine(settings_for(chattts_checkpoint))
    batch = [Utterance("hello", VOICE, seed=1, params=exact(16))]
    for _ in range(3):  # warm-up: allocator arenas, numba, tokenizer caches
        engine.load()
        engine.synthesize(batch)
    before = _rss_bytes()
    chats = []
    for _ in range(20):
        engine.load()  # load() on a loaded engine unloads first: a hot-swap
        engine.synthesize(batch)
        chats.append(weakref.ref(engine.model.chat))
    engine.unload()
    growth_mb = (_rss_bytes() - before) / 2**20
    assert all(chat() is None for chat in chats)
    assert growth_mb < 8.0, f"RSS grew {growth_mb:.1f} MB over 20 load/unload cycles"


# ---- registration and the CLI ----------------------------------------------------------------


def test_create_engine_builds_chattts_from_the_processs_settings(
    chattts_checkpoint: Checkpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine is configured by the process's ``chattts`` section, read with the rest of
    its settings (``VOICELANE_CHATTTS__*``); a bad value fails that reading, by its path."""
    monkeypatch.setenv("VOICELANE_CHATTTS__DIR", str(chattts_checkpoint.directory))
    monkeypatch.setenv("VOICELANE_CHATTTS__LISTED_SEED_VOICES", "2")
    settings = WorkerSettings(engine="chattts")
    engine = create_engine(settings.engine, device=settings.device, chattts=settings.chattts)
    assert isinstance(engine, ChatTTSEngine)
    assert [v.id for v in engine.voices()] == ["auto", "seed:0", "seed:1"]
    monkeypatch.setenv("VOICELANE_CHATTTS__CONTEXT_STEPS", "-1")
    with pytest.raises(ValidationError, match=r"chattts\.context_steps"):
        WorkerSettings(engine="chattts")


def test_the_workers_device_reaches_chattts(
    chattts_checkpoint: Checkpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--device`` / ``VOICELANE_DEVICE`` is the one device setting: it reaches the engine,
    a CUDA device without CUDA is refused before anything loads, and the old ChatTTS device
    variable stops the process with one line saying what to set instead."""
    monkeypatch.setenv("VOICELANE_CHATTTS__DIR", str(chattts_checkpoint.directory))
    settings = WorkerSettings(engine="chattts", device="cpu")
    engine = create_engine(settings.engine, device=settings.device, chattts=settings.chattts)
    assert isinstance(engine, ChatTTSEngine) and engine.device == "cpu"
    engine.load()
    try:
        assert engine._require().model.device == torch.device("cpu")
    finally:
        engine.unload()
    if not torch.cuda.is_available():
        with pytest.raises(ModelLoadError, match="cuda:0: CUDA is not available here"):
            create_engine("chattts", device="cuda:0", chattts=settings.chattts)
    for old in ("VOICELANE_CHATTTS_DEVICE", "VOICELANE_CHATTTS__DEVICE"):
        with monkeypatch.context() as env:
            env.setenv(old, "cpu")  # even one that agrees: there is one device setting
            for root in (WorkerSettings, EmbeddedSettings):
                with pytest.raises(
                    ConfigError, match=f"{old} is no longer read: .*VOICELANE_DEVICE"
                ):
                    root(device="cpu")


def test_espeak_refuses_a_gpu_device() -> None:
    with pytest.raises(ConfigError, match="espeak engine runs on the CPU; device cuda:0"):
        create_engine("espeak", device="cuda:0")
    assert create_engine("espeak", device="cpu").name == "espeak"


def test_a_worker_with_a_device_it_cannot_use_exits_2_with_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "VOICELANE_DEV_MODE": "1", "VOICELANE_STORAGE__LOCAL__ROOT": str(tmp_path)}
    for args, more, message in (
        (["--device", "cuda:x"], {}, "bad setting VOICELANE_DEVICE"),
        (["--device", "cuda:0"], {}, "the espeak engine runs on the CPU"),
        (
            ["--device", "cuda:0"],
            {"VOICELANE_CHATTTS_DEVICE": "cuda:0"},
            "voicelane: error: VOICELANE_CHATTTS_DEVICE is no longer read: the engine runs on "
            "the process's device: set VOICELANE_DEVICE (a worker's --device) instead\n",
        ),
    ):
        done = _cli(["worker", *args], {**env, **more}, Path.cwd())
        assert done.returncode == 2, done.stderr
        assert message in done.stderr and "Traceback" not in done.stderr


def _cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "voicelane.api.cli", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={**os.environ, **env},
        cwd=cwd,
    )


def test_cli_renders_with_chattts_and_rejects_a_missing_dir(
    chattts_checkpoint: Checkpoint, tmp_path: Path
) -> None:
    text = tmp_path / "input.txt"
    text.write_text("Hello world. 你好世界。\n")
    env = {
        "VOICELANE_CHATTTS__DIR": str(chattts_checkpoint.directory),
        "VOICELANE_CHATTTS__NORMALIZE_TEXT": "false",
        "VOICELANE_CHATTTS__HOMOPHONE_REPLACEMENT": "false",
        "VOICELANE_CHATTTS__MIN_NEW_TOKENS": "8",
        "VOICELANE_CHATTTS__MAX_NEW_TOKENS": "24",
    }
    output = tmp_path / "out.wav"
    args = ["render", str(text), "-o", str(output), "--engine", "chattts", "--voice", "seed:5"]
    rendered = _cli(args, env, tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    assert output.stat().st_size > 44 + 2 * samples(8)  # a WAV header and audio

    missing = _cli(args, {**env, "VOICELANE_CHATTTS__DIR": str(tmp_path / "nope")}, tmp_path)
    assert missing.returncode == 2
    lines = missing.stderr.strip().splitlines()
    assert lines == [
        f"voicelane: error: VOICELANE_CHATTTS__DIR={tmp_path / 'nope'}: no such directory"
    ]
    bad = _cli(args, {**env, "VOICELANE_CHATTTS__CONTEXT_STEPS": "-1"}, tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "voicelane: error: bad setting VOICELANE_CHATTTS__CONTEXT_STEPS: "
        "Input should be greater than or equal to 0"
    ]
