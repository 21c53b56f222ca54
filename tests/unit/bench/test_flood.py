"""The flood benchmark's own arithmetic: ratios to idle and the table's verdicts (no stack)."""

from __future__ import annotations

import pytest

from bench.flood import Row, Sample, passed, ratios, table

MIB = 2**20
IDLE = [Sample(job_s=0.1, first_audio_s=0.2, stream_s=2.0, chat_s=1.0)]


def test_ratios_are_flooded_median_over_idle_median_per_metric() -> None:
    busy = [Sample(0.2, 0.2, 3.0, 1.0), Sample(0.4, 0.6, 5.0, 3.0), Sample(0.3, 0.4, 4.0, 2.0)]
    assert ratios(IDLE, busy) == pytest.approx([3.0, 2.0, 2.0, 2.0])


def test_a_row_within_2x_and_under_budget_passes() -> None:
    row = Row("idle Converse", [Sample(0.2, 0.4, 4.0, 2.0)], 100 * MIB, {})
    text = table(IDLE, 10 * MIB, [row], 512 * MIB)
    assert "| idle Converse | 0.20 s (2.00x) |" in text
    assert "100 / 512 MiB | PASS |" in text
    assert passed(text)


def test_a_row_over_2x_or_over_budget_fails_naming_what_missed() -> None:
    slow_job = Row("quotas", [Sample(0.5, 0.2, 2.0, 1.0)], 10 * MIB, {})
    full = Row("never-reading speech", IDLE, 512 * MIB, {})
    text = table(IDLE, 10 * MIB, [slow_job, full], 512 * MIB)
    assert "FAIL: small job, submit → done |" in text
    assert "FAIL: Redis over budget |" in text
    assert not passed(text)
