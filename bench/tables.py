"""What every benchmark's tables share: percentiles and Markdown table headers."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0-1) of ``values``; NaN when there are none."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def header(*columns: str) -> None:
    """A Markdown table header; the first column left-aligned, the others right-aligned."""
    print("| " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * (len(columns) - 1))
