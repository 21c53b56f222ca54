"""Benchmark: ``voicelane render`` of a 20,000-character mixed Chinese/English text.

Three measurements on the same text in the same run (median of ``--repeat`` runs each):

* **engine alone** — the espeak engine called directly on the same segments, in batches of
  64, no batcher, no resampling, no encoding: the floor;
* **pipeline in-process** — ``EmbeddedRenderer.render`` to Ogg/Opus (batcher + engine +
  resampling + encoding + atomic write);
* **CLI** — the ``voicelane render`` command as a user runs it (a new process: interpreter
  start and imports included);
* **normalization's share** — the pipeline with text normalization off (``normalize:
  false``) beside the default (on), interleaved in the same run, and ``prepare_text`` alone
  with and without it: what reading numbers, dates and symbols as words costs next to
  synthesis (issue 20: within 10%).

Each row gives x real time (audio seconds per wall second) and its overhead over the engine
alone. The Ogg file is then checked with ``opusinfo`` and decoded with PyAV; both durations
must agree with the one the renderer reported.

Run: ``.venv/bin/python bench/render.py``
"""

from __future__ import annotations

import os

# As every voicelane process (voicelane.api.cli): one OpenBLAS thread. Without it the
# in-process rows below measured the resampler's BLAS helper threads spinning on the second
# core (a one-encoder Ogg encode: 11.7 s of CPU in 5.9 s of wall time, 6.0 s with one thread).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import random
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from voicelane.common.audio import AudioFormat, PcmF32, StreamResampler, open_writer, probe
from voicelane.core.settings import EmbeddedSettings
from voicelane.core.speech_text import TextOptions, prepare_text
from voicelane.core.text import split_sentences
from voicelane.core.text_profiles import ESPEAK
from voicelane.workers.engines import Utterance
from voicelane.workers.engines.espeak import EspeakEngine
from voicelane.workers.render import EmbeddedRenderer

ROOT = Path(__file__).resolve().parents[1]

ENGLISH = [
    "The committee met on Tuesday to review the budget for the next fiscal year.",
    "Version 2.5 of the software fixes 37 bugs and improves startup time by 40%.",
    "Dr. Smith said the results, while promising, need to be confirmed by others.",
    "Rain is expected in the north, with temperatures around 12 degrees.",
    "She opened the window, looked at the harbor, and smiled.",
    "Every chapter ends with a short summary and a list of questions.",
]
CHINESE = [
    "今天的会议讨论了明年的预算和人员安排。",
    "这个版本修复了三十七个问题，启动速度提高了百分之四十。",
    "北方地区预计有雨，气温在十二度左右。",
    "她打开窗户，看着港口，笑了起来。",
    "每一章的结尾都有一个简短的总结和几个问题。",
    "我们使用 Python 和 Redis 构建了这个系统。",
]


def mixed_text(characters: int, seed: int = 20) -> str:
    """Paragraphs alternating English and Chinese sentences, about ``characters`` long."""
    rng = random.Random(seed)
    paragraphs: list[str] = []
    total = 0
    while total < characters:
        pool = ENGLISH if len(paragraphs) % 2 == 0 else CHINESE
        joiner = " " if pool is ENGLISH else ""
        # Chinese sentences are shorter in characters: twice as many keep the mix even.
        count = rng.randint(3, 6) * (1 if pool is ENGLISH else 2)
        paragraph = joiner.join(rng.choice(pool) for _ in range(count))
        paragraphs.append(paragraph)
        total += len(paragraph) + 2
    return "\n\n".join(paragraphs)[:characters].rstrip()


def engine_alone(text: str) -> tuple[float, float, list[PcmF32], int]:
    """(wall s, audio s, audio, rate) for the engine on the renderer's segments, batches of 64."""
    engine = EspeakEngine()
    segments = split_sentences(text, EmbeddedSettings().max_segment_chars)
    utterances = [Utterance(s.text, "auto") for s in segments]
    started = time.perf_counter()
    audio: list[PcmF32] = []
    for i in range(0, len(utterances), 64):
        audio.extend(engine.synthesize(utterances[i : i + 64]))
    wall_s = time.perf_counter() - started
    return wall_s, sum(map(len, audio)) / engine.sample_rate_hz, audio, engine.sample_rate_hz


