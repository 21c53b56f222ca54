"""Codec throughput: x real time of resampling, Opus packets and each file writer.

Usage: ``python bench/audio_codecs.py [--seconds 60] [--repeat 5] [--book-minutes 60]``

Every row processes the same amount of speech-like audio (a gliding tone with harmonics,
syllable-rate amplitude modulation and a noise floor), mono, at 24 kHz unless the row says
otherwise, fed in 200 ms pieces where the row is a stream. The baseline row is numpy's own
float -> int16 conversion of that audio, measured in the same run; ``vs baseline`` is each row's
speed as a fraction of it. Times are the best of ``--repeat`` runs.

``--book-minutes N`` also times :func:`voicelane.workers.book_audio.write_book_metadata` (60
chapters, title/author/language, a 200 KB JPEG-sized cover) on an N-minute file of each format
(the same audio repeated), once each, and prints the file sizes: the step rewrites the file, so
its time grows with the size.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from voicelane.common.audio.pcm import PcmF32

PIECE_S = 0.2


def speech_like(rate_hz: int, seconds: float, seed: int = 0) -> PcmF32:
    """A chirp with harmonics, 4 Hz syllable envelope and a little noise, peak ~0.5."""
    rng = np.random.default_rng(seed)
    t = np.arange(round(rate_hz * seconds)) / rate_hz
    f0 = 140 + 40 * np.sin(2 * np.pi * 0.3 * t)  # gliding pitch
    phase = 2 * np.pi * np.cumsum(f0) / rate_hz
    voiced = sum(np.sin(k * phase) / k for k in range(1, 8))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2
    noise = 0.02 * rng.standard_normal(len(t))
    x = 0.25 * envelope * voiced + noise
    out: PcmF32 = (0.5 * x / np.max(np.abs(x))).astype(np.float32)
    return out


def pieces(x: PcmF32, rate_hz: int) -> list[PcmF32]:
    step = round(rate_hz * PIECE_S)
    return [x[i : i + step] for i in range(0, len(x), step)]


def best_time(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=60.0, help="audio per row (s)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per row; best is kept")
    parser.add_argument(
        "--book-minutes", type=float, default=0.0, help="time the book metadata step (min)"
    )
    args = parser.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import av
    from av.audio.resampler import AudioResampler

    from voicelane.common.audio.files import AudioFormat, decode_to_pcm, open_writer
    from voicelane.common.audio.opus import OpusStreamDecoder, OpusStreamEncoder
    from voicelane.common.audio.pcm import StreamResampler, float_to_int16, resample

    seconds: float = args.seconds
    repeat: int = args.repeat
    x24 = speech_like(24000, seconds)
    x22 = speech_like(22050, seconds)
    rows: list[tuple[str, float]] = []

    def row(name: str, fn: Callable[[], object]) -> None:
        fn()  # warm-up: filter tables, codec init, lazy imports
        rows.append((name, best_time(fn, repeat)))

    # -- baseline
    def numpy_int16() -> object:
        return (np.clip(x24, np.float32(-1.0), np.float32(1.0)) * 32767).astype(np.int16)

    row("baseline: numpy float32->int16 (clip, *32767, astype)", numpy_int16)
    row("float_to_int16 (clip, *32767, rint)", lambda: float_to_int16(x24))

    # -- resampling: numpy polyphase (chosen) vs libswresample through PyAV
    def stream_resample(x: PcmF32, src: int, dst: int) -> None:
        r = StreamResampler(src, dst)
        for p in pieces(x, src):
            r.process(p)
        r.flush()

    def swr_resample(x: PcmF32, src: int, dst: int) -> None:
        r = AudioResampler(format="flt", layout="mono", rate=dst)
        pts = 0
        for p in pieces(x, src):
            frame = av.AudioFrame.from_ndarray(p.reshape(1, -1), format="flt", layout="mono")
            frame.sample_rate = src
            frame.pts = pts
            pts += len(p)
            r.resample(frame)
        r.resample(None)

    for src, dst, x in ((22050, 24000, x22), (24000, 48000, x24)):
        tag = f"{src}->{dst}"
        row(f"resample {tag} whole (numpy polyphase)", partial(resample, x, src, dst))
        row(f"resample {tag} stream 200 ms (numpy)", partial(stream_resample, x, src, dst))
        row(f"resample {tag} stream 200 ms (PyAV swr, unused)", partial(swr_resample, x, src, dst))

    # -- Opus packets
    def opus_encode(complexity: int) -> list[bytes]:
        enc = OpusStreamEncoder(24000, 32000, complexity=complexity)
        out: list[bytes] = []
        for p in pieces(x24, 24000):
            out += enc.encode(p)
        return out + enc.flush()

    # 6 is the default; 5 and up run CELT's pitch pre-filter, 7 and up the signal analysis
    for complexity in (0, 4, 5, 6, 10):
        row(
            f"Opus packet encode 24 kHz 32 kbps (complexity {complexity})",
            partial(opus_encode, complexity),
        )
    packets = opus_encode(6)
    row("Opus packet decode at 24 kHz", lambda: OpusStreamDecoder(24000).decode_all(packets))
    row("Opus packet decode at 48 kHz", lambda: OpusStreamDecoder(48000).decode_all(packets))

    # -- file writers, into memory
    files: dict[AudioFormat, bytes] = {}

    def write(fmt: AudioFormat) -> None:
        buf = io.BytesIO()
        with open_writer(buf, fmt, 24000) as writer:
            for p in pieces(x24, 24000):
                writer.write(p)
        files[fmt] = buf.getvalue()

    for fmt in AudioFormat:
        row(f"write {fmt.value} 24 kHz, 200 ms pieces", partial(write, fmt))
    for fmt in AudioFormat:
        row(
            f"decode_to_pcm {fmt.value}",
            partial(decode_to_pcm, files[fmt]),
        )

    baseline_xrt = seconds / rows[0][1]
    print(f"{seconds:g} s of speech-like mono audio per row; best of {repeat}")
    print(f"{'row':<56} {'time s':>9} {'x real time':>12} {'vs baseline':>12}")
    print("-" * 92)
    for name, elapsed in rows:
        xrt = seconds / elapsed
        print(f"{name:<56} {elapsed:>9.4f} {xrt:>12,.0f} {xrt / baseline_xrt:>12.4f}")
    sizes = ", ".join(f"{fmt.value} {len(data) / 1024:.0f} KiB" for fmt, data in files.items())
    print(f"file sizes: {sizes}")
    if args.book_minutes > 0:
        book_metadata(args.book_minutes, x24)
    return 0


def book_metadata(minutes: float, block: PcmF32) -> None:
    """Write ``minutes`` of each format (``block`` repeated), then time the metadata step."""
    import tempfile

    from voicelane.common.audio.files import AudioFormat, open_writer
    from voicelane.workers.book_audio import BookTags, ChapterMark, write_book_metadata

    total_ms = round(minutes * 60_000)
    step_ms = total_ms // 60
    chapters = [ChapterMark(f"Chapter {n + 1}", n * step_ms, (n + 1) * step_ms) for n in range(60)]
    cover = b"\xff\xd8\xff\xe0" + bytes(200_000)  # the size of a typical cover; not decoded
    tags = BookTags(title="A Book", author="An Author", language="en", cover=cover)
    print(f"\nbook metadata step on {minutes:g} min files (60 chapters, 200 KB cover), one run")
    print(f"{'format':<8} {'encode s':>9} {'x real time':>12} {'size MiB':>9} {'metadata s':>11}")
    with tempfile.TemporaryDirectory(prefix="voicelane-bench-") as directory:
        for fmt in AudioFormat:
            path = Path(directory) / f"book.{fmt.extension}"
            start = time.perf_counter()
            with open_writer(path, fmt, 24000) as writer:
                for _ in range(round(total_ms / 1000 * 24000 / len(block))):
                    writer.write(block)
            encode_s = time.perf_counter() - start
            start = time.perf_counter()
            write_book_metadata(path, fmt, chapters=chapters, tags=tags)
            tag_s = time.perf_counter() - start
            size_mib = path.stat().st_size / 2**20
            xrt = writer.duration_s / encode_s
            print(f"{fmt.value:<8} {encode_s:>9.1f} {xrt:>12,.0f} {size_mib:>9.1f} {tag_s:>11.2f}")
            path.unlink()


if __name__ == "__main__":
    raise SystemExit(main())
