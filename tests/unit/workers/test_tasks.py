"""voicelane.workers.tasks: the retry schedule, above all for a full store (issue 26, item 8)."""

from __future__ import annotations

import errno

import pytest

from voicelane.common.errors import EngineError, StorageFullError, StorageUnavailableError
from voicelane.workers import tasks


def test_a_full_store_is_retried_on_a_slow_schedule() -> None:
    # Repro: a full disk was retried after at most 1, 2, 4 s (and failed the job after 3
    # attempts). Now 5, 15, 45, 135, then 300 s, each plus at most 20 % jitter.
    expected_s = [5, 15, 45, 135, 300, 300, 300, 300]
    for error in (StorageFullError("full"), OSError(errno.ENOSPC, "No space left on device")):
        for _ in range(20):
            waits_s = [tasks.retry_countdown_s(error, retries) for retries in range(8)]
            for wait_s, base_s in zip(waits_s, expected_s, strict=True):
                assert base_s <= wait_s <= base_s * 1.2
    assert sum(expected_s) > 20 * 60  # gives an operator ~20 minutes to free room


def test_other_errors_keep_the_quick_schedule() -> None:
    for error in (StorageUnavailableError("down"), EngineError("x"), OSError(errno.EIO, "io")):
        for retries in range(8):
            assert 0 <= tasks.retry_countdown_s(error, retries) <= min(60, 2**retries)


def test_a_chunk_whose_store_stays_full_fails_its_job_after_the_last_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    failed: list[tuple[str, str]] = []
    calls: list[int] = []

    def full(_ctx: object, job_id: str, n: int) -> str:
        calls.append(n)
        raise StorageFullError("local storage write 't/j/part' failed: No space left on device")

    monkeypatch.setattr(tasks, "context", lambda: None)
    monkeypatch.setattr(tasks, "render_chunk", full)
    monkeypatch.setattr(tasks, "fail_job", lambda _c, job_id, why: failed.append((job_id, why)))
    monkeypatch.setattr(tasks, "storage_full_countdown_s", lambda retries: 0.0)
    result = tasks.render.apply(args=("job1", 0), retries=tasks._MAX_RETRIES)
    assert result.get() == "failed"
    assert calls == [0]
    assert failed == [
        (
            "job1",
            "chunk 0: storage stayed full: local storage write 't/j/part' failed: "
            "No space left on device",
        )
    ]
