"""Deterministic engines for tests: they record every call and can be held at a gate."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from core.errors import EngineOutOfMemoryError
from workers.engines.base import Engine, PcmF32, Utterance, VoiceInfo

GATE_TIMEOUT_S = 10.0


class FakeClock:
    """A clock that only moves when a test moves it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def audio_for(utterance: Utterance) -> PcmF32:
    """What RecordingEngine renders: one sample per character, valued by the text's hash."""
    value = (sum(map(ord, utterance.text)) % 1000) / 1000.0
    return np.full(len(utterance.text), value, dtype=np.float32)


class RecordingEngine(Engine):
    """Renders :func:`audio_for` each utterance; records batches; can be held at a gate.

    ``hold()`` makes the next calls block until ``release()``; ``entered`` is set when a
    call is waiting at the gate, so tests know a batch is running without sleeping.
    """

    name = "recording"
    sample_rate_hz = 1000

    def __init__(
        self,
        voices: Sequence[str] = ("a", "b"),
        *,
        fail_when: Callable[[Sequence[Utterance]], BaseException | None] | None = None,
        output_count: Callable[[int], int] | None = None,
        stream_chunks: int = 2,
    ) -> None:
        self._voices = [VoiceInfo(id=v, name=v.upper(), languages=("xx",)) for v in voices]
        self.batches: list[list[Utterance]] = []
        self.calls = 0
        self._gate = threading.Event()
        self._gate.set()
        self.entered = threading.Event()
        self.fail_when = fail_when
        self.output_count = output_count
        self.stream_chunks = stream_chunks
        self.gate_from_step = 0
        self.steps_run = 0
        """Streamed steps before this index pass without the gate."""
        self.stream_closed = threading.Event()
        self.loaded_on: threading.Thread | None = None
        self.unloaded = threading.Event()

    # gate control
    def hold(self) -> None:
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    def _pass_gate(self) -> None:
        self.entered.set()
        if not self._gate.wait(GATE_TIMEOUT_S):
            raise TimeoutError("test gate was never released")

    # engine interface
    def load(self) -> None:
        self.loaded_on = threading.current_thread()

    def unload(self) -> None:
        self.unloaded.set()

    def voices(self) -> list[VoiceInfo]:
        return list(self._voices)

    def synthesize(self, batch: Sequence[Utterance]) -> list[PcmF32]:
        self.calls += 1
        self._pass_gate()
        self.batches.append(list(batch))
        if self.fail_when is not None and (error := self.fail_when(batch)) is not None:
            raise error
        outputs = [audio_for(u) for u in batch]
        if self.output_count is not None:
            count = self.output_count(len(batch))
            outputs = (outputs * (count // max(1, len(outputs)) + 1))[:count]
        return outputs

    def synthesize_stream(self, batch: Sequence[Utterance]) -> Iterator[list[PcmF32]]:
        """Each utterance's audio in ``stream_chunks`` steps; gate checked before each step."""
        self.calls += 1
        self.batches.append(list(batch))
        whole = [audio_for(u) for u in batch]
        try:
            for step in range(self.stream_chunks):
                if step >= self.gate_from_step:
                    self._pass_gate()
                if self.fail_when is not None and (error := self.fail_when(batch)) is not None:
                    raise error
                self.steps_run += 1
                yield [np.array_split(w, self.stream_chunks)[step] for w in whole]
        finally:
            self.stream_closed.set()


def oom_above(limit: int) -> Callable[[Sequence[Utterance]], BaseException | None]:
    def check(batch: Sequence[Utterance]) -> BaseException | None:
        if len(batch) > limit:
            return EngineOutOfMemoryError(f"batch of {len(batch)} does not fit")
        return None

    return check
