"""Settings that derive a value: the render workers ``voicelane up`` starts."""

from __future__ import annotations

import os

import pytest

from voicelane.core.settings import StackSettings


def cores() -> int:
    return len(os.sched_getaffinity(0))


def test_a_cpu_engine_gets_one_render_worker_per_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VOICELANE_RENDER_WORKERS", raising=False)
    monkeypatch.setenv("VOICELANE_ENGINE", "espeak")
    assert StackSettings().render_worker_count() == cores()


def test_a_gpu_engine_gets_one_render_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VOICELANE_RENDER_WORKERS", raising=False)
    monkeypatch.setenv("VOICELANE_ENGINE", "chattts")
    assert StackSettings().render_worker_count() == 1


def test_the_operator_picks_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICELANE_RENDER_WORKERS", "3")
    assert StackSettings(engine="espeak").render_worker_count() == 3
    assert StackSettings(engine="chattts").render_worker_count() == 3
