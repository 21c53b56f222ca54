"""Real processes of the batch lane for integration tests and benchmarks.

:class:`Stack` starts ``voicelane worker`` (GPU side and CPU side), ``voicelane api``,
``voicelane grpc``, ``voicelane wyoming`` and ``voicelane flower`` as child processes against a
given Redis and storage, waits until they answer, and stops (or SIGKILLs) them on request.
Logs go to files in the lane's directory and are printed when a test fails, so a failure says
what the processes did.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx

from voicelane.api.stack import grpc_serving
from voicelane.api.wyoming_wire import wyoming_serving
from voicelane.core.redis_server import free_port

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
API_KEYS = "acme:acme-key-0001,other:other-key-0002"
ACME_KEY = "acme-key-0001"
OTHER_KEY = "other-key-0002"


def wait_for(
    condition: Callable[[], T | None], timeout_s: float, what: str, *, poll_s: float = 0.02
) -> T:
    """Poll ``condition`` every ``poll_s`` until it returns something truthy; fail after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(poll_s)


@dataclass
class Proc:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no cleanup, no acks — a crashed machine."""
        if self.alive():
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self, timeout_s: float = 15.0) -> None:
        if not self.alive():
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def tail(self, lines: int = 40) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Stack:
    directory: Path
    redis_url: str
    env_overrides: dict[str, str] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
    api_port: int = 0
    flower_port: int = 0
    grpc_port: int = 0
    wyoming_port: int = 0
    prefix: list[str] = field(default_factory=list)
    """Prepended to every process's command: ``ip netns exec NAME`` runs the stack on another
    simulated host (``tests/support/netns.py``)."""
    address: str = "127.0.0.1"
    """Where the API and the gRPC front listen, and where the test reaches them."""

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOICELANE_")}
        env.update(
            {
                "PYTHONPATH": str(ROOT),
                "PYTHONUNBUFFERED": "1",
                "VOICELANE_REDIS_URL": self.redis_url,
                "VOICELANE_API_KEYS": API_KEYS,
                "VOICELANE_LEASE_TTL_S": "3",
                "VOICELANE_RECONCILE_INTERVAL_S": "0.5",
                "VOICELANE_STALL_TIMEOUT_S": "15",
                "VOICELANE_STORAGE__BACKEND": "local",
                "VOICELANE_STORAGE__LOCAL__ROOT": str(self.directory / "storage"),
                "VOICELANE_STORAGE__LOCAL__SECRET": "test-secret-not-for-production-0123456789",
                "VOICELANE_FLOWER_BASIC_AUTH": "watcher:flower-pass",
            }
        )
        env.update(self.env_overrides)
        return env

    def spawn(self, name: str, *args: str, extra_env: dict[str, str] | None = None) -> Proc:
        log = self.directory / f"{name}.log"
        self.directory.mkdir(parents=True, exist_ok=True)
        handle = log.open("ab")
        process = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "voicelane.api.cli", *args],
            env={**self.env, **(extra_env or {})},
            cwd=ROOT,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        proc = Proc(name, process, log)
        self.procs.append(proc)
        return proc

    def gpu_worker(
        self,
        name: str = "gpu",
        concurrency: int | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> Proc:
        threads = ["--concurrency", str(concurrency)] if concurrency else []
        return self.spawn(
            name, "worker", *threads, "--hostname", f"{name}@test", extra_env=extra_env
        )

    def cpu_worker(self, name: str = "cpu", extra_env: dict[str, str] | None = None) -> Proc:
        return self.spawn(
            name,
            "worker",
            "--queues",
            "control,assemble",
            "--hostname",
            f"{name}@test",
            extra_env=extra_env,
        )

    def callback_worker(
        self, name: str = "callbacks", extra_env: dict[str, str] | None = None
    ) -> Proc:
        """The worker of job callbacks (queue ``callbacks``), as ``voicelane up`` runs it."""
        return self.spawn(
            name, "worker", "--queues", "callbacks", "--hostname", f"{name}@test",
            extra_env=extra_env,
        )  # fmt: skip

    def api(self) -> Proc:
        self.api_port = free_port()
        proc = self.spawn(
            "api",
            "api",
            "--host",
            self.address,
            "--port",
            str(self.api_port),
            extra_env={"VOICELANE_STORAGE__LOCAL__PUBLIC_BASE_URL": self.api_url},
        )
        wait_for(lambda: self._ready(proc), 60, "the API to be ready")
        return proc

    def flower(self) -> Proc:
        self.flower_port = free_port()
        proc = self.spawn("flower", "flower", "--port", str(self.flower_port))

        def answers() -> bool:
            if not proc.alive():
                raise AssertionError(f"flower exited:\n{proc.tail()}")
            try:
                return httpx.get(f"{self.flower_url}/healthcheck", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(answers, 60, "Flower to answer")
        return proc

    def grpc(self, extra_env: dict[str, str] | None = None) -> Proc:
        """The gRPC front; ready once its health service answers SERVING."""
        self.grpc_port = free_port()
        proc = self.spawn(
            "grpc", "grpc", "--host", self.address, "--port", str(self.grpc_port),
            extra_env=extra_env,
        )  # fmt: skip

        def serving() -> bool:
            if not proc.alive():
                raise AssertionError(f"grpc exited:\n{proc.tail()}")
            return grpc_serving(self.grpc_target)

        wait_for(serving, 60, "the gRPC front to serve")
        return proc

    def wyoming(self, name: str = "wyoming", extra_env: dict[str, str] | None = None) -> Proc:
        """A Wyoming server (its port: :attr:`wyoming_port`, until the next one starts), acting
        as tenant ``acme`` unless ``extra_env`` sets another ``VOICELANE_WYOMING_API_KEY``;
        ready once it answers ``describe``."""
        self.wyoming_port = free_port()
        env = {"VOICELANE_WYOMING_API_KEY": ACME_KEY, **(extra_env or {})}
        proc = self.spawn(name, "wyoming", "--port", str(self.wyoming_port), extra_env=env)

        def serving() -> bool:
            if not proc.alive():
                raise AssertionError(f"wyoming exited:\n{proc.tail()}")
            return wyoming_serving("127.0.0.1", self.wyoming_port)

        wait_for(serving, 60, "the Wyoming server to answer")
        return proc

    def metered_processes(self) -> dict[str, int]:
        """A render worker, a CPU worker and the gRPC front, each serving its ``/metrics`` on
        a free port as ``voicelane up`` gives them one; their ports by the names ``up`` uses."""
        ports = {name: free_port() for name in ("gpu-worker", "cpu-worker", "grpc")}

        def metrics_on(name: str) -> dict[str, str]:
            return {"VOICELANE_METRICS_PORT": str(ports[name])}

        self.gpu_worker(extra_env=metrics_on("gpu-worker"))
        self.cpu_worker(extra_env=metrics_on("cpu-worker"))
        self.grpc(extra_env=metrics_on("grpc"))
        return ports

    def wait_realtime_workers(
        self, count: int = 1, timeout_s: float = 60, engine: str | None = None
    ) -> None:
        """Until ``count`` workers (of ``engine``; None: of any) report real-time capacity
        (their consumers run)."""
        import redis

        from voicelane.core.lane.worker import reporting_workers

        client = redis.Redis.from_url(self.redis_url)
        try:
            wait_for(
                lambda: reporting_workers(client, engine) >= count,
                timeout_s,
                f"real-time workers ({engine or 'any engine'})",
            )
        finally:
            client.close()

    @property
    def grpc_target(self) -> str:
        return f"{self.address}:{self.grpc_port}"

    @property
    def api_url(self) -> str:
        return f"http://{self.address}:{self.api_port}"

    @property
    def flower_url(self) -> str:
        return f"http://127.0.0.1:{self.flower_port}"

    def client(self, key: str = ACME_KEY) -> httpx.Client:
        return httpx.Client(
            base_url=self.api_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )

    def _ready(self, proc: Proc) -> bool:
        if not proc.alive():
            raise AssertionError(f"{proc.name} exited:\n{proc.tail()}")
        try:
            return httpx.get(f"{self.api_url}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()

    def logs(self) -> str:
        return "\n".join(f"----- {p.name} -----\n{p.tail()}" for p in self.procs)
