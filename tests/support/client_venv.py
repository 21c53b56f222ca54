"""The third-party clients' own virtual environments (``.venv/clients/NAME``, made by
``scripts/install-client-venvs.sh`` from ``tests/clients/venvs/NAME.txt``; ``make test`` runs
it): a test runs a script of ``tests/clients/`` with that environment's Python against a
server this test process started. A missing environment fails under CI and skips elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / "tests" / "clients"


def client_python(name: str) -> Path:
    """The Python of client environment ``name``; fails under CI when missing, else skips."""
    venv = Path(sys.prefix) / "clients" / name
    python = venv / "bin" / "python"
    if not python.exists():
        message = f"client environment {name} is missing (make test installs it: {venv})"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return python


def run_client(
    name: str, script: str, *args: str, timeout_s: float = 120, env: dict[str, str] | None = None
) -> Any:
    """Run ``tests/clients/SCRIPT`` with environment ``name``'s Python; the script prints one
    JSON document (its findings) as its last stdout line, which is returned. A non-zero exit
    fails the test with the script's stderr."""
    python = client_python(name)
    result = subprocess.run(
        [str(python), str(CLIENTS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **(env or {}), "PYTHONPATH": ""},
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(
            f"{script} ({name}) exited {result.returncode}:\n{result.stderr[-4000:]}"
            f"\n{result.stdout[-2000:]}"
        )
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    if not lines:
        pytest.fail(f"{script} ({name}) printed nothing:\n{result.stderr[-4000:]}")
    return json.loads(lines[-1])
