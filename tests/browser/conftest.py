"""Fixtures of the browser tests: a real stack (redis-server, an espeak render worker with its
real-time consumer, a CPU worker, the API, the stand-in Ollama) and one headless Chromium on
the playground, both for the whole module."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.chrome import BrowserLogs, axe_source, start_chromium
from tests.support.stack import Stack
from voicelane.api.ollama_standin import OllamaStandin, StandinConfig
from voicelane.core.redis_server import RedisServer

MODEL = "qwen2.5:7b"


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The screenshots' folder, under pytest's kept base temp folder (its path is printed)."""
    folder = tmp_path_factory.getbasetemp() / "playground"
    folder.mkdir(exist_ok=True)
    print(f"\nplayground screenshots: {folder}", file=sys.stderr)
    return folder


@pytest.fixture(scope="module")
def standin() -> Iterator[OllamaStandin]:
    with OllamaStandin(StandinConfig(tokens_per_s=60)) as server:
        yield server


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, standin: OllamaStandin) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("browser-stack")
    redis_server = RedisServer(directory / "redis").start()
    stack = Stack(
        directory / "stack",
        redis_server.url,
        env_overrides={"OLLAMA_HOST": standin.url, "VOICELANE_LLM__MODEL": MODEL},
    )
    try:
        stack.gpu_worker()
        stack.cpu_worker()
        stack.wait_realtime_workers()
        stack.api()
        yield stack
    except BaseException:
        print(stack.logs(), file=sys.stderr)
        raise
    finally:
        stack.stop()
        redis_server.stop()


@pytest.fixture(scope="module")
def axe() -> str:
    return axe_source()


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    """Asked for before the stack, so a missing browser skips before anything starts."""
    browser = start_chromium()
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture(scope="module")
def logs(driver: Any) -> BrowserLogs:
    return BrowserLogs(driver)
