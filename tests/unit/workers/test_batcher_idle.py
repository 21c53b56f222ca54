"""Idle unload (``Batcher(idle_unload_s=...)``, ``VOICELANE_IDLE_UNLOAD_S``): after that long
with nothing queued or running the scheduler unloads the engine; the next work loads it again
on the scheduler thread, and work that arrives during the unload or the load waits, it is not
failed. Both scheduler loops: static batches (a recording engine) and continuous batching (a
stepping engine).

Nothing here sleeps: the idle time runs on a fake clock the tests move; the engine's load and
unload can be held at a gate, and tests wait on events, futures and ``Batcher.settle``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from prometheus_client import REGISTRY

from tests.support.engines import (
    GATE_TIMEOUT_S,
    FakeClock,
    RecordingEngine,
    SteppingEngine,
    audio_for,
    stepped_audio,
)
from voicelane.common.errors import DeadlineExceededError, EngineError, ShuttingDownError
from voicelane.core.settings import BatcherSettings
from voicelane.workers.batching import AudioStream, Batcher, Priority
from voicelane.workers.engines.base import Engine, PcmF32, Utterance
from voicelane.workers.metrics import batcher_families

T = 5.0  # seconds any wait may take before the test fails
IDLE_S = 10.0


class LifeGates:
    """What both test engines add: their loads and unloads in order (``life``), each of
    which can be held at a gate (``entered`` set while it waits), and a load that fails."""

    def __init__(self) -> None:
        self.life: list[str] = []
        self.load_fails: BaseException | None = None
        self.gates = {what: threading.Event() for what in ("load", "unload")}
        self.entered = {what: threading.Event() for what in ("load", "unload")}
        for gate in self.gates.values():
            gate.set()

    def hold(self, what: str) -> None:
        self.entered[what].clear()
        self.gates[what].clear()

    def pass_gate(self, what: str) -> None:
        self.life.append(what)
        self.entered[what].set()
        if not self.gates[what].wait(GATE_TIMEOUT_S):
            raise TimeoutError(f"the test never released the engine's {what}")


class GatedRecording(RecordingEngine):
    """Static batches."""

    def __init__(self) -> None:
        super().__init__()
        self.gated = LifeGates()

    def load(self) -> None:
        self.gated.pass_gate("load")
        if self.gated.load_fails is not None:
            raise self.gated.load_fails

    def unload(self) -> None:
        self.gated.pass_gate("unload")


class GatedStepping(SteppingEngine):
    """Continuous batching."""

    def __init__(self) -> None:
        super().__init__()
        self.gated = LifeGates()

    def load(self) -> None:
        self.gated.pass_gate("load")
        if self.gated.load_fails is not None:
            raise self.gated.load_fails

    def unload(self) -> None:
        self.gated.pass_gate("unload")


@dataclass
class Case:
    engine: GatedRecording | GatedStepping
    expect: Callable[[Utterance], PcmF32]

    @property
    def gated(self) -> LifeGates:
        return self.engine.gated


@pytest.fixture(params=["static", "stepping"])
def case(request: pytest.FixtureRequest) -> Case:
    if request.param == "static":
        return Case(GatedRecording(), audio_for)
    return Case(GatedStepping(), stepped_audio)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


Make = Callable[..., Batcher]


@pytest.fixture
def make(case: Case, clock: FakeClock) -> Iterator[Make]:
    made: list[Batcher] = []

    def build(idle_unload_s: float | None = IDLE_S) -> Batcher:
        settings = BatcherSettings(max_batch=4, max_wait_realtime_s=0.005, max_wait_batch_s=0.03)
        batcher = Batcher(case.engine, settings, clock=clock, idle_unload_s=idle_unload_s)
        made.append(batcher)
        return batcher.start(timeout_s=T)

    yield build
    for gate in case.gated.gates.values():
        gate.set()
    for batcher in made:
        batcher.close(drain=False, timeout_s=T)


def u(text: str) -> Utterance:
    return Utterance(text=text, voice="a")


def advance(batcher: Batcher, clock: FakeClock, seconds: float) -> None:
    """Move the clock and wait until the scheduler has looked at it and waits again."""
    clock.advance(seconds)
    batcher.wake()
    assert batcher.settle(T)


def render(batcher: Batcher, clock: FakeClock, text: str) -> PcmF32:
    """One item through the batcher, its batch made due by the clock."""
    future = batcher.submit(u(text))
    clock.advance(0.03)
    batcher.wake()
    return future.result(T)


def played(stream: AudioStream) -> PcmF32:
    chunks = list(stream)
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)


def is_loaded(batcher: Batcher) -> bool:
    """``Batcher.engine_loaded`` (a call: mypy does not narrow it between two reads)."""
    return batcher.engine_loaded


def loaded_gauge(batcher: Batcher) -> float:
    (family,) = [f for f in batcher_families(batcher) if f.name == "voicelane_engine_loaded"]
    (sample,) = family.samples
    assert sample.labels == {"engine": batcher.engine.name}
    return sample.value


def loads_counted(engine: Engine, cause: str) -> float:
    labels = {"engine": engine.name, "cause": cause}
    return REGISTRY.get_sample_value("voicelane_engine_load_seconds_count", labels) or 0.0


# ---- unloading ---------------------------------------------------------------------------


def test_the_engine_unloads_after_the_idle_time_and_the_gauge_says_so(
    case: Case, make: Make, clock: FakeClock
) -> None:
    batcher = make()
    assert is_loaded(batcher) and loaded_gauge(batcher) == 1.0
    advance(batcher, clock, IDLE_S - 0.5)
    assert case.gated.life == ["load"]
    advance(batcher, clock, 0.5)
    assert case.gated.life == ["load", "unload"]
    assert not is_loaded(batcher) and loaded_gauge(batcher) == 0.0
    advance(batcher, clock, 10 * IDLE_S)
    assert case.gated.life == ["load", "unload"]  # once: nothing loads it but work


def test_the_idle_time_counts_from_the_end_of_the_last_work(
    case: Case, make: Make, clock: FakeClock
) -> None:
    batcher = make()
    advance(batcher, clock, IDLE_S - 2)
    render(batcher, clock, "work")
    assert batcher.settle(T)
    advance(batcher, clock, IDLE_S - 1)
    assert case.gated.life == ["load"]  # 2 * IDLE_S - 3 since the start, IDLE_S - 1 idle
    advance(batcher, clock, 1)
    assert case.gated.life == ["load", "unload"]


@pytest.mark.parametrize("idle_unload_s", [None, 0.0])
def test_none_or_zero_never_unloads(
    case: Case, make: Make, clock: FakeClock, idle_unload_s: float | None
) -> None:
    batcher = make(idle_unload_s)
    advance(batcher, clock, 1e6)
    assert case.gated.life == ["load"] and is_loaded(batcher)


def test_a_stream_still_playing_is_work_however_long_it_takes(clock: FakeClock) -> None:
    engine = GatedStepping()
    batcher = Batcher(
        engine, BatcherSettings(max_batch=4), clock=clock, idle_unload_s=IDLE_S
    ).start(timeout_s=T)
    try:
        engine.gate.hold()
        stream = batcher.submit_stream(u("a long sentence"), priority=Priority.REALTIME)
        assert engine.gate.wait_at(0)
        for step in range(1, 6):  # each step takes longer than the idle time
            clock.advance(2 * IDLE_S)
            engine.gate.allow(1)
            assert engine.gate.wait_at(step)
        engine.gate.release()
        np.testing.assert_array_equal(played(stream), stepped_audio(u("a long sentence")))
        assert batcher.settle(T)
        assert engine.gated.life == ["load"]
    finally:
        engine.gate.release()
        batcher.close(drain=False, timeout_s=T)


def test_an_engine_whose_unload_frees_nothing_is_never_unloaded(clock: FakeClock) -> None:
    engine = GatedRecording()
    engine.unload_frees_memory = False  # espeak's case
    batcher = Batcher(engine, BatcherSettings(), clock=clock, idle_unload_s=IDLE_S)
    batcher.start(timeout_s=T)
    try:
        advance(batcher, clock, 100 * IDLE_S)
        assert engine.gated.life == ["load"] and loaded_gauge(batcher) == 1.0
    finally:
        batcher.close(drain=False, timeout_s=T)


# ---- loading again -----------------------------------------------------------------------


def test_the_next_submission_loads_it_again_and_succeeds(
    case: Case, make: Make, clock: FakeClock
) -> None:
    batcher = make()
    demand_loads = loads_counted(case.engine, "demand")
    advance(batcher, clock, IDLE_S)
    assert not is_loaded(batcher)
    np.testing.assert_array_equal(render(batcher, clock, "wake up"), case.expect(u("wake up")))
    assert case.gated.life == ["load", "unload", "load"]
    assert is_loaded(batcher) and loaded_gauge(batcher) == 1.0
    assert loads_counted(case.engine, "demand") == demand_loads + 1


def test_a_submission_during_the_unload_waits_and_succeeds(
    case: Case, make: Make, clock: FakeClock
) -> None:
    batcher = make()
    case.gated.hold("unload")
    clock.advance(IDLE_S)
    batcher.wake()
    assert case.gated.entered["unload"].wait(T)
    future = batcher.submit(u("mid-unload"))
    timed = batcher.submit_timed(u("mid-unload timed"), priority=Priority.REALTIME)
    assert not future.done()
    case.gated.gates["unload"].set()
    clock.advance(0.03)
    batcher.wake()
    np.testing.assert_array_equal(future.result(T), case.expect(u("mid-unload")))
    np.testing.assert_array_equal(timed.result(T).pcm, case.expect(u("mid-unload timed")))
    assert case.gated.life == ["load", "unload", "load"]
    assert is_loaded(batcher)


def test_a_stream_arriving_mid_unload_is_served_in_full(
    case: Case, make: Make, clock: FakeClock
) -> None:
    batcher = make()
    case.gated.hold("unload")
    clock.advance(IDLE_S)
    batcher.wake()
    assert case.gated.entered["unload"].wait(T)
    stream = batcher.submit_stream(u("a stream mid-unload"), priority=Priority.REALTIME)
    case.gated.gates["unload"].set()
    clock.advance(0.03)
    batcher.wake()
    np.testing.assert_array_equal(played(stream), case.expect(u("a stream mid-unload")))
    assert case.gated.life == ["load", "unload", "load"]


def test_a_submission_during_the_load_waits_and_succeeds(
    case: Case, make: Make, clock: FakeClock
) -> None:
    batcher = make()
    advance(batcher, clock, IDLE_S)
    case.gated.hold("load")
    first = batcher.submit_stream(u("first"), priority=Priority.REALTIME)
    assert case.gated.entered["load"].wait(T)
    second = batcher.submit(u("during the load"))
    case.gated.gates["load"].set()
    clock.advance(0.03)
    batcher.wake()
    np.testing.assert_array_equal(played(first), case.expect(u("first")))
    np.testing.assert_array_equal(second.result(T), case.expect(u("during the load")))
    assert case.gated.life == ["load", "unload", "load"]  # one load for both


def test_deadlines_still_apply_while_the_engine_loads(
    case: Case, make: Make, clock: FakeClock
) -> None:
    batcher = make()
    advance(batcher, clock, IDLE_S)
    case.gated.hold("load")
    late = batcher.submit(u("late"), deadline_s=clock() + 1.0)
    patient = batcher.submit(u("patient"), deadline_s=clock() + 100.0)
    assert case.gated.entered["load"].wait(T)
    clock.advance(2.0)  # the load took longer than the first one's deadline
    case.gated.gates["load"].set()
    with pytest.raises(DeadlineExceededError):
        late.result(T)
    np.testing.assert_array_equal(patient.result(T), case.expect(u("patient")))


def test_a_failed_load_fails_the_waiting_work_and_the_next_work_tries_again(
    case: Case, make: Make, clock: FakeClock
) -> None:
    batcher = make()
    advance(batcher, clock, IDLE_S)
    case.gated.load_fails = RuntimeError("the checkpoint went away")
    case.gated.hold("load")
    future = batcher.submit(u("unlucky"))
    stream = batcher.submit_stream(u("unlucky stream"), priority=Priority.REALTIME)
    assert case.gated.entered["load"].wait(T)
    case.gated.gates["load"].set()
    with pytest.raises(EngineError, match="could not load again") as failed:
        future.result(T)
    assert not failed.value.permanent  # transient: a batch-lane chunk is retried
    with pytest.raises(EngineError):
        stream.read(T)
    assert not is_loaded(batcher)
    case.gated.load_fails = None
    np.testing.assert_array_equal(render(batcher, clock, "lucky"), case.expect(u("lucky")))
    assert case.gated.life == ["load", "unload", "load", "load"]


# ---- with the other lifecycle events -----------------------------------------------------


def test_a_reload_while_unloaded_loads_it_and_the_idle_time_starts_again(
    case: Case, make: Make, clock: FakeClock
) -> None:
    batcher = make()
    advance(batcher, clock, IDLE_S)
    report = batcher.reload().result(T)
    assert report.after_bytes > 0
    assert case.gated.life == ["load", "unload", "load"] and is_loaded(batcher)
    assert batcher.settle(T)
    advance(batcher, clock, IDLE_S - 1)
    assert is_loaded(batcher)
    advance(batcher, clock, 1)
    assert case.gated.life == ["load", "unload", "load", "unload"]


def test_close_after_an_idle_unload_does_not_unload_twice(
    case: Case, make: Make, clock: FakeClock
) -> None:
    batcher = make()
    advance(batcher, clock, IDLE_S)
    batcher.close(timeout_s=T)
    assert case.gated.life == ["load", "unload"]
    with pytest.raises(ShuttingDownError):
        batcher.submit(u("too late"))


def test_the_step_loop_closes_its_session_before_unloading_and_opens_one_after(
    clock: FakeClock,
) -> None:
    engine = GatedStepping()
    batcher = Batcher(
        engine, BatcherSettings(max_batch=4), clock=clock, idle_unload_s=IDLE_S
    ).start(timeout_s=T)
    try:
        advance(batcher, clock, IDLE_S)
        stream = batcher.submit_stream(u("again"), priority=Priority.REALTIME)
        np.testing.assert_array_equal(played(stream), stepped_audio(u("again")))
        assert engine.events == ["open", "close", "open"]
        assert engine.gated.life == ["load", "unload", "load"]
        assert engine.sessions[0].closed and not engine.sessions[1].closed
        assert engine.step_sessions[-1] is engine.sessions[1]
    finally:
        batcher.close(drain=False, timeout_s=T)
