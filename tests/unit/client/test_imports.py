"""The SDK imports without the server's dependencies: a fresh interpreter that refuses them
(and ``voicelane.api``, ``voicelane.workers``, ``voicelane.core``) imports ``voicelane.client``,
every module of it and of ``voicelane.common``."""

from __future__ import annotations

import importlib.util
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import voicelane.client
import voicelane.common

REFUSED = (
    "voicelane.api",
    "voicelane.workers",
    "voicelane.core",
    "fastapi",
    "starlette",
    "uvicorn",
    "redis",
    "celery",
    "kombu",
    "flower",
    "boto3",
    "pydantic_settings",
    "torch",
)

REFUSE = f"""
import importlib.abc
import sys

REFUSED = {REFUSED!r}


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in REFUSED or ".".join(fullname.split(".")[:2]) in REFUSED:
            raise ImportError(f"refused: {{fullname}} is a server package")
        return None


sys.meta_path.insert(0, Refuse())
"""

CLIENT_MODULES = sorted(
    info.name
    for package in (voicelane.client, voicelane.common)
    for info in pkgutil.walk_packages(
        [str(Path(package.__file__ or "").parent)], f"{package.__name__}."
    )
)


def run_refusing(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` after REFUSE in a fresh interpreter, with none of the server packages loaded."""
    return subprocess.run(
        [sys.executable, "-c", REFUSE + code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_client_module_is_found() -> None:
    assert {
        "voicelane.client.jobs",
        "voicelane.client.pool",
        "voicelane.client.speech",
        "voicelane.client.sync",
        "voicelane.common.errors",
        "voicelane.common.audio.opus",
        "voicelane.common.wire.speech_pb2_grpc",
    } <= set(CLIENT_MODULES)


def test_the_sdk_imports_without_the_server_packages() -> None:
    imports = "\n".join(f"import {name}" for name in ["voicelane.client", *CLIENT_MODULES])
    result = run_refusing(
        imports
        + "\nloaded = sorted({n for n in sys.modules for r in REFUSED"
        + " if n == r or n.startswith(r + '.')})"
        + "\nprint(','.join(loaded) or 'none')\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "none"


@pytest.mark.parametrize(
    ("module", "refused"),
    [("voicelane.api.rest", "voicelane.api"), ("voicelane.core.ledger", "voicelane.core"),
     ("fastapi", "fastapi")],
)  # fmt: skip
def test_the_probe_refuses_server_modules(module: str, refused: str) -> None:
    """Not vacuous: under the same finder the REST app cannot be imported, nor fastapi (which
    is installed: the finder, not its absence, stops it)."""
    assert importlib.util.find_spec(refused) is not None
    result = run_refusing(f"import {module}\n")
    assert result.returncode != 0
    assert f"ImportError: refused: {refused} is a server package" in result.stderr
