"""Tenant voices on the ChatTTS engine (``Utterance.speaker``): mixes of seed and named voices,
inline ``spk_emb`` embeddings, zero-shot from a reference clip; on the tiny random checkpoint.

Every utterance has an exact length (``min_new_tokens == max_new_tokens``) and a seed, so
audio can be compared sample for sample.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support.chattts_checkpoint import Checkpoint
from tests.unit.workers.engines.conftest import require_chattts_extra

require_chattts_extra()

import torch  # noqa: E402

from tests.support.chattts_checkpoint import MANIFEST_NAME, sha256_key  # noqa: E402
from voicelane.common.errors import (  # noqa: E402
    ConfigError,
    InvalidInputError,
    ModelLoadError,
    UnknownVoiceError,
    is_permanent,
)
from voicelane.core.rules import EngineCapabilities  # noqa: E402
from voicelane.core.settings import BatcherSettings, ChatTTSSettings  # noqa: E402
from voicelane.core.speaker_embedding import encode_spk_emb  # noqa: E402
from voicelane.core.speakers import SpeakerDef  # noqa: E402
from voicelane.workers.batching import Batcher  # noqa: E402
from voicelane.workers.engines import chattts_speakers  # noqa: E402
from voicelane.workers.engines.base import PcmF32, Utterance  # noqa: E402
from voicelane.workers.engines.chattts import ChatTTSEngine  # noqa: E402
from voicelane.workers.engines.chattts_config import file_sha256  # noqa: E402
from voicelane.workers.engines.chattts_model import LoadedModel, encode_clip  # noqa: E402
from voicelane.workers.engines.chattts_speakers import mix_embeddings  # noqa: E402
from voicelane.workers.engines.speaker_clips import SpeakerClips  # noqa: E402

TIMEOUT_S = 120.0
CLIP_REF = "tenant-a/0f0e"
TRANSCRIPT = "good morning"


def exact(steps: int) -> tuple[tuple[str, float | int | str], ...]:
    return (("max_new_tokens", steps), ("min_new_tokens", steps))


def reference_clip(seconds: float = 1.5) -> PcmF32:
    """A deterministic stand-in for a recording (random weights make any audio a voice)."""
    time_s = np.arange(round(seconds * 24000)) / 24000
    noise = np.random.default_rng(5).normal(0.0, 0.05, time_s.size)
    return (0.3 * np.sin(2 * np.pi * 180 * time_s) + noise).astype(np.float32)


def spoken(
    speaker: SpeakerDef, text: str = "hello world", seed: int = 7, steps: int = 24
) -> Utterance:
    return Utterance(text, f"custom:{speaker.digest}", seed=seed, params=exact(steps),
                     speaker=speaker)  # fmt: skip


def plain(voice: str, text: str = "hello world", seed: int = 7, steps: int = 24) -> Utterance:
    return Utterance(text, voice, seed=seed, params=exact(steps))


def mix(*parts: tuple[str, float]) -> SpeakerDef:
    return SpeakerDef.mix(list(parts))


CLIP = SpeakerDef(clip_ref=CLIP_REF, clip_transcript=TRANSCRIPT)


@pytest.fixture(scope="module")
def alice() -> list[float]:
    return [float(x) for x in np.random.default_rng(11).normal(0.0, 1.0, 64)]


@pytest.fixture(scope="module")
def clips() -> SpeakerClips:
    return SpeakerClips()


@pytest.fixture(scope="module")
def settings(
    chattts_checkpoint: Checkpoint, tmp_path_factory: pytest.TempPathFactory, alice: list[float]
) -> ChatTTSSettings:
    voices = tmp_path_factory.mktemp("voices") / "voices.json"
    voices.write_text(json.dumps({"voices": {"alice": {"embedding": alice}}}))
    return ChatTTSSettings(dir=chattts_checkpoint.directory, voices_file=voices)


@pytest.fixture(scope="module")
def engine(settings: ChatTTSSettings, clips: SpeakerClips) -> Iterator[ChatTTSEngine]:
    """Loaded once. (A batcher loads and unloads the engine it runs: those tests build
    their own, on the same checkpoint and clip store.)"""
    loaded = ChatTTSEngine(settings, clips=clips)
    loaded.load()
    yield loaded
    loaded.unload()


@pytest.fixture
def with_clip(clips: SpeakerClips) -> Iterator[SpeakerClips]:
    clips.put(CLIP_REF, reference_clip())
    yield clips
    clips.discard(CLIP_REF)


def render(engine: ChatTTSEngine, utterance: Utterance) -> PcmF32:
    engine.validate(utterance)
    (audio,) = engine.synthesize([utterance])
    return audio


def z_of(engine: ChatTTSEngine, embedding: torch.Tensor) -> torch.Tensor:
    """An embedding in the speaker distribution's coordinates: (e - mean) / std."""
    speaker = engine.model.chat.speaker
    z: torch.Tensor = (embedding.float() - speaker.mean.float()) / speaker.std.float()
    return z


