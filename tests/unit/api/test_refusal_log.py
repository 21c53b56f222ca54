"""Refusals in the log: the first of a burst in full, the rest counted in one line."""

from __future__ import annotations

import logging

import pytest

from voicelane.api.refusal_log import RefusalLog


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records]


def test_a_burst_of_refusals_is_one_full_line_then_one_line_of_counts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    refusals = RefusalLog(logging.getLogger("test.refusals"), every_s=10.0, clock=clock)
    with caplog.at_level(logging.INFO, logger="test.refusals"):
        refusals.refused("Synthesize", "RESOURCE_EXHAUSTED", "stream a ended: full")
        for i in range(500):
            clock.now_s += 0.01
            refusals.refused("Synthesize", "RESOURCE_EXHAUSTED", f"stream {i} ended: full")
        refusals.refused("Converse", "RESOURCE_EXHAUSTED", "stream c ended: full")
        assert lines(caplog) == ["stream a ended: full"]

        clock.now_s += 10.0
        refusals.refused("Synthesize", "RESOURCE_EXHAUSTED", "stream z ended: full")
    assert lines(caplog) == [
        "stream a ended: full",
        "501 more refusals not logged one by one (within 10 s of a logged one): "
        "Converse RESOURCE_EXHAUSTED x1, Synthesize RESOURCE_EXHAUSTED x500",
        "stream z ended: full",
    ]


def test_flush_writes_what_was_counted_once(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    refusals = RefusalLog(logging.getLogger("test.refusals"), every_s=10.0, clock=clock)
    with caplog.at_level(logging.INFO, logger="test.refusals"):
        refusals.flush()  # nothing counted: nothing written
        refusals.refused("Chat", "RESOURCE_EXHAUSTED", "first")
        refusals.refused("Chat", "RESOURCE_EXHAUSTED", "second")
        refusals.flush()
        refusals.flush()
    assert lines(caplog) == [
        "first",
        "1 more refusals not logged one by one (within 10 s of a logged one): "
        "Chat RESOURCE_EXHAUSTED x1",
    ]
