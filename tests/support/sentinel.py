"""Redis through Sentinel for tests: a primary, a replica and three sentinels on loopback.

Debian's ``redis-server`` runs as a sentinel with ``--sentinel`` (the ``redis-sentinel``
package adds only a service and a link to the same binary), so nothing beyond
``redis-server`` is needed. Every wait here watches the sentinels' (or the servers') own
view — who is the primary, who replicates from whom — polled, never a fixed sleep.

* :meth:`SentinelCluster.failover`: ``SENTINEL FAILOVER``; returns once all three sentinels
  name the new primary. The old primary is still a writable master then, until the sentinels
  demote it (about 10 s: their ``INFO`` period) — the stale-primary window.
* :meth:`SentinelCluster.kill_primary`: SIGKILL the primary; returns once the sentinels
  promoted the replica; the killed server is started again as a replica of the new primary
  (what a supervisor such as compose's ``restart: always`` does; the sentinels would convert
  it too, later).
* :meth:`SentinelCluster.wait_replicated`: until the primary has its replica online again
  and the sentinels see it healthy (a next failover has somewhere to go).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from tests.support.stack import wait_for
from voicelane.core.redis_server import RedisServer, free_port, redis_answers
from voicelane.core.redis_target import RedisTarget

T = TypeVar("T")
MASTER_NAME = "voicelane"
Address = tuple[str, int]
HOST = "127.0.0.1"


def wait_until(condition: Callable[[], T | None], timeout_s: float, what: str) -> T:
    """:func:`tests.support.stack.wait_for`, polling the cluster's servers every 50 ms."""
    return wait_for(condition, timeout_s, what, poll_s=0.05)


def _ask(port: int, *args: Any) -> Any:
    client = redis.Redis(HOST, port, socket_timeout=1.0, socket_connect_timeout=1.0)
    try:
        return client.execute_command(*args)  # type: ignore[no-untyped-call]
    finally:
        client.close()


