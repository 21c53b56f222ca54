"""Benchmark (issue 21): the engines on the CPU — speed, batching, first audio, memory, WER.

Per engine, each in its own process (so one engine's memory and threads do not mix with
another's), on the sentence set of the intelligibility check
(``tests/data/intelligibility_en.txt``):

* **real-time factor** (wall seconds per audio second; lower is faster) of the engine's own
  ``synthesize`` on the sentences cycled to ``--items`` utterances, at batch sizes 1, 2, 4 ...
  64 (the fastest of up to five passes while a size has run under 2 s in all): at batch 1
  and at the best batch, and the throughput the best batch buys over batch 1 (the batcher
  caps an engine's batch at its ``max_batch``: espeak renders one utterance after the other,
  so it is capped at 1);
* **first audio**: a sentence submitted as a stream is served (the shared
  :class:`~voicelane.workers.batching.Batcher`, ``submit_stream`` at real-time priority, the
  embedded renderer's batcher) → its first non-empty chunk; median of ``--repeat``;
* **memory**: the process's resident memory grown by creating and loading the engine and
  rendering one sentence (imports and first-call allocations included), and its peak through
  the batch-size runs (the largest batch's working memory; before the renderer and the
  listener are loaded);
* **WER** as pocketsphinx hears each sentence (:mod:`bench.intelligibility`): the engine's
  PCM, ``voicelane render`` to WAV and to Ogg Opus at the default 24 kHz.

Ratios are against the baseline measured in the same run: the first engine listed (espeak by
default) at batch 1.

``--engines`` (comma-separated) defaults to every engine ``create_engine`` knows that can be
built here; one that cannot (ChatTTS without ``VOICELANE_CHATTTS__DIR``, an extra not
installed) is left out with the reason printed.

Run: ``.venv/bin/python -m bench.engines [--engines espeak,piper] [--quick]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from itertools import cycle, islice
from pathlib import Path
from typing import Any

from bench.intelligibility import ENGINE_PATH, PATHS, engine_wer, english_voice, load_sentences
from bench.tables import header
from voicelane.common.audio import AudioFormat
from voicelane.core.settings import EmbeddedSettings
from voicelane.workers.batching import Priority
from voicelane.workers.engines import ENGINE_NAMES, Engine, Utterance, create_engine
from voicelane.workers.render import EmbeddedRenderer

ROOT = Path(__file__).resolve().parents[1]
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
QUICK_BATCH_SIZES = (1, 4, 16)
MIN_TIMED_S = 2.0
MAX_PASSES = 5
RESULT_PREFIX = "RESULT "
TIMEOUT_S = 600.0


@dataclass
class BatchRun:
    batch: int
    wall_s: float
    audio_s: float

    @property
    def rtf(self) -> float:
        return self.wall_s / self.audio_s


@dataclass
class EngineResult:
    engine: str
    voice: str
    sample_rate_hz: int
    max_batch: int | None
    load_s: float
    rss_load_bytes: int
    rss_peak_bytes: int
    first_audio_s: float
    batches: list[BatchRun] = field(default_factory=list)
    wer: dict[str, float] = field(default_factory=dict)
    heard: dict[str, list[tuple[str, str, float]]] = field(default_factory=dict)
    """Per path: (sentence, what pocketsphinx heard, its WER)."""

    @property
    def batch1(self) -> BatchRun:
        return next(run for run in self.batches if run.batch == 1)

    @property
    def best(self) -> BatchRun:
        return min(self.batches, key=lambda run: run.rtf)

    @staticmethod
    def from_json(data: dict[str, Any]) -> EngineResult:
        batches = [BatchRun(**run) for run in data.pop("batches")]
        heard = {
            path: [(str(text), str(said), float(wer)) for text, said, wer in rows]
            for path, rows in data.pop("heard").items()
        }
        return EngineResult(**data, batches=batches, heard=heard)


# ---- one engine, in its own process ----------------------------------------------------------


def _status_kib(key: str) -> int:
    """A ``/proc/self/status`` line's value (kB) in bytes: ``VmRSS``, ``VmHWM``."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def batch_runs(
    engine: Engine, utterances: Sequence[Utterance], sizes: Sequence[int]
) -> list[BatchRun]:
    """``synthesize`` on all ``utterances`` in calls of each batch size: the fastest of up to
    :data:`MAX_PASSES` passes, repeated while a size has run for less than
    :data:`MIN_TIMED_S` in all (a fast engine's pass is a fraction of a second: one pass
    would be mostly the machine's noise)."""
    runs: list[BatchRun] = []
    for size in sizes:
        best: BatchRun | None = None
        timed_s = 0.0
        for _ in range(MAX_PASSES):
            started = time.perf_counter()
            samples = 0
            for i in range(0, len(utterances), size):
                samples += sum(len(pcm) for pcm in engine.synthesize(utterances[i : i + size]))
            run = BatchRun(size, time.perf_counter() - started, samples / engine.sample_rate_hz)
            timed_s += run.wall_s
            if best is None or run.wall_s < best.wall_s:
                best = run
            if timed_s >= MIN_TIMED_S:
                break
        assert best is not None
        runs.append(best)
    return runs


