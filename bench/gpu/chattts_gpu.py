"""Benchmark: the ChatTTS engine on a GPU, from full-size random weights, against ChatTTS itself.

Measured in one run, on the same checkpoint and device:

1. **Throughput**, batch 1 to 64: audio seconds per wall second and peak GPU memory, for
   ChatTTS's own ``Chat.infer`` on the batch and for the same batch through the voicelane
   batcher (every item exactly ``--steps`` audio tokens: min == max).
2. **Time to first audio, streamed**: B real-time streams submitted at once (first chunk after
   ``first_chunk_steps``), against ChatTTS's ``infer(stream=True)`` on the same B texts
   (first chunk after 72 steps, prefix re-decoded every chunk).
3. **Hot-swap**: GPU memory allocated before ``load``, after it, and after ``unload``.
4. **Live streams under a batch load, metrics exported**: the batch class saturated while live
   streams arrive one by one; their first audio, and the worker's Prometheus metrics (batch
   size and wait per class, real-time factor, device memory, max batch, OOM events, first
   audio) written as ``chattts_gpu_metrics.prom`` next to the JSON.

5. **Continuous batching vs static batches** (``bench/chattts_continuous.py``, the same
   tables as the CPU benchmark): real-time first audio idle vs batch lane saturated (max_batch
   64), batch-lane throughput with sentences of mixed lengths, KV memory per row at 1-64 rows.
   ``--continuous-only`` runs just this phase (a few minutes).

Self-checks (exit status 1 when one fails): every item comes back with steps x 512 - 256
samples; a streamed utterance equals its whole render within 1e-3 of its peak; ``unload``
returns the memory (within 16 MiB of the level before ``load``).

The weights are random (no downloads on the GPU machine); timings do not depend on their
values. ``--cpu-smoke`` runs everything on the tiny checkpoint on the CPU with small sizes: the
check that the script works, where there is no GPU.

Run: ``bench/gpu/run.sh [--batches 1,2,4,8,16,32,64] [--steps 192] [--half]`` on the GPU
machine (it installs what is missing); ``python bench/gpu/chattts_gpu.py --cpu-smoke`` here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.chattts_continuous import Scale, continuous_tables  # noqa: E402
from bench.tables import header  # noqa: E402
from tests.support.chattts_checkpoint import FULL, TINY, build_checkpoint  # noqa: E402
from voicelane.core.settings import BatcherSettings, ChatTTSSettings  # noqa: E402
from voicelane.workers.batching import Batcher, Priority  # noqa: E402
from voicelane.workers.engines import Utterance  # noqa: E402
from voicelane.workers.engines.chattts import ChatTTSEngine  # noqa: E402

STEP_SAMPLES = 512
STEP_S = STEP_SAMPLES / 24000
VOICE = "seed:2"
TIMEOUT_S = 900.0
MIB = 2**20
TEXTS = (
    "The committee met on Tuesday to review the budget for the next fiscal year.",
    "今天的会议讨论了明年的预算和人员安排。",
    "She opened the window, looked at the harbor, and smiled.",
    "北方地区预计有雨，气温在十二度左右。",
)

warnings.filterwarnings("ignore", message=".*past_key_values.*", category=FutureWarning)


@dataclasses.dataclass
class Options:
    device: str
    half: bool
    batches: list[int]
    stream_batches: list[int]
    steps: int
    repeat: int
    smoke: bool
    live_streams: int = 40
    live_every_ms: int = 100
    live_batch_items: int = 64
    continuous_only: bool = False


@dataclasses.dataclass
class Report:
    tables: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    failures: list[str] = dataclasses.field(default_factory=list)

    def check(self, ok: bool, what: str) -> None:
        print(f"- check: {what}: {'ok' if ok else 'FAILED'}")
        if not ok:
            self.failures.append(what)


def exact(steps: int) -> tuple[tuple[str, float | int | str], ...]:
    return (("max_new_tokens", steps), ("min_new_tokens", steps))


def texts(count: int) -> list[str]:
    return [TEXTS[i % len(TEXTS)] for i in range(count)]


def mib(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.0f}"  # NaN: no GPU


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def allocated_mib(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.memory_allocated(torch.device(device)) / MIB
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_mib(device: str, run: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, peak memory MiB during ``run``; NaN on the CPU)."""
    cuda = device.startswith("cuda")
    if cuda:
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(torch.device(device))
    started = time.perf_counter()
    run()
    synchronize(device)
    elapsed = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated(torch.device(device)) / MIB if cuda else float("nan")
    return elapsed, peak