# ---- capabilities -----------------------------------------------------------------------


def test_the_engine_publishes_every_voice_kind(engine: ChatTTSEngine) -> None:
    caps = engine.capabilities()
    assert caps.voice_kinds == ("seed", "embedding", "clip", "mix")
    assert EngineCapabilities.from_json(caps.to_json()).voice_kinds == caps.voice_kinds


# ---- parts: seeds, named voices, embeddings, mixes ------------------------------------------


def test_a_mix_of_one_voice_is_that_voice(engine: ChatTTSEngine) -> None:
    one = mix(("seed:3", 1.0))
    assert torch.equal(engine.speaker_embedding(one), engine.speaker_embedding("seed:3"))
    assert np.array_equal(render(engine, spoken(one)), render(engine, plain("seed:3")))
    assert torch.equal(
        engine.speaker_embedding(mix(("alice", 2.0))), engine.speaker_embedding("alice")
    )
    default = engine.speaker_embedding("seed:2")
    assert torch.equal(engine.speaker_embedding(mix(("auto", 1.0))), default)


def test_a_mix_of_two_seeds_is_neither_yet_as_far_from_the_mean_speaker(
    engine: ChatTTSEngine,
) -> None:
    a, b = engine.speaker_embedding("seed:1"), engine.speaker_embedding("seed:4")
    both = engine.speaker_embedding(mix(("seed:1", 1.0), ("seed:4", 1.0)))
    za, zb, zm = z_of(engine, a), z_of(engine, b), z_of(engine, both)
    # Its spread is the parts' mean spread (a plain average would have ~0.71 of it) ...
    assert float(zm.norm()) == pytest.approx((float(za.norm()) + float(zb.norm())) / 2, rel=2e-3)
    # ... pointing half way between them.
    cos = torch.nn.functional.cosine_similarity
    assert float(cos(zm, za, dim=0)) == pytest.approx(float(cos(zm, zb, dim=0)), abs=0.02)
    assert 0.5 < float(cos(zm, za, dim=0)) < 0.9
    # Random weights barely listen to the speaker (the tokens here are the same for all
    # three): the audio differs in the hidden states' share, far above the 1e-5 that rows
    # of one voice may differ by in a batch (alone, the same voice renders identically).
    audio = render(engine, spoken(mix(("seed:1", 1.0), ("seed:4", 1.0))))
    for voice in ("seed:1", "seed:4"):
        alone = render(engine, plain(voice))
        assert np.array_equal(alone, render(engine, plain(voice)))
        assert audio.shape == alone.shape
        assert float(np.abs(audio - alone).max()) > 2e-5
    # Weights matter: 3 to 1 leans towards the first.
    leaning = z_of(engine, engine.speaker_embedding(mix(("seed:1", 3.0), ("seed:4", 1.0))))
    assert float(cos(leaning, za, dim=0)) > float(cos(leaning, zb, dim=0)) + 0.2