def first_audio_s(renderer: EmbeddedRenderer, utterance: Utterance, repeat: int) -> float:
    """Median time from ``submit_stream`` (real-time priority) to the first non-empty chunk
    (after one warm-up stream)."""
    times: list[float] = []
    for attempt in range(repeat + 1):
        started = time.perf_counter()
        stream = renderer.batcher.submit_stream(utterance, priority=Priority.REALTIME)
        elapsed: float | None = None
        while (chunk := stream.read(TIMEOUT_S)) is not None:
            if elapsed is None and len(chunk):
                elapsed = time.perf_counter() - started
        assert elapsed is not None, "the stream gave no audio"
        if attempt:
            times.append(elapsed)
    return statistics.median(times)


def measure(name: str, *, quick: bool, items: int, repeat: int) -> EngineResult:
    """Every number of one engine; the process's memory is this engine's alone."""
    settings = EmbeddedSettings().model_copy(update={"engine": name})
    sentences = load_sentences()
    rss_before = _status_kib("VmRSS")
    started = time.perf_counter()
    engine = create_engine(name, device="cpu", chattts=settings.chattts, piper=settings.piper)
    engine.load()
    load_s = time.perf_counter() - started
    voice = english_voice(engine)
    engine.synthesize([Utterance(sentences[0], voice)])  # what the first call allocates counts
    rss_load = _status_kib("VmRSS") - rss_before
    utterances = [Utterance(text, voice) for text in islice(cycle(sentences), items)]
    sizes = [s for s in (QUICK_BATCH_SIZES if quick else BATCH_SIZES) if s <= items]
    batches = batch_runs(engine, utterances, sizes)
    rss_peak = _status_kib("VmHWM") - rss_before  # before the renderer and the listener
    engine.unload()  # the renderer's batcher loads it again, on its own thread
    paths = PATHS[1:] if quick else PATHS
    with EmbeddedRenderer(settings, engine=engine) as renderer:
        first_s = first_audio_s(renderer, Utterance(sentences[0], voice), repeat)
        reports = engine_wer(name, sentences, paths=paths, voice=voice, renderer=renderer)
    return EngineResult(
        engine=name,
        voice=voice,
        sample_rate_hz=engine.sample_rate_hz,
        max_batch=engine.max_batch,
        load_s=load_s,
        rss_load_bytes=rss_load,
        rss_peak_bytes=rss_peak,
        first_audio_s=first_s,
        batches=batches,
        wer={path: report.wer for path, report in reports.items()},
        heard={
            path: [(s.text, s.heard, s.wer) for s in report.sentences]
            for path, report in reports.items()
        },
    )


# ---- the parent: which engines, one process each, the tables ---------------------------------


def unavailable(name: str, settings: EmbeddedSettings) -> str | None:
    """Why ``name`` cannot run here (None: it can)."""
    if name not in ENGINE_NAMES:
        return f"unknown engine (create_engine knows: {', '.join(ENGINE_NAMES)})"
    if name == "chattts" and settings.chattts.dir is None:
        return "no checkpoint: set VOICELANE_CHATTTS__DIR (no weights can be downloaded here)"
    try:
        create_engine(name, device="cpu", chattts=settings.chattts, piper=settings.piper)
    except Exception as exc:  # the reason is the report
        return f"cannot be created: {exc}"
    return None


