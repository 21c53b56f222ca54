"""ChatTTS through the batcher's step loop (continuous batching), on the tiny checkpoint.

Steps are counted, not milliseconds: ``Batcher.stats().batches`` is the number of steps the
loop has started, read on the batcher's own thread when a chunk is delivered.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest

from tests.support.chattts_checkpoint import Checkpoint
from tests.unit.workers.engines.conftest import require_chattts_extra

require_chattts_extra()

import torch  # noqa: E402

from voicelane.common.errors import (  # noqa: E402
    DeadlineExceededError,
    EngineOutOfMemoryError,
)
from voicelane.core.settings import BatcherSettings, ChatTTSSettings  # noqa: E402
from voicelane.workers.batching import Batcher, Priority  # noqa: E402
from voicelane.workers.engines.base import PcmF32, Utterance  # noqa: E402
from voicelane.workers.engines.chattts import ChatTTSEngine  # noqa: E402
from voicelane.workers.engines.chattts_steps import ChatTTSSteps  # noqa: E402

TIMEOUT_S = 120.0
FIRST_CHUNK_STEPS = 24


def exact(steps: int) -> tuple[tuple[str, float | int | str], ...]:
    return (("max_new_tokens", steps), ("min_new_tokens", steps))


def batch_row(index: int, steps: int) -> Utterance:
    return Utterance(
        f"Sentence number {index}.", f"seed:{index % 5}", seed=index, params=exact(steps)
    )


@pytest.fixture
def engine(chattts_checkpoint: Checkpoint) -> Iterator[ChatTTSEngine]:
    yield ChatTTSEngine(ChatTTSSettings(dir=chattts_checkpoint.directory))


def whole(engine: ChatTTSEngine, utterance: Utterance) -> PcmF32:
    """The utterance rendered alone (static loop)."""
    (audio,) = engine.synthesize([utterance])
    return audio


def test_a_realtime_row_gets_its_first_chunk_a_few_steps_after_64_batch_rows(
    engine: ChatTTSEngine,
) -> None:
    with Batcher(engine, BatcherSettings(max_batch=64)) as batcher:
        futures = [batcher.submit(batch_row(i, 300)) for i in range(64)]
        while batcher.stats().batches < 40:  # every batch row prefilled and decoding
            threading.Event().wait(0.01)
        assert batcher.stats().items == 64
        first_chunk_at: list[int] = []
        probe = Utterance("Hello there.", "seed:1", seed=3, params=exact(48))
        submitted_at = batcher.stats().batches
        stream = batcher.submit_stream(probe, priority=Priority.REALTIME)
        stream.listen(lambda: first_chunk_at.append(batcher.stats().batches))
        chunks = [chunk for chunk in stream]
        paused = batcher.stats().paused
        for future in futures:
            assert future.result(TIMEOUT_S).size > 0
    # Alone, its first chunk is due after its prefill step and 23 more: 24 steps. Here it
    # waits at most the step that was running when it arrived, plus one boundary.
    waited = first_chunk_at[0] - submitted_at
    assert FIRST_CHUNK_STEPS <= waited <= FIRST_CHUNK_STEPS + 2
    assert np.concatenate(chunks).size == 48 * 512 - 256
    assert paused == 0  # the loop went back to stepping every row once it had room


def test_a_live_row_preempts_a_batch_row_when_the_kv_budget_is_full(
    chattts_checkpoint: Checkpoint,
) -> None:
    """The KV budget holds exactly four batch rows: a live row that arrives takes the youngest
    one's place (its blocks freed), gets its first chunk as soon as it would alone (give or
    take the step running when it came), and the preempted row, rendered again from its
    start, completes with the audio it gives alone."""
    rows = [batch_row(i, 120) for i in range(4)]
    probe = Utterance("Hello there.", "seed:1", seed=3, params=exact(48))
    sizing = ChatTTSEngine(ChatTTSSettings(dir=chattts_checkpoint.directory))
    sizing.load()
    alone = [whole(sizing, row) for row in rows]
    budget = sum(sizing.reserved_tokens(row) for row in rows)
    assert sizing.reserved_tokens(probe) < sizing.reserved_tokens(rows[-1])
    sizing.unload()
    engine = ChatTTSEngine(
        ChatTTSSettings(dir=chattts_checkpoint.directory, kv_budget_tokens=budget)
    )
    with Batcher(engine, BatcherSettings(max_batch=64)) as batcher:
        futures = [batcher.submit(row) for row in rows]
        while batcher.stats().batches < 20:  # every batch row prefilled and decoding
            threading.Event().wait(0.01)
        assert batcher.stats().items == 4
        first_chunk_at: list[int] = []
        submitted_at = batcher.stats().batches
        stream = batcher.submit_stream(probe, priority=Priority.REALTIME)
        stream.listen(lambda: first_chunk_at.append(batcher.stats().batches))
        chunks = list(stream)
        outputs = [future.result(TIMEOUT_S) for future in futures]
        stats = batcher.stats()
    waited = first_chunk_at[0] - submitted_at
    assert FIRST_CHUNK_STEPS <= waited <= FIRST_CHUNK_STEPS + 2
    assert np.concatenate(chunks).size == 48 * 512 - 256
    assert stats.preempted == 1
    assert stats.items == 6  # four batch rows, the live row, the preempted row again
    for reference, audio in zip(alone, outputs, strict=True):
        assert audio.shape == reference.shape
        assert float(np.abs(reference - audio).max()) < 1e-5


def test_rows_of_a_running_batch_give_the_audio_they_give_alone(engine: ChatTTSEngine) -> None:
    rows = [batch_row(i, 20 + 13 * i) for i in range(6)]
    engine.load()
    alone = [whole(engine, row) for row in rows]
    engine.unload()
    with Batcher(engine, BatcherSettings(max_batch=3)) as batcher:  # rows leave and are replaced
        futures = [batcher.submit(row) for row in rows]
        outputs = [future.result(TIMEOUT_S) for future in futures]
        stats = batcher.stats()
    for reference, audio in zip(alone, outputs, strict=True):
        assert float(np.abs(reference - audio).max()) < 1e-5
    assert [len(a) for a in outputs] == [(20 + 13 * i) * 512 - 256 for i in range(6)]
    assert max(stats.batch_sizes) == 3
    # Row 0 (20 steps) left first and row 3 took its place at once: more steps ran with three
    # rows than the longest row alone would need.
    assert stats.batch_sizes[3] > 20


def _forward_failing(
    monkeypatch: pytest.MonkeyPatch, fail: str, calls: list[tuple[int, int]]
) -> None:
    """Out of memory in the GPT forward: at a prefill once 3 rows are in, or at any
    decoding step of more than 2 rows."""
    real = ChatTTSSteps._forward

    def forward(
        self: ChatTTSSteps, embeds: torch.Tensor, past: list[int], blocks: list[list[int]]
    ) -> torch.Tensor:
        rows, new = int(embeds.shape[0]), int(embeds.shape[1])
        calls.append((rows, new))
        prefill = new > 1
        if fail == "prefill" and prefill and len(self.handles) > 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 GiB")
        if fail == "step" and not prefill and rows > 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB")
        return real(self, embeds, past, blocks)

    monkeypatch.setattr(ChatTTSSteps, "_forward", forward)


@pytest.mark.parametrize("fail", ["prefill", "step"])
def test_out_of_memory_halves_the_running_batch_and_loses_nothing(
    engine: ChatTTSEngine, monkeypatch: pytest.MonkeyPatch, fail: str
) -> None:
    rows = [batch_row(i, 16 + 5 * i) for i in range(8)]
    engine.load()
    alone = [whole(engine, row) for row in rows]
    engine.unload()
    calls: list[tuple[int, int]] = []
    _forward_failing(monkeypatch, fail, calls)
    with Batcher(engine, BatcherSettings(max_batch=8, grow_after_successes=100)) as batcher:
        futures = [batcher.submit(row) for row in rows]
        outputs = [future.result(TIMEOUT_S) for future in futures]
        stats = batcher.stats()
    for reference, audio in zip(alone, outputs, strict=True):
        assert reference.shape == audio.shape
        assert float(np.abs(reference - audio).max()) < 1e-5
    assert stats.oom_events >= 1
    if fail == "step":
        assert stats.effective_max_batch == 2  # 8 -> 4 -> 2
        assert max(rows for rows, new in calls if new == 1 and (rows, new) != calls[-1]) >= 3
    else:
        assert stats.effective_max_batch <= 4  # 8 -> 4 (then 2 if it failed again)


def test_out_of_memory_on_one_row_fails_it_with_the_typed_error(
    engine: ChatTTSEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    def always(self: ChatTTSSteps, *args: object) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(ChatTTSSteps, "_forward", always)
    with Batcher(engine) as batcher:
        future = batcher.submit(batch_row(1, 10))
        with pytest.raises(EngineOutOfMemoryError, match="out of memory"):
            future.result(TIMEOUT_S)


def test_a_joined_stream_cancelled_or_past_its_deadline_leaves_the_others_intact(
    engine: ChatTTSEngine,
) -> None:
    long_row = batch_row(2, 200)
    with Batcher(engine, BatcherSettings(max_batch=8)) as batcher:
        kept = batcher.submit(long_row)
        cancelled = batcher.submit_stream(batch_row(3, 400), priority=Priority.REALTIME)
        assert cancelled.read(TIMEOUT_S) is not None  # it joined and streams
        cancelled.cancel()
        expiring = batcher.submit_stream(
            batch_row(4, 400), priority=Priority.REALTIME, deadline_s=batcher.clock() + 0.3
        )
        with pytest.raises(DeadlineExceededError, match="deadline passed"):
            while expiring.read(TIMEOUT_S) is not None:
                pass
        audio = kept.result(TIMEOUT_S)
    engine.load()
    try:
        assert float(np.abs(whole(engine, long_row) - audio).max()) < 1e-5
    finally:
        engine.unload()