def test_parts_that_cancel_out_make_the_mean_speaker(engine: ChatTTSEngine) -> None:
    speaker = engine.model.chat.speaker
    opposite = 2 * speaker.mean.float() - engine.speaker_embedding("seed:1").float()
    mixed = mix_embeddings(
        [(engine.speaker_embedding("seed:1"), 0.5), (opposite.half(), 0.5)],
        speaker.std.cpu(),
        speaker.mean.cpu(),
    )
    assert torch.allclose(mixed.float(), speaker.mean.float().cpu(), atol=1e-2)


def test_an_inline_embedding_is_that_speaker(engine: ChatTTSEngine) -> None:
    spk_emb = encode_spk_emb(engine.speaker_embedding("seed:5").float().numpy())
    inline = mix((f"emb:{spk_emb}", 1.0))
    assert np.array_equal(render(engine, spoken(inline)), render(engine, plain("seed:5")))
    # ... and mixes like any other part.
    with_seed = mix((f"emb:{spk_emb}", 1.0), ("seed:1", 1.0))
    assert torch.equal(
        engine.speaker_embedding(with_seed),
        engine.speaker_embedding(mix(("seed:5", 1.0), ("seed:1", 1.0))),
    )


@pytest.mark.parametrize(
    ("source", "error", "message"),
    [
        ("emb:" + encode_spk_emb(np.ones(32)), InvalidInputError, "32 values; .* have 64"),
        ("emb:not a speaker", InvalidInputError, "not a ChatTTS speaker embedding"),
        ("bob", UnknownVoiceError, "unknown voice 'bob'"),
        ("seed:x", UnknownVoiceError, "seed"),
    ],
    ids=["wrong size", "malformed", "unknown name", "bad seed"],
)
def test_a_part_that_cannot_be_made_is_refused_at_submission(
    engine: ChatTTSEngine, source: str, error: type[Exception], message: str
) -> None:
    utterance = spoken(mix((source, 1.0), ("seed:1", 1.0)))
    with pytest.raises(error, match=message) as caught:
        engine.validate(utterance)
    assert is_permanent(caught.value)


def test_the_embedding_size_is_checked_before_load_too(
    chattts_checkpoint: Checkpoint, clips: SpeakerClips
) -> None:
    """Before load only the string's form is known; the size is checked when the row is
    planned (a permanent error there too)."""
    engine = ChatTTSEngine(ChatTTSSettings(dir=chattts_checkpoint.directory), clips=clips)
    wrong = spoken(mix(("emb:" + encode_spk_emb(np.ones(32)), 1.0)))
    engine.validate(wrong)
    with pytest.raises(InvalidInputError, match="not a ChatTTS"):
        engine.validate(spoken(mix(("emb:nope", 1.0))))
    engine.load()
    try:
        with pytest.raises(InvalidInputError, match="32 values"):
            engine.synthesize([wrong])
    finally:
        engine.unload()


def test_each_speaker_is_its_own_batch_key(engine: ChatTTSEngine) -> None:
    first = mix(("seed:1", 1.0), ("seed:4", 1.0))
    second = mix(("seed:1", 1.0), ("seed:4", 2.0))
    assert engine.batch_key(spoken(first)) == engine.batch_key(spoken(first, text="other"))
    assert engine.batch_key(spoken(first)) != engine.batch_key(spoken(second))
    assert engine.batch_key(spoken(first)) != engine.batch_key(plain("seed:1"))


# ---- zero-shot from a reference clip ----------------------------------------------------------


