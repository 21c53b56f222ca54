"""Benchmark tables for continuous batching (ChatTTS), static batches vs the running batch.

Both modes run the same engine through the same :class:`~voicelane.workers.batching.Batcher`, in the
same run; only ``BatcherSettings.continuous`` differs. Random weights (the tiny checkpoint and
the official architecture); every item is forced to an exact number of steps (min == max).

a. **Real-time first audio, idle vs batch lane saturated**: streamed real-time probes one
   after the other, with nothing else running, then while the batch lane is kept full
   (``max_batch`` long sentences running and as many queued, of mixed lengths). p50 and max,
   and saturated / idle.
b. **Batch-lane throughput with mixed lengths**: the same set of sentences of mixed lengths
   submitted at once; audio seconds per wall second.
c. **KV memory per row vs batch size**: the running batch's paged cache with rows that joined
   at different steps, against a cache padded to the longest row (what splicing rows into
   one left-padded cache costs).

Called by ``bench/chattts.py --continuous``.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from bench.tables import header
from voicelane.core.settings import BatcherSettings, ChatTTSSettings
from voicelane.workers.batching import Batcher, Priority
from voicelane.workers.engines import Utterance
from voicelane.workers.engines.base import PcmF32
from voicelane.workers.engines.chattts import ChatTTSEngine

STEP_S = 512 / 24000
TIMEOUT_S = 1800.0
VOICES = ("seed:2", "seed:5", "seed:11")
BATCH_TEXTS = (
    "The committee met on Tuesday to review the budget for the coming year.",
    "今天的会议讨论了明年的预算和人员安排。",
    "She opened the window, looked at the harbor, and smiled at the boats.",
    "北方地区预计有雨，气温在十二度左右。",
)
PROBE_TEXT = "Hello, how can I help you today?"


@dataclass(frozen=True, slots=True)
class Scale:
    """One checkpoint's sizes for the three tables."""

    label: str
    max_batch: int
    min_steps: int
    max_steps: int
    probe_steps: int
    probes: int
    throughput_items: int
    memory_batches: tuple[int, ...]
    memory_steps: int


def exact(steps: int) -> tuple[tuple[str, float | int | str], ...]:
    return (("max_new_tokens", steps), ("min_new_tokens", steps))


def batch_item(rng: random.Random, scale: Scale, index: int) -> Utterance:
    return Utterance(
        BATCH_TEXTS[index % len(BATCH_TEXTS)],
        VOICES[index % len(VOICES)],
        seed=index,
        params=exact(rng.randint(scale.min_steps, scale.max_steps)),
    )


class BatchLaneLoad:
    """Keeps ``2 x max_batch`` batch-lane items in the batcher: each one done is replaced."""

    def __init__(self, batcher: Batcher, scale: Scale) -> None:
        self.batcher = batcher
        self.scale = scale
        self._rng = random.Random(7)
        self._lock = threading.Lock()
        self._stopped = False
        self._count = 0
        self.outstanding: set[Future[PcmF32]] = set()

    def start(self) -> None:
        for _ in range(2 * self.scale.max_batch):
            self._submit()

    def _submit(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._count += 1
            utterance = batch_item(self._rng, self.scale, self._count)
        future = self.batcher.submit(utterance, priority=Priority.BATCH)
        with self._lock:
            self.outstanding.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: Future[PcmF32]) -> None:
        with self._lock:
            self.outstanding.discard(future)
        self._submit()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            waiting = list(self.outstanding)
        for future in waiting:
            future.cancel()


def probe_times(batcher: Batcher, scale: Scale, count: int) -> list[tuple[float, float]]:
    """Real-time streams one after the other: (submitted, first chunk), perf_counter s."""
    rng = random.Random(3)
    results: list[tuple[float, float]] = []
    for index in range(count):
        time.sleep(rng.uniform(0.0, 0.05))
        utterance = Utterance(PROBE_TEXT, VOICES[0], seed=index, params=exact(scale.probe_steps))
        started = time.perf_counter()
        stream = batcher.submit_stream(utterance, priority=Priority.REALTIME)
        first = stream.read(TIMEOUT_S)
        results.append((started, time.perf_counter()))
        assert first is not None
        while stream.read(TIMEOUT_S) is not None:
            pass
    return results


