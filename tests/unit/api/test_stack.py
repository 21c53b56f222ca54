"""``voicelane up``'s LLM children: the local model and the stand-in, and where they point
the fronts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from voicelane.api import cli, stack
from voicelane.api.llm_local import DEFAULT_ALIAS
from voicelane.core.settings import StackSettings


def test_the_local_llm_child_and_the_fronts_pointed_at_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOICELANE_LLM__NUM_CTX", "1024")
    monkeypatch.setenv("VOICELANE_LLM__MAX_PARALLEL", "3")
    monkeypatch.setenv("VOICELANE_LLM__MAX_REPLY_TOKENS", "60")
    monkeypatch.setenv("VOICELANE_LLM_LOCAL_PORT", "8181")
    monkeypatch.setenv("VOICELANE_LLM_LOCAL_THREADS", "1")
    env: dict[str, str] = {}
    child = stack._llm_local(env, StackSettings(), tmp_path)
    assert child.module == "voicelane.api.llm_local"
    assert child.args == [
        "--port", "8181", "--threads", "1", "--ctx", "1024", "--parallel", "3",
        "--max-tokens", "60",
    ]  # fmt: skip
    assert env == {
        "VOICELANE_LLM__BACKEND": "openai",
        "VOICELANE_LLM__BASE_URL": "http://127.0.0.1:8181/v1",
        "VOICELANE_LLM__MODEL": DEFAULT_ALIAS,
        "VOICELANE_LLM__PRELOAD": "1",
    }
    monkeypatch.setenv("VOICELANE_LLM__PRELOAD", "0")  # the operator's choice stands
    monkeypatch.delenv("VOICELANE_LLM__MAX_REPLY_TOKENS")
    env = {}
    child = stack._llm_local(env, StackSettings(), tmp_path)
    assert "VOICELANE_LLM__PRELOAD" not in env
    assert child.args[-2:] == ["--max-tokens", "512"]  # the reply's reserve of the window


@pytest.mark.parametrize(
    ("flags", "chosen"),
    [
        (["--llm", "local"], {"llm_local": True, "llm_standin": False}),
        (["--llm", "standin"], {"llm_local": False, "llm_standin": True}),
        (["--llm-standin"], {"llm_local": False, "llm_standin": True}),
        ([], {"llm_local": False, "llm_standin": False}),
    ],
)
def test_up_takes_the_llm_to_run(
    monkeypatch: pytest.MonkeyPatch, flags: list[str], chosen: dict[str, bool]
) -> None:
    handed: dict[str, Any] = {}

    def run_stack(settings: StackSettings, state_dir: Path, **kwargs: Any) -> int:
        handed.update(kwargs)
        return 0

    monkeypatch.setenv("VOICELANE_DEV_MODE", "1")
    monkeypatch.setattr(stack, "run_stack", run_stack)
    assert cli.main(["up", *flags]) == 0
    assert {key: handed[key] for key in chosen} == chosen