def engine_for(directory: Path, options: Options) -> ChatTTSEngine:
    return ChatTTSEngine(ChatTTSSettings(dir=directory, half=options.half), device=options.device)


def chattts_params(speaker: str, steps: int) -> Any:
    import ChatTTS

    return ChatTTS.Chat.InferCodeParams(
        spk_emb=speaker, manual_seed=1, min_new_token=steps, max_new_token=steps, show_tqdm=False
    )


# ---- 1. throughput ----------------------------------------------------------------------


def throughput(directory: Path, options: Options, report: Report) -> None:
    direct = engine_for(directory, options)
    direct.load()
    chat = direct.model.chat
    speaker = chat.speaker._encode(direct.speaker_embedding(VOICE))
    engine = engine_for(directory, options)
    # All B items are submitted within a millisecond; the batch starts when the first has
    # waited 20 ms (or at once when B is the largest batch): the batcher's own cost included.
    config = BatcherSettings(max_batch=max(options.batches), max_wait_batch_s=0.02)
    rows: list[dict[str, Any]] = []
    print(f"### Throughput: {options.steps} steps per item, median of {options.repeat}\n")
    header(
        "batch", "audio s", "ChatTTS s", "ChatTTS x real time", "ChatTTS peak MiB",
        "voicelane s", "voicelane x real time", "voicelane peak MiB", "speed-up",
    )  # fmt: skip
    with Batcher(engine, config) as batcher:
        for batch in options.batches:
            row = throughput_row(batcher, chat, speaker, batch, options=options, report=report)
            speed_up = row["chattts_s"] / row["voicelane_s"]
            rows.append(row)
            print(
                f"| {batch} | {row['audio_s']:.1f} | {row['chattts_s']:.3f} "
                f"| {row['chattts_x']:.1f}x | {mib(row['chattts_peak_mib'])} "
                f"| {row['voicelane_s']:.3f} | {row['voicelane_x']:.1f}x "
                f"| {mib(row['voicelane_peak_mib'])} | {speed_up:.2f}x |"
            )
        report.check(batcher.stats().oom_events == 0, "no out-of-memory event in the batcher")
    direct.unload()
    report.tables["throughput"] = rows
    print()


def throughput_row(
    batcher: Batcher, chat: Any, speaker: str, batch: int, *, options: Options, report: Report
) -> dict[str, Any]:
    steps = options.steps
    lengths: list[int] = []

    def ours() -> None:
        futures = [
            batcher.submit(Utterance(text, VOICE, seed=1, params=exact(steps)))
            for text in texts(batch)
        ]
        lengths[:] = [len(future.result(TIMEOUT_S)) for future in futures]

    def theirs() -> None:
        chat.infer(
            texts(batch), split_text=False, skip_refine_text=True,
            params_infer_code=chattts_params(speaker, steps),
        )  # fmt: skip

    measured = {}
    for name, run in (("chattts", theirs), ("voicelane", ours)):
        run()  # warm-up (and CUDA kernels' first launch)
        samples = [peak_mib(options.device, run) for _ in range(options.repeat)]
        measured[name] = (
            statistics.median(s for s, _ in samples),
            max(p for _, p in samples),
        )
    report.check(
        lengths == [steps * STEP_SAMPLES - 256] * batch, f"batch {batch}: every item's length"
    )
    audio_s = batch * steps * STEP_S
    return {
        "batch": batch,
        "audio_s": audio_s,
        "chattts_s": measured["chattts"][0],
        "chattts_x": audio_s / measured["chattts"][0],
        "chattts_peak_mib": measured["chattts"][1],
        "voicelane_s": measured["voicelane"][0],
        "voicelane_x": audio_s / measured["voicelane"][0],
        "voicelane_peak_mib": measured["voicelane"][1],
    }


# ---- 2. time to first audio ------------------------------------------------------------------


