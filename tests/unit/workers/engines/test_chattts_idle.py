"""Idle unload with the real ChatTTS engine (tiny checkpoint, CPU) through the batcher: the
unload drops every tensor of the model, and the load on the next request renders the same
audio for the same seed as before the unload."""

from __future__ import annotations

import weakref
from collections.abc import Iterator

import numpy as np
import pytest

from tests.support.chattts_checkpoint import Checkpoint
from tests.support.engines import FakeClock
from tests.unit.workers.engines.conftest import require_chattts_extra

require_chattts_extra()

import torch  # noqa: E402

from voicelane.core.settings import BatcherSettings, ChatTTSSettings  # noqa: E402
from voicelane.workers.batching import AudioStream, Batcher, Priority  # noqa: E402
from voicelane.workers.engines.base import PcmF32, Utterance  # noqa: E402
from voicelane.workers.engines.chattts import ChatTTSEngine  # noqa: E402

TIMEOUT_S = 120.0
IDLE_S = 30.0


def exact(steps: int) -> tuple[tuple[str, float | int | str], ...]:
    return (("max_new_tokens", steps), ("min_new_tokens", steps))


WHOLE = Utterance("Good morning, everyone.", "seed:3", seed=7, params=exact(40))
STREAMED = Utterance("你好，早上好。", "seed:1", seed=11, params=exact(48))


def model_tensors(engine: ChatTTSEngine) -> list[weakref.ref[torch.Tensor]]:
    """Weak references to every parameter and buffer of the loaded model's modules, and to
    the tensors the engine computed from them."""
    chat = engine.model.chat
    modules = [value for value in vars(chat).values() if isinstance(value, torch.nn.Module)]
    assert len(modules) >= 4  # gpt, decoder, dvae, vocos, embed...
    tensors = [t for m in modules for t in (*m.parameters(), *m.buffers())]
    tensors.append(engine.model.code_head)
    return [weakref.ref(tensor) for tensor in tensors]


def played(stream: AudioStream) -> PcmF32:
    return np.concatenate(list(stream))


@pytest.fixture
def batcher(chattts_checkpoint: Checkpoint) -> Iterator[tuple[Batcher, FakeClock]]:
    clock = FakeClock()
    engine = ChatTTSEngine(ChatTTSSettings(dir=chattts_checkpoint.directory))
    batcher = Batcher(engine, BatcherSettings(max_batch=4), clock=clock, idle_unload_s=IDLE_S)
    batcher.start(timeout_s=TIMEOUT_S)
    yield batcher, clock
    batcher.close(drain=False, timeout_s=TIMEOUT_S)


def test_idle_unload_drops_the_models_tensors_and_the_reload_renders_the_same_audio(
    batcher: tuple[Batcher, FakeClock],
) -> None:
    batcher_, clock = batcher
    engine = batcher_.engine
    assert isinstance(engine, ChatTTSEngine)
    whole_before = batcher_.submit(WHOLE).result(TIMEOUT_S)
    streamed_before = played(batcher_.submit_stream(STREAMED, priority=Priority.REALTIME))
    tensors = model_tensors(engine)
    chat = weakref.ref(engine.model.chat)
    assert batcher_.settle(TIMEOUT_S)

    clock.advance(IDLE_S)
    batcher_.wake()
    assert batcher_.settle(TIMEOUT_S)
    assert (batcher_.engine_loaded, engine.loaded) == (False, False)
    assert chat() is None
    alive = sum(ref() is not None for ref in tensors)
    assert alive == 0, f"{alive} of the model's {len(tensors)} tensors outlived the unload"

    # The same requests in the same order (rows sharing a step may differ in the last bits).
    np.testing.assert_array_equal(batcher_.submit(WHOLE).result(TIMEOUT_S), whole_before)
    assert (batcher_.engine_loaded, engine.loaded) == (True, True)
    streamed_after = played(batcher_.submit_stream(STREAMED, priority=Priority.REALTIME))
    np.testing.assert_array_equal(streamed_after, streamed_before)
