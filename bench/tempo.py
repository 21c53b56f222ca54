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
0.4 s pieces, as the worker does. espeak renders each speed once (its output depends a little
on what it rendered before): every way through the same espeak speed stretches the same audio,
so ``atempo``'s rows differ from ``none`` by the stretch alone. Columns:

* ``x RT`` — seconds of audio delivered / seconds of CPU (``process_time``: this process's, so
  other load on the machine does not count) to render it (espeak, the resampler) and stretch
  it, each the best of ``--repeat``; ``vs none``: as a fraction of the baseline's. At speed 4
  a delivered second holds four seconds of speech, so even a free stretch would cost 4x;
* ``stretch x RT`` — seconds of audio delivered / CPU seconds in ``atempo`` alone;
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


@dataclass
class Rendered:
    """The sentences at one espeak speed, resampled to the delivery rate."""

    audio: list[PcmF32]
    cpu_s: float
    """Best of the repeats: espeak and the resampler."""


def render(
    engine: Engine, voice: str, sentences: list[str], speed: float, *, rate_hz: int, repeat: int
) -> Rendered:
    """Each sentence by ``engine`` at ``speed``, resampled to ``rate_hz``: the first run's audio
    (espeak's output depends a little on what it rendered before: every way to a speed stretches
    this same audio, so their differences are the stretch's own) and the best run's CPU time."""
    from voicelane.common.audio.pcm import StreamResampler
    from voicelane.workers.engines import Utterance

    audio: list[PcmF32] = []
    best_s = float("inf")
    for run in range(repeat):
        start = time.process_time()
        out: list[PcmF32] = []
        for text in sentences:
            [pcm] = engine.synthesize([Utterance(text, voice, speed)])
            resampler = StreamResampler(engine.sample_rate_hz, rate_hz)
            out.append(np.concatenate([resampler.process(pcm), resampler.flush()]))
        best_s = min(best_s, time.process_time() - start)
        if run == 0:
            audio = out
    return Rendered(audio, best_s)


def stretched(
    audio: list[PcmF32], tempo: float, rate_hz: int, repeat: int
) -> tuple[list[PcmF32], float]:
    """Each sentence through a :class:`TempoStretcher` in 0.4 s pieces; the best CPU time."""
    from voicelane.common.audio.tempo import TempoStretcher

    if tempo == 1.0:
        return audio, 0.0
    step = round(PIECE_S * rate_hz)
    out: list[PcmF32] = []
    best_s = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        out = []
        for pcm in audio:
            stretcher = TempoStretcher(rate_hz, tempo)
            parts = [stretcher.process(pcm[i : i + step]) for i in range(0, len(pcm), step)]
            out.append(np.concatenate([*parts, stretcher.flush()]))
        best_s = min(best_s, time.process_time() - start)
    return out, best_s


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
    repeat: int = args.repeat
    all_ways = ways(caps.min_speed, caps.max_speed)
    render(engine, "auto", sentences[:2], 1.0, rate_hz=rate_hz, repeat=1)  # warm-up
    renders = {
        speed: render(engine, "auto", sentences, speed, rate_hz=rate_hz, repeat=repeat)
        for speed in sorted({w.engine_speed for w in all_ways})
    }
    rows: list[Row] = []
    for way in all_ways:
        source = renders[way.engine_speed]
        audio, stretch_s = stretched(source.audio, way.tempo, rate_hz, repeat)
        seconds_out = sum(len(a) for a in audio) / rate_hz
        heard = [(a, rate_hz) for a in audio]
        rows.append(Row(way, seconds_out, source.cpu_s + stretch_s, stretch_s, heard))

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
