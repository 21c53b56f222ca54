"""Run the third-party ``wyoming-bench tts`` CLI (its own console script, in this client
environment) against a Wyoming server and report what it measured.

Usage: ``wyoming_bench_tts.py HOST:PORT [wyoming-bench tts options...]`` (``-v`` is added).
Prints one JSON line last: the CLI's exit status, each mode's ``ok``/``fail`` counts, and per
measurement its audio duration, audio cycles and sentence count (from the ``-v`` lines), with
the output's tail for a failing test to show.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

SUMMARY = re.compile(r"^\[(non_streaming|streaming)\] ok=(\d+) fail=(\d+)$")
MEASUREMENT = re.compile(
    r"^\[(non_streaming|streaming)\] r\d+ sent=(\d+) .*audio=([0-9.]+)s bytes=(\d+) cycles=(\d+)$"
)
FAILURE = re.compile(r"^\[(non_streaming|streaming)\] r\d+ FAIL: (.*)$")


def main() -> None:
    server, *options = sys.argv[1:]
    bench = Path(sys.executable).parent / "wyoming-bench"
    result = subprocess.run(
        [str(bench), "tts", server, "-v", *options],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    modes: dict[str, dict[str, int]] = {}
    measurements: list[dict[str, object]] = []
    failures: list[str] = []
    for raw in result.stdout.splitlines():
        line = raw.strip()
        if found := SUMMARY.match(line):
            modes[found.group(1)] = {"ok": int(found.group(2)), "fail": int(found.group(3))}
        elif found := MEASUREMENT.match(line):
            measurements.append(
                {
                    "mode": found.group(1),
                    "sentences": int(found.group(2)),
                    "audio_s": float(found.group(3)),
                    "bytes": int(found.group(4)),
                    "cycles": int(found.group(5)),
                }
            )
        elif found := FAILURE.match(line):
            failures.append(f"{found.group(1)}: {found.group(2)}")
    print(
        json.dumps(
            {
                "returncode": result.returncode,
                "modes": modes,
                "measurements": measurements,
                "failures": failures,
                "tail": (result.stdout + result.stderr)[-3000:],
            }
        )
    )


if __name__ == "__main__":
    main()
