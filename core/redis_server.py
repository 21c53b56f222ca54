"""Run Debian's ``redis-server`` the way voicelane needs it: AOF on, ``noeviction``, loopback.

Used by ``voicelane up`` (when no Redis answers at the configured URL), ``voicelane redis``
and the integration tests, which start their own server on a free port and stop it. The
server runs as a child process (not daemonised), so stopping it is a signal and a wait; its
data directory survives a restart, which is how the tests check that the AOF keeps queued
jobs.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from voicelane.common.errors import RedisServerError


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def redis_answers(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """True if something at host:port answers PING with PONG."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` child process with an append-only file in ``data_dir``."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        password: str | None = None,
        executable: str = "redis-server",
        maxmemory_bytes: int | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port or free_port()
        self.password = password
        self.executable = executable
        self.maxmemory_bytes = maxmemory_bytes
        """Redis's memory budget: past it, writes are refused (``noeviction``): new work is
        turned away with a clear error, job state is never evicted."""
        self.extra_args = extra_args
        """More ``redis-server`` arguments (a replica's ``--replicaof HOST PORT``)."""
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}{self.host}:{self.port}/0"

    def command(self) -> list[str]:
        binary = shutil.which(self.executable)
        if binary is None:
            raise RedisServerError(
                f"{self.executable} not found; run `make install` (Debian package redis-server)"
            )
        args = [
            binary,
            "--bind", self.host,
            "--port", str(self.port),
            "--dir", str(self.data_dir),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--maxmemory-policy", "noeviction",
            "--save", "",
            "--daemonize", "no",
            "--protected-mode", "yes" if not self.password else "no",
            "--logfile", str(self.data_dir / "redis.log"),
        ]  # fmt: skip
        if self.password:
            args += ["--requirepass", self.password]
        if self.maxmemory_bytes is not None:
            args += ["--maxmemory", str(self.maxmemory_bytes)]
        return args + list(self.extra_args)

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._process = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout_s
        while not redis_answers(self.host, self.port):
            if self._process.poll() is not None:
                raise RedisServerError(
                    f"redis-server exited with {self._process.returncode}; "
                    f"see {self.data_dir / 'redis.log'}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RedisServerError(f"redis-server did not answer within {timeout_s} s")
            time.sleep(0.02)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM: Redis flushes the AOF and exits; SIGKILL if it does not in time."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """SIGKILL: no AOF flush, no goodbye to replicas — a crashed machine."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self.running and self._process is not None else None

    @property
    def returncode(self) -> int | None:
        """Its exit status once it exited (reaping it); None while it runs or before start."""
        return self._process.poll() if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
