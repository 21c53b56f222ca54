"""What installs: the server's and the SDK's wheels put nothing but the ``voicelane`` namespace
into site-packages, and the SDK installed alone into a fresh virtual environment — none of the
server's dependencies — streams speech from a running stack."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from email.parser import Parser
from pathlib import Path

import pytest

from tests.support.stack import ACME_KEY, ROOT, Stack
from voicelane.core.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SERVER_ONLY = {"celery", "flower", "boto3", "fastapi", "uvicorn", "redis", "torch", "kombu"}
"""Distributions the SDK must not pull in."""


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The server's and the SDK's wheels, built from this checkout (setuptools' build folders,
    which would carry files deleted since into the wheel, are removed before and after)."""
    out = tmp_path_factory.mktemp("wheels")
    scratch = [ROOT / "build", ROOT / "client" / "build"]
    for folder in scratch:
        shutil.rmtree(folder, ignore_errors=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(ROOT), str(ROOT / "client")],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    for folder in scratch:
        shutil.rmtree(folder, ignore_errors=True)
    built = {path.name.split("-")[0]: path for path in out.glob("*.whl")}
    assert set(built) == {"voicelane", "voicelane_client"}, sorted(built)
    return built


def contents(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return [name for name in archive.namelist() if ".dist-info/" not in name]


def requirements(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        message = Parser().parsestr(archive.read(metadata).decode())
    names = set()
    for requirement in message.get_all("Requires-Dist") or []:
        if "extra ==" in requirement:
            continue
        name = requirement.split(";")[0].strip()
        for stop in "<>=!~[ (":
            name = name.split(stop)[0]
        names.add(name.lower())
    return names


def test_the_wheels_install_only_the_voicelane_namespace(wheels: dict[str, Path]) -> None:
    server, sdk = contents(wheels["voicelane"]), contents(wheels["voicelane_client"])
    assert {name.split("/")[0] for name in server + sdk} == {"voicelane"}
    assert {name.split("/")[1] for name in server} == {"core", "workers", "api"}
    assert {name.split("/")[1] for name in sdk} == {"client", "common"}
    # a namespace shared by two distributions: neither ships voicelane/__init__.py
    assert "voicelane/__init__.py" not in server + sdk
    assert "voicelane/common/wire/speech_pb2.py" in sdk
    assert "voicelane/common/wire/speech_pb2_grpc.pyi" in sdk
    assert "voicelane/client/py.typed" in sdk
    assert "voicelane/core/ledger/lock.lua" in server  # the Lua scripts travel with the code
    assert "voicelane/api/playground/index.html" in server  # the playground's static files
    assert "voicelane/api/playground/app.js" in server
    assert not [name for name in server if name.startswith("voicelane/api/") and "tests" in name]


def test_the_sdk_requires_none_of_the_server(wheels: dict[str, Path]) -> None:
    sdk = requirements(wheels["voicelane_client"])
    assert {"grpcio", "protobuf", "numpy", "opuslib"} <= sdk
    assert not sdk & SERVER_ONLY
    assert "voicelane-client" in requirements(wheels["voicelane"])


@pytest.fixture(scope="module")
def sdk_venv(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the SDK's wheel and its dependencies, nothing else."""
    home = tmp_path_factory.mktemp("sdk-venv")
    venv.EnvBuilder(with_pip=True).create(home)
    python = home / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(wheels["voicelane_client"])],
        check=True, capture_output=True, timeout=900,
    )  # fmt: skip
    return python


def installed(python: Path) -> set[str]:
    listing = subprocess.run(
        [str(python), "-m", "pip", "list", "--format", "json"],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return {entry["name"].lower() for entry in json.loads(listing.stdout)}


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    redis_server = RedisServer(tmp_path / "redis").start()
    lane = Stack(tmp_path / "lane", redis_server.url)
    try:
        lane.gpu_worker()
        lane.grpc()
        lane.wait_realtime_workers()
        yield lane
    finally:
        lane.stop()
        redis_server.stop()


SPEAK = """
import sys
import voicelane.client
from voicelane.client import say_to_file
result = say_to_file(sys.argv[1], sys.argv[2], "Hello from the SDK alone.", sys.argv[3])
loaded = sorted(n for n in sys.modules if n.split(".")[0] in {"celery", "fastapi", "redis", "boto3"}
                or n.startswith(("voicelane.core", "voicelane.api", "voicelane.workers")))
print(voicelane.client.__file__)
print(round(len(result.pcm) / result.sample_rate_hz, 2), ",".join(loaded) or "none")
"""


def test_the_sdk_alone_streams_from_a_running_stack(
    sdk_venv: Path, stack: Stack, tmp_path: Path
) -> None:
    assert not installed(sdk_venv) & (SERVER_ONLY | {"voicelane"})
    out = tmp_path / "hello.wav"
    done = subprocess.run(
        [str(sdk_venv), "-I", "-c", SPEAK, stack.grpc_target, ACME_KEY, str(out)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    where, figures = done.stdout.strip().splitlines()
    assert where.startswith(str(sdk_venv.parents[1]))  # the venv's copy, not this checkout
    seconds, loaded = figures.split()
    assert float(seconds) > 1.0 and loaded == "none"
    assert out.stat().st_size > 0
