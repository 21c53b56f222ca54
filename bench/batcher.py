"""Benchmark: what the dynamic batcher costs, and how long real-time work waits behind batch work.

A cost-model engine stands in for a GPU: each call takes ``FIXED_S + PER_ITEM_S * n`` (it
sleeps, releasing the GIL as a GPU call does), so batching pays. Two tables:

1. Closed-loop submitters (1, 8, 64 threads, each submitting one item and waiting for it,
   again and again) through the batcher, against the same items fed to the engine directly
   in ideal batches (size = number of submitters, capped at max_batch), in the same run.
   "added" is the batcher's wall time over the ideal engine time.
2. The batch class saturated (thousands of queued items, full batches back to back) while a
   real-time item arrives every few tens of milliseconds: its wait (submit → its batch
   starts) against one full batch's run time.

Run: ``.venv/bin/python bench/batcher.py`` (``--quick`` for a short run).
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time
from collections.abc import Sequence

import numpy as np

from voicelane.core.settings import BatcherSettings
from voicelane.workers.batching import Batcher, Priority
from voicelane.workers.engines.base import Engine, PcmF32, Utterance, VoiceInfo

FIXED_S = 0.040
PER_ITEM_S = 0.0005
MAX_BATCH = 64


class CostModelEngine(Engine):
    name = "cost-model"
    sample_rate_hz = 24000

    def __init__(self) -> None:
        self.busy_s = 0.0
        self.calls = 0
        self._out = np.zeros(480, dtype=np.float32)

    def voices(self) -> list[VoiceInfo]:
        return [VoiceInfo(id="v", name="V", languages=("xx",))]

    def synthesize(self, batch: Sequence[Utterance]) -> list[PcmF32]:
        started = time.perf_counter()
        time.sleep(FIXED_S + PER_ITEM_S * len(batch))
        self.busy_s += time.perf_counter() - started
        self.calls += 1
        return [self._out] * len(batch)


def ideal_time_s(engine: CostModelEngine, total_items: int, batch_size: int) -> float:
    """The same items fed straight to the engine in full batches: the floor."""
    started = time.perf_counter()
    left = total_items
    while left > 0:
        n = min(batch_size, left)
        engine.synthesize([Utterance("x", "v")] * n)
        left -= n
    return time.perf_counter() - started


def closed_loop(submitters: int, rounds: int) -> dict[str, float]:
    engine = CostModelEngine()
    config = BatcherSettings(max_batch=MAX_BATCH, max_wait_batch_s=0.030)
    batcher = Batcher(engine, config).start()
    start_line = threading.Barrier(submitters + 1)

    def submitter() -> None:
        start_line.wait()
        for _ in range(rounds):
            batcher.submit(Utterance("x", "v")).result(timeout=60)

    threads = [threading.Thread(target=submitter) for _ in range(submitters)]
    for t in threads:
        t.start()
    start_line.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    wall_s = time.perf_counter() - started
    stats = batcher.stats()
    batcher.close()
    total = submitters * rounds
    ideal_s = ideal_time_s(CostModelEngine(), total, min(submitters, MAX_BATCH))
    return {
        "submitters": submitters,
        "items": total,
        "wall_s": wall_s,
        "engine_busy_s": engine.busy_s,
        "ideal_s": ideal_s,
        "mean_batch": stats.mean_batch_size,
        "added_pct": 100.0 * (wall_s - ideal_s) / ideal_s,
        "gap_ms_per_batch": 1000.0 * (wall_s - engine.busy_s) / max(1, stats.batches),
    }


def realtime_under_load(batch_items: int, realtime_items: int) -> dict[str, float]:
    engine = CostModelEngine()
    config = BatcherSettings(max_batch=MAX_BATCH, max_wait_realtime_s=0.005)
    batcher = Batcher(engine, config).start()
    batch_futures = [batcher.submit(Utterance("x", "v")) for _ in range(batch_items)]
    waits_s: list[float] = []
    rng = random.Random(7)
    for _ in range(realtime_items):
        time.sleep(rng.uniform(0.0, 0.1))  # arrivals at random points of the running batch
        submitted = time.perf_counter()
        future = batcher.submit(Utterance("x", "v"), priority=Priority.REALTIME)
        future.result(timeout=60)
        # The item's own batch took one full-batch run; the rest is waiting.
        waits_s.append(time.perf_counter() - submitted)
    depth = batcher.stats().queue_depth[Priority.BATCH]
    stats = batcher.stats()
    batcher.close(drain=False)
    for f in batch_futures:
        f.cancel()
    full_batch_s = FIXED_S + PER_ITEM_S * MAX_BATCH
    rt = stats.wait[Priority.REALTIME]
    return {
        "batch_queued_at_end": depth,
        "full_batch_s": full_batch_s,
        "rt_wait_p50_s": rt.p50_s,
        "rt_wait_p99_s": rt.p99_s,
        "rt_wait_max_s": rt.max_s,
        "rt_total_p50_s": statistics.median(waits_s),
        "rt_total_max_s": max(waits_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row; the median is shown")
    args = parser.parse_args()
    rounds = 10 if args.quick else 30

    print(
        f"cost model: {FIXED_S * 1000:.0f} ms per call + {PER_ITEM_S * 1000:.1f} ms per item; "
        f"max_batch {MAX_BATCH}, batch max_wait 30 ms; median of {args.repeat} runs per row\n"
    )
    print(
        "| submitters | items | mean batch | batcher wall s | ideal engine s | added "
        "| not-engine time per batch |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for submitters in (1, 8, 64):
        runs = [closed_loop(submitters, rounds) for _ in range(args.repeat)]
        r = sorted(runs, key=lambda run: run["added_pct"])[len(runs) // 2]  # the median run
        print(
            f"| {submitters} | {r['items']:.0f} | {r['mean_batch']:.1f} | {r['wall_s']:.3f} "
            f"| {r['ideal_s']:.3f} | {r['added_pct']:+.1f}% | {r['gap_ms_per_batch']:.2f} ms |"
        )

    r = realtime_under_load(batch_items=12000, realtime_items=15 if args.quick else 60)
    print()
    print(
        "| batch items still queued | full batch run | rt wait p50 | rt wait p99 | rt wait max "
        "| p99 / full batch |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {r['batch_queued_at_end']:.0f} | {r['full_batch_s'] * 1000:.1f} ms "
        f"| {r['rt_wait_p50_s'] * 1000:.1f} ms | {r['rt_wait_p99_s'] * 1000:.1f} ms "
        f"| {r['rt_wait_max_s'] * 1000:.1f} ms "
        f"| {r['rt_wait_p99_s'] / r['full_batch_s']:.2f} |"
    )


if __name__ == "__main__":
    main()