class SentinelCluster:
    """``redis-server`` primary + ``replicas`` replicas, and three sentinels (quorum 2)."""

    def __init__(
        self,
        directory: Path,
        *,
        replicas: int = 1,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 3000,
    ) -> None:
        self.directory = directory
        self.replicas = replicas
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.last_switch_s = 0.0
        """The last failover's time: from the command (or the kill) until every sentinel
        names the new primary and it is one."""
        self.ports = [free_port() for _ in range(1 + replicas)]
        self.servers: dict[int, RedisServer] = {}
        self.sentinel_ports = [free_port() for _ in range(3)]
        self._sentinels: list[subprocess.Popen[bytes]] = []

    # -- what clients are given -------------------------------------------------------------
    @property
    def sentinels(self) -> str:
        """``VOICELANE_REDIS_SENTINELS``."""
        return ",".join(f"{HOST}:{port}" for port in self.sentinel_ports)

    @property
    def url(self) -> str:
        """``VOICELANE_REDIS_URL``: only its database (and password) count with sentinels."""
        return "redis://sentinel-managed/0"

    def target(self, *, replica_acks: int = 1, ack_timeout_ms: int = 1000) -> RedisTarget:
        return RedisTarget(
            url=self.url,
            sentinels=tuple((HOST, port) for port in self.sentinel_ports),
            master_name=MASTER_NAME,
            replica_acks=replica_acks,
            replica_ack_timeout_ms=ack_timeout_ms,
        )

    def env(self) -> dict[str, str]:
        """A stack's environment for these sentinels."""
        return {
            "VOICELANE_REDIS_URL": self.url,
            "VOICELANE_REDIS_SENTINELS": self.sentinels,
            "VOICELANE_REDIS_MASTER_NAME": MASTER_NAME,
        }

    # -- lifecycle ----------------------------------------------------------------------------
    def _server(self, port: int, *, replica_of: int | None = None) -> RedisServer:
        extra = ("--replicaof", HOST, str(replica_of)) if replica_of else ()
        server = RedisServer(self.directory / f"redis-{port}", port=port, extra_args=extra)
        self.servers[port] = server
        return server.start()

    def start(self) -> SentinelCluster:
        primary, *replicas = self.ports
        self._server(primary)
        for replica in replicas:
            self._server(replica, replica_of=primary)
            self._wait_link(replica)
        for port in self.sentinel_ports:
            self._start_sentinel(port, primary)
        self.wait_replicated()
        return self

    def _start_sentinel(self, port: int, primary: int) -> None:
        home = self.directory / f"sentinel-{port}"
        home.mkdir(parents=True, exist_ok=True)
        conf = home / "sentinel.conf"
        conf.write_text(
            f"port {port}\nbind {HOST}\ndaemonize no\ndir {home}\n"
            f"logfile {home / 'sentinel.log'}\n"
            f"sentinel monitor {MASTER_NAME} {HOST} {primary} 2\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {self.down_after_ms}\n"
            f"sentinel failover-timeout {MASTER_NAME} {self.failover_timeout_ms}\n"
            f"sentinel parallel-syncs {MASTER_NAME} 1\n"
        )
        process = subprocess.Popen(
            ["redis-server", str(conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._sentinels.append(process)
        wait_until(lambda: redis_answers(HOST, port), 10, f"sentinel :{port} to answer")

    def stop(self) -> None:
        for process in self._sentinels:
            if process.poll() is None:
                process.terminate()
                process.wait(10)
        for server in self.servers.values():
            server.stop()

    def __enter__(self) -> SentinelCluster:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # -- the sentinels' view ------------------------------------------------------------------
    def primary_seen_by(self, sentinel_port: int) -> Address | None:
        try:
            reply = _ask(sentinel_port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
        except redis.RedisError:
            return None
        return (reply[0].decode(), int(reply[1])) if reply else None

    def agreed_primary(self) -> Address | None:
        """The primary all three sentinels name, or None while they disagree."""
        seen = {self.primary_seen_by(port) for port in self.sentinel_ports}
        return seen.pop() if len(seen) == 1 and None not in seen else None

    @property
    def primary_port(self) -> int:
        return wait_until(self.agreed_primary, 30, "the sentinels to agree")[1]

    @property
    def replica_ports(self) -> list[int]:
        primary = self.primary_port
        return [port for port in self.ports if port != primary]

    def _wait_link(self, replica: int) -> None:
        def linked() -> bool:
            try:
                info = _ask(replica, "INFO", "replication")
            except redis.RedisError:
                return False
            return bool(info.get("role") == "slave" and info.get("master_link_status") == "up")

        wait_until(linked, 30, f"replica :{replica} to sync")

    def _sentinels_ready(self) -> bool:
        """Every sentinel knows the other two and sees one healthy replica of the primary."""
        primary = self.agreed_primary()
        if primary is None:
            return False
        for port in self.sentinel_ports:
            try:
                master = _pairs(_ask(port, "SENTINEL", "MASTER", MASTER_NAME))
                replicas = [_pairs(r) for r in _ask(port, "SENTINEL", "REPLICAS", MASTER_NAME)]
            except redis.RedisError:
                return False
            if int(master.get("num-other-sentinels", 0)) < 2:
                return False
            healthy = [
                r
                for r in replicas
                if r.get("flags") == "slave"
                and r.get("master-link-status") == "ok"
                and int(r.get("info-refresh", 10**9)) < 10_000
            ]
            if len(healthy) < self.replicas:
                return False
        return True

    def wait_replicated(self, timeout_s: float = 60.0) -> None:
        """Until the replicas follow the agreed primary and the sentinels see them healthy."""
        for replica in self.replica_ports:
            self._wait_link(replica)
        wait_until(self._sentinels_ready, timeout_s, "the sentinels to see a healthy replica")

    def role(self, port: int) -> str | None:
        try:
            reply = _ask(port, "ROLE")
        except redis.RedisError:
            return None
        return str(reply[0].decode())

    # -- chaos -------------------------------------------------------------------------------
    def failover(self, timeout_s: float = 30.0) -> tuple[int, int]:
        """``SENTINEL FAILOVER``: (old primary's port, new primary's port), once every
        sentinel names the new one. The old one stays a writable master for a while."""
        old = self.primary_port

        def started() -> bool:
            try:
                _ask(self.sentinel_ports[0], "SENTINEL", "FAILOVER", MASTER_NAME)
            except redis.ResponseError as error:  # NOGOODSLAVE / INPROG: not yet
                if "NOGOODSLAVE" in str(error) or "INPROG" in str(error):
                    return False
                raise
            return True

        wait_until(started, timeout_s, "the sentinel to accept a failover")
        begun = time.monotonic()
        new = self._wait_switch(old, timeout_s)
        self.last_switch_s = time.monotonic() - begun
        return old, new

    def kill_primary(self, timeout_s: float = 30.0) -> tuple[int, int]:
        """SIGKILL the primary; once the sentinels promoted the replica, start the killed
        server again as a replica of the new primary. (old port, new port)."""
        old = self.primary_port
        begun = time.monotonic()
        self.servers[old].kill()
        new = self._wait_switch(old, timeout_s)
        self.last_switch_s = time.monotonic() - begun
        self._server(old, replica_of=new)
        return old, new

    def _wait_switch(self, old: int, timeout_s: float) -> int:
        def switched() -> int | None:
            agreed = self.agreed_primary()
            return agreed[1] if agreed is not None and agreed[1] != old else None

        new = wait_until(switched, timeout_s, "the sentinels to name a new primary")
        wait_until(lambda: self.role(new) == "master", timeout_s, "the promotion")
        return new

    def wait_demoted(self, port: int, timeout_s: float = 40.0) -> None:
        """Until the server at ``port`` (an old primary) is a replica again."""
        wait_until(lambda: self.role(port) == "slave", timeout_s, f":{port} to be demoted")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pairs(reply: Any) -> dict[str, str]:
    """A sentinel's ``MASTER`` / ``REPLICAS`` entry (a map, or a flat list of pairs)."""
    if isinstance(reply, dict):
        return {_text(k): _text(v) for k, v in reply.items()}
    items = [_text(v) for v in reply]
    return dict(zip(items[::2], items[1::2], strict=True))


@pytest.fixture
def sentinel_cluster(tmp_path: Path) -> Iterator[SentinelCluster]:
    with SentinelCluster(tmp_path / "sentinel") as cluster:
        yield cluster