def run_engine(name: str, args: argparse.Namespace) -> EngineResult:
    command = [
        sys.executable, "-m", "bench.engines", "--measure", name,
        "--items", str(args.items), "--repeat", str(args.repeat),
        *(["--quick"] if args.quick else []),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if done.returncode or not lines:
        raise SystemExit(f"{name}: the measuring process failed:\n{done.stderr[-4000:]}")
    return EngineResult.from_json(json.loads(lines[-1][len(RESULT_PREFIX) :]))


def _mb(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:.0f}"


def _wer(result: EngineResult, path: str) -> str:
    value = result.wer.get(path)
    return "—" if value is None else f"{value:.2f}"


def print_tables(results: Sequence[EngineResult], *, per_sentence: bool) -> None:
    base = results[0]
    base_rtf = base.batch1.rtf
    print(f"baseline: {base.engine} at batch 1 (RTF {base_rtf:.4f})\n")
    header(
        "engine (voice, rate)", "RTF batch 1", "vs baseline", "best batch", "RTF best",
        "best's throughput vs batch 1", "first audio ms", "load s", "RSS from load MB",
        "peak RSS MB",
        "WER engine PCM", "WER WAV", "WER Ogg Opus",
    )  # fmt: skip
    for r in results:
        b1, best = r.batch1, r.best
        print(
            f"| {r.engine} ({r.voice}, {r.sample_rate_hz} Hz) | {b1.rtf:.4f} "
            f"| {b1.rtf / base_rtf:.2f}x | {best.batch} | {best.rtf:.4f} "
            f"| {b1.rtf / best.rtf:.2f}x | {r.first_audio_s * 1000:.0f} "
            f"| {r.load_s:.2f} | {_mb(r.rss_load_bytes)} | {_mb(r.rss_peak_bytes)} "
            f"| {_wer(r, ENGINE_PATH)} | {_wer(r, AudioFormat.WAV.value)} "
            f"| {_wer(r, AudioFormat.OGG.value)} |"
        )
    print()
    print("RTF: wall seconds per audio second (lower is faster); throughput = 1 / RTF.\n")
    header("engine", "batch", "wall s", "audio s", "RTF", "x real time", "throughput vs batch 1")
    for r in results:
        for run in r.batches:
            print(
                f"| {r.engine} | {run.batch} | {run.wall_s:.3f} | {run.audio_s:.1f} "
                f"| {run.rtf:.4f} | {1 / run.rtf:.0f}x | {r.batch1.rtf / run.rtf:.2f}x |"
            )
        if r.max_batch is not None:
            print(f"| {r.engine}: the batcher caps its batches at {r.max_batch} | | | | | | |")
    if per_sentence:
        for r in results:
            for path, rows in r.heard.items():
                print(f"\n{r.engine}, {path}: WER {r.wer[path]:.2f}\n")
                print("| sentence | heard | WER |\n|---|---|---:|")
                for text, heard, wer in rows:
                    print(f"| {text} | {heard or '(nothing)'} | {wer:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", help="comma-separated (default: every one creatable here)")
    parser.add_argument("--quick", action="store_true", help="batch sizes 1/4/16, 16 items")
    parser.add_argument("--items", type=int, help="utterances per batch-size run (default 64)")
    parser.add_argument("--repeat", type=int, default=5, help="first-audio streams (median)")
    parser.add_argument(
        "--per-sentence", action="store_true", help="what each sentence was heard as"
    )
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # the child process: one engine
    args = parser.parse_args()
    if args.items is None:
        args.items = 16 if args.quick else 64
    if args.measure:
        result = measure(args.measure, quick=args.quick, items=args.items, repeat=args.repeat)
        print(RESULT_PREFIX + json.dumps(asdict(result)), flush=True)
        return

    settings = EmbeddedSettings()
    names = args.engines.split(",") if args.engines else list(ENGINE_NAMES)
    chosen: list[str] = []
    for name in (n.strip() for n in names if n.strip()):
        reason = unavailable(name, settings)
        if reason is None:
            chosen.append(name)
        else:
            print(f"left out: {name}: {reason}")
    if not chosen:
        raise SystemExit("no engine to measure")
    print(
        f"engines: {', '.join(chosen)}; {len(load_sentences())} sentences "
        f"(tests/data/intelligibility_en.txt) cycled to {args.items} utterances per batch size; "
        f"first audio: median of {args.repeat} streams; each engine in its own process\n"
    )
    results: list[EngineResult] = []
    for name in chosen:
        started = time.perf_counter()
        results.append(run_engine(name, args))
        print(f"measured {name} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    print_tables(results, per_sentence=args.per_sentence)


if __name__ == "__main__":
    main()