def first_audio(directory: Path, options: Options, report: Report) -> None:
    direct = engine_for(directory, options)
    direct.load()
    chat = direct.model.chat
    speaker = chat.speaker._encode(direct.speaker_embedding(VOICE))
    steps = max(options.steps, 96)
    rows: list[dict[str, Any]] = []
    print(f"### Time to first audio, streamed, {steps} steps per item\n")
    header(
        "streams", "ChatTTS first chunk ms", "voicelane first chunk ms (median)",
        "voicelane first chunk ms (max)", "voicelane all done s",
    )  # fmt: skip
    engine = engine_for(directory, options)
    config = BatcherSettings(max_batch=max(options.stream_batches))  # real-time wait: 5 ms
    with Batcher(engine, config) as batcher:
        for count in options.stream_batches:
            stream_first_audio(batcher, count, steps)  # warm-up
            ours = stream_first_audio(batcher, count, steps)
            chattts_first_audio(chat, speaker, count, steps)  # warm-up
            theirs = chattts_first_audio(chat, speaker, count, steps)
            row = {"streams": count, "chattts_first_ms": theirs * 1000, **ours}
            rows.append(row)
            print(
                f"| {count} | {row['chattts_first_ms']:.0f} | {row['first_ms_median']:.0f} "
                f"| {row['first_ms_max']:.0f} | {row['done_s']:.2f} |"
            )
        check_stream_equals_whole(batcher, steps, report)
    direct.unload()
    report.tables["first_audio"] = rows
    print()


def stream_first_audio(batcher: Batcher, count: int, steps: int) -> dict[str, float]:
    started = time.perf_counter()
    streams = [
        batcher.submit_stream(
            Utterance(text, VOICE, seed=1, params=exact(steps)), priority=Priority.REALTIME
        )
        for text in texts(count)
    ]
    first: list[float] = []
    for stream in streams:
        assert stream.read(TIMEOUT_S) is not None
        first.append(time.perf_counter() - started)
    for stream in streams:
        while stream.read(TIMEOUT_S) is not None:
            pass
    return {
        "first_ms_median": statistics.median(first) * 1000,
        "first_ms_max": max(first) * 1000,
        "done_s": time.perf_counter() - started,
    }


def chattts_first_audio(chat: Any, speaker: str, count: int, steps: int) -> float:
    started = time.perf_counter()
    stream = chat.infer(
        texts(count), stream=True, split_text=False, skip_refine_text=True,
        params_infer_code=chattts_params(speaker, steps),
    )  # fmt: skip
    next(iter(stream))
    elapsed = time.perf_counter() - started
    for _ in stream:
        pass
    return elapsed


def check_stream_equals_whole(batcher: Batcher, steps: int, report: Report) -> None:
    utterance = Utterance(TEXTS[0], VOICE, seed=9, params=exact(steps))
    whole = batcher.submit(utterance).result(TIMEOUT_S)
    stream = batcher.submit_stream(utterance, priority=Priority.REALTIME)
    chunks = []
    while (chunk := stream.read(TIMEOUT_S)) is not None:
        chunks.append(chunk)
    streamed = np.concatenate(chunks)
    peak = max(1e-6, float(np.abs(whole).max()))
    difference = float(np.abs(streamed - whole).max()) if streamed.shape == whole.shape else 1e9
    print(f"- streamed vs whole: max difference {difference:.2e} ({difference / peak:.2e} of peak)")
    report.check(difference <= 1e-3 * peak, "streamed chunks equal the whole utterance")


# ---- 3. hot-swap -------------------------------------------------------------------------------


def hot_swap(directory: Path, options: Options, report: Report) -> None:
    engine = engine_for(directory, options)
    rows = []
    unit = "MiB allocated" if options.device.startswith("cuda") else "MiB resident"
    print(f"### Hot-swap: load / unload, {unit}\n")
    header("cycle", "before load", "after load", "after unload")
    before_first = allocated_mib(options.device)
    for cycle in range(3):
        before = allocated_mib(options.device)
        engine.load()
        engine.synthesize([Utterance("hello", VOICE, seed=1, params=exact(24))])
        loaded = allocated_mib(options.device)
        engine.unload()
        after = allocated_mib(options.device)
        rows.append({"cycle": cycle, "before": before, "loaded": loaded, "after": after})
        print(f"| {cycle} | {before:.0f} | {loaded:.0f} | {after:.0f} |")
    print()
    report.tables["hot_swap"] = rows
    if options.device.startswith("cuda"):
        report.check(rows[-1]["after"] - before_first <= 16, "unload returns the GPU memory")


