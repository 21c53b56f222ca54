"""Continuous batching with a noisy neighbour: a live voice's first audio beside a saturated
batch lane while another process spins on a core, run after run, with a trace of every slow
wait (issue 27's "stall").

Each run builds a fresh continuous :class:`~voicelane.workers.batching.Batcher` on the ChatTTS
engine and measures table a of :mod:`bench.chattts_continuous` (streamed real-time probes,
idle, then beside ``2 x max_batch`` batch-lane items), all of it with a CPU hog beside it (a
process spinning in a loop, started before the first run). The ratio is saturated max / idle
max of the same run; the target is <= 3x in every run.

The trace: the engine's step session is wrapped so that every ``step`` (prefill work, one
decoding step, the decodes of chunks and finished rows) and every ``admit`` is timed, and
``gc.callbacks`` times every collection. For each probe whose first audio took more than 3x
the run's idle max, the line lists what ran between its submission and its first audio: the
steps (count, total, longest, the most rows in one), the collections, and the rest — time in
no engine call and no collection: the scheduler thread waiting for the GIL or for a core.

Called by ``bench/chattts.py --hog-runs N``.
"""

from __future__ import annotations

import gc
import multiprocessing
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.chattts_continuous import Scale, idle_then_saturated, seconds
from bench.tables import header
from voicelane.core.settings import BatcherSettings, ChatTTSSettings
from voicelane.workers.batching import Batcher
from voicelane.workers.engines import Utterance
from voicelane.workers.engines.base import StepEvent, StepSession
from voicelane.workers.engines.chattts import ChatTTSEngine

SLOW_X = 3.0
"""A probe is traced when its first audio took more than this times the run's idle max."""


def _spin() -> None:  # pragma: no cover - runs in the hog process
    while True:
        pass


@dataclass
class Span:
    kind: str
    start: float
    end: float
    rows: int = 0


@dataclass
class Recorder:
    """Engine calls and collections, timed (perf_counter seconds)."""

    spans: list[Span] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _gc_started: float = 0.0

    def add(self, span: Span) -> None:
        with self._lock:
            self.spans.append(span)

    def gc_callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            kind = f"gc{info.get('generation', '?')}"
            self.add(Span(kind, self._gc_started, time.perf_counter()))

    def clear(self) -> None:
        with self._lock:
            self.spans.clear()

    def between(self, start: float, end: float) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if s.end > start and s.start < end]


class TracedSession(StepSession):
    """A step session whose calls are timed into a :class:`Recorder`."""

    def __init__(self, inner: StepSession, recorder: Recorder) -> None:
        self._inner = inner
        self._recorder = recorder

    def admit(self, handle: int, utterance: Utterance, *, stream: bool) -> None:
        started = time.perf_counter()
        self._inner.admit(handle, utterance, stream=stream)
        self._recorder.add(Span("admit", started, time.perf_counter(), 1))

    def fits(self, utterance: Utterance) -> bool:
        return self._inner.fits(utterance)

    def remove(self, handle: int) -> None:
        self._inner.remove(handle)

    def step(self, handles: Sequence[int]) -> list[StepEvent]:
        started = time.perf_counter()
        events = self._inner.step(handles)
        self._recorder.add(Span("step", started, time.perf_counter(), len(handles)))
        return events

    @property
    def handles(self) -> list[int]:
        return self._inner.handles

    def close(self) -> None:
        self._inner.close()


def _traced_engine(settings: ChatTTSSettings, device: str, recorder: Recorder) -> ChatTTSEngine:
    engine = ChatTTSEngine(settings, device=device)
    open_steps = engine.open_steps

    def traced() -> StepSession:
        return TracedSession(open_steps(), recorder)

    setattr(engine, "open_steps", traced)  # noqa: B010 - an instance's method, wrapped
    return engine


