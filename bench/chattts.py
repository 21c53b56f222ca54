"""Benchmark: the ChatTTS engine on the CPU, against ChatTTS itself, in the same run.

Random-weight checkpoints (``tests/support/chattts_checkpoint.py``): no real weights can be
downloaded here, and timings do not depend on the weights' values. Every item is forced to
exactly ``--steps`` audio tokens (min == max), so both sides render the same amount of audio
(one step = 512 samples = 21.3 ms at 24 kHz).

Tables:

1. **Throughput** — audio seconds per wall second at batch 1, 4 and 16: ChatTTS's own
   ``Chat.infer`` on the batch vs the same batch submitted to the voicelane batcher (engine +
   batcher: our step loop, per-item decode).
2. **Time to first audio, streamed** (batch 1): ChatTTS's ``infer(stream=True)`` (first chunk
   after 72 steps, re-decoding the prefix) vs ``Batcher.submit_stream`` (first chunk after
   ``first_chunk_steps``).
3. **Streamed chunk decode time vs position** in the utterance, with the full-size decoder and
   vocoder: our incremental window (context + chunk + holdback) vs ChatTTS re-decoding the whole
   prefix, as every streamed chunk of ``infer(stream=True)`` does.
4. **Window sizes vs accuracy**: the streamed chunks, concatenated, against one whole decode.

``--full`` adds table 1 on the official architecture (1.1 GB of random weights; slow on a CPU:
keep ``--full-steps`` small).

``--continuous`` prints the continuous-batching tables instead (static batches vs the running
batch, :mod:`bench.chattts_continuous`): real-time first audio idle vs batch lane saturated,
batch-lane throughput with mixed lengths, KV memory per row — on the tiny checkpoint, and with
``--full`` on the official architecture too (few steps).

``--hog-runs N`` prints only issue 27's stall check (:mod:`bench.chattts_hog`): the continuous
batcher's real-time first audio idle vs beside a saturated batch lane, N fresh runs, a process
spinning on a core throughout, every slow probe traced (steps, admits, collections, the rest).

Run: ``.venv/bin/python bench/chattts.py [--steps 96] [--repeat 3] [--full]``
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/chattts.py`: the checkpoint builder is in tests/
    sys.path.insert(0, str(ROOT))

from bench.chattts_continuous import Scale, continuous_tables  # noqa: E402
from bench.chattts_hog import hog_rows  # noqa: E402
from bench.tables import header  # noqa: E402
from tests.support.chattts_checkpoint import (  # noqa: E402
    FULL,
    TINY,
    CheckpointSize,
    build_checkpoint,
)
from voicelane.core.settings import BatcherSettings, ChatTTSSettings  # noqa: E402
from voicelane.workers.batching import Batcher, Priority  # noqa: E402
from voicelane.workers.engines import Utterance, chattts_model  # noqa: E402
from voicelane.workers.engines.chattts import ChatTTSEngine  # noqa: E402
from voicelane.workers.engines.chattts_config import Sampling  # noqa: E402
from voicelane.workers.engines.chattts_loop import (  # noqa: E402
    Generation,
    StreamDecoder,
    StreamWindows,
    decode_rows,
)
from voicelane.workers.engines.chattts_model import Row, decorate_prompt  # noqa: E402

VOICE = "seed:2"
STEP_S = 512 / 24000
TIMEOUT_S = 600.0
TEXTS = (
    "The committee met on Tuesday to review the budget.",
    "今天的会议讨论了明年的预算和人员安排。",
    "She opened the window, looked at the harbor, and smiled.",
    "北方地区预计有雨，气温在十二度左右。",
)
VOCODER_FULL = dataclasses.replace(FULL, gpt_layers=2, num_text_tokens=None)
"""The official decoder and vocoder (their cost is what streaming decodes), a 2-layer GPT."""
SAMPLING = Sampling(temperature=0.3, top_p=0.7, top_k=20, repetition_penalty=1.05)
TINY_SCALE = Scale(
    "tiny checkpoint", max_batch=16, min_steps=96, max_steps=384, probe_steps=48, probes=20,
    throughput_items=48, memory_batches=(1, 4, 16, 64), memory_steps=384,
)  # fmt: skip
FULL_SCALE = Scale(
    "full-size random weights", max_batch=8, min_steps=8, max_steps=40, probe_steps=32,
    probes=5, throughput_items=16, memory_batches=(1, 4, 16), memory_steps=32,
)  # fmt: skip

warnings.filterwarnings("ignore", message=".*past_key_values.*", category=FutureWarning)


def _quiet_transformers() -> None:
    """ChatTTS's own loop makes transformers 5 log a deprecation line: not ours to show."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]