# ---- 4. live streams under a batch load, with the workers' metrics ---------------------------


def live_load(directory: Path, options: Options, report: Report, metrics_path: Path) -> None:
    """A worker's shape, without Redis: the batch class saturated with long items while live
    streams arrive every ``--live-every-ms``; each stream's first audio is observed into
    ``chattts_stream_latency_ms{front="bench"}`` and the worker's collectors (batcher, device
    memory) are registered, then the whole Prometheus exposition is written to
    ``metrics_path`` and its key lines printed."""
    from prometheus_client import generate_latest

    from voicelane.core import metrics
    from voicelane.workers.metrics import register_worker_metrics

    engine = engine_for(directory, options)
    config = BatcherSettings(max_batch=64)
    batch_steps = options.steps * 2
    print(
        f"### Live streams under a batch load: {options.live_streams} streams, one every "
        f"{options.live_every_ms} ms, batch class {options.live_batch_items} x {batch_steps} "
        "steps\n"
    )
    with Batcher(engine, config) as batcher:
        collectors = register_worker_metrics(options.device, batcher, None, 0)
        try:
            utterances = [
                Utterance(text, VOICE, seed=n, params=exact(batch_steps))
                for n, text in enumerate(texts(options.live_batch_items))
            ]
            background = [batcher.submit(u, priority=Priority.BATCH) for u in utterances]
            first_ms: list[float] = []
            for n in range(options.live_streams):
                started = time.perf_counter()
                stream = batcher.submit_stream(
                    Utterance(TEXTS[n % len(TEXTS)], VOICE, seed=100 + n, params=exact(96)),
                    priority=Priority.REALTIME,
                )
                assert stream.read(TIMEOUT_S) is not None
                latency_ms = (time.perf_counter() - started) * 1000
                first_ms.append(latency_ms)
                metrics.STREAM_LATENCY_MS.labels(front="bench", engine="chattts").observe(
                    latency_ms
                )
                while stream.read(TIMEOUT_S) is not None:
                    pass
                time.sleep(options.live_every_ms / 1000)
            for future in background:
                future.result(TIMEOUT_S * 4)
            text = generate_latest().decode()
        finally:
            for collector in collectors:
                collector.close()
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    metrics_path.write_text(text)
    ordered = sorted(first_ms)
    row = {
        "streams": len(first_ms),
        "first_ms_p50": statistics.median(ordered),
        "first_ms_max": ordered[-1],
    }
    report.tables["live_load"] = [row]
    header("streams", "first audio p50 ms", "first audio max ms")
    print(f"| {row['streams']} | {row['first_ms_p50']:.0f} | {row['first_ms_max']:.0f} |\n")
    wanted = (
        "chattts_stream_latency_ms_count",
        "voicelane_batch_size_count",
        "voicelane_batch_size_sum",
        "voicelane_realtime_factor_count",
        "voicelane_realtime_factor_sum",
        "gpu_memory_free_bytes",
        "voicelane_max_batch",
        "voicelane_batcher_utilisation",
        "voicelane_oom_events_total",
    )
    shown = [line for line in text.splitlines() if line.startswith(wanted)]
    print("```\n" + "\n".join(shown) + "\n```")
    print(f"- the whole exposition: {metrics_path}\n")
    report.check(
        any(line.startswith("voicelane_batch_size_count") for line in shown)
        and any(line.startswith("gpu_memory_free_bytes") for line in shown),
        "the worker's metrics are exported",
    )


# ---- 5. continuous batching --------------------------------------------------------------