def _explain(recorder: Recorder, start: float, end: float) -> str:
    spans = recorder.between(start, end)
    steps = [s for s in spans if s.kind == "step"]
    admits = [s for s in spans if s.kind == "admit"]
    gcs = [s for s in spans if s.kind.startswith("gc")]

    def inside(s: Span) -> float:
        return max(0.0, min(s.end, end) - max(s.start, start))

    step_s = sum(inside(s) for s in steps)
    admit_s = sum(inside(s) for s in admits)
    gc_s = sum(inside(s) for s in gcs)
    rest_s = (end - start) - step_s - admit_s - gc_s
    longest = max((s.end - s.start for s in steps), default=0.0)
    rows = max((s.rows for s in steps), default=0)
    return (
        f"{(end - start) * 1000:.0f} ms = {len(steps)} steps {step_s * 1000:.0f} ms "
        f"(longest {longest * 1000:.0f} ms, up to {rows} rows) + {len(admits)} admits "
        f"{admit_s * 1000:.0f} ms + {len(gcs)} collections {gc_s * 1000:.0f} ms "
        f"({', '.join(s.kind for s in gcs) or '-'}) + {rest_s * 1000:.0f} ms in none "
        "(waiting for a core or the GIL)"
    )


def hog_rows(
    settings: ChatTTSSettings, scale: Scale, runs: int, device: str = "cpu", hogs: int = 1
) -> list[dict[str, Any]]:
    print(
        f"#### Continuous batching beside a CPU hog: {scale.label}, {runs} runs\n\n"
        f"Each run: a fresh continuous batcher, {scale.probes} streamed probes of "
        f"{scale.probe_steps} steps idle, then beside max_batch {scale.max_batch} with "
        f"{2 * scale.max_batch} batch-lane sentences of {scale.min_steps}-{scale.max_steps} "
        f"steps; {hogs} process(es) spinning, one core each, throughout\n"
    )
    header(
        "run", "idle p50 ms", "idle max ms", "saturated p50 ms", "saturated max ms",
        "max ratio", f"probes > {SLOW_X:g}x idle max",
    )  # fmt: skip
    spawn = multiprocessing.get_context("spawn")
    hog_processes = [spawn.Process(target=_spin, daemon=True) for _ in range(hogs)]
    for hog in hog_processes:
        hog.start()
    recorder = Recorder()
    gc.callbacks.append(recorder.gc_callback)
    rows: list[dict[str, Any]] = []
    traces: list[str] = []
    try:
        for run in range(1, runs + 1):
            config = BatcherSettings(max_batch=scale.max_batch, continuous=True)
            engine = _traced_engine(settings, device, recorder)
            with Batcher(engine, config) as batcher:
                idle, busy = idle_then_saturated(batcher, scale)
            idle_s, busy_s = seconds(idle), seconds(busy)
            idle_max = max(idle_s)
            slow = [(start, end) for start, end in busy if end - start > SLOW_X * idle_max]
            ratio = max(busy_s) / idle_max
            print(
                f"| {run} | {statistics.median(idle_s) * 1000:.0f} | {idle_max * 1000:.0f} "
                f"| {statistics.median(busy_s) * 1000:.0f} | {max(busy_s) * 1000:.0f} "
                f"| {ratio:.2f}x | {len(slow)} |",
                flush=True,
            )
            traces += [f"- run {run}: {_explain(recorder, s, e)}" for s, e in slow]
            rows.append({"run": run, "idle_max_s": idle_max, "busy_max_s": max(busy_s)})
            recorder.clear()
    finally:
        gc.callbacks.remove(recorder.gc_callback)
        for hog in hog_processes:
            hog.terminate()
            hog.join()
    met = sum(1 for r in rows if r["busy_max_s"] <= SLOW_X * r["idle_max_s"])
    print()
    print("\n".join(traces) or f"- no probe took more than {SLOW_X:g}x its run's idle max")
    verdict = "PASS" if met == len(rows) else "FAIL"
    print(f"\n{verdict} max <= {SLOW_X:g}x idle in {met} of {len(rows)} runs (target: every run)\n")
    return rows
