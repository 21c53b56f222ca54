"""``voicelane up``: the whole stack on this machine, one command; Ctrl-C stops it all.

Starts Redis (unless one already answers at ``VOICELANE_REDIS_URL``), the render workers of
each engine served (``--engines`` / ``VOICELANE_ENGINES``; engine + batcher + its render queue +
real-time consumer each: one per CPU core for a CPU engine such as espeak — the cores divided
between the CPU engines served — one for a GPU engine; ``VOICELANE_RENDER_WORKERS``
overrides), a CPU worker (``control,assemble`` + reconciler), a callback worker
(``callbacks``: job callbacks, apart from planning), the REST API, the gRPC front, the Wyoming
server (when it has a tenant: ``VOICELANE_WYOMING_API_KEY``, or dev mode) and Flower, each as a
child process, prints where each listens once all answer, and stops them all
(children in reverse order, then the Redis it started) on Ctrl-C or SIGTERM. State (Redis
AOF, local storage) lives in ``--state-dir`` (default ``.voicelane/``).

Until then it supervises: a child that exits is restarted with the same command and
environment after a backoff (1 s, doubling to at most 30 s; back to 1 s once it stayed up
60 s) while the others keep serving, and so is the Redis it started (same data directory and
port: it replays its AOF and clients reconnect). Each restart is one line on stdout and in
``logs/supervisor.log``; ``{state_dir}/children.json`` says who runs (pid, restarts, since).

Without ``VOICELANE_API_KEYS`` the stack runs in dev mode: API key ``demo-key`` (tenant
``demo``) and Flower login ``admin:admin``, printed at start. Never expose a dev-mode stack.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import httpx

from voicelane.api.flower import basic_auth
from voicelane.api.wyoming_wire import wyoming_serving
from voicelane.common.errors import VoicelaneError
from voicelane.core.engines import DEFAULT_STACK_ENGINES, engine_installed
from voicelane.core.redis_server import RedisServer, redis_answers
from voicelane.core.settings.processes import StackSettings, cpu_cores

BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
STABLE_AFTER_S = 60.0
"""A process that stayed up this long gets the first backoff again when it next exits."""
READY_TIMEOUT_S = 60.0
TICK_S = 0.2
CHILDREN_FILE = "children.json"


def describe_exit(status: int) -> str:
    """``exited with 3`` or ``killed by SIGKILL`` (Popen's negative return codes)."""
    if status >= 0:
        return f"exited with {status}"
    try:
        return f"killed by {signal.Signals(-status).name}"
    except ValueError:
        return f"killed by signal {-status}"


class Supervised(ABC):
    """A process ``up`` keeps running: after it exits (while the stack is not stopping) it
    is started again once its backoff has passed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.restarts = 0
        self.since = 0.0
        """Wall clock (unix seconds) of the last start."""
        self.restart_at: float | None = None
        """Monotonic time its restart is due; None while it runs."""
        self._started = 0.0
        self._backoff_s = BACKOFF_FIRST_S

    @property
    @abstractmethod
    def pid(self) -> int | None: ...

    @abstractmethod
    def exit_status(self) -> int | None:
        """Its exit status once it exited (reaping it), None while it runs."""

    @abstractmethod
    def _launch(self) -> None: ...

    def start(self) -> None:
        self._started, self.since = time.monotonic(), time.time()
        self._launch()

    def restart(self) -> None:
        self.restart_at = None
        self.restarts += 1
        self.start()

    def schedule_restart(self) -> float:
        """Marks it down; returns the seconds until its restart (the backoff)."""
        now = time.monotonic()
        if now - self._started >= STABLE_AFTER_S:
            self._backoff_s = BACKOFF_FIRST_S
        delay = self._backoff_s
        self._backoff_s = min(2 * delay, BACKOFF_MAX_S)
        self.restart_at = now + delay
        return delay

    def state(self) -> dict[str, object]:
        pid = self.pid if self.restart_at is None else None
        return {"pid": pid, "restarts": self.restarts, "since": round(self.since, 3)}


class Child(Supervised):
    """``python -m voicelane.api.cli ARGS`` in its own session (Ctrl-C reaches ``up`` only, which
    stops the children in order); a restart runs the same command with the same environment."""

    def __init__(
        self,
        name: str,
        args: list[str],
        where: str,
        env: dict[str, str],
        log_dir: Path,
        *,
        module: str = "voicelane.api.cli",
        cwd: Path | None = None,
    ) -> None:
        super().__init__(name)
        self.where = where
        self.args = args
        self.module = module
        self.cwd = cwd
        self.env = env
        self.log = log_dir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def exit_status(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    def _launch(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", self.module, *self.args],
                env=self.env,
                cwd=self.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def terminate(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, deadline: float) -> None:
        """Until it exited; SIGKILL past ``deadline`` (monotonic)."""
        if self.process is None:
            return
        try:
            self.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class SupervisedRedis(Supervised):
    """The Redis ``up`` started: restarted from the same data directory and port, so it
    replays its AOF and its clients reconnect."""

    def __init__(self, server: RedisServer) -> None:
        super().__init__("redis")
        self.server = server

    @property
    def pid(self) -> int | None:
        return self.server.pid

    def exit_status(self) -> int | None:
        return self.server.returncode

    def _launch(self) -> None:
        self.server.start()


@dataclass
class Supervisor:
    """Restarts what exits, reports each restart, keeps ``children.json`` current."""

    state_dir: Path
    log_dir: Path
    redis: SupervisedRedis | None = None
    children: list[Child] = field(default_factory=list)

    @property
    def procs(self) -> list[Supervised]:
        return [*([self.redis] if self.redis else []), *self.children]

    def tend(self) -> None:
        """One pass: reap what exited and schedule its restart; restart what is due."""
        changed = [self._tend(proc) for proc in self.procs]
        if any(changed):
            self.write_state()

    def _tend(self, proc: Supervised) -> bool:
        if proc.restart_at is None:
            status = proc.exit_status()
            if status is None:
                return False
            self._down(proc, describe_exit(status))
            return True
        if time.monotonic() < proc.restart_at:
            return False
        try:
            proc.restart()
        except (OSError, VoicelaneError) as error:
            self._down(proc, f"did not start ({error})")
        return True

    def _down(self, proc: Supervised, why: str) -> None:
        delay = proc.schedule_restart()
        self.report(f"{proc.name} {why}; restart {proc.restarts + 1} in {delay:g} s")

    def report(self, line: str) -> None:
        print(line, flush=True)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with (self.log_dir / "supervisor.log").open("a") as log:
            log.write(f"{stamp} {line}\n")

    def write_state(self) -> None:
        """``children.json``, atomically (a reader sees the old file or the new one)."""
        state: dict[str, object] = {"redis": None}
        state.update({proc.name: proc.state() for proc in self.procs})
        path = self.state_dir / CHILDREN_FILE
        temporary = path.with_name(f".{CHILDREN_FILE}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(state, indent=2) + "\n")
        os.replace(temporary, path)

    def stop(self, timeout_s: float = 20.0) -> None:
        """Children in reverse order (SIGTERM, SIGKILL past the deadline), then Redis."""
        for child in reversed(self.children):
            child.terminate()
        deadline = time.monotonic() + timeout_s
        for child in reversed(self.children):
            child.wait(deadline)
        if self.redis is not None:
            self.redis.server.stop()
        (self.state_dir / CHILDREN_FILE).unlink(missing_ok=True)


def _link_secret(state_dir: Path) -> str:
    """The local backend's link-signing secret: made once, kept in the state directory so
    links stay valid across restarts of the stack."""
    path = state_dir / "link-secret"
    if not path.exists():
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    return path.read_text().strip()


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


def stack_engines(settings: StackSettings) -> tuple[str, ...]:
    """The engines ``up`` serves: as configured (``--engines``, ``VOICELANE_ENGINES`` or
    ``VOICELANE_ENGINE``), else those of :data:`DEFAULT_STACK_ENGINES` that are installed."""
    if settings.engines.strip() or "engine" in settings.model_fields_set:
        return settings.served_engines()
    return tuple(name for name in DEFAULT_STACK_ENGINES if engine_installed(name))


def _engine_env(stack: StackSettings, engine: str) -> dict[str, str]:
    """What a render worker of ``engine`` is given beyond the stack's environment: Piper's ONNX
    Runtime one thread when its workers already take a core each (else each would start a
    thread per core, and they would fight over them); the operator's setting wins."""
    if engine != "piper" or "threads" in stack.piper.model_fields_set:
        return {}
    if stack.render_worker_count("piper") >= cpu_cores():
        return {"VOICELANE_PIPER__THREADS": "1"}
    return {}


def _worker_names(engine: str, count: int, engines: int) -> list[str]:
    """``gpu-worker`` / ``gpu-worker-2`` for a stack of one engine; ``piper-worker-1``... for
    several."""
    base = "gpu-worker" if engines == 1 else f"{engine}-worker"
    if count == 1 and engines == 1:
        return [base]
    return [f"{base}-{n}" for n in range(1, count + 1)]


def _ready(api: StackSettings, grpc_target: str, *, wyoming: bool = False) -> bool:
    """The API is ready, the gRPC front serves (and the Wyoming server, when ``up`` runs it)
    and a render worker of every engine reports real-time capacity."""
    import redis

    from voicelane.core.lane.worker import reporting_workers

    try:
        if httpx.get(f"http://{api.host}:{api.port}/readyz", timeout=1.0).status_code != 200:
            return False
    except httpx.HTTPError:
        return False
    client = redis.Redis.from_url(api.redis_url, socket_timeout=1.0)
    try:
        engines = api.served_engines()
        reporting = all(reporting_workers(client, engine) > 0 for engine in engines)
        if wyoming and not wyoming_serving(api.wyoming_host, api.wyoming_port):
            return False
        return reporting and grpc_serving(grpc_target)
    except redis.RedisError:
        return False
    finally:
        client.close()


def _environment(settings: StackSettings, state_dir: Path) -> dict[str, str]:
    """The children's environment: this process's, passed on whole (each child reads its own
    settings from it), plus what the stack decides for the settings the operator left unset —
    local storage in the state directory with a link secret kept there, links pointing at the
    API, dev mode without API keys. Written for the children; decided from ``settings``."""
    env = dict(os.environ)
    storage, local = settings.storage, settings.storage.local
    if "backend" not in storage.model_fields_set:
        env["VOICELANE_STORAGE__BACKEND"] = "local"
    if "root" not in local.model_fields_set:
        env["VOICELANE_STORAGE__LOCAL__ROOT"] = str(state_dir / "storage")
    if local.secret is None:
        env["VOICELANE_STORAGE__LOCAL__SECRET"] = _link_secret(state_dir)
    if "public_base_url" not in local.model_fields_set:
        env["VOICELANE_STORAGE__LOCAL__PUBLIC_BASE_URL"] = f"http://{settings.host}:{settings.port}"
    if not settings.api_keys:
        env["VOICELANE_DEV_MODE"] = "1"
    return env


def _own_redis(state_dir: Path, settings: StackSettings) -> SupervisedRedis | None:
    """A Redis of our own, unless one answers at the configured URL (then it is not ours to
    start, supervise or stop)."""
    parsed = urlparse(settings.redis_url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 6379
    if redis_answers(host, port):
        return None
    server = RedisServer(
        state_dir / "redis", host=host, port=port, maxmemory_bytes=settings.redis_maxmemory_bytes
    )
    return SupervisedRedis(server)


def _wyoming_tenant(settings: StackSettings) -> str | None:
    """The Wyoming server's tenant, or None when it has none (production keys without
    ``VOICELANE_WYOMING_API_KEY``: ``up`` runs the rest without it). A key that is not one of
    the API keys stops ``up`` at start."""
    from voicelane.api.wyoming_front import wyoming_tenant

    if settings.wyoming_api_key is None and settings.api_keys:
        return None
    return wyoming_tenant(settings)


WYOMING_SKIPPED = (
    "wyoming     not started: set VOICELANE_WYOMING_API_KEY (the API key whose tenant Home "
    "Assistant acts as; docs/integrations.md)"
)


def _banner(supervisor: Supervisor, redis_url: str, dev: bool, *, wyoming: bool = True) -> str:
    lines = [f"redis       {redis_url}{' (started here)' if supervisor.redis else ''}"]
    lines += [f"{child.name:11} {child.where}" for child in supervisor.children]
    if not wyoming:
        lines.append(WYOMING_SKIPPED)
    if dev:
        lines.append("dev mode: API key 'demo-key' (tenant demo), Flower login admin:admin")
    lines.append(f"restarted when they exit; who runs: {supervisor.state_dir / CHILDREN_FILE}")
    lines.append(f"logs in {supervisor.log_dir}; Ctrl-C stops everything")
    return "\n".join(lines)


def _serve(
    supervisor: Supervisor, ready: Callable[[], bool], banner: str, stopping: threading.Event
) -> None:
    """Supervise until ``stopping``; print ``banner`` once everything answers."""
    announced = warned = False
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not stopping.is_set():
        supervisor.tend()
        if not announced and ready():
            print(banner, flush=True)
            announced = True
        elif not (announced or warned) and time.monotonic() > deadline:
            print(f"not ready after {READY_TIMEOUT_S:g} s; still trying (see the logs)", flush=True)
            warned = True
        stopping.wait(TICK_S)


TARGETS_FILE = "prometheus-targets.json"
"""Prometheus file-SD list of every process's ``/metrics`` endpoint, in the state directory."""


def _target(address: str, process: str) -> dict[str, object]:
    return {"targets": [address], "labels": {"job": "voicelane", "process": process}}


def _write_targets(path: Path, targets: list[dict[str, object]]) -> None:
    """Written whole, then renamed: Prometheus never reads half a file."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(targets, indent=2) + "\n")
    partial.replace(path)


STANDIN_MODULE = "voicelane.api.ollama_standin"
"""The stand-in Ollama server (``up --llm-standin``): canned replies, no model, for demos."""


def _llm_standin(env: dict[str, str], settings: StackSettings, log_dir: Path) -> Child:
    """The stand-in Ollama server as a child, and the fronts' LLM settings pointed at it."""
    port = settings.llm_standin_port
    url = f"http://127.0.0.1:{port}"
    env["VOICELANE_LLM__HOST"] = url
    if "preload" not in settings.llm.model_fields_set:
        env["VOICELANE_LLM__PRELOAD"] = "1"
    where = f"{url} (stand-in Ollama: canned replies, no model)"
    return Child("llm-standin", ["--port", str(port)], where, env, log_dir, module=STANDIN_MODULE)


LOCAL_LLM_MODULE = "voicelane.api.llm_local"
"""The local LLM (``up --llm local``): llama.cpp's server with SmolLM2-135M-Instruct."""


def _llm_local(env: dict[str, str], settings: StackSettings, log_dir: Path) -> Child:
    """The local LLM server as a child, and the fronts' LLM settings pointed at it (the
    ``openai`` backend; its model; preloaded unless the operator said otherwise)."""
    from voicelane.api.llm_local import DEFAULT_ALIAS

    llm = settings.llm
    port = settings.llm_local_port
    url = f"http://127.0.0.1:{port}/v1"
    env.update(
        VOICELANE_LLM__BACKEND="openai", VOICELANE_LLM__BASE_URL=url,
        VOICELANE_LLM__MODEL=DEFAULT_ALIAS,
    )  # fmt: skip
    if "preload" not in llm.model_fields_set:
        env["VOICELANE_LLM__PRELOAD"] = "1"
    args = [
        "--port", str(port), "--threads", str(settings.llm_local_threads),
        "--ctx", str(llm.num_ctx), "--parallel", str(llm.max_parallel),
        "--max-tokens", str(llm.max_reply_tokens or llm.reply_reserve_tokens),
    ]  # fmt: skip
    where = f"{url} (llama.cpp, {DEFAULT_ALIAS}, {settings.llm_local_threads} threads)"
    return Child("llm-local", args, where, env, log_dir, module=LOCAL_LLM_MODULE)


def run_stack(
    settings: StackSettings,
    state_dir: Path,
    *,
    pidfile: Path | None = None,
    llm_standin: bool = False,
    llm_local: bool = False,
) -> int:
    """Run the stack that ``settings`` (the union of its children's settings, read once from
    this process's environment) describes, until SIGTERM/SIGINT."""
    state_dir = state_dir.resolve()
    log_dir = state_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = _environment(settings, state_dir)
    dev = not settings.api_keys
    stack = settings.model_copy(update={"dev_mode": True}) if dev else settings
    basic_auth(stack)  # a missing Flower login stops `up` now, saying what to set
    wyoming_tenant = _wyoming_tenant(stack)  # so does a Wyoming key that is nobody's
    grpc_target = f"{stack.grpc_host}:{stack.grpc_port}"
    wyoming_where = f"{stack.wyoming_host}:{stack.wyoming_port} (Wyoming, tenant {wyoming_tenant})"

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    if pidfile is not None:
        pidfile.write_text(str(os.getpid()))
    supervisor = Supervisor(state_dir, log_dir, redis=_own_redis(state_dir, stack))
    try:
        if supervisor.redis is not None:
            supervisor.redis.start()
        if llm_standin or llm_local:
            make = _llm_local if llm_local else _llm_standin
            llm_server = make(env, stack, log_dir)
            supervisor.children.append(llm_server)
            llm_server.start()
        engines = stack_engines(stack)
        stack = stack.model_copy(update={"engines": ",".join(engines)})
        env["VOICELANE_ENGINES"] = stack.engines
        render = [
            (name, ["worker"], f"queue render.{engine} ({engine} + batcher)", engine)
            for engine in engines
            for name in _worker_names(engine, stack.render_worker_count(engine), len(engines))
        ]
        metrics_port = stack.metrics_base_port
        targets = [_target(f"{stack.host}:{stack.port}", "api")]
        first = engines[0]
        for name, args, where, engine in (
            *render,
            (
                "cpu-worker",
                ["worker", "--queues", "control,assemble"],
                "queues control, assemble",
                first,
            ),
            ("callback-worker", ["worker", "--queues", "callbacks"], "queue callbacks", first),
            ("api", ["api"], f"http://{stack.host}:{stack.port} (OpenAPI: /docs)", first),
            ("grpc", ["grpc"], f"{grpc_target} (voicelane.v1.Speech)", first),
            *([("wyoming", ["wyoming"], wyoming_where, first)] if wyoming_tenant else []),
            ("flower", ["flower"], f"http://{stack.flower_host}:{stack.flower_port}", first),
        ):
            child_env = {**env, "VOICELANE_ENGINE": engine, **_engine_env(stack, engine)}
            if args[0] in ("worker", "grpc", "wyoming"):  # the API serves /metrics on its own port
                child_env["VOICELANE_METRICS_PORT"] = str(metrics_port)
                targets.append(_target(f"127.0.0.1:{metrics_port}", name))
                metrics_port += 1
            child = Child(name, args, where, child_env, log_dir)
            supervisor.children.append(child)
            child.start()
        # Flower's /metrics needs its login: scrape it with its own job (deploy/prometheus.yml).
        _write_targets(state_dir / TARGETS_FILE, targets)
        supervisor.write_state()
        wyoming = wyoming_tenant is not None
        banner = _banner(supervisor, stack.redis_url, dev, wyoming=wyoming)
        ready = functools.partial(_ready, stack, grpc_target, wyoming=wyoming)
        _serve(supervisor, ready, banner, stopping)
        return 0
    finally:
        supervisor.stop()
        if pidfile is not None:
            pidfile.unlink(missing_ok=True)