@pytest.mark.filterwarnings("ignore:.*past_key_values.*:FutureWarning")  # ChatTTS's own loop
def test_zero_shot_gives_chattts_own_tokens_for_its_speaker_sample(
    engine: ChatTTSEngine, with_clip: SpeakerClips
) -> None:
    """ChatTTS's ``sample_audio_speaker`` (DVAE encoder) + ``txt_smp``, step for step."""
    import ChatTTS

    chat = engine.model.chat
    params = ChatTTS.Chat.InferCodeParams(
        manual_seed=7,
        min_new_token=24,
        max_new_token=24,
        show_tqdm=False,
        spk_smp=chat.sample_audio_speaker(torch.from_numpy(reference_clip())),
        txt_smp=TRANSCRIPT,
    )
    upstream = next(chat._infer_code(["hello world"], False, chat.device, True, params))
    session = engine.open_steps()
    session.record_tokens = True
    session.admit(1, spoken(CLIP), stream=False)
    (event,) = [e for _ in range(30) for e in session.step(session.handles)]
    assert torch.equal(session.finished_tokens[1], upstream.ids[0])
    assert event.finished
    assert event.audio.size == 24 * 512 - 256
    # The clip's 70 audio tokens (1.5 s: 141 mel frames, halved) and its transcript are in
    # the prompt: the KV budget counts them.
    assert engine.reserved_tokens(spoken(CLIP)) == (
        engine.reserved_tokens(plain("seed:3")) + len(TRANSCRIPT) + 70
    )
    default = render(engine, plain("seed:2"))
    assert float(np.abs(render(engine, spoken(CLIP)) - default).max()) > 2e-5


@pytest.mark.parametrize("seconds", [1.0, 1.37, 2.0])
def test_the_kv_reservation_counts_the_clip_before_and_after_it_is_encoded(
    engine: ChatTTSEngine, clips: SpeakerClips, seconds: float
) -> None:
    """Before its first row the clip's tokens are counted from its samples: exactly what
    the encoder then makes."""
    voice = SpeakerDef(clip_ref=f"tenant-b/{seconds}", clip_transcript="hi")
    base = engine.reserved_tokens(plain("seed:3")) + len("hi")
    clips.put(voice.clip_ref, reference_clip(seconds))
    try:
        before = engine.reserved_tokens(spoken(voice))
        session = engine.open_steps()
        session.admit(1, spoken(voice), stream=False)  # encodes the clip
        prompt = session.model.chat.dvae.sample_audio(torch.from_numpy(reference_clip(seconds)))
        assert before == engine.reserved_tokens(spoken(voice)) == base + prompt.shape[1]
        session.close()
    finally:
        clips.discard(voice.clip_ref)