def encode_alone(
    audio: list[PcmF32], rate_hz: int, out: Path, threads: int = 1
) -> tuple[float, float]:
    """Resampling + Ogg/Opus encoding of the engine's audio, no engine: one encoder, or
    ``threads`` encoders on pieces of the file (the parallel writer)."""
    started = time.perf_counter()
    resampler = StreamResampler(rate_hz, 24000)
    with open_writer(out, AudioFormat.OGG, 24000, encode_threads=threads) as writer:
        for pcm in audio:
            writer.write(resampler.process(pcm))
        writer.write(resampler.flush())
    return time.perf_counter() - started, writer.duration_s


def pipeline(
    text: str,
    out: Path,
    fmt: AudioFormat = AudioFormat.OGG,
    options: TextOptions = TextOptions(),  # noqa: B008 - frozen
    encode_threads: int | None = None,
) -> tuple[float, float]:
    """``encode_threads``: None for the default (the cores, at most 4)."""
    settings = EmbeddedSettings(engine="espeak")
    if encode_threads is not None:
        settings = settings.model_copy(update={"encode_threads": encode_threads})
    with EmbeddedRenderer(settings) as renderer:
        started = time.perf_counter()
        result = renderer.render(text, out, fmt=fmt, text_options=options)
        return time.perf_counter() - started, result.duration_s


def prepare_alone(text: str, *, normalize: bool) -> float:
    """Wall seconds of ``prepare_text`` (what every lane runs before the engine)."""
    started = time.perf_counter()
    prepare_text(text, profile=ESPEAK, options=TextOptions(normalize=normalize))
    return time.perf_counter() - started


def cli(source: Path, out: Path, encode_threads: int | None = None) -> tuple[float, float]:
    """``encode_threads``: VOICELANE_ENCODE_THREADS for the command (None: its default)."""
    command = [str(ROOT / ".venv" / "bin" / "voicelane"), "render", str(source), "-o", str(out)]
    env = dict(os.environ)
    if encode_threads is not None:
        env["VOICELANE_ENCODE_THREADS"] = str(encode_threads)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    wall_s = time.perf_counter() - started
    match = re.search(r": (?:(\d+)h)?(?:(\d+)m)?([\d.]+)s of audio", done.stdout)
    assert match, done.stdout
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return wall_s, hours * 3600 + minutes * 60 + seconds