def exact(steps: int) -> tuple[tuple[str, float | int | str], ...]:
    return (("max_new_tokens", steps), ("min_new_tokens", steps))


def texts(batch: int) -> list[str]:
    return [TEXTS[i % len(TEXTS)] for i in range(batch)]


def engine_for(directory: Path, **overrides: Any) -> ChatTTSEngine:
    return ChatTTSEngine(ChatTTSSettings(dir=directory, **overrides))


def median_s(run: Callable[[], object], repeat: int) -> float:
    run()  # warm-up
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


# ---- 1. throughput ------------------------------------------------------------------------


def chattts_direct(chat: Any, speaker: str, batch: int, steps: int) -> None:
    import ChatTTS

    params = ChatTTS.Chat.InferCodeParams(
        spk_emb=speaker,
        manual_seed=1,
        min_new_token=steps,
        max_new_token=steps,
        show_tqdm=False,
    )
    chat.infer(texts(batch), split_text=False, skip_refine_text=True, params_infer_code=params)


def through_batcher(batcher: Batcher, batch: int, steps: int) -> None:
    futures = [
        batcher.submit(Utterance(text, VOICE, seed=1, params=exact(steps))) for text in texts(batch)
    ]
    for future in futures:
        future.result(TIMEOUT_S)


def throughput_table(
    directory: Path, label: str, batches: list[int], steps: int, repeat: int
) -> None:
    direct = engine_for(directory)
    direct.load()
    chat = direct.model.chat
    speaker = chat.speaker._encode(direct.speaker_embedding(VOICE))
    print(f"### Throughput: {label}, {steps} steps per item, median of {repeat}\n")
    header(
        "batch", "audio s", "ChatTTS infer s", "x real time", "via batcher s", "x real time",
        "speed-up",
    )  # fmt: skip
    for batch in batches:
        audio_s = batch * steps * STEP_S
        theirs = median_s(functools.partial(chattts_direct, chat, speaker, batch, steps), repeat)
        config = BatcherSettings(max_batch=batch, max_wait_batch_s=TIMEOUT_S, continuous=False)
        with Batcher(engine_for(directory), config) as batcher:
            ours = median_s(functools.partial(through_batcher, batcher, batch, steps), repeat)
        print(
            f"| {batch} | {audio_s:.1f} | {theirs:.3f} | {audio_s / theirs:.1f}x "
            f"| {ours:.3f} | {audio_s / ours:.1f}x | {theirs / ours:.2f}x |"
        )
    direct.unload()
    print()


# ---- 2. time to first audio ----------------------------------------------------------------


def first_audio_table(directory: Path, steps: int, repeat: int) -> None:
    import ChatTTS

    direct = engine_for(directory)
    direct.load()
    chat = direct.model.chat
    speaker = chat.speaker._encode(direct.speaker_embedding(VOICE))

    def theirs() -> float:
        params = ChatTTS.Chat.InferCodeParams(
            spk_emb=speaker, manual_seed=1, min_new_token=steps, max_new_token=steps
        )
        params.show_tqdm = False
        started = time.perf_counter()
        stream = chat.infer(
            [TEXTS[0]], stream=True, split_text=False, skip_refine_text=True,
            params_infer_code=params,
        )  # fmt: skip
        first = next(iter(stream))
        elapsed = time.perf_counter() - started
        assert first.size > 0
        for _ in stream:
            pass
        return elapsed

    with Batcher(engine_for(directory)) as batcher:

        def ours() -> float:
            started = time.perf_counter()
            stream = batcher.submit_stream(
                Utterance(TEXTS[0], VOICE, seed=1, params=exact(steps)), priority=Priority.REALTIME
            )
            first = stream.read(TIMEOUT_S)
            elapsed = time.perf_counter() - started
            assert first is not None and first.size > 0
            while stream.read(TIMEOUT_S) is not None:
                pass
            return elapsed

        ours()
        ours_s = statistics.median(ours() for _ in range(repeat))
    theirs()
    theirs_s = statistics.median(theirs() for _ in range(repeat))
    direct.unload()
    print(f"### Time to first audio, streamed, batch 1, {steps} steps (tiny checkpoint)\n")
    header("path", "first chunk after", "first audio ms")
    print(f"| ChatTTS `infer(stream=True)` | 72 steps | {theirs_s * 1000:.0f} |")
    print(f"| voicelane `submit_stream` | 24 steps | {ours_s * 1000:.0f} |")
    print()


