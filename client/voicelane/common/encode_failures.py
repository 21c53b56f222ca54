"""The process-wide count of audio frames that failed to encode (each became silence).

Apart from :mod:`voicelane.common.audio` so that a worker's metrics
(:mod:`voicelane.workers.metrics`) read it without importing the audio package's file
writers (PyAV): a GPU machine that runs only the engine has no PyAV.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_total = 0


def encode_failures_total() -> int:
    """Frames that failed to encode in this process, over every encoder (each became silence)."""
    return _total


def count_encode_failure() -> None:
    global _total  # noqa: PLW0603  (a process-wide counter is the point)
    with _lock:
        _total += 1