def opusinfo_seconds(path: Path) -> float:
    report = subprocess.run(["opusinfo", str(path)], capture_output=True, text=True, check=True)
    match = re.search(r"Playback length: (\d+)m:([\d.]+)s", report.stdout)
    assert match, report.stdout
    return int(match.group(1)) * 60 + float(match.group(2))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--characters", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    text = mixed_text(args.characters)
    han = sum(1 for c in text if "\u4e00" <= c <= "\u9fff")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "mixed.txt"
        source.write_text(text, encoding="utf-8")
        rows: dict[str, list[tuple[float, float]]] = {
            "engine": [],
            "encode": [],
            "encode-parallel": [],
            "pipeline-one": [],
            "pipeline": [],
            "pipeline-wav": [],
            "cli": [],
            "cli-one": [],
            "pipeline-raw": [],
        }
        prepared: dict[bool, list[float]] = {True: [], False: []}
        for i in range(args.repeat):
            engine_s, audio_s, audio, rate_hz = engine_alone(text)
            rows["engine"].append((engine_s, audio_s))
            rows["encode"].append(encode_alone(audio, rate_hz, Path(tmp) / f"e{i}.ogg"))
            threads = EmbeddedSettings().encode_threads
            parallel = encode_alone(audio, rate_hz, Path(tmp) / f"ep{i}.ogg", threads)
            rows["encode-parallel"].append(parallel)
            del audio
            one = pipeline(text, Path(tmp) / f"o{i}.ogg", encode_threads=1)
            rows["pipeline-one"].append(one)
            rows["pipeline"].append(pipeline(text, Path(tmp) / f"p{i}.ogg"))
            wav = Path(tmp) / f"p{i}.wav"
            rows["pipeline-wav"].append(pipeline(text, wav, AudioFormat.WAV))
            wav.unlink()
            rows["cli-one"].append(cli(source, Path(tmp) / f"c1{i}.ogg", encode_threads=1))
            rows["cli"].append(cli(source, Path(tmp) / f"c{i}.ogg"))
            raw = TextOptions(normalize=False)
            rows["pipeline-raw"].append(pipeline(text, Path(tmp) / f"r{i}.ogg", options=raw))
            for normalize in (True, False):
                prepared[normalize].append(prepare_alone(text, normalize=normalize))
        checked = Path(tmp) / "c0.ogg"
        reported_s = rows["cli"][0][1]
        opusinfo_s = opusinfo_seconds(checked)
        decoded = probe(checked)

    print(
        f"text: {len(text):,} characters ({han:,} Han), "
        f"{len(split_sentences(text))} segments; median of {args.repeat} runs\n"
    )
    engine_wall = statistics.median(w for w, _ in rows["engine"])
    print("| stage | wall s | audio s | x real time | overhead vs engine alone |")
    print("|---|---:|---:|---:|---:|")
    for name, label in (
        ("engine", "engine alone (espeak, batches of 64)"),
        ("encode", "resample + Ogg/Opus encode alone, same audio (one encoder)"),
        ("encode-parallel", f"the same, {threads} encoders on 10 s pieces"),
        ("pipeline-wav", "pipeline in-process to WAV (batcher + resample, no codec)"),
        ("pipeline-one", "pipeline in-process, one encoder (VOICELANE_ENCODE_THREADS=1)"),
        ("pipeline", f"pipeline in-process ({threads} encoders, the default)"),
        ("cli-one", "`voicelane render` command (new process), one encoder"),
        ("cli", f"`voicelane render` command (new process), {threads} encoders (the default)"),
    ):
        wall = statistics.median(w for w, _ in rows[name])
        audio_s = statistics.median(a for _, a in rows[name])
        overhead = (wall - engine_wall) / engine_wall
        print(
            f"| {label} | {wall:.3f} | {audio_s:.1f} | {audio_s / wall:.0f}x | "
            f"{'—' if name.startswith(('engine', 'encode')) else f'{overhead:+.0%}'} |"
        )
    cli_x = statistics.median(a / w for w, a in rows["cli"])
    cli_one_x = statistics.median(a / w for w, a in rows["cli-one"])
    one_s = statistics.median(w for w, _ in rows["pipeline-one"])
    many_s = statistics.median(w for w, _ in rows["pipeline"])
    print(
        f"\n{threads} encoders vs one, in-process: {one_s / many_s:.2f}x faster; "
        f"`voicelane render` {cli_x:.0f}x real time with {threads} encoders, "
        f"{cli_one_x:.0f}x with one (target: >= 600x)"
    )
    print()
    on_s = statistics.median(w for w, _ in rows["pipeline"])
    off_s = statistics.median(w for w, _ in rows["pipeline-raw"])
    prepare_on = statistics.median(prepared[True])
    prepare_off = statistics.median(prepared[False])
    print("| normalization (issue 20) | wall s | share of the render |")
    print("|---|---:|---:|")
    print(f"| prepare_text, normalization on | {prepare_on:.4f} | {prepare_on / on_s:.1%} |")
    print(f"| prepare_text, normalization off | {prepare_off:.4f} | {prepare_off / on_s:.1%} |")
    print(
        f"| normalization itself (on - off) | {prepare_on - prepare_off:.4f} | "
        f"{(prepare_on - prepare_off) / on_s:.1%} |"
    )
    print(f"| pipeline, normalization off | {off_s:.3f} | — |")
    print(f"| pipeline, normalization on (default) | {on_s:.3f} | — |")
    print(f"\npipeline with normalization on / off: {on_s / off_s:.3f}x (target: <= 1.10x)")
    print()
    print(
        f"Ogg check: renderer reported {reported_s:.2f} s, opusinfo {opusinfo_s:.2f} s, "
        f"PyAV decode {decoded.duration_s:.2f} s ({decoded.codec}, {decoded.sample_rate_hz} Hz)"
    )
    if abs(opusinfo_s - reported_s) > 0.05 or abs(decoded.duration_s - reported_s) > 0.05:
        raise SystemExit("duration mismatch between renderer, opusinfo and decoder")


if __name__ == "__main__":
    main()
