"""Deterministic engines for tests: they record every call and can be held at a gate."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from voicelane.common.errors import EngineOutOfMemoryError
from voicelane.workers.engines.base import (
    Engine,
    PcmF32,
    StepEvent,
    StepSession,
    Utterance,
    VoiceInfo,
)

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


def stepped_audio(utterance: Utterance) -> PcmF32:
    """What SteppingEngine renders: one sample per character, each valued by the character
    and its position, so a row's audio shows any sample lost, repeated or misplaced."""
    values = [((ord(c) * 7 + i) % 1000) / 1000.0 for i, c in enumerate(utterance.text)]
    return np.array(values, dtype=np.float32)


class StepGate:
    """Holds a stepping engine's steps: while held, each step waits for a permit.

    ``allow(n)`` lets ``n`` more steps through; ``wait_at(i)`` returns once step ``i`` (0 is
    the first) waits at the gate, so a test knows exactly where the engine is, no sleeps.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._open = True
        self._permits = 0
        self._waiting: int | None = None

    def hold(self) -> None:
        with self._cond:
            self._open = False
            self._permits = 0

    def release(self) -> None:
        with self._cond:
            self._open = True
            self._cond.notify_all()

    def allow(self, steps: int = 1) -> None:
        with self._cond:
            self._permits += steps
            self._cond.notify_all()

    def wait_at(self, index: int, timeout_s: float = GATE_TIMEOUT_S) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._waiting == index, timeout_s)

    def pass_(self, index: int) -> None:
        with self._cond:
            self._waiting = index
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: self._open or self._permits > 0, GATE_TIMEOUT_S):
                raise TimeoutError("test gate was never released")
            if not self._open:
                self._permits -= 1
            self._waiting = None


@dataclass(slots=True)
class StepRecord:
    """One call of ``SteppingSession.step``: the rows given, split by what they did."""

    handles: list[int]
    prefill: list[int]
    """Rows given their prefill step (they produce nothing in it)."""
    decode: list[int]
    error: BaseException | None = None
    """What ``fail_when`` raised (then nothing of the step was committed)."""


@dataclass(slots=True)
class _Row:
    utterance: Utterance
    stream: bool
    audio: PcmF32
    prefilled: bool = False
    produced: int = 0


class SteppingSession(StepSession):
    """A running batch of :class:`SteppingEngine`: a row's first step is its prefill (no
    audio); then it makes one sample of :func:`stepped_audio` per step and finishes on its
    last sample (a row with no text finishes on its prefill step)."""

    def __init__(self, engine: SteppingEngine) -> None:
        self.engine = engine
        self._rows: dict[int, _Row] = {}
        self.admitted: dict[int, Utterance] = {}
        """Every row ever admitted, by handle."""
        self.removed: list[int] = []
        self.finished: list[int] = []
        self.closed = False

    def admit(self, handle: int, utterance: Utterance, *, stream: bool) -> None:
        assert not self.closed, "admit on a closed session"
        assert handle not in self.admitted, f"handle {handle} admitted twice"
        self._rows[handle] = _Row(utterance, stream, stepped_audio(utterance))
        self.admitted[handle] = utterance

    def fits(self, utterance: Utterance) -> bool:
        check = self.engine.fits_when
        return check is None or check(len(self._rows), utterance)

    def remove(self, handle: int) -> None:
        if self._rows.pop(handle, None) is not None:
            self.removed.append(handle)

    def step(self, handles: Sequence[int]) -> list[StepEvent]:
        rows = [self._rows[h] for h in handles]  # KeyError: a row not in the session
        record = StepRecord(
            handles=list(handles),
            prefill=[h for h, r in zip(handles, rows, strict=True) if not r.prefilled],
            decode=[h for h, r in zip(handles, rows, strict=True) if r.prefilled],
        )
        engine = self.engine
        engine.steps_log.append(record)
        engine.step_sessions.append(self)
        engine.gate.pass_(len(engine.steps_log) - 1)
        if engine.fail_when is not None and (error := engine.fail_when(list(handles))):
            record.error = error
            raise error
        return [
            event for h, row in zip(handles, rows, strict=True) if (event := self._advance(h, row))
        ]

    def _advance(self, handle: int, row: _Row) -> StepEvent | None:
        if not row.prefilled:
            row.prefilled = True
            chunk = np.zeros(0, dtype=np.float32)
        else:
            chunk = row.audio[row.produced : row.produced + 1]
            row.produced += 1
        finished = row.produced >= len(row.audio)
        if finished:
            del self._rows[handle]
            self.finished.append(handle)
            return StepEvent(handle, row.audio.copy() if not row.stream else chunk, True)
        if row.stream and chunk.size:
            return StepEvent(handle, chunk, False)
        return None

    @property
    def handles(self) -> list[int]:
        return list(self._rows)

    def close(self) -> None:
        self._rows.clear()
        self.closed = True
        self.engine.events.append("close")


class SteppingEngine(Engine):
    """A deterministic stepping engine (continuous batching) rendering :func:`stepped_audio`.

    Records every step (:class:`StepRecord`, in ``steps_log``) and every session; ``gate``
    holds steps; ``fail_when(handles)`` runs at the start of each step (after the gate) and
    may return an error to raise, e.g. :class:`EngineOutOfMemoryError`; ``fits_when(rows,
    utterance)`` answers ``StepSession.fits``. ``synthesize`` and ``synthesize_stream``
    (static batches) run the same session, so they render the same audio.
    """

    name = "stepping"
    sample_rate_hz = 1000
    steps = True

    def __init__(
        self,
        voices: Sequence[str] = ("a", "b"),
        *,
        fail_when: Callable[[list[int]], BaseException | None] | None = None,
        fits_when: Callable[[int, Utterance], bool] | None = None,
    ) -> None:
        self._voices = [VoiceInfo(id=v, name=v.upper(), languages=("xx",)) for v in voices]
        self.fail_when = fail_when
        self.fits_when = fits_when
        self.gate = StepGate()
        self.steps_log: list[StepRecord] = []
        self.step_sessions: list[SteppingSession] = []
        """The session of each step in ``steps_log``."""
        self.sessions: list[SteppingSession] = []
        """Every session opened by ``open_steps``."""
        self.batches: list[list[Utterance]] = []
        """Static batches (``synthesize``/``synthesize_stream``)."""
        self.events: list[str] = []
        """load / unload / open / close, in order."""

    # engine interface
    def load(self) -> None:
        self.events.append("load")

    def unload(self) -> None:
        self.events.append("unload")

    def voices(self) -> list[VoiceInfo]:
        return list(self._voices)

    def open_steps(self) -> SteppingSession:
        self.events.append("open")
        session = SteppingSession(self)
        self.sessions.append(session)
        return session

    def synthesize(self, batch: Sequence[Utterance]) -> list[PcmF32]:
        self.batches.append(list(batch))
        session = SteppingSession(self)
        for handle, utterance in enumerate(batch):
            session.admit(handle, utterance, stream=False)
        outputs: list[PcmF32 | None] = [None] * len(batch)
        while session.handles:
            for event in session.step(session.handles):
                outputs[event.handle] = event.audio
        return [out if out is not None else np.zeros(0, np.float32) for out in outputs]

    def synthesize_stream(self, batch: Sequence[Utterance]) -> Iterator[list[PcmF32]]:
        self.batches.append(list(batch))
        session = SteppingSession(self)
        for handle, utterance in enumerate(batch):
            session.admit(handle, utterance, stream=True)
        while session.handles:
            step = [np.zeros(0, dtype=np.float32) for _ in batch]
            for event in session.step(session.handles):
                step[event.handle] = event.audio
            yield step

    # helpers for tests
    def texts(self, handles: Sequence[int], session: int = -1) -> list[str]:
        """The texts of these rows of a session (the latest by default)."""
        admitted = self.sessions[session].admitted
        return [admitted[h].text for h in handles]

    def step_texts(self, index: int) -> list[str]:
        """The texts of the rows given to step ``index``."""
        record = self.steps_log[index]
        admitted = self.step_sessions[index].admitted
        return [admitted[h].text for h in record.handles]