def continuous(directory: Path, options: Options, report: Report) -> None:
    """Phase 5: the CPU benchmark's continuous-batching tables, on this device."""
    if options.smoke:
        scale = Scale(
            "tiny checkpoint, CPU smoke", max_batch=4, min_steps=16, max_steps=48,
            probe_steps=32, probes=3, throughput_items=8, memory_batches=(1, 4), memory_steps=32,
        )  # fmt: skip
    else:
        scale = Scale(
            f"full-size random weights, {options.device}", max_batch=64, min_steps=96,
            max_steps=384, probe_steps=48, probes=10, throughput_items=128,
            memory_batches=(1, 4, 16, 64), memory_steps=256,
        )  # fmt: skip
    settings = ChatTTSSettings(dir=directory, half=options.half)
    print(f"### 5. Continuous batching vs static batches ({scale.label})\n")
    tables = continuous_tables(settings, scale, options.device)
    report.tables.update(tables)
    same = tables["continuous_throughput"][-1].get("same_lengths", False)
    report.check(bool(same), "continuous and static batches give every item its length")
    first = {row["mode"]: row for row in tables["continuous_first_audio"]}
    ours = first["continuous"]
    report.tables["continuous_targets"] = [
        {
            "saturated_p50_over_idle": ours["saturated_p50_ms"] / ours["idle_p50_ms"],
            "saturated_max_over_idle": ours["saturated_max_ms"] / ours["idle_max_ms"],
        }
    ]


# ---- main ----------------------------------------------------------------------------------------


def parse_options() -> tuple[Options, Path | None, Path | None]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny checkpoint on the CPU")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--half", action="store_true", help="GPT in float16")
    parser.add_argument("--batches", default="1,2,4,8,16,32,64")
    parser.add_argument("--stream-batches", default="1,8,32")
    parser.add_argument("--steps", type=int, default=192, help="audio tokens per item")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--checkpoint", type=Path, help="reuse (or build into) this directory")
    parser.add_argument("--json", type=Path, help="write the numbers here")
    parser.add_argument("--live-streams", type=int, default=40, help="phase 4: live streams")
    parser.add_argument("--live-every-ms", type=int, default=100)
    parser.add_argument("--live-batch-items", type=int, default=64, help="phase 4: batch load")
    parser.add_argument(
        "--continuous-only", action="store_true", help="only phase 5 (continuous batching)"
    )
    args = parser.parse_args()
    if args.cpu_smoke:
        options = Options("cpu", False, [1, 2, 4], [1, 2], 32, 1, True, 4, 10, 4)
        options.continuous_only = args.continuous_only
    else:
        options = Options(
            device=args.device,
            half=args.half,
            batches=[int(b) for b in args.batches.split(",")],
            stream_batches=[int(b) for b in args.stream_batches.split(",")],
            steps=args.steps,
            repeat=args.repeat,
            smoke=False,
            live_streams=args.live_streams,
            live_every_ms=args.live_every_ms,
            live_batch_items=args.live_batch_items,
            continuous_only=args.continuous_only,
        )
    return options, args.checkpoint, args.json


def environment(options: Options) -> dict[str, Any]:
    import transformers

    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": options.device,
        "half": options.half,
        "steps": options.steps,
    }
    if options.device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(torch.device(options.device))
        info["gpu_memory_mib"] = (
            torch.cuda.get_device_properties(torch.device(options.device)).total_memory // MIB
        )
    return info


def prepare_checkpoint(options: Options, requested: Path | None, scratch: Path) -> Path:
    size = TINY if options.smoke else FULL
    directory = requested or scratch / ("tiny" if options.smoke else "full")
    if not (directory / "voicelane-chattts.json").exists():
        started = time.perf_counter()
        build_checkpoint(directory, size)
        print(f"- built the {'tiny' if options.smoke else 'full-size'} random checkpoint "
              f"in {time.perf_counter() - started:.1f} s: {directory}")  # fmt: skip
    return directory


def main() -> int:
    options, requested, json_path = parse_options()
    if options.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device: run with --cpu-smoke to check the script on a CPU", file=sys.stderr)
        return 2
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    info = environment(options)
    print("## ChatTTS engine benchmark\n")
    print(", ".join(f"{k}: {v}" for k, v in info.items()) + "\n")
    report = Report()
    with tempfile.TemporaryDirectory() as scratch:
        directory = prepare_checkpoint(options, requested, Path(scratch))
        print()
        if not options.continuous_only:
            throughput(directory, options, report)
            first_audio(directory, options, report)
            hot_swap(directory, options, report)
            metrics_dir = json_path.parent if json_path else Path(".")
            live_load(directory, options, report, metrics_dir / "chattts_gpu_metrics.prom")
        continuous(directory, options, report)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"environment": info, **report.tables, "failures": report.failures}
        json_path.write_text(json.dumps(payload, indent=2))
        print(f"- numbers written to {json_path}")
    if report.failures:
        print(f"FAILED checks: {', '.join(report.failures)}", file=sys.stderr)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
