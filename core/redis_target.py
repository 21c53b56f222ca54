"""Where voicelane's Redis is: one server, or a primary that sentinels name (no Redis import:
the settings build a :class:`RedisTarget`; :mod:`voicelane.core.redis_clients` makes clients)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

from voicelane.common.errors import ConfigError

DEFAULT_MASTER_NAME = "voicelane"


@dataclass(frozen=True)
class RedisTarget:
    """Where voicelane's Redis is: one server (``url``), or the primary that ``sentinels``
    name ``master_name`` (``url`` then gives only the password and database)."""

    url: str
    sentinels: tuple[tuple[str, int], ...] = ()
    master_name: str = DEFAULT_MASTER_NAME
    replica_acks: int = 1
    """With sentinels: replicas each write waits for (``WAIT``); 0: none (the stale primary
    can lose acknowledged writes; the chaos test's "fix off")."""
    replica_ack_timeout_ms: int = 1000

    @property
    def ha(self) -> bool:
        return bool(self.sentinels)

    @property
    def password(self) -> str | None:
        return urlparse(self.url).password

    @property
    def db(self) -> int:
        path = urlparse(self.url).path.strip("/")
        return int(path) if path.isdigit() else 0


def parse_sentinels(text: str, *, field: str = "redis_sentinels") -> tuple[tuple[str, int], ...]:
    """``host:port,host:port`` → addresses; a clear error on anything else."""
    addresses: list[tuple[str, int]] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{field}: {item!r} is not host:port")
        addresses.append((host.strip("[]"), int(port)))
    return tuple(addresses)


def target_of(target: str | RedisTarget) -> RedisTarget:
    return target if isinstance(target, RedisTarget) else RedisTarget(url=target)