# ---- 3. and 4. streamed decode ----------------------------------------------------------------


@dataclasses.dataclass
class DecodeTimer:
    """Wraps chattts_model.decode: the window length and wall time of every call."""

    calls: list[tuple[int, float]] = dataclasses.field(default_factory=list)

    def __call__(self, model: chattts_model.LoadedModel, hiddens: torch.Tensor) -> np.ndarray:
        started = time.perf_counter()
        audio = ORIGINAL_DECODE(model, hiddens)
        self.calls.append((int(hiddens.shape[1]), time.perf_counter() - started))
        return audio


ORIGINAL_DECODE = chattts_model.decode


def stream_one(
    model: chattts_model.LoadedModel, steps: int, windows: StreamWindows, speaker: torch.Tensor
) -> tuple[list[np.ndarray], np.ndarray, list[int]]:
    """Chunks, the whole decode, and the step at which each chunk went out."""
    row = Row(decorate_prompt(TEXTS[0], 5, True), speaker, 1, steps, steps)
    generation = Generation(model, [row], SAMPLING)
    decoder = StreamDecoder(model, generation, windows)
    chunks: list[np.ndarray] = []
    at_step: list[int] = []
    while not generation.done:
        generation.step()
        if (step := decoder.pending()) is not None:
            chunks.append(step[0])
            at_step.append(generation.steps_done)
    (whole,) = decode_rows(model, generation)
    return chunks, whole, at_step


def decode_position_table(directory: Path, steps: int, repeat: int) -> None:
    engine = engine_for(directory)
    engine.load()
    model = engine.model
    speaker = engine.speaker_embedding(VOICE)
    runs: list[list[tuple[int, float]]] = []
    at_step: list[int] = []
    for _ in range(repeat):
        timer = DecodeTimer()
        chattts_model.decode = timer
        try:
            chunks, _, at_step = stream_one(model, steps, engine.windows, speaker)
        finally:
            chattts_model.decode = ORIGINAL_DECODE
        runs.append(timer.calls[: len(chunks)])  # the last call is the whole decode
    windows = [w for w, _ in runs[0]]
    ours_ms = [statistics.median(run[i][1] for run in runs) * 1000 for i in range(len(at_step))]
    hiddens = torch.randn((steps, model.hidden_size))
    chat = model.chat
    positions = sorted({min(p, steps) for p in (24, 48, 96, 192, 384, 768, 1536, steps)})
    print(
        f"### Streamed chunk decode time vs position (full-size decoder + vocoder, "
        f"median of {repeat})\n"
    )
    header(
        "chunk ends at step", "audio s so far", "ours: window steps", "ours ms",
        "ChatTTS re-decode steps", "ChatTTS ms",
    )  # fmt: skip
    for position in positions:
        index = min(range(len(at_step)), key=lambda i: abs(at_step[i] - position))
        redecode = statistics.median(
            _timed(functools.partial(chat._decode_to_wavs, [hiddens[:position].clone()], True))
            for _ in range(repeat)
        )
        print(
            f"| {at_step[index]} | {at_step[index] * STEP_S:.1f} | {windows[index]} "
            f"| {ours_ms[index]:.1f} | {position} | {redecode * 1000:.1f} |"
        )
    all_ms = sorted(ours_ms[2:])  # past the first two chunks (their windows are shorter)
    print(
        f"\nours, every chunk after the second ({len(all_ms)} chunks of 24 steps): "
        f"median {statistics.median(all_ms):.1f} ms, max {all_ms[-1]:.1f} ms\n"
    )
    engine.unload()