def test_a_clip_is_encoded_once_and_kept_when_the_store_forgets_it(
    engine: ChatTTSEngine, with_clip: SpeakerClips, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def counted(model: LoadedModel, pcm: np.ndarray) -> torch.Tensor:
        calls.append(pcm.size)
        return encode_clip(model, pcm)

    monkeypatch.setattr(chattts_speakers, "encode_clip", counted)
    voice = SpeakerDef(clip_ref=CLIP_REF, clip_transcript="another transcript, one encode")
    first = render(engine, spoken(voice, seed=3))
    with_clip.discard(CLIP_REF)
    second = render(engine, spoken(voice, seed=3))  # validate passes: the engine has it
    assert np.array_equal(first, second)
    assert calls == [reference_clip().size]


def test_a_missing_clip_is_refused_and_fails_its_row_alone(engine: ChatTTSEngine) -> None:
    missing = SpeakerDef(clip_ref="tenant-a/gone", clip_transcript="hello")
    with pytest.raises(UnknownVoiceError, match="tenant-a/gone is not on this worker") as caught:
        engine.validate(spoken(missing))
    assert is_permanent(caught.value)
    assert caught.value.field == "voice"
    session = engine.open_steps()
    session.admit(1, plain("seed:3"), stream=False)
    session.step(session.handles)
    with pytest.raises(UnknownVoiceError):
        session.admit(2, spoken(missing), stream=False)
    audio = [e.audio for _ in range(30) for e in session.step(session.handles)]
    assert session.handles == []
    assert np.array_equal(audio[0], render(engine, plain("seed:3")))


def test_a_clip_voice_has_no_embedding(engine: ChatTTSEngine) -> None:
    with pytest.raises(InvalidInputError, match="no embedding"):
        engine.speaker_embedding(SpeakerDef(clip_ref="x/y", clip_transcript="hi"))


def test_without_a_dvae_encoder_clip_voices_are_a_clear_configuration_error(
    engine: ChatTTSEngine, with_clip: SpeakerClips, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ChatTTS that loads a DVAE without its encoder (0.2.5 does not: next test)."""
    monkeypatch.setattr(engine.model.chat.dvae, "encoder", None)
    voice = SpeakerDef(clip_ref=CLIP_REF, clip_transcript="no encoder here")
    with pytest.raises(ConfigError, match="DVAE has no encoder") as caught:
        engine.validate(spoken(voice))
    assert is_permanent(caught.value)
    with pytest.raises(ConfigError):
        engine.synthesize([spoken(voice)])
    assert render(engine, plain("seed:3")).size > 0  # other voices go on


def test_a_checkpoint_whose_dvae_lacks_the_encoder_does_not_load(
    chattts_checkpoint: Checkpoint, tmp_path: Path
) -> None:
    """ChatTTS 0.2.5 loads DVAE.safetensors strictly, encoder included."""
    from safetensors.torch import load_file, save_file

    directory = tmp_path / "checkpoint"
    shutil.copytree(chattts_checkpoint.directory, directory)
    dvae = directory / "asset" / "DVAE.safetensors"
    kept = {
        name: tensor
        for name, tensor in load_file(str(dvae)).items()
        if not name.startswith(("encoder.", "downsample_conv.", "vq_layer."))
    }
    save_file(kept, str(dvae))
    manifest = json.loads((directory / MANIFEST_NAME).read_text())
    manifest["sha256"][sha256_key("asset/DVAE.safetensors")] = file_sha256(dvae)
    (directory / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(ModelLoadError, match="DVAE"):
        ChatTTSEngine(ChatTTSSettings(dir=directory)).load()


# ---- sharing a batch ------------------------------------------------------------------------


def test_a_static_batch_of_clip_mix_and_seed_rows_gives_each_its_own_audio(
    engine: ChatTTSEngine, with_clip: SpeakerClips
) -> None:
    """One prompt with a clip's audio tokens, the others without: each row is padded
    on its own left, as ChatTTS pads a batch."""
    rows = [
        spoken(CLIP, steps=30),
        plain("seed:3", text="Good morning, everyone here.", steps=20),
        spoken(mix(("seed:1", 1.0), ("alice", 1.0)), seed=2, steps=26),
    ]
    together = engine.synthesize(rows)
    for row, audio in zip(rows, together, strict=True):
        (alone,) = engine.synthesize([row])
        assert audio.shape == alone.shape
        assert float(np.abs(audio - alone).max()) < 1e-5


def test_tenant_voices_share_the_running_batch_and_each_row_gets_its_alone_audio(
    engine: ChatTTSEngine,
    settings: ChatTTSSettings,
    with_clip: SpeakerClips,
    alice: list[float],
) -> None:
    """The same voice and seed give the same audio whatever else shares the batch; a voice
    that cannot be made is refused at submission."""
    spk_emb = encode_spk_emb(np.asarray(alice))
    rows = [
        spoken(CLIP, steps=40),
        spoken(mix(("seed:1", 1.0), ("seed:4", 1.0)), seed=3, steps=28),
        spoken(mix((f"emb:{spk_emb}", 2.0), ("seed:6", 1.0)), seed=4, steps=34),
        spoken(CLIP, text="这是一个测试", seed=9, steps=22),
        plain("seed:3", steps=31),
    ]
    wrong_size = spoken(mix(("emb:" + encode_spk_emb(np.ones(32)), 1.0)))
    batched = ChatTTSEngine(settings, clips=with_clip)
    with Batcher(batched, BatcherSettings(max_batch=8)) as batcher:
        with pytest.raises(InvalidInputError, match="32 values"):
            batcher.submit(wrong_size)
        futures = [batcher.submit(row) for row in rows]
        together = [future.result(TIMEOUT_S) for future in futures]
        assert batcher.stats().items == len(rows)
    for row, audio in zip(rows, together, strict=True):
        (alone,) = engine.synthesize([row])
        assert audio.shape == alone.shape
        assert float(np.abs(audio - alone).max()) < 1e-5
