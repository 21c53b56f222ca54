"""The SDK imports without the server's dependencies: a fresh interpreter that refuses them
(and ``api``, ``workers``) imports ``client`` and every module of it."""

from __future__ import annotations

import importlib.util
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import client

REFUSED = (
    "api",
    "workers",
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
        if fullname.split(".")[0] in REFUSED:
            raise ImportError(f"refused: {{fullname}} is a server package")
        return None


sys.meta_path.insert(0, Refuse())
"""

CLIENT_MODULES = sorted(
    info.name for info in pkgutil.iter_modules([str(Path(client.__file__).parent)], "client.")
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
    assert {"client.jobs", "client.pool", "client.speech", "client.sync"} <= set(CLIENT_MODULES)


def test_the_sdk_imports_without_the_server_packages() -> None:
    imports = "\n".join(f"import {name}" for name in ["client", *CLIENT_MODULES])
    result = run_refusing(
        imports
        + "\nloaded = sorted({n.split('.')[0] for n in sys.modules} & set(REFUSED))"
        + "\nprint(','.join(loaded) or 'none')\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "none"


@pytest.mark.parametrize(("module", "refused"), [("api.rest", "api"), ("fastapi", "fastapi")])
def test_the_probe_refuses_server_modules(module: str, refused: str) -> None:
    """Not vacuous: under the same finder the REST app cannot be imported, nor fastapi (which
    is installed: the finder, not its absence, stops it)."""
    assert importlib.util.find_spec(refused) is not None
    result = run_refusing(f"import {module}\n")
    assert result.returncode != 0
    assert f"ImportError: refused: {refused} is a server package" in result.stderr