def _timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def window_accuracy_table(directory: Path, steps: int) -> None:
    engine = engine_for(directory)
    engine.load()
    speaker = engine.speaker_embedding(VOICE)
    print(f"### Streamed vs whole decode (full-size decoder + vocoder, {steps} steps)\n")
    header("left context steps", "holdback steps", "chunks", "max abs difference", "/ peak")
    for context, holdback in ((0, 1), (8, 4), (24, 8), (32, 16), (64, 23)):
        windows = StreamWindows(
            first_chunk_steps=24, stream_chunk_steps=24, context_steps=context,
            holdback_steps=holdback,
        )  # fmt: skip
        chunks, whole, _ = stream_one(engine.model, steps, windows, speaker)
        difference = float(np.abs(np.concatenate(chunks) - whole).max())
        peak = float(np.abs(whole).max())
        print(
            f"| {context} | {holdback} | {len(chunks)} | {difference:.2e} "
            f"| {difference / peak:.2e} |"
        )
    print()
    engine.unload()


def build(root: Path, name: str, size: CheckpointSize) -> Path:
    started = time.perf_counter()
    checkpoint = build_checkpoint(root / name, size)
    print(f"- built `{name}` checkpoint in {time.perf_counter() - started:.1f} s")
    return checkpoint.directory


def cpu_tables(root: Path, args: argparse.Namespace, cores: int) -> None:
    tiny = build(root, "tiny", TINY)
    vocoder = build(root, "vocoder-full", VOCODER_FULL)
    print()
    torch.set_num_threads(args.throughput_threads)
    label = f"tiny checkpoint, {args.throughput_threads} torch thread(s)"
    throughput_table(tiny, label, [1, 4, 16], args.steps, args.repeat)
    first_audio_table(tiny, 200, args.repeat)
    torch.set_num_threads(cores)
    decode_position_table(vocoder, args.stream_steps, args.repeat)
    window_accuracy_table(vocoder, 300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=96, help="audio tokens per item (tiny)")
    parser.add_argument("--stream-steps", type=int, default=768, help="steps for tables 3-4")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--full", action="store_true", help="also the 1.1 GB architecture")
    parser.add_argument("--full-steps", type=int, default=24)
    parser.add_argument("--full-batches", default="1,4")
    parser.add_argument("--full-repeat", type=int, default=1)
    parser.add_argument("--full-only", action="store_true", help="only the 1.1 GB table")
    parser.add_argument(
        "--continuous", action="store_true", help="the continuous-batching tables (a-c)"
    )
    parser.add_argument(
        "--hog-runs",
        type=int,
        default=0,
        help="only: continuous first audio beside a CPU hog, this many runs (bench.chattts_hog)",
    )
    parser.add_argument("--hogs", type=int, default=1, help="spinning processes for --hog-runs")
    parser.add_argument(
        "--throughput-threads",
        type=int,
        default=1,
        help="torch threads for tables 1-2 (two threads running torch on 2 cores contend)",
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    _quiet_transformers()
    cores = torch.get_num_threads()
    print(f"torch {torch.__version__}, CPU, {cores} cores\n")
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        if args.hog_runs:
            torch.set_num_threads(args.throughput_threads)
            print(f"torch threads: {args.throughput_threads}\n")
            settings = ChatTTSSettings(dir=build(root, "tiny", TINY))
            hog_rows(settings, TINY_SCALE, args.hog_runs, hogs=args.hogs)
            return
        if args.continuous:
            torch.set_num_threads(args.throughput_threads)
            print(f"torch threads: {args.throughput_threads}\n")
            if not args.full_only:
                continuous_tables(ChatTTSSettings(dir=build(root, "tiny", TINY)), TINY_SCALE)
            if args.full or args.full_only:
                continuous_tables(ChatTTSSettings(dir=build(root, "full", FULL)), FULL_SCALE)
            return
        if not args.full_only:
            cpu_tables(root, args, cores)
        if args.full or args.full_only:
            full = build(root, "full", FULL)
            batches = [int(b) for b in args.full_batches.split(",")]
            torch.set_num_threads(args.throughput_threads)
            label = f"full-size random weights, {args.throughput_threads} torch thread(s)"
            throughput_table(full, label, batches, args.full_steps, args.full_repeat)


if __name__ == "__main__":
    main()
