"""``voicelane up``: the whole stack on this machine, one command; Ctrl-C stops it all.

Starts Redis (unless one already answers at ``VOICELANE_REDIS_URL``), a GPU worker (engine +
batcher + ``render`` queue + real-time consumer), a CPU worker (``control,assemble`` +
reconciler), the REST API, the gRPC front and Flower, each as a child process, prints where
each listens, and stops them all (children first, then the Redis it started) on Ctrl-C or
SIGTERM. State (Redis AOF, local storage)
lives in ``--state-dir`` (default ``.voicelane/``).

Without ``VOICELANE_API_KEYS`` the stack runs in dev mode: API key ``demo-key`` (tenant
``demo``) and Flower login ``admin:admin``, printed at start. Never expose a dev-mode stack.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import httpx

from core.redis_server import RedisServer, redis_answers
from core.settings import ApiSettings, FlowerSettings, GrpcSettings


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    where: str


def _spawn(
    name: str, args: list[str], env: dict[str, str], log_dir: Path
) -> subprocess.Popen[bytes]:
    log = (log_dir / f"{name}.log").open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "api.cli", *args],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # Ctrl-C reaches us; we stop the children in order
    )


def _link_secret(state_dir: Path) -> str:
    """The local backend's link-signing secret: made once, kept in the state directory so
    links stay valid across restarts of the stack."""
    path = state_dir / "link-secret"
    if not path.exists():
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    return path.read_text().strip()


def _wait_ready(url: str, timeout_s: float, children: list[Child]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for child in children:
            if child.process.poll() is not None:
                raise RuntimeError(f"{child.name} exited with {child.process.returncode}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {timeout_s:.0f} s")


def grpc_serving(target: str) -> bool:
    """Whether the gRPC front at ``target`` answers its health check with SERVING."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(  # type: ignore[attr-defined]
                health_pb2.HealthCheckRequest(service=""), timeout=1
            )
        except grpc.RpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def _wait_realtime(
    redis_url: str, grpc_target: str, timeout_s: float, children: list[Child]
) -> None:
    """Until the gRPC front serves and a GPU worker reports real-time capacity."""
    import redis

    from core.realtime_lane import reporting_workers

    client = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            for child in children:
                if child.process.poll() is not None:
                    raise RuntimeError(f"{child.name} exited with {child.process.returncode}")
            if reporting_workers(client) > 0 and grpc_serving(grpc_target):
                return
            time.sleep(0.2)
    finally:
        client.close()
    raise RuntimeError(f"the real-time lane was not ready after {timeout_s:.0f} s")


def _stop(children: list[Child], timeout_s: float = 20.0) -> None:
    for child in reversed(children):
        if child.process.poll() is None:
            child.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for child in reversed(children):
        try:
            child.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait()


def run_stack(state_dir: Path, *, pidfile: Path | None = None) -> int:
    state_dir = state_dir.resolve()
    log_dir = state_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("VOICELANE_STORAGE_BACKEND", "local")
    env.setdefault("VOICELANE_STORAGE_LOCAL__ROOT", str(state_dir / "storage"))
    if "VOICELANE_STORAGE_LOCAL__SECRET" not in env:
        env["VOICELANE_STORAGE_LOCAL__SECRET"] = _link_secret(state_dir)
    dev = not env.get("VOICELANE_API_KEYS")
    if dev:
        env["VOICELANE_DEV_MODE"] = "1"
    os.environ.update({k: v for k, v in env.items() if k.startswith("VOICELANE_")})
    api = ApiSettings()
    flower = FlowerSettings()
    grpc = GrpcSettings()
    env.setdefault("VOICELANE_STORAGE_LOCAL__PUBLIC_BASE_URL", f"http://{api.host}:{api.port}")

    redis_server: RedisServer | None = None
    parsed = urlparse(api.redis_url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 6379
    if not redis_answers(host, port):
        redis_server = RedisServer(state_dir / "redis", host=host, port=port).start()
    children: list[Child] = []
    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if pidfile is not None:
        pidfile.write_text(str(os.getpid()))
    try:
        for name, args, where in (
            ("gpu-worker", ["worker"], "queue render (engine + batcher)"),
            ("cpu-worker", ["worker", "--queues", "control,assemble"], "queues control, assemble"),
            ("api", ["api"], f"http://{api.host}:{api.port} (OpenAPI: /docs)"),
            ("grpc", ["grpc"], f"{grpc.grpc_host}:{grpc.grpc_port} (voicelane.v1.Speech)"),
            ("flower", ["flower"], f"http://{flower.flower_host}:{flower.flower_port}"),
        ):
            children.append(Child(name, _spawn(name, args, env, log_dir), where))
        _wait_ready(f"http://{api.host}:{api.port}/readyz", 60, children)
        _wait_realtime(api.redis_url, f"{grpc.grpc_host}:{grpc.grpc_port}", 60, children)
        print(f"redis       {api.redis_url}{' (started here)' if redis_server else ''}")
        for child in children:
            print(f"{child.name:11} {child.where}")
        if dev:
            print("dev mode: API key 'demo-key' (tenant demo), Flower login admin:admin")
        print(f"logs in {log_dir}; Ctrl-C stops everything", flush=True)
        while not stopping:
            for child in children:
                if child.process.poll() is not None:
                    print(f"{child.name} exited with {child.process.returncode}; stopping")
                    stopping = True
            time.sleep(0.5)
        return 0
    finally:
        _stop(children)
        if redis_server is not None:
            redis_server.stop()
        if pidfile is not None:
            pidfile.unlink(missing_ok=True)
