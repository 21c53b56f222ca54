"""The pure parts of our LiveKit plugin (``livekit.plugins.voicelane._protocol``), run in the
plugin's environment on fixed inputs: the agent URL from a base URL, the server's errors as
LiveKit's, a context's words as ``TimedString``s. Prints one JSON line of the results; the
expectations live in tests/integration/test_livekit.py.
"""

from __future__ import annotations

import json
from typing import Any

from livekit.plugins.voicelane._protocol import (
    ContextOptions,
    TranscriptAligner,
    agent_url,
    append_message,
    error_from_close,
    error_from_message,
)

BASE_URLS = [
    "http://host:8000",
    "http://host:8000/",
    "http://host:8000/v1",
    "https://tts.example/v1/",
    "ws://host:8000",
]
CODES = [
    "INVALID_ARGUMENT",
    "UNAUTHENTICATED",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "UNAVAILABLE",
    "DEADLINE_EXCEEDED",
    "INTERNAL",
]


def timed(pieces: list[Any]) -> list[list[Any]]:
    return [[str(p), p.start_time, p.end_time] for p in pieces]


def aligner_cases() -> dict[str, Any]:
    aligner = TranscriptAligner()
    aligner.append("Hello, wor")
    aligner.append("ld. Bye")
    first = aligner.words(
        [
            {"text": "Hello", "start_ms": 10, "end_ms": 300, "char_start": 0, "char_end": 5},
            {"text": "world", "start_ms": 350, "end_ms": 700, "char_start": 7, "char_end": 12},
        ]
    )
    again = aligner.words(  # a word already handed out
        [{"text": "world", "start_ms": 350, "end_ms": 700, "char_start": 7, "char_end": 12}]
    )
    late = aligner.words(  # starts before the previous word: kept in order
        [{"text": "Bye", "start_ms": 200, "end_ms": 900, "char_start": 14, "char_end": 99}]
    )
    ending = TranscriptAligner()
    ending.append("Bye now.")
    words = ending.words(
        [
            {"text": "Bye", "start_ms": 0, "end_ms": 250, "char_start": 0, "char_end": 3},
            {"text": "now", "start_ms": 250, "end_ms": 600, "char_start": 4, "char_end": 7},
        ]
    )
    tail = ending.tail(1.2)
    return {
        "first": timed(first),
        "again": timed(again),
        "late": timed(late),
        "ending": timed(words),
        "tail": timed([tail]) if tail is not None else None,
        "tail_again": ending.tail(1.2),
    }


def main() -> None:
    errors = {}
    for code in CODES:
        e = error_from_message({"type": "error", "code": code, "error_code": "x", "message": "m"})
        errors[code] = [type(e).__name__, e.status_code, e.retryable]
    closes = {}
    for close_code in (1008, 1011, 1013, 1000, None):
        e = error_from_close(close_code)
        closes[str(close_code)] = [type(e).__name__, getattr(e, "status_code", None), e.retryable]
    options = ContextOptions(sample_rate_hz=16000, voice="espeak:en-us", speed=1.5)
    findings = {
        "urls": {url: agent_url(url) for url in BASE_URLS},
        "errors": errors,
        "closes": closes,
        "first_append": append_message("c1", "Hi.", options),
        "later_append": append_message("c1", "More.", None, close=True),
        "aligner": aligner_cases(),
    }
    print(json.dumps(findings, default=str))


if __name__ == "__main__":
    main()
