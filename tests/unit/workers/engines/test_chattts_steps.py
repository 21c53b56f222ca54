"""ChatTTS's running batch (continuous batching), on the tiny random checkpoint.

The session is driven directly here (admit, step, remove); the batcher's scheduling of it is
pinned in tests/unit/workers/test_batcher_steps.py (with a fake engine) and in
tests/unit/workers/engines/test_chattts_continuous.py (with this engine).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pytest

from tests.support.chattts_checkpoint import Checkpoint
from tests.unit.workers.engines.conftest import chattts_infer_codes, require_chattts_extra

require_chattts_extra()

import torch  # noqa: E402

from voicelane.common.errors import EngineOutOfMemoryError  # noqa: E402
from voicelane.core.settings import ChatTTSSettings  # noqa: E402
from voicelane.core.speaker_embedding import encode_spk_emb  # noqa: E402
from voicelane.core.speakers import SpeakerDef  # noqa: E402
from voicelane.workers.engines.base import PcmF32, Utterance  # noqa: E402
from voicelane.workers.engines.chattts import ChatTTSEngine  # noqa: E402
from voicelane.workers.engines.chattts_config import Sampling  # noqa: E402
from voicelane.workers.engines.chattts_loop import Generation, decode_rows  # noqa: E402
from voicelane.workers.engines.chattts_model import Row, decorate_prompt  # noqa: E402
from voicelane.workers.engines.chattts_steps import ChatTTSSteps  # noqa: E402
from voicelane.workers.engines.speaker_clips import CLIPS  # noqa: E402

Admissions = Mapping[int, Sequence[tuple[int, Utterance]]]


def exact(steps: int, **sampling: float | int) -> tuple[tuple[str, float | int | str], ...]:
    params: dict[str, float | int] = {"min_new_tokens": steps, "max_new_tokens": steps}
    params.update(sampling)
    return tuple(sorted(params.items()))


LONG = Utterance("Good morning, everyone here.", "seed:5", seed=9, params=exact(200))
SHORT = Utterance("hello world", "seed:3", seed=7, params=exact(40))
OTHER = Utterance(
    "这是一个测试语音合成的句子。", "seed:1", seed=4, params=exact(90, temperature=0.5, top_k=10)
)
MID = Utterance("She smiled.", "seed:8", seed=21, speed=1.4, params=exact(64, top_p=0.9))


@pytest.fixture(scope="module")
def engine(chattts_checkpoint: Checkpoint) -> Iterator[ChatTTSEngine]:
    loaded = ChatTTSEngine(ChatTTSSettings(dir=chattts_checkpoint.directory))
    loaded.load()
    yield loaded
    loaded.unload()


def session_of(engine: ChatTTSEngine) -> ChatTTSSteps:
    session = engine.open_steps()
    session.record_tokens = True
    return session


def run(
    session: ChatTTSSteps, admissions: Admissions, *, stream: bool = False
) -> dict[int, PcmF32]:
    """Admit rows at the given steps, step every row until all have finished."""
    audio: dict[int, list[PcmF32]] = {}
    step = 0
    last = max(admissions)
    while step <= last or session.handles:
        for handle, utterance in admissions.get(step, ()):
            session.admit(handle, utterance, stream=stream)
        for event in session.step(session.handles):
            audio.setdefault(event.handle, []).append(event.audio)
        step += 1
    return {handle: np.concatenate(chunks) for handle, chunks in audio.items()}


def alone(engine: ChatTTSEngine, utterance: Utterance) -> tuple[torch.Tensor, PcmF32]:
    session = session_of(engine)
    audio = run(session, {0: [(1, utterance)]})
    return session.finished_tokens[1], audio[1]


def test_a_row_joining_at_step_137_gets_the_tokens_and_audio_it_gets_alone(
    engine: ChatTTSEngine,
) -> None:
    """Rows of other lengths, voices, speeds and sampling settings share the batch."""
    session = session_of(engine)
    audio = run(session, {0: [(1, LONG), (2, MID)], 30: [(3, OTHER)], 137: [(4, SHORT)]})
    for handle, utterance in ((1, LONG), (2, MID), (3, OTHER), (4, SHORT)):
        tokens, sound = alone(engine, utterance)
        assert torch.equal(session.finished_tokens[handle], tokens), handle
        assert sound.shape == audio[handle].shape
        assert float(np.abs(sound - audio[handle]).max()) < 1e-5
    assert session.finished_tokens[4].shape[0] == 40
    assert session.handles == []


def test_rows_of_tenant_voices_get_the_tokens_and_audio_they_get_alone(
    engine: ChatTTSEngine,
) -> None:
    """A mix, an inline embedding and a reference clip (its audio tokens in the prompt:
    a longer prompt than its neighbours') joining the running batch at other steps."""
    rng = np.random.default_rng(3)
    CLIPS.put("steps/clip", rng.normal(0.0, 0.1, 30000).astype(np.float32))
    spk_emb = encode_spk_emb(rng.normal(0.0, 1.0, 64))
    voices = [
        SpeakerDef.mix([("seed:1", 2.0), ("seed:6", 1.0)]),
        SpeakerDef.mix([(f"emb:{spk_emb}", 1.0)]),
        SpeakerDef(clip_ref="steps/clip", clip_transcript="she smiled"),
    ]
    mixed, inline, clip = (
        Utterance("Good morning.", f"custom:{v.digest}", seed=5 + i, params=exact(n), speaker=v)
        for i, (v, n) in enumerate(zip(voices, (70, 45, 60), strict=True))
    )
    try:
        session = session_of(engine)
        audio = run(session, {0: [(1, clip), (2, SHORT)], 12: [(3, mixed)], 30: [(4, inline)]})
        for handle, utterance in ((1, clip), (2, SHORT), (3, mixed), (4, inline)):
            tokens, sound = alone(engine, utterance)
            assert torch.equal(session.finished_tokens[handle], tokens), handle
            assert sound.shape == audio[handle].shape
            assert float(np.abs(sound - audio[handle]).max()) < 1e-5
    finally:
        CLIPS.discard("steps/clip")


@pytest.mark.filterwarnings("ignore:.*past_key_values.*:FutureWarning")  # ChatTTS's own loop
def test_at_batch_one_the_tokens_are_chattts_own(engine: ChatTTSEngine) -> None:
    upstream = chattts_infer_codes(engine, "hello world", "seed:3", 7, 40)
    tokens, _audio = alone(engine, SHORT)
    assert torch.equal(tokens, upstream.ids[0])


def test_the_running_batch_gives_the_static_loops_audio(engine: ChatTTSEngine) -> None:
    row = Row(
        decorate_prompt("hello world", 5, True), engine.speaker_embedding("seed:3"), 7, 40, 40
    )
    generation = Generation(engine.model, [row], Sampling(0.3, 0.7, 20, 1.05))
    generation.run()
    (static,) = decode_rows(engine.model, generation)
    tokens, audio = alone(engine, SHORT)
    assert torch.equal(tokens, generation.tokens[0, :40])
    assert float(np.abs(static - audio).max()) < 1e-6


def test_streamed_rows_concatenate_to_their_whole_audio(engine: ChatTTSEngine) -> None:
    admissions = {0: [(1, LONG)], 45: [(2, OTHER)]}
    whole = run(session_of(engine), admissions)
    streamed_session = session_of(engine)
    chunks: dict[int, int] = {1: 0, 2: 0}
    audio: dict[int, list[PcmF32]] = {1: [], 2: []}
    step = 0
    while step <= 45 or streamed_session.handles:
        for handle, utterance in admissions.get(step, ()):
            streamed_session.admit(handle, utterance, stream=True)
        for event in streamed_session.step(streamed_session.handles):
            if event.audio.size:
                chunks[event.handle] += 1
                audio[event.handle].append(event.audio)
        step += 1
    for handle in (1, 2):
        joined = np.concatenate(audio[handle])
        assert joined.shape == whole[handle].shape
        assert float(np.abs(joined - whole[handle]).max()) < 1e-4
    # 200 steps: 8 (first) + 24-step chunks + the tail; never one whole blob.
    assert chunks[1] >= 8
    assert chunks[2] >= 4


def test_rows_leave_at_their_own_ends_and_memory_follows_their_lengths(
    engine: ChatTTSEngine,
) -> None:
    session = session_of(engine)
    block = session.kv.block_tokens
    lengths = {1: 20, 2: 60, 3: 100}
    for handle, steps in lengths.items():
        session.admit(
            handle,
            Utterance("One two three.", "seed:1", seed=handle, params=exact(steps)),
            stream=False,
        )
    finished_at: dict[int, int] = {}
    step = 0
    while session.handles:
        for event in session.step(session.handles):
            if event.finished:
                finished_at[event.handle] = step
        step += 1
        if step == 10:  # every row decoding: one block list per row, rounded up
            blocks = 0
            for handle in session.handles:
                prefilled, prompt, steps = session.progress(handle)
                assert prefilled == prompt > 0
                blocks += math.ceil((prompt + steps - 1) / block)
            assert session.kv.blocks_used == blocks
    # Each row ended at its own step (one prefill step, then one token per step: 19, 59, 99);
    # its blocks went back then, and its whole audio was decoded at the next step.
    assert finished_at == {1: 20, 2: 60, 3: 100}
    assert session.kv.blocks_used == 0 and session.kv.blocks_total == 0


def test_a_long_prompt_is_prefilled_in_bounded_chunks_while_others_decode(
    chattts_checkpoint: Checkpoint,
) -> None:
    engine = ChatTTSEngine(
        ChatTTSSettings(dir=chattts_checkpoint.directory, prefill_chunk_tokens=8)
    )
    engine.load()
    try:
        session = session_of(engine)
        session.admit(1, SHORT, stream=False)
        session.step([1])
        session.step([1])  # row 1 decoding
        text = "A long prompt: " + "words and more words, " * 4
        session.admit(2, Utterance(text, "seed:2", seed=1, params=exact(10)), stream=False)
        prefill_steps = 0
        while session.progress(2)[2] == 0:
            before = session.progress(1)[2]
            session.step([1, 2])
            prefilled, prompt, _steps = session.progress(2)
            assert session.progress(1)[2] == before + 1  # row 1 never waits
            prefill_steps += 1
            assert prefilled <= 8 * prefill_steps
        assert prefill_steps == math.ceil(prompt / 8) and prompt > 16
        run(session, {0: []})
    finally:
        engine.unload()
    assert session.finished_tokens[1].shape[0] == 40
    assert session.finished_tokens[2].shape[0] == 10


def test_paused_rows_keep_their_state(engine: ChatTTSEngine) -> None:
    session = session_of(engine)
    session.admit(1, SHORT, stream=False)
    session.admit(2, MID, stream=False)
    for _ in range(10):
        session.step([1, 2])
    for _ in range(15):  # row 2 paused
        session.step([1])
    assert session.progress(2)[2] == 10  # one token from the prefill, then one per step
    run(session, {0: []})
    tokens, _audio = alone(engine, MID)
    assert torch.equal(session.finished_tokens[2], tokens)


def test_out_of_memory_in_a_step_commits_nothing(
    engine: ChatTTSEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = session_of(engine)
    session.admit(1, SHORT, stream=False)
    session.admit(2, OTHER, stream=False)
    for _ in range(5):
        session.step([1, 2])
    before = (session.progress(1), session.progress(2), session.kv.blocks_used)
    real = ChatTTSSteps._decode_windows
    calls = {"n": 0}

    def fail_once(self: ChatTTSSteps, windows: object) -> object:
        calls["n"] += 1
        if calls["n"] == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
        return real(self, windows)  # type: ignore[arg-type]

    session.admit(3, MID, stream=False)
    monkeypatch.setattr(ChatTTSSteps, "_decode_windows", fail_once)
    with pytest.raises(EngineOutOfMemoryError, match="out of memory"):
        session.step([1, 2, 3])
    assert (session.progress(1), session.progress(2)) == before[:2]
    assert session.progress(3)[0] == 0
    session.remove(3)  # the batcher evicts, then steps again
    run(session, {0: []})
    assert torch.equal(session.finished_tokens[1], alone(engine, SHORT)[0])
    assert torch.equal(session.finished_tokens[2], alone(engine, OTHER)[0])


def test_removed_rows_release_their_blocks_and_unknown_handles_are_ignored(
    engine: ChatTTSEngine,
) -> None:
    session = session_of(engine)
    session.admit(1, LONG, stream=True)
    session.admit(2, SHORT, stream=True)
    for _ in range(30):
        session.step([1, 2])
    used = session.kv.blocks_used
    session.remove(1)
    assert 0 < session.kv.blocks_used < used
    session.remove(1)
    session.remove(99)
    assert session.handles == [2]
    with pytest.raises(ValueError, match="already"):
        session.admit(2, SHORT, stream=True)
    session.close()
    assert session.handles == [] and session.kv.blocks_total == 0


def test_the_kv_budget_admits_rows_while_their_reservations_fit(
    chattts_checkpoint: Checkpoint,
) -> None:
    engine = ChatTTSEngine(ChatTTSSettings(dir=chattts_checkpoint.directory, kv_budget_tokens=200))
    engine.load()
    try:
        session = engine.open_steps()
        row = Utterance("Hi.", "seed:1", params=exact(80))  # reserves 80 + 3 + 16 = 99
        assert engine.reserved_tokens(row) == 99
        assert session.fits(row)
        session.admit(1, row, stream=False)
        assert session.fits(row)
        session.admit(2, row, stream=False)
        assert not session.fits(row)
        session.remove(1)
        assert session.fits(row)
    finally:
        engine.unload()


def test_a_finished_rows_decode_waits_while_a_stream_waits_for_its_first_audio(
    engine: ChatTTSEngine,
) -> None:
    """A whole row that ends while a live stream is still before its first chunk is decoded
    after that chunk: the live voice's first audio does not wait for a whole utterance."""
    session = session_of(engine)
    session.admit(1, Utterance("One two.", "seed:1", seed=1, params=exact(10)), stream=False)
    session.admit(2, Utterance("Streaming now.", "seed:2", seed=2, params=exact(60)), stream=True)
    events: list[tuple[int, int, bool, int]] = []
    for step in range(40):
        for event in session.step(session.handles):
            events.append((step, event.handle, event.finished, event.audio.size))
    whole = [(step, size) for step, handle, finished, size in events if handle == 1 and finished]
    first_chunk = min(step for step, handle, _f, size in events if handle == 2 and size)
    # Row 1 ended at step 9; row 2's first chunk is due after its 24th token (step 23).
    assert first_chunk == 23
    assert whole == [(24, 10 * 512 - 256)]
    assert 1 not in session.handles
