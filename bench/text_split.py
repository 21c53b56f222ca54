"""Benchmark voicelane.core.text.split_sentences on ~100 KB and ~1 MB of mixed Chinese/English text.

Run from the repository root: ``python bench/text_split.py [--repeat N] [--seed S]``.

Prints one row per input size: characters, segments, best-of-N seconds, MB/s (millions of
characters per second), and the same for the naive baseline
``re.split(r"(?<=[.!?。！？])\\s*", text)`` measured in the same run on the same text, and the
ratio split_sentences / baseline time.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from voicelane.core.text import Segment

_WORDS = (
    "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "speech", "model", "render",
    "queue", "batch", "stream", "voice", "latency", "server", "request", "audio", "chunk",
    "sentence", "paragraph", "number", "version", "value", "result",
)  # fmt: skip
_HAN = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动"
    "同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自"
    "二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日"
    "那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变"
    "条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总"
    "次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指"
)
_EN_END = (". ", "! ", "? ", "; ", "... ")
_ZH_END = ("。", "！", "？", "；", "……")
_EXTRAS = (
    "Mr. Smith",
    "Dr. Lee",
    "e.g. this",
    "3.14",
    "v1.2.3",
    "example.com",
    "3,000,000",
    "U.S. market",
    "J. R. R. Tolkien",
)


def make_text(n_chars: int, seed: int = 1) -> str:
    """Deterministic mixed text of about ``n_chars`` characters: English and Chinese sentences,
    abbreviations, numbers, list items, line breaks and blank lines."""
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < n_chars:
        kind = rng.random()
        if kind < 0.45:
            words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 22))]
            if rng.random() < 0.3:
                words.insert(rng.randrange(len(words)), rng.choice(_EXTRAS))
            piece = " ".join(words).capitalize() + rng.choice(_EN_END)
        elif kind < 0.85:
            han = "".join(rng.choice(_HAN) for _ in range(rng.randint(6, 40)))
            if rng.random() < 0.3:
                cut = rng.randrange(len(han))
                han = han[:cut] + "，" + han[cut:]
            if rng.random() < 0.2:
                han += " English words "
            piece = han + rng.choice(_ZH_END)
        elif kind < 0.93:
            piece = f"\n{rng.randint(1, 12)}. " + " ".join(rng.choice(_WORDS) for _ in range(5))
        else:
            piece = rng.choice(("\n", "\n\n", "\r\n", "\n   \n", "\u3000"))
        parts.append(piece)
        size += len(piece)
    return "".join(parts)[:n_chars]


def _count_segments(split: Callable[[str], list[Segment]], text: str) -> int:
    return len(split(text))


def _count_pieces(pattern: re.Pattern[str], text: str) -> int:
    return len(pattern.split(text))


def _best(fn: Callable[[], int], repeat: int) -> tuple[float, int]:
    best = float("inf")
    count = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        count = fn()
        best = min(best, time.perf_counter() - t0)
    return best, count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (best kept)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from voicelane.core.text import split_sentences

    baseline_re = re.compile(r"(?<=[.!?。！？])\s*")
    header = (
        f"{'input':>6} {'chars':>9} {'segments':>9} {'seconds':>9} {'MB/s':>7} "
        f"{'base pieces':>11} {'base s':>8} {'base MB/s':>9} {'ratio':>6}"
    )
    print(header)
    print("-" * len(header))
    for label, size in (("100KB", 100_000), ("1MB", 1_000_000)):
        text = make_text(size, args.seed)
        ours, segments = _best(partial(_count_segments, split_sentences, text), args.repeat)
        base, pieces = _best(partial(_count_pieces, baseline_re, text), args.repeat)
        print(
            f"{label:>6} {len(text):>9,} {segments:>9,} {ours:>9.4f} "
            f"{len(text) / ours / 1e6:>7.2f} {pieces:>11,} {base:>8.4f} "
            f"{len(text) / base / 1e6:>9.2f} {ours / base:>6.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
