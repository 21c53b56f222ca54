"""Each rule of the dynamic batcher, pinned with a deterministic engine and a fake clock.

Nothing here sleeps: tests move the fake clock, wake the scheduler and wait on futures,
events or ``Batcher.settle`` with timeouts.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future

import numpy as np
import pytest

from tests.support.engines import FakeClock, RecordingEngine, audio_for, oom_above
from voicelane.common.errors import (
    CancelledError,
    DeadlineExceededError,
    EngineError,
    EngineOutOfMemoryError,
    EngineOutputMismatchError,
    ShuttingDownError,
    UnknownVoiceError,
)
from voicelane.core.settings import BatcherSettings
from voicelane.workers.batching import Batcher, Priority
from voicelane.workers.engines.base import Utterance

T = 5.0  # seconds any wait may take before the test fails


def u(text: str, voice: str = "a") -> Utterance:
    return Utterance(text=text, voice=voice)


def texts(batch: list[Utterance]) -> list[str]:
    return [x.text for x in batch]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine() -> RecordingEngine:
    return RecordingEngine()


def make(
    engine: RecordingEngine, clock: FakeClock, **config: float | int | None
) -> Iterator[Batcher]:
    defaults: dict[str, float | int | None] = {
        "max_batch": 4,
        "max_wait_realtime_s": 0.005,
        "max_wait_batch_s": 0.030,
    }
    defaults.update(config)
    batcher = Batcher(engine, BatcherSettings(**defaults), clock=clock)
    batcher.start(timeout_s=T)
    yield batcher
    engine.release()
    batcher.close(drain=False, timeout_s=T)


@pytest.fixture
def batcher(engine: RecordingEngine, clock: FakeClock) -> Iterator[Batcher]:
    yield from make(engine, clock)


def advance(batcher: Batcher, clock: FakeClock, seconds: float) -> None:
    clock.advance(seconds)
    batcher.wake()
    assert batcher.settle(T)


def busy(batcher: Batcher, engine: RecordingEngine, clock: FakeClock) -> Future[object]:
    """Occupy the engine with one full batch held at the gate; returns its first future."""
    engine.hold()
    engine.entered.clear()
    first = batcher.submit(u("busy-0", "b"))
    for i in range(1, 4):
        batcher.submit(u(f"busy-{i}", "b"))
    assert engine.entered.wait(T)
    return first  # type: ignore[return-value]


def test_result_is_the_engines_audio(batcher: Batcher, clock: FakeClock) -> None:
    future = batcher.submit(u("hello"))
    advance(batcher, clock, 0.030)
    np.testing.assert_array_equal(future.result(T), audio_for(u("hello")))


def test_engine_loads_and_runs_on_the_scheduler_thread(
    batcher: Batcher, engine: RecordingEngine
) -> None:
    assert engine.loaded_on is not None
    assert engine.loaded_on is not threading.current_thread()
    assert engine.loaded_on.name == "batcher"


def test_full_batch_starts_at_once_and_rest_waits_for_max_wait(
    batcher: Batcher, engine: RecordingEngine, clock: FakeClock
) -> None:
    futures = [batcher.submit(u(f"t{i}")) for i in range(10)]
    assert batcher.settle(T)
    # Two full batches of 4 ran without the clock moving; the last 2 wait for max_wait.
    assert [len(b) for b in engine.batches] == [4, 4]
    assert not futures[9].done()
    advance(batcher, clock, 0.029)
    assert [len(b) for b in engine.batches] == [4, 4]
    advance(batcher, clock, 0.001)
    futures[9].result(T)
    assert [len(b) for b in engine.batches] == [4, 4, 2]


def test_cost_limit_closes_a_batch(engine: RecordingEngine, clock: FakeClock) -> None:
    for batcher in make(engine, clock, max_batch=64, max_batch_cost=10):
        futures = [batcher.submit(u("abcd")) for _ in range(5)]  # cost 4 each
        assert batcher.settle(T)
        # 4+4 fits in 10, a third would not: two batches of 2 ran at once, one item waits.
        assert [len(b) for b in engine.batches] == [2, 2]
        advance(batcher, clock, 0.030)
        futures[-1].result(T)
        assert [len(b) for b in engine.batches] == [2, 2, 1]


def test_max_wait_timer_starts_at_the_first_item(
    batcher: Batcher, engine: RecordingEngine, clock: FakeClock
) -> None:
    first = batcher.submit(u("first"))
    advance(batcher, clock, 0.020)
    second = batcher.submit(u("second"))
    assert batcher.settle(T)
    assert engine.batches == []
    # 30 ms after the FIRST item (not the second) the batch goes, holding both.
    advance(batcher, clock, 0.010)
    first.result(T)
    second.result(T)
    assert [texts(b) for b in engine.batches] == [["first", "second"]]


def test_realtime_class_has_its_own_short_max_wait(
    batcher: Batcher, engine: RecordingEngine, clock: FakeClock
) -> None:
    stream = batcher.submit_stream(u("live"), priority=Priority.REALTIME)
    advance(batcher, clock, 0.004)
    assert engine.batches == []
    advance(batcher, clock, 0.001)
    assert b"".join(c.tobytes() for c in stream) == audio_for(u("live")).tobytes()
    assert [texts(b) for b in engine.batches] == [["live"]]


def test_realtime_items_first_then_topped_up_with_batch_items(
    batcher: Batcher, engine: RecordingEngine, clock: FakeClock
) -> None:
    held = busy(batcher, engine, clock)
    b1 = batcher.submit(u("b1"))
    b2 = batcher.submit(u("b2"))
    b3 = batcher.submit(u("b3"))
    r1 = batcher.submit(u("r1"), priority=Priority.REALTIME)
    r2 = batcher.submit(u("r2"), priority=Priority.REALTIME)
    engine.release()
    held.result(T)
    for f in (r1, r2, b1, b2):
        f.result(T)
    assert texts(engine.batches[1]) == ["r1", "r2", "b1", "b2"]
    assert not b3.done()


def test_a_batch_with_a_realtime_item_counts_as_realtime_in_the_metrics(
    batcher: Batcher, engine: RecordingEngine, clock: FakeClock
) -> None:
    from prometheus_client import REGISTRY

    def count(cls: str) -> float:
        return REGISTRY.get_sample_value("voicelane_batch_size_count", {"class": cls}) or 0.0

    held = busy(batcher, engine, clock)
    before = count("realtime"), count("batch")
    mixed = [batcher.submit(u("b1")), batcher.submit(u("r1"), priority=Priority.REALTIME)]
    engine.release()
    held.result(T)
    clock.advance(1.0)  # past the real-time max_wait: the batch of two starts
    batcher.wake()
    for future in mixed:
        future.result(T)
    assert texts(engine.batches[1]) == ["r1", "b1"]
    # The held batch was batch-class; the mixed one counts as real-time (not "batch", which
    # sorts first as a string).
    assert (count("realtime"), count("batch")) == (before[0] + 1, before[1])


def test_only_items_with_the_same_batch_key_share_a_batch(
    batcher: Batcher, engine: RecordingEngine, clock: FakeClock
) -> None:
    futures = [batcher.submit(u(f"x{i}", voice="ab"[i % 2])) for i in range(6)]
    advance(batcher, clock, 0.030)
    advance(batcher, clock, 0.030)
    for f in futures:
        f.result(T)
    for batch in engine.batches:
        assert len({x.voice for x in batch}) == 1
    assert sorted(len(b) for b in engine.batches) == [3, 3]


def test_queued_realtime_item_goes_before_a_due_batch_item(
    batcher: Batcher, engine: RecordingEngine, clock: FakeClock
) -> None:
    held = busy(batcher, engine, clock)
    batch_item = batcher.submit(u("bulk", voice="a"))
    clock.advance(0.029)
    live = batcher.submit(u("live", voice="b"), priority=Priority.REALTIME)
    clock.advance(0.002)  # the batch item is due (31 ms), the real-time one is not (2 ms)
    engine.release()
    held.result(T)
    assert batcher.settle(T)
    assert len(engine.batches) == 1
    advance(batcher, clock, 0.003)
    live.result(T)
    assert texts(engine.batches[1]) == ["live"]
    batch_item.result(T)
    assert texts(engine.batches[2]) == ["bulk"]


def test_cancelled_items_never_reach_the_engine(
    batcher: Batcher, engine: RecordingEngine, clock: FakeClock
) -> None:
    held = busy(batcher, engine, clock)
    doomed = batcher.submit(u("doomed"))
    stream = batcher.submit_stream(u("gone"), priority=Priority.REALTIME)
    kept = batcher.submit(u("kept"))
    assert doomed.cancel()
    stream.cancel()
    assert stream.read(T) is None
    engine.release()
    held.result(T)
    advance(batcher, clock, 0.030)
    kept.result(T)
    seen = [x.text for b in engine.batches for x in b]
    assert "doomed" not in seen and "gone" not in seen and "kept" in seen
    assert batcher.stats().dropped_cancelled == 2


def test_expired_items_are_dropped_with_deadline_exceeded(
    batcher: Batcher, engine: RecordingEngine, clock: FakeClock
) -> None:
    held = busy(batcher, engine, clock)
    late = batcher.submit(u("late"), deadline_s=clock() + 0.010)
    stream = batcher.submit_stream(u("late-stream"), deadline_s=clock() + 0.010)
    in_time = batcher.submit(u("in-time"), deadline_s=clock() + 1.0)
    clock.advance(0.050)
    engine.release()
    held.result(T)
    with pytest.raises(DeadlineExceededError):
        late.result(T)
    with pytest.raises(DeadlineExceededError):
        stream.read(T)
    in_time.result(T)
    seen = [x.text for b in engine.batches for x in b]
    assert "late" not in seen and "late-stream" not in seen
    assert batcher.stats().dropped_expired == 2


def test_streamed_items_get_their_chunks_as_steps_complete(
    batcher: Batcher, engine: RecordingEngine, clock: FakeClock
) -> None:
    engine.stream_chunks = 3
    s1 = batcher.submit_stream(u("first-stream"))
    s2 = batcher.submit_stream(u("second"))
    engine.hold()
    advance_no_settle(batcher, clock, 0.005)
    assert engine.entered.wait(T)
    engine.release()
    got1 = list(s1)
    got2 = list(s2)
    assert len(got1) == 3 and len(got2) == 3
    np.testing.assert_array_equal(np.concatenate(got1), audio_for(u("first-stream")))
    np.testing.assert_array_equal(np.concatenate(got2), audio_for(u("second")))


def test_first_chunk_arrives_before_the_utterance_is_finished(
    batcher: Batcher, engine: RecordingEngine, clock: FakeClock
) -> None:
    engine.stream_chunks = 2
    engine.gate_from_step = 1
    engine.hold()  # step 0 runs, step 1 blocks at the gate
    stream = batcher.submit_stream(u("streaming text"))
    advance_no_settle(batcher, clock, 0.005)
    first = stream.read(T)
    assert first is not None
    assert engine.entered.wait(T)  # the engine is still inside the utterance
    assert len(first) == len(audio_for(u("streaming text"))) // 2
    engine.release()
    assert stream.read(T) is not None
    assert stream.read(T) is None


def test_cancelling_every_stream_of_a_running_batch_stops_it(
    batcher: Batcher, engine: RecordingEngine, clock: FakeClock
) -> None:
    engine.stream_chunks = 50
    engine.gate_from_step = 1
    engine.hold()
    stream = batcher.submit_stream(u("a long utterance that streams"))
    advance_no_settle(batcher, clock, 0.005)
    assert stream.read(T) is not None
    assert engine.entered.wait(T)  # held before step 1 of 50
    stream.cancel()
    engine.release()
    assert engine.stream_closed.wait(T)
    assert stream.read(T) is None
    # The engine's generator was closed right after the step that saw the cancel.
    assert engine.steps_run <= 2
    follow = batcher.submit(u("next"))
    advance(batcher, clock, 0.030)
    follow.result(T)


def test_out_of_memory_splits_halves_and_loses_nothing(
    engine: RecordingEngine, clock: FakeClock
) -> None:
    engine.fail_when = oom_above(2)
    for batcher in make(engine, clock, max_batch=8, grow_after_successes=10):
        futures = [batcher.submit(u(f"t{i}")) for i in range(8)]
        for i, f in enumerate(futures):
            np.testing.assert_array_equal(f.result(T), audio_for(u(f"t{i}")))
        assert batcher.settle(T)
        sizes = [len(b) for b in engine.batches]
        assert sizes == [8, 4, 2, 2, 2, 2]  # 8 → OOM → 4 → OOM → 2s
        stats = batcher.stats()
        assert stats.oom_events == 2
        assert stats.effective_max_batch == 2
        order = [x.text for b in engine.batches[2:] for x in b]
        assert order == [f"t{i}" for i in range(8)]


def test_out_of_memory_on_a_single_item_fails_it(engine: RecordingEngine, clock: FakeClock) -> None:
    engine.fail_when = oom_above(0)
    for batcher in make(engine, clock, max_batch=4):
        future = batcher.submit(u("too big"))
        advance(batcher, clock, 0.030)
        with pytest.raises(EngineOutOfMemoryError):
            future.result(T)


def test_max_batch_grows_back_only_after_enough_successes(
    engine: RecordingEngine, clock: FakeClock
) -> None:
    engine.fail_when = oom_above(2)
    for batcher in make(engine, clock, max_batch=4, grow_after_successes=4):
        for f in [batcher.submit(u(f"t{i}")) for i in range(4)]:
            f.result(T)
        assert batcher.settle(T)
        assert batcher.stats().effective_max_batch == 2
        engine.fail_when = None
        for f in [batcher.submit(u(f"s{i}")) for i in range(2)]:
            f.result(T)
        assert batcher.settle(T)
        # 3 good batches since the OOM (the two split pairs and this one): not 4 yet.
        assert batcher.stats().effective_max_batch == 2
        for f in [batcher.submit(u(f"r{i}")) for i in range(2)]:
            f.result(T)
        assert batcher.settle(T)
        assert batcher.stats().effective_max_batch == 4


def test_wrong_number_of_outputs_is_a_typed_error_on_every_future(
    engine: RecordingEngine, clock: FakeClock
) -> None:
    engine.output_count = lambda n: n - 1
    for batcher in make(engine, clock):
        futures = [batcher.submit(u(f"t{i}")) for i in range(4)]
        for f in futures:
            with pytest.raises(EngineOutputMismatchError, match="3 outputs for 4 inputs"):
                f.result(T)
        assert batcher.stats().failed_batches == 1


def test_engine_crash_fails_its_batch_and_the_next_batch_still_runs(
    engine: RecordingEngine, clock: FakeClock
) -> None:
    def boom(batch: object) -> BaseException | None:
        return RuntimeError("kaput") if engine.calls == 1 else None

    engine.fail_when = boom
    for batcher in make(engine, clock):
        doomed = [batcher.submit(u(f"t{i}")) for i in range(4)]
        for f in doomed:
            with pytest.raises(EngineError, match="RuntimeError: kaput"):
                f.result(T)
        survivor = batcher.submit(u("survivor"))
        advance(batcher, clock, 0.030)
        np.testing.assert_array_equal(survivor.result(T), audio_for(u("survivor")))


def test_unknown_voice_is_refused_at_submit(batcher: Batcher, engine: RecordingEngine) -> None:
    with pytest.raises(UnknownVoiceError):
        batcher.submit(u("x", voice="nope"))
    assert batcher.stats().queue_depth == {Priority.REALTIME: 0, Priority.BATCH: 0}


def test_metrics_count_batches_waits_depth_and_busy_time(
    batcher: Batcher, engine: RecordingEngine, clock: FakeClock
) -> None:
    futures = [batcher.submit(u(f"t{i}")) for i in range(4)]
    for f in futures:
        f.result(T)
    batch_item = batcher.submit(u("b"))
    live = batcher.submit(u("r", voice="b"), priority=Priority.REALTIME)
    assert batcher.settle(T)
    stats = batcher.stats()
    assert stats.queue_depth == {Priority.REALTIME: 1, Priority.BATCH: 1}
    advance(batcher, clock, 0.005)
    live.result(T)
    advance(batcher, clock, 0.025)
    batch_item.result(T)
    stats = batcher.stats()
    assert stats.batches == 3 and stats.items == 6
    assert stats.batch_sizes == {4: 1, 1: 2}
    assert stats.wait[Priority.REALTIME].count == 1
    assert stats.wait[Priority.REALTIME].max_s == pytest.approx(0.005)
    assert stats.wait[Priority.BATCH].max_s == pytest.approx(0.030)
    assert stats.queue_depth == {Priority.REALTIME: 0, Priority.BATCH: 0}


def test_utilization_reflects_busy_time(engine: RecordingEngine) -> None:
    clock = FakeClock()

    def slow(batch: object) -> None:
        clock.advance(0.5)  # the engine "takes" 0.5 s of the fake clock

    engine.fail_when = slow
    for batcher in make(engine, clock, max_batch=1):
        batcher.submit(u("x")).result(T)
        clock.advance(0.5)
        stats = batcher.stats()
        assert stats.busy_s == pytest.approx(0.5)
        assert stats.utilization == pytest.approx(0.5)


def test_close_without_drain_fails_queued_work_and_refuses_new(
    engine: RecordingEngine, clock: FakeClock
) -> None:
    batcher = Batcher(engine, BatcherSettings(max_batch=4), clock=clock).start(timeout_s=T)
    pending = batcher.submit(u("never"))
    batcher.close(drain=False, timeout_s=T)
    with pytest.raises(ShuttingDownError):
        pending.result(T)
    with pytest.raises(ShuttingDownError):
        batcher.submit(u("late"))
    assert engine.unloaded.is_set()


def test_close_with_drain_runs_queued_work(engine: RecordingEngine, clock: FakeClock) -> None:
    batcher = Batcher(engine, BatcherSettings(max_batch=4), clock=clock).start(timeout_s=T)
    pending = batcher.submit(u("finish me"))
    batcher.close(drain=True, timeout_s=T)
    np.testing.assert_array_equal(pending.result(T), audio_for(u("finish me")))


def test_engine_load_failure_is_raised_by_start(clock: FakeClock) -> None:
    class Broken(RecordingEngine):
        def load(self) -> None:
            raise EngineError("weights missing: model.safetensors")

    with pytest.raises(EngineError, match=r"model\.safetensors"):
        Batcher(Broken(), clock=clock).start(timeout_s=T)


def test_cancel_error_type_for_a_future_cancelled_in_the_queue(
    batcher: Batcher, engine: RecordingEngine, clock: FakeClock
) -> None:
    held = busy(batcher, engine, clock)
    stream = batcher.submit_stream(u("s"))
    stream.cancel()
    engine.release()
    held.result(T)
    assert stream.read(T) is None
    assert issubclass(CancelledError, Exception)


def advance_no_settle(batcher: Batcher, clock: FakeClock, seconds: float) -> None:
    clock.advance(seconds)
    batcher.wake()


def test_an_engine_that_cannot_batch_caps_the_batch_and_never_waits(clock: FakeClock) -> None:
    engine = RecordingEngine()
    engine.max_batch = 1  # renders one utterance at a time, like espeak
    for batcher in make(engine, clock, max_batch=64, max_wait_batch_s=10.0):
        futures = [batcher.submit(u(f"t{i}")) for i in range(3)]
        for f in futures:
            f.result(T)  # no clock movement needed: a batch of one is always full
        assert [len(b) for b in engine.batches] == [1, 1, 1]
        assert batcher.max_batch == 1


def test_batch_heads_go_round_the_groups_so_a_small_tenant_is_not_stuck(
    engine: RecordingEngine, clock: FakeClock
) -> None:
    for batcher in make(engine, clock, max_batch=1):
        engine.hold()
        engine.entered.clear()
        first = batcher.submit(u("warm"))
        assert engine.entered.wait(T)
        big = [batcher.submit(u(f"big{i}"), group="books") for i in range(4)]
        small = [batcher.submit(u(f"small{i}"), group="one-liner") for i in range(2)]
        live = batcher.submit(u("live"), priority=Priority.REALTIME)
        engine.release()
        for future in (first, *big, *small, live):
            future.result(T)
        order = [x.text for b in engine.batches for x in b]
        # Real time first; then the groups take turns; FIFO within a group.
        assert order == ["warm", "live", "big0", "small0", "big1", "small1", "big2", "big3"]


def test_batches_of_one_group_keep_their_order(engine: RecordingEngine, clock: FakeClock) -> None:
    for batcher in make(engine, clock, max_batch=2):
        futures = [batcher.submit(u(f"t{i}"), group="only") for i in range(6)]
        assert batcher.settle(T)
        for future in futures:
            future.result(T)
        assert [texts(b) for b in engine.batches] == [["t0", "t1"], ["t2", "t3"], ["t4", "t5"]]
