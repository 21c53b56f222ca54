"""Refusals in the log: one line per burst, not one per refused call.

Past capacity most calls are refused (``RESOURCE_EXHAUSTED``), and clients that retry every
50 ms make hundreds of refusals a second (``docs/benchmarks.md``, "the retry storm"): a line
each was 400-900 lines a second of the same words, and CPU the admitted streams needed. The
count of every refusal is a metric (``voicelane_grpc_stream_errors_total``); the log keeps
the first refusal after a quiet :data:`REFUSAL_LOG_EVERY_S` in full, counts the ones that
follow, and writes what it counted, in one line, with the next refusal after the interval
(or at :meth:`RefusalLog.flush`, when the front stops).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

REFUSAL_LOG_EVERY_S = 10.0
"""At most one full refusal line (and one line of counts) per this many seconds."""


class RefusalLog:
    """Log a refusal in full at most once per ``every_s``; count the rest (per method and
    status code) and log the counts in one line when the interval is over. One thread (the
    front's event loop)."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        every_s: float = REFUSAL_LOG_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._every_s = every_s
        self._clock = clock
        self._last_line_s = -float("inf")
        self._held: Counter[tuple[str, str]] = Counter()

    def refused(self, method: str, code: str, line: str) -> None:
        """A call of ``method`` was refused with ``code``; ``line``: the refusal in full."""
        now = self._clock()
        if now - self._last_line_s < self._every_s:
            self._held[(method, code)] += 1
            return
        self.flush()
        self._last_line_s = now
        self._logger.info("%s", line)

    def flush(self) -> None:
        """Log the refusals counted since the last line, if any."""
        if not self._held:
            return
        held, self._held = self._held, Counter()
        counts = ", ".join(f"{method} {code} x{n}" for (method, code), n in sorted(held.items()))
        self._logger.info(
            "%d more refusals not logged one by one (within %g s of a logged one): %s",
            sum(held.values()),
            self._every_s,
            counts,
        )