def idle_then_saturated(
    batcher: Batcher, scale: Scale
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """Table a's probes on one batcher: after a warm-up, ``scale.probes`` with nothing else
    running, then as many beside a kept-full batch lane (:class:`BatchLaneLoad`)."""
    probe_times(batcher, scale, 1)  # warm-up
    idle = probe_times(batcher, scale, scale.probes)
    load = BatchLaneLoad(batcher, scale)
    load.start()
    time.sleep(0.5)
    busy = probe_times(batcher, scale, scale.probes)
    load.stop()
    return idle, busy


def seconds(times: list[tuple[float, float]]) -> list[float]:
    return [end - start for start, end in times]


Row = dict[str, Any]


def first_audio_rows(settings: ChatTTSSettings, scale: Scale, device: str) -> list[Row]:
    print(
        f"#### a. Real-time first audio, idle vs batch lane saturated: {scale.label}\n\n"
        f"{scale.probes} streamed probes of {scale.probe_steps} steps each; saturated: "
        f"max_batch {scale.max_batch}, {2 * scale.max_batch} batch-lane sentences of "
        f"{scale.min_steps}-{scale.max_steps} steps in the batcher at all times\n"
    )
    header(
        "mode", "idle p50 ms", "idle max ms", "saturated p50 ms", "saturated max ms",
        "p50 ratio", "max ratio",
    )  # fmt: skip
    rows: list[Row] = []
    for continuous in (False, True):
        config = BatcherSettings(max_batch=scale.max_batch, continuous=continuous)
        with Batcher(ChatTTSEngine(settings, device=device), config) as batcher:
            idle_times, busy_times = idle_then_saturated(batcher, scale)
        idle, busy = seconds(idle_times), seconds(busy_times)
        idle_p50, idle_max = statistics.median(idle), max(idle)
        busy_p50, busy_max = statistics.median(busy), max(busy)
        name = "continuous" if continuous else "static batches"
        print(
            f"| {name} | {idle_p50 * 1000:.0f} | {idle_max * 1000:.0f} | {busy_p50 * 1000:.0f} "
            f"| {busy_max * 1000:.0f} | {busy_p50 / idle_p50:.2f}x | {busy_max / idle_max:.2f}x |"
        )
        rows.append(
            {"mode": name, "idle_p50_ms": idle_p50 * 1000, "idle_max_ms": idle_max * 1000,
             "saturated_p50_ms": busy_p50 * 1000, "saturated_max_ms": busy_max * 1000}
        )  # fmt: skip
    print()
    return rows


def throughput_rows(settings: ChatTTSSettings, scale: Scale, device: str) -> list[Row]:
    rng = random.Random(11)
    items = [batch_item(rng, scale, index) for index in range(scale.throughput_items)]
    audio_s = sum(dict(u.params)["max_new_tokens"] for u in items) * STEP_S  # type: ignore[misc]
    print(
        f"#### b. Batch-lane throughput, mixed lengths: {scale.label}\n\n"
        f"{len(items)} sentences of {scale.min_steps}-{scale.max_steps} steps "
        f"({audio_s:.0f} s of audio) submitted at once, max_batch {scale.max_batch}\n"
    )
    header("mode", "wall s", "audio s per wall s", "vs static")
    static_s = 0.0
    rows: list[Row] = []
    lengths: list[list[int]] = []
    for continuous in (False, True):
        config = BatcherSettings(
            max_batch=scale.max_batch, continuous=continuous, max_wait_batch_s=0.5
        )
        with Batcher(ChatTTSEngine(settings, device=device), config) as batcher:
            started = time.perf_counter()
            futures = [batcher.submit(item) for item in items]
            lengths.append([future.result(TIMEOUT_S).size for future in futures])
            wall_s = time.perf_counter() - started
        static_s = static_s or wall_s
        name = "continuous" if continuous else "static batches"
        print(f"| {name} | {wall_s:.2f} | {audio_s / wall_s:.1f} | {static_s / wall_s:.2f}x |")
        rows.append({"mode": name, "wall_s": wall_s, "audio_s_per_wall_s": audio_s / wall_s})
    print()
    rows.append({"same_lengths": lengths[0] == lengths[1]})
    return rows


def memory_rows(settings: ChatTTSSettings, scale: Scale, device: str) -> list[Row]:
    engine = ChatTTSEngine(settings, device=device)
    table: list[Row] = []
    engine.load()
    try:
        per_token = engine.open_steps().kv.bytes_per_token
        print(
            f"#### c. KV memory per row vs batch size: {scale.label}\n\n"
            f"{per_token / 1024:.1f} KiB per token (keys and values, every layer); rows join "
            f"at even intervals over {scale.memory_steps} steps (as a running batch refills); "
            f"measured when the last row has joined\n"
        )
        header(
            "rows", "tokens in rows", "paged KiB", "KiB per row", "padded to longest KiB",
            "padded / paged",
        )  # fmt: skip
        for rows in scale.memory_batches:
            session = engine.open_steps()
            every = max(1, scale.memory_steps // rows)
            for step in range(every * (rows - 1) + 1):
                if step % every == 0:
                    handle = step // every
                    text = BATCH_TEXTS[handle % len(BATCH_TEXTS)]
                    utterance = Utterance(text, VOICES[0], seed=handle, params=exact(4000))
                    session.admit(handle, utterance, stream=False)
                session.step(session.handles)
            lengths = []
            for handle in session.handles:
                prefilled, _prompt, steps = session.progress(handle)
                lengths.append(prefilled + max(0, steps - 1))
            paged = session.kv.blocks_used * session.kv.block_tokens * per_token
            padded = len(lengths) * max(lengths) * per_token
            print(
                f"| {rows} | {sum(lengths)} | {paged / 1024:.0f} | {paged / rows / 1024:.0f} "
                f"| {padded / 1024:.0f} | {padded / paged:.2f}x |"
            )
            table.append(
                {"rows": rows, "tokens": sum(lengths), "paged_bytes": paged,
                 "padded_bytes": padded, "pool_bytes": session.kv.bytes_allocated}
            )  # fmt: skip
            session.close()
    finally:
        engine.unload()
    print()
    return table


def continuous_tables(
    settings: ChatTTSSettings, scale: Scale, device: str = "cpu"
) -> dict[str, list[Row]]:
    """The three tables, printed; their numbers returned by table."""
    return {
        "continuous_first_audio": first_audio_rows(settings, scale, device),
        "continuous_throughput": throughput_rows(settings, scale, device),
        "continuous_memory": memory_rows(settings, scale, device),
    }
