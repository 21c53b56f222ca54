"""Continuous batching: each rule of the batcher's step loop (``workers/batching/stepping.py``),
pinned with a deterministic stepping engine, its step gate and a fake clock.

Nothing here sleeps: tests hold the engine at a step (``gate.wait_at``), let steps through
one by one (``gate.allow``), and wait on futures, streams or ``Batcher.settle``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError as FutureCancelledError

import numpy as np
import pytest

from tests.support.engines import FakeClock, SteppingEngine, stepped_audio
from voicelane.common.errors import (
    DeadlineExceededError,
    EngineError,
    EngineOutOfMemoryError,
    ShuttingDownError,
)
from voicelane.core.settings import BatcherSettings
from voicelane.workers.batching import AudioStream, Batcher, Priority
from voicelane.workers.engines.base import PcmF32, Utterance

T = 5.0  # seconds any wait may take before the test fails

Build = Callable[..., Batcher]


def u(text: str, voice: str = "a") -> Utterance:
    return Utterance(text=text, voice=voice)


def expect(text: str) -> PcmF32:
    return stepped_audio(u(text))


def played(stream: AudioStream) -> PcmF32:
    chunks = list(stream)
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)


def read(stream: AudioStream, count: int) -> PcmF32:
    """The next ``count`` chunks of ``stream``, joined (each must come)."""
    chunks = [stream.read(T) for _ in range(count)]
    assert all(chunk is not None for chunk in chunks)
    return np.concatenate([chunk for chunk in chunks if chunk is not None])


def sizes(engine: SteppingEngine) -> list[int]:
    return [len(record.handles) for record in engine.steps_log]


def oom_above(limit: int) -> Callable[[list[int]], BaseException | None]:
    """A step of more than ``limit`` rows runs out of memory."""

    def check(handles: list[int]) -> BaseException | None:
        if len(handles) > limit:
            return EngineOutOfMemoryError(f"a step of {len(handles)} rows does not fit")
        return None

    return check


def fail_at(
    engine: SteppingEngine, error: BaseException, *indices: int
) -> Callable[[list[int]], BaseException | None]:
    """Steps number ``indices`` (0 is the first) raise ``error``."""

    def check(handles: list[int]) -> BaseException | None:
        return error if len(engine.steps_log) - 1 in indices else None

    return check


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine() -> SteppingEngine:
    return SteppingEngine()


@pytest.fixture
def build(engine: SteppingEngine, clock: FakeClock) -> Iterator[Build]:
    """Makes batchers, not started, so a test can queue rows before the first step."""
    made: list[Batcher] = []

    def make(**config: int | bool) -> Batcher:
        settings = BatcherSettings(**{"max_batch": 4, **config})
        batcher = Batcher(engine, settings, clock=clock)
        made.append(batcher)
        return batcher

    yield make
    engine.gate.release()
    for batcher in made:
        batcher.close(drain=False, timeout_s=T)


def test_a_realtime_row_joins_a_full_running_batch_at_the_next_step(
    build: Build, engine: SteppingEngine
) -> None:
    batcher = build(max_batch=64)
    bulk = {f"bulk-{i:02d}-xxxxxx": batcher.submit(u(f"bulk-{i:02d}-xxxxxx")) for i in range(64)}
    engine.gate.hold()
    batcher.start(timeout_s=T)
    assert batcher.continuous
    assert engine.gate.wait_at(0)
    assert len(engine.steps_log[0].prefill) == 64
    engine.gate.allow(1)
    assert engine.gate.wait_at(1)  # 64 batch rows decoding
    live = batcher.submit_stream(u("live"), priority=Priority.REALTIME)
    engine.gate.allow(1)
    assert engine.gate.wait_at(2)  # the very next step
    step = engine.steps_log[2]
    assert engine.step_texts(2) == ["live", *list(bulk)[:63]]
    assert step.prefill == step.handles[:1]
    assert batcher.stats().paused == 1  # the youngest batch row made room
    with pytest.raises(BlockingIOError):
        live.read_nowait()
    engine.gate.allow(1)
    assert engine.gate.wait_at(3)  # its prefill step is done: nothing yet
    with pytest.raises(BlockingIOError):
        live.read_nowait()
    engine.gate.allow(1)
    assert engine.gate.wait_at(4)  # the step after its prefill is done: its first sample
    first = live.read_nowait()
    assert first is not None
    np.testing.assert_array_equal(first, expect("live")[:1])
    engine.gate.release()
    np.testing.assert_array_equal(np.concatenate([first, *live]), expect("live"))
    for text, future in bulk.items():
        np.testing.assert_array_equal(future.result(T), expect(text))
    assert batcher.settle(T)
    assert max(sizes(engine)) == 64
    (paused,) = set(engine.steps_log[1].handles) - set(step.handles)
    assert paused in engine.sessions[0].finished  # it resumed when room freed
    assert batcher.stats().paused == 0


def test_a_finished_row_is_replaced_at_the_next_step_by_a_queued_one(
    build: Build, engine: SteppingEngine
) -> None:
    batcher = build(max_batch=4)
    texts = ["ab", "long-row-1", "long-row-2", "long-row-3", "next-4", "next-5"]
    futures = [batcher.submit(u(text)) for text in texts]
    batcher.start(timeout_s=T)
    for text, future in zip(texts, futures, strict=True):
        np.testing.assert_array_equal(future.result(T), expect(text))
    assert batcher.settle(T)
    # "ab": prefill at step 0, its two samples at steps 1 and 2; "next-4" takes its place
    # at step 3; "next-4" ends at step 9 and "next-5" joins at step 10.
    assert engine.step_texts(2) == texts[:4]
    assert engine.step_texts(3) == [*texts[1:4], "next-4"]
    assert engine.texts(engine.steps_log[3].prefill) == ["next-4"]
    assert engine.step_texts(10) == [*texts[1:4], "next-5"]
    assert engine.texts(engine.steps_log[10].prefill) == ["next-5"]
    assert sizes(engine) == [4] * 11 + [1] * 6  # full while anything is queued
    stats = batcher.stats()
    assert (stats.batches, stats.items) == (17, 6)


def test_a_row_joining_mid_way_gets_exactly_the_audio_it_gets_alone(
    build: Build, engine: SteppingEngine
) -> None:
    text = "joins mid-way"
    batcher = build(max_batch=4).start(timeout_s=T)
    alone = batcher.submit(u(text)).result(T)
    alone_streamed = played(batcher.submit_stream(u(text)))
    assert batcher.settle(T)
    first = len(engine.steps_log)  # the index of the next step
    engine.gate.hold()
    busy = [batcher.submit(u(f"busy-{i}-..........")) for i in range(2)]
    assert engine.gate.wait_at(first)
    engine.gate.allow(3)
    assert engine.gate.wait_at(first + 3)
    joined = batcher.submit(u(text))
    joined_stream = batcher.submit_stream(u(text), priority=Priority.REALTIME)
    engine.gate.allow(1)
    assert engine.gate.wait_at(first + 4)
    assert engine.texts(engine.steps_log[first + 4].prefill) == [text, text]
    engine.gate.release()
    np.testing.assert_array_equal(alone, expect(text))
    np.testing.assert_array_equal(alone_streamed, expect(text))
    np.testing.assert_array_equal(joined.result(T), alone)
    np.testing.assert_array_equal(played(joined_stream), alone)
    for i, future in enumerate(busy):
        np.testing.assert_array_equal(future.result(T), expect(f"busy-{i}-.........."))


def test_a_cancelled_stream_leaves_the_running_batch_at_the_next_step(
    build: Build, engine: SteppingEngine
) -> None:
    batcher = build()
    other = batcher.submit(u("the other row"))
    live = batcher.submit_stream(u("cancel me soon"), priority=Priority.REALTIME)
    engine.gate.hold()
    batcher.start(timeout_s=T)
    assert engine.gate.wait_at(0)
    handle = engine.steps_log[0].handles[0]  # real-time rows come first
    engine.gate.allow(2)
    assert engine.gate.wait_at(2)  # prefill and one decoding step done
    chunk = live.read(T)
    assert chunk is not None
    np.testing.assert_array_equal(chunk, expect("cancel me soon")[:1])
    live.cancel()
    engine.gate.allow(1)
    assert engine.gate.wait_at(3)
    assert handle in engine.steps_log[2].handles
    assert handle not in engine.steps_log[3].handles
    assert engine.sessions[0].removed == [handle]
    assert live.read(T) is None
    engine.gate.release()
    np.testing.assert_array_equal(other.result(T), expect("the other row"))
    assert batcher.settle(T)
    assert all(handle not in record.handles for record in engine.steps_log[3:])


def test_a_cancelled_future_never_joins_and_a_running_one_runs_to_its_end(
    build: Build, engine: SteppingEngine
) -> None:
    batcher = build(max_batch=1)
    running = batcher.submit(u("running row"))
    queued = batcher.submit(u("queued row"))
    engine.gate.hold()
    batcher.start(timeout_s=T)
    assert engine.gate.wait_at(0)
    assert queued.cancel()
    # A joined row's future is running: only a stream can be cancelled mid-way.
    assert not running.cancel()
    engine.gate.release()
    np.testing.assert_array_equal(running.result(T), expect("running row"))
    with pytest.raises(FutureCancelledError):
        queued.result(T)
    assert batcher.settle(T)
    admitted = engine.sessions[0].admitted
    assert [x.text for x in admitted.values()] == ["running row"]
    assert batcher.stats().dropped_cancelled == 1


def test_a_row_past_its_deadline_leaves_the_running_batch_with_deadline_exceeded(
    build: Build, engine: SteppingEngine, clock: FakeClock
) -> None:
    batcher = build()
    other = batcher.submit(u("the other row"))
    late = batcher.submit(u("late row"), deadline_s=clock() + 1.0)
    late_stream = batcher.submit_stream(
        u("late stream"), priority=Priority.BATCH, deadline_s=clock() + 1.0
    )
    engine.gate.hold()
    batcher.start(timeout_s=T)
    assert engine.gate.wait_at(0)
    late_handles = engine.steps_log[0].handles[1:]
    engine.gate.allow(2)
    assert engine.gate.wait_at(2)
    clock.advance(1.0)
    engine.gate.allow(1)
    assert engine.gate.wait_at(3)  # step 2 still ran them; then they left
    assert engine.steps_log[3].handles == engine.steps_log[0].handles[:1]
    assert sorted(engine.sessions[0].removed) == sorted(late_handles)
    with pytest.raises(DeadlineExceededError, match="while rendering"):
        late.result(T)
    np.testing.assert_array_equal(read(late_stream, 2), expect("late stream")[:2])  # steps 1, 2
    with pytest.raises(DeadlineExceededError, match="while rendering"):
        late_stream.read(T)
    engine.gate.release()
    np.testing.assert_array_equal(other.result(T), expect("the other row"))


def test_out_of_memory_at_admission_halves_capacity_and_loses_nothing(
    build: Build, engine: SteppingEngine
) -> None:
    engine.fail_when = oom_above(16)
    batcher = build(max_batch=64, grow_after_successes=1000)
    texts = [f"row-{i:02d}" for i in range(63)]
    futures = {text: batcher.submit(u(text)) for text in texts}
    streamed = batcher.submit_stream(u("streamed-63"), priority=Priority.BATCH)
    batcher.start(timeout_s=T)
    for text, future in futures.items():
        np.testing.assert_array_equal(future.result(T), expect(text))
    np.testing.assert_array_equal(played(streamed), expect("streamed-63"))  # nothing twice
    assert batcher.settle(T)
    # 64 prefilling rows → OOM → 32 → OOM → 16, and it stays there.
    assert sizes(engine)[:3] == [64, 32, 16]
    assert [r.error is not None for r in engine.steps_log[:3]] == [True, True, False]
    assert max(sizes(engine)[2:]) == 16
    session = engine.sessions[0]
    assert len(session.removed) == 32 + 16
    finished = [session.admitted[h].text for h in session.finished]
    assert sorted(finished) == sorted([*texts, "streamed-63"])  # each exactly once
    stats = batcher.stats()
    assert (stats.oom_events, stats.effective_max_batch) == (2, 16)
    assert stats.items == 64 + 48  # rows put back join again


def test_out_of_memory_at_a_decoding_step_puts_back_rows_that_streamed_nothing(
    build: Build, engine: SteppingEngine
) -> None:
    engine.fail_when = fail_at(engine, EngineOutOfMemoryError("no room"), 3)
    batcher = build(max_batch=8, grow_after_successes=1000)
    kept = {f"kept-{i}-.......": batcher.submit(u(f"kept-{i}-.......")) for i in range(4)}
    playing = batcher.submit_stream(u("playing-4-...."), priority=Priority.BATCH)
    back = {f"back-{i}-.......": batcher.submit(u(f"back-{i}-.......")) for i in (5, 6)}
    engine.gate.hold()
    batcher.start(timeout_s=T)
    assert engine.gate.wait_at(0)
    engine.gate.allow(2)
    assert engine.gate.wait_at(2)
    fresh = batcher.submit_stream(u("fresh-stream"), priority=Priority.BATCH)
    engine.gate.allow(1)
    assert engine.gate.wait_at(3)  # 8 rows, "fresh-stream" prefilling: this step fails
    assert engine.texts(engine.steps_log[3].prefill) == ["fresh-stream"]
    engine.gate.release()
    for text, future in [*kept.items(), *back.items()]:
        np.testing.assert_array_equal(future.result(T), expect(text))
    np.testing.assert_array_equal(played(fresh), expect("fresh-stream"))
    # "playing" had streamed steps 1 and 2: its audio cannot be re-sent.
    np.testing.assert_array_equal(read(playing, 2), expect("playing-4-....")[:2])
    with pytest.raises(EngineOutOfMemoryError, match="no room"):
        playing.read(T)
    assert batcher.settle(T)
    assert sizes(engine)[3:5] == [8, 4]
    assert engine.step_texts(4) == list(kept)
    stats = batcher.stats()
    assert (stats.oom_events, stats.effective_max_batch) == (1, 4)


def test_capacity_grows_back_after_enough_completed_rows(
    build: Build, engine: SteppingEngine
) -> None:
    engine.fail_when = fail_at(engine, EngineOutOfMemoryError("no room"), 0)
    batcher = build(max_batch=4, grow_after_successes=3)
    futures = [batcher.submit(u(f"r{i}x")) for i in range(8)]  # prefill + 3 samples each
    batcher.start(timeout_s=T)
    for i, future in enumerate(futures):
        np.testing.assert_array_equal(future.result(T), expect(f"r{i}x"))
    assert batcher.settle(T)
    # OOM at 4 → 2: rows 0-1, then the two put back (2-3); the third completed row doubles
    # the capacity back to 4 for rows 4-7.
    assert sizes(engine) == [4] + [2] * 8 + [4] * 4
    assert engine.step_texts(5) == ["r2x", "r3x"]
    assert batcher.stats().effective_max_batch == 4


def test_out_of_memory_on_a_single_row_fails_it(build: Build, engine: SteppingEngine) -> None:
    def too_big(handles: list[int]) -> BaseException | None:
        if "huge row" in engine.texts(handles):
            return EngineOutOfMemoryError("the huge row does not fit")
        return None

    engine.fail_when = too_big
    batcher = build(max_batch=4, grow_after_successes=1)
    huge = batcher.submit(u("huge row"))
    fine = batcher.submit(u("fine row"))
    batcher.start(timeout_s=T)
    with pytest.raises(EngineOutOfMemoryError, match="does not fit"):
        huge.result(T)
    np.testing.assert_array_equal(fine.result(T), expect("fine row"))
    assert batcher.settle(T)
    # 2 rows → OOM → 1: "fine row" goes back; "huge row" alone → OOM → it fails.
    assert sizes(engine)[:3] == [2, 1, 1]
    stats = batcher.stats()
    assert stats.oom_events == 2
    assert stats.effective_max_batch == 2  # "fine row" completed: 1 → 2


def test_a_row_that_does_not_fit_waits_for_room_or_fails_alone(
    build: Build, engine: SteppingEngine
) -> None:
    engine.fits_when = lambda rows, utterance: rows < 2 and "huge" not in utterance.text
    batcher = build(max_batch=4)
    texts = ["abc", "abcdef", "waits"]
    futures = [batcher.submit(u(text)) for text in texts]
    huge = batcher.submit(u("huge"))
    batcher.start(timeout_s=T)
    for text, future in zip(texts, futures, strict=True):
        np.testing.assert_array_equal(future.result(T), expect(text))
    with pytest.raises(EngineOutOfMemoryError, match="even alone"):
        huge.result(T)
    assert batcher.settle(T)
    assert max(sizes(engine)) == 2
    assert engine.texts(engine.steps_log[4].prefill) == ["waits"]  # "abc" left after step 3


def test_an_engine_failure_fails_the_running_rows_and_a_new_session_goes_on(
    build: Build, engine: SteppingEngine
) -> None:
    engine.fail_when = fail_at(engine, RuntimeError("kaput"), 2)
    batcher = build(max_batch=2)
    doomed = [batcher.submit(u(f"doomed-{i}")) for i in range(2)]
    queued = batcher.submit(u("queued row"))
    batcher.start(timeout_s=T)
    for future in doomed:
        with pytest.raises(EngineError, match="RuntimeError: kaput"):
            future.result(T)
    np.testing.assert_array_equal(queued.result(T), expect("queued row"))
    assert batcher.settle(T)
    assert engine.events == ["load", "open", "close", "open"]
    assert batcher.stats().failed_batches == 1


def test_close_without_drain_fails_running_and_queued_rows(
    build: Build, engine: SteppingEngine
) -> None:
    batcher = build(max_batch=2)
    live = batcher.submit_stream(u("live stream"), priority=Priority.REALTIME)
    running = batcher.submit(u("running row"))
    queued = batcher.submit(u("queued row"))
    engine.gate.hold()
    batcher.start(timeout_s=T)
    assert engine.gate.wait_at(0)
    batcher.close(drain=False, timeout_s=0)  # closing: the step in progress ends first
    engine.gate.release()
    batcher.close(drain=False, timeout_s=T)
    with pytest.raises(ShuttingDownError):
        live.read(T)
    for future in (running, queued):
        with pytest.raises(ShuttingDownError):
            future.result(T)
    assert engine.events == ["load", "open", "close", "unload"]
    assert [x.text for x in engine.sessions[0].admitted.values()] == ["live stream", "running row"]
    with pytest.raises(ShuttingDownError):
        batcher.submit(u("late"))


def test_close_with_drain_finishes_running_and_queued_rows(
    build: Build, engine: SteppingEngine
) -> None:
    batcher = build(max_batch=2)
    live = batcher.submit_stream(u("live stream"), priority=Priority.REALTIME)
    running = batcher.submit(u("running row"))
    queued = batcher.submit(u("queued row"))
    engine.gate.hold()
    batcher.start(timeout_s=T)
    assert engine.gate.wait_at(0)
    batcher.close(drain=True, timeout_s=0)
    engine.gate.release()
    batcher.close(drain=True, timeout_s=T)
    np.testing.assert_array_equal(played(live), expect("live stream"))
    np.testing.assert_array_equal(running.result(T), expect("running row"))
    np.testing.assert_array_equal(queued.result(T), expect("queued row"))
    assert engine.events == ["load", "open", "close", "unload"]


def test_a_reload_waits_for_the_running_rows_and_the_next_rows_run_after_it(
    build: Build, engine: SteppingEngine
) -> None:
    batcher = build(max_batch=4)
    first = batcher.submit(u("before reload"))
    engine.gate.hold()
    batcher.start(timeout_s=T)
    assert engine.gate.wait_at(0)
    reload = batcher.reload()
    after = batcher.submit(u("after"))
    live = batcher.submit_stream(u("after live"), priority=Priority.REALTIME)
    engine.gate.allow(1)
    assert engine.gate.wait_at(1)
    assert engine.step_texts(1) == ["before reload"]  # nothing joins while a reload waits
    assert not reload.done()
    engine.gate.release()
    assert reload.result(T).seconds >= 0
    np.testing.assert_array_equal(first.result(T), expect("before reload"))
    np.testing.assert_array_equal(after.result(T), expect("after"))
    np.testing.assert_array_equal(played(live), expect("after live"))
    assert batcher.settle(T)
    assert engine.events == ["load", "open", "close", "unload", "load", "open"]
    old, new = engine.sessions
    assert [x.text for x in old.admitted.values()] == ["before reload"]
    assert [x.text for x in new.admitted.values()] == ["after live", "after"]


def test_metrics_count_steps_rows_waits_and_busy_time(
    build: Build, engine: SteppingEngine, clock: FakeClock
) -> None:
    def slow(handles: list[int]) -> BaseException | None:
        clock.advance(0.1)  # each step "takes" 0.1 s of the fake clock
        return None

    engine.fail_when = slow
    batcher = build(max_batch=4, realtime_solo_steps=0)  # every step costs the same
    short = batcher.submit(u("ab"))
    long = batcher.submit(u("abcd"))
    engine.gate.hold()
    batcher.start(timeout_s=T)
    assert engine.gate.wait_at(0)
    live = batcher.submit_stream(u("r"), priority=Priority.REALTIME)
    clock.advance(0.25)
    engine.gate.release()
    np.testing.assert_array_equal(short.result(T), expect("ab"))
    np.testing.assert_array_equal(long.result(T), expect("abcd"))
    np.testing.assert_array_equal(played(live), expect("r"))
    assert batcher.settle(T)
    stats = batcher.stats()
    assert sizes(engine) == [2, 3, 3, 1, 1]
    assert (stats.batches, stats.items) == (5, 3)
    assert stats.batch_sizes == {2: 1, 3: 2, 1: 2}
    assert stats.wait[Priority.REALTIME].count == 1
    assert stats.wait[Priority.REALTIME].max_s == pytest.approx(0.35)  # submit → admission
    assert stats.wait[Priority.BATCH].count == 2
    assert stats.wait[Priority.BATCH].max_s == 0.0
    assert stats.busy_s == pytest.approx(0.25 + 5 * 0.1)
    assert stats.queue_depth == {Priority.REALTIME: 0, Priority.BATCH: 0}


def test_continuous_false_runs_a_stepping_engine_in_static_batches(
    build: Build, engine: SteppingEngine
) -> None:
    batcher = build(continuous=False, max_wait_batch_s=0, max_wait_realtime_s=0)
    batcher.start(timeout_s=T)
    assert not batcher.continuous
    whole = batcher.submit(u("static whole")).result(T)
    np.testing.assert_array_equal(whole, expect("static whole"))
    streamed = played(batcher.submit_stream(u("static stream")))
    np.testing.assert_array_equal(streamed, expect("static stream"))
    assert engine.sessions == []  # no step session: static batches
    assert [[x.text for x in batch] for batch in engine.batches] == [
        ["static whole"],
        ["static stream"],
    ]
    assert batcher.stats().batches == 2


def _step_cost(
    clock: FakeClock, fixed_s: float, per_row_s: float
) -> Callable[[list[int]], BaseException | None]:
    """Each step moves the fake clock by what it costs: ``fixed + per_row x rows``."""

    def cost(handles: list[int]) -> BaseException | None:
        clock.advance(fixed_s + per_row_s * len(handles))
        return None

    return cost


def test_solo_steps_serve_a_warming_live_row_when_a_step_costs_per_row(
    build: Build, engine: SteppingEngine, clock: FakeClock
) -> None:
    """A CPU: a step's cost grows with its rows. The live row's first audio comes from
    real-time-only steps; then it steps with the batch again."""
    cost = _step_cost(clock, 0.001, 0.01)
    engine.fail_when = cost
    batcher = build(max_batch=8, realtime_solo_steps=32)
    bulk = [batcher.submit(u(f"bulk-{i}-" + "x" * 40)) for i in range(8)]
    engine.gate.hold()
    batcher.start(timeout_s=T)
    engine.gate.allow(3)
    assert engine.gate.wait_at(3)  # three full steps measured
    live = batcher.submit_stream(u("live-row"), priority=Priority.REALTIME)
    engine.gate.release()
    np.testing.assert_array_equal(played(live), expect("live-row"))
    for future in bulk:
        assert future.result(T).size > 0
    live_steps = [i for i in range(len(engine.steps_log)) if "live-row" in engine.step_texts(i)]
    solo = [i for i in live_steps if engine.step_texts(i) == ["live-row"]]
    # Its prefill and first sample: solo steps (the first joins the step set that was due).
    assert len(solo) >= 2
    assert solo[0] <= live_steps[0] + 1
    # Once it played, it steps with the batch rows again.
    assert len(engine.step_texts(live_steps[-1])) > 1


def test_no_solo_steps_when_a_step_costs_the_same_whatever_its_rows(
    build: Build, engine: SteppingEngine, clock: FakeClock
) -> None:
    """A GPU: one solo step is tried, measured, and not repeated."""
    cost = _step_cost(clock, 0.02, 0.0)
    engine.fail_when = cost
    batcher = build(max_batch=8, realtime_solo_steps=32)
    bulk = [batcher.submit(u(f"bulk-{i}-" + "x" * 40)) for i in range(8)]
    engine.gate.hold()
    batcher.start(timeout_s=T)
    engine.gate.allow(3)
    assert engine.gate.wait_at(3)
    lives = [batcher.submit_stream(u(f"live-{i}"), priority=Priority.REALTIME) for i in range(2)]
    engine.gate.release()
    for index, live in enumerate(lives):
        np.testing.assert_array_equal(played(live), expect(f"live-{index}"))
    for future in bulk:
        assert future.result(T).size > 0
    solo = [
        i
        for i in range(len(engine.steps_log))
        if engine.step_texts(i)
        and all(t.startswith("live") for t in engine.step_texts(i))
        and any(t.startswith("bulk") for t in engine.step_texts(i - 1))
    ]
    assert len(solo) <= 1


# ---- preemption -------------------------------------------------------------------------------


def test_a_realtime_row_that_does_not_fit_preempts_the_youngest_batch_row(
    build: Build, engine: SteppingEngine
) -> None:
    """Memory for three rows, all batch rows: a live row takes the youngest one's place at the
    next step (that row leaves the session, its memory freed); the preempted row goes back to
    the front of its queue and later completes with its whole audio, rendered again."""
    engine.fits_when = lambda rows, utterance: rows < 3
    batcher = build(max_batch=8)
    texts = ["batch-0-..........", "batch-1-..........", "batch-2-..........", "batch-3-."]
    futures = {text: batcher.submit(u(text)) for text in texts}
    engine.gate.hold()
    batcher.start(timeout_s=T)
    assert engine.gate.wait_at(0)
    assert engine.texts(engine.steps_log[0].prefill) == texts[:3]  # "batch-3" does not fit
    engine.gate.allow(2)
    assert engine.gate.wait_at(2)  # three batch rows decoding
    live = batcher.submit_stream(u("live"), priority=Priority.REALTIME)
    engine.gate.allow(1)
    assert engine.gate.wait_at(3)  # the very next step: the live row prefills
    assert engine.step_texts(3) == ["live", *texts[:2]]
    preempted = engine.sessions[0].removed
    assert engine.texts(preempted) == [texts[2]]  # the youngest batch row, out of the session
    assert batcher.stats().preempted == 1
    engine.gate.allow(1)
    assert engine.gate.wait_at(4)
    engine.gate.allow(1)
    assert engine.gate.wait_at(5)  # the step after its prefill is done: its first sample
    first = live.read_nowait()
    assert first is not None
    engine.gate.release()
    np.testing.assert_array_equal(np.concatenate([first, *live]), expect("live"))
    for text, future in futures.items():
        np.testing.assert_array_equal(future.result(T), expect(text))
    assert batcher.settle(T)
    session = engine.sessions[0]
    assert engine.texts(session.finished).count(texts[2]) == 1  # rendered again, to its end
    assert max(len(record.handles) for record in engine.steps_log) <= 3
    assert batcher.stats().preempted == 1


def test_a_batch_row_that_streamed_audio_is_not_preempted(
    build: Build, engine: SteppingEngine
) -> None:
    """A batch-class stream that already played cannot be rendered again: a live row that
    does not fit beside it waits for it to end instead."""
    engine.fits_when = lambda rows, utterance: rows < 1
    batcher = build(max_batch=8)
    playing = batcher.submit_stream(u("playing-batch"), priority=Priority.BATCH)
    engine.gate.hold()
    batcher.start(timeout_s=T)
    assert engine.gate.wait_at(0)
    engine.gate.allow(2)
    assert engine.gate.wait_at(2)
    first = playing.read(T)  # it streamed its first sample
    live = batcher.submit_stream(u("live"), priority=Priority.REALTIME)
    engine.gate.allow(1)
    assert engine.gate.wait_at(3)
    assert engine.step_texts(3) == ["playing-batch"]
    engine.gate.release()
    assert first is not None
    np.testing.assert_array_equal(np.concatenate([first, *playing]), expect("playing-batch"))
    np.testing.assert_array_equal(played(live), expect("live"))
    assert batcher.settle(T)
    assert engine.sessions[0].removed == []
    assert batcher.stats().preempted == 0


def test_a_realtime_row_never_preempts_another_realtime_row(
    build: Build, engine: SteppingEngine
) -> None:
    engine.fits_when = lambda rows, utterance: rows < 1
    batcher = build(max_batch=8)
    first = batcher.submit_stream(u("first-live"), priority=Priority.REALTIME)
    engine.gate.hold()
    batcher.start(timeout_s=T)
    assert engine.gate.wait_at(0)
    second = batcher.submit_stream(u("second-live"), priority=Priority.REALTIME)
    engine.gate.allow(1)
    assert engine.gate.wait_at(1)
    assert engine.step_texts(1) == ["first-live"]
    engine.gate.release()
    np.testing.assert_array_equal(played(first), expect("first-live"))
    np.testing.assert_array_equal(played(second), expect("second-live"))
    assert batcher.settle(T)
    assert batcher.stats().preempted == 0
