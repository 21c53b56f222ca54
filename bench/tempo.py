"""Time-stretching (issue 24): cost, duration and intelligibility of each way to a speed.

Usage: ``python bench/tempo.py [--repeat 3] [--rate 24000]``

The intelligibility sentence set (``tests/data/intelligibility_en.txt``, 10 sentences, 81
words) is spoken by espeak (0.5 to 2.5 on its own) at each target speed, every way there is:

* ``none`` — speed 1, nothing changed: the **baseline** of the ratios;
* ``espeak`` — espeak's own rate (only where it reaches: 0.5 to 2.5);
* ``atempo`` — espeak at speed 1, the whole factor by
  :class:`~voicelane.common.audio.tempo.TempoStretcher` (libavfilter's ``atempo``);
* ``lane`` — what the real-time lane does with ``stretch_speed``: espeak at the nearest speed
  it can, ``atempo`` the rest (0.25 = 0.5 x 0.5, 4 = 2.5 x 1.6; within espeak's range it is
  ``espeak``, so not repeated).

Each sentence is resampled to ``--rate`` (the lane's default delivery rate) and stretched in
0.4 s pieces, as the worker does. Columns:

* ``x RT`` — seconds of audio delivered / seconds of CPU to render (espeak) and stretch it,
  best of ``--repeat``; ``vs none``: that speed as a fraction of the baseline's;
* ``stretch x RT`` — seconds of audio out / seconds in ``atempo`` alone;
* ``duration`` — audio delivered / expected (the baseline's duration / speed), all sentences;
* ``WER`` — pocketsphinx's word error rate (:mod:`bench.intelligibility`: its noise floor,
  its FFT resampler to 16 kHz), all sentences; ``vs none``: the difference from the baseline.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from voicelane.common.audio.pcm import PcmF32
    from voicelane.workers.engines import Engine

SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0)
PIECE_S = 0.4
"""The worker's slices of an engine's chunk (``voicelane.workers.realtime.SLICE_S``)."""


@dataclass(frozen=True)
class Way:
    path: str
    speed: float
    engine_speed: float
    tempo: float


@dataclass
class Row:
    way: Way
    seconds_out: float
    cpu_s: float
    stretch_s: float
    heard: list[tuple[PcmF32, int]]


def ways(min_speed: float, max_speed: float) -> list[Way]:
    """Every way to each of :data:`SPEEDS` (module docstring)."""
    out = [Way("none", 1.0, 1.0, 1.0)]
    for speed in SPEEDS:
        if speed == 1.0:
            continue
        if min_speed <= speed <= max_speed:
            out.append(Way("espeak", speed, speed, 1.0))
        out.append(Way("atempo", speed, 1.0, speed))
        engine_speed = min(max(speed, min_speed), max_speed)
        if engine_speed != speed:
            out.append(Way("lane", speed, engine_speed, speed / engine_speed))
    return out


def render(
    engine: Engine, voice: str, sentences: list[str], way: Way, rate_hz: int
) -> tuple[list[PcmF32], float, float]:
    """Each sentence at ``way``; (audio, seconds rendering + stretching, seconds stretching)."""
    from voicelane.common.audio.pcm import StreamResampler
    from voicelane.common.audio.tempo import TempoStretcher
    from voicelane.workers.engines import Utterance

    audio: list[PcmF32] = []
    total_s = stretch_s = 0.0
    for text in sentences:
        start = time.process_time()
        [pcm] = engine.synthesize([Utterance(text, voice, way.engine_speed)])
        resampler = StreamResampler(engine.sample_rate_hz, rate_hz)
        pcm = np.concatenate([resampler.process(pcm), resampler.flush()])
        rendered = time.process_time()
        if way.tempo != 1.0:
            stretcher = TempoStretcher(rate_hz, way.tempo)
            step = round(PIECE_S * rate_hz)
            parts = [stretcher.process(pcm[i : i + step]) for i in range(0, len(pcm), step)]
            pcm = np.concatenate([*parts, stretcher.flush()])
        done = time.process_time()
        total_s += done - start
        stretch_s += done - rendered
        audio.append(pcm)
    return audio, total_s, stretch_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=3, help="runs per row; the best is kept")
    parser.add_argument("--rate", type=int, default=24000, help="delivery rate (Hz)")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.intelligibility import load_sentences, score, transcribe
    from bench.tables import header
    from voicelane.workers.engines.espeak import EspeakEngine

    engine = EspeakEngine()
    caps = engine.capabilities()
    sentences = load_sentences()
    rate_hz: int = args.rate
    rows: list[Row] = []
    for way in ways(caps.min_speed, caps.max_speed):
        render(engine, "auto", sentences[:1], way, rate_hz)  # warm-up
        runs = [render(engine, "auto", sentences, way, rate_hz) for _ in range(args.repeat)]
        audio = runs[0][0]
        cpu_s = min(r[1] for r in runs)
        stretch_s = min(r[2] for r in runs)
        seconds_out = sum(len(a) for a in audio) / rate_hz
        heard = [(a, rate_hz) for a in audio]
        rows.append(Row(way, seconds_out, cpu_s, stretch_s, heard))

    base = rows[0]
    scores = {
        id(row): [
            score(t, transcribe(pcm, r)) for t, (pcm, r) in zip(sentences, row.heard, strict=True)
        ]
        for row in rows
    }

    def wer(row: Row) -> float:
        found = scores[id(row)]
        return sum(s.errors for s in found) / sum(s.words for s in found)

    base_x = base.seconds_out / base.cpu_s
    base_wer = wer(base)
    print(
        f"espeak {engine.sample_rate_hz} Hz → {rate_hz} Hz, {len(sentences)} sentences "
        f"({sum(s.words for s in scores[id(base)])} words), {base.seconds_out:.1f} s at speed 1; "
        f"best of {args.repeat}"
    )
    print()
    header(
        "path", "speed", "espeak speed", "tempo", "x RT", "vs none", "stretch x RT",
        "duration", "WER", "vs none",
    )  # fmt: skip
    for row in rows:
        way = row.way
        x_rt = row.seconds_out / row.cpu_s
        stretch = f"{row.seconds_out / row.stretch_s:.0f}" if way.tempo != 1.0 else "—"
        expected_s = base.seconds_out / way.speed
        print(
            f"| {way.path} | {way.speed:g} | {way.engine_speed:g} | {way.tempo:g} | {x_rt:.0f} "
            f"| {x_rt / base_x:.2f} | {stretch} | {row.seconds_out / expected_s:.3f} "
            f"| {wer(row):.2f} | {wer(row) - base_wer:+.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
