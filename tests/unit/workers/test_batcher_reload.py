"""Hot-swap: ``Batcher.reload`` reloads the engine between two batches; queued work waits and
runs on the new weights, nothing is failed or dropped."""

from __future__ import annotations

import threading

from tests.support.engines import RecordingEngine
from voicelane.workers.batching import Batcher, Priority, ReloadReport
from voicelane.workers.engines import Utterance


class CountingEngine(RecordingEngine):
    def __init__(self) -> None:
        super().__init__(voices=("auto",))
        self.loads = 0
        self.unloads = 0

    def load(self) -> None:
        self.loads += 1

    def unload(self) -> None:
        self.unloads += 1


def test_a_reload_waits_for_the_running_batch_and_loses_nothing() -> None:
    engine = CountingEngine()
    engine.hold()  # the first batch waits at the gate
    batcher = Batcher(engine).start()
    try:
        first = batcher.submit(Utterance("running", "auto"), priority=Priority.BATCH)
        assert engine.entered.wait(10)
        reload = batcher.reload()
        queued = [
            batcher.submit(Utterance(f"queued {n}", "auto"), priority=Priority.BATCH)
            for n in range(5)
        ]
        live = batcher.submit(Utterance("live", "auto"), priority=Priority.REALTIME)
        assert not reload.done()  # never in the middle of a batch
        engine.release()
        report = reload.result(10)
        assert isinstance(report, ReloadReport)
        assert report.before_bytes > 0 and report.after_bytes > 0 and report.seconds >= 0
        for future in [first, *queued, live]:
            assert len(future.result(10)) > 0  # every item rendered, none failed
        assert (engine.loads, engine.unloads) == (2, 1)
        texts = [u.text for batch in engine.batches for u in batch]
        assert texts[0] == "running" and sorted(texts[1:]) == sorted(
            ["live", *(f"queued {n}" for n in range(5))]
        )
    finally:
        engine.release()
        batcher.close()


def test_reloads_asked_together_are_done_once() -> None:
    engine = CountingEngine()
    batcher = Batcher(engine).start()
    try:
        gate = threading.Barrier(2)
        futures = []

        def ask() -> None:
            gate.wait()
            futures.append(batcher.reload())

        threads = [threading.Thread(target=ask) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        reports = [future.result(10) for future in futures]
        assert len(reports) == 2
        assert engine.loads in (2, 3)  # one reload for both, or one each: never lost
    finally:
        batcher.close()
