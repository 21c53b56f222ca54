"""Redis clients as voicelane makes them: the one place a Redis client is built.

**Timeouts.** redis-py's default retries a failed command ten times with exponential
backoff, timeouts included: a paused Redis then holds a request for minutes, and a stale
pooled connection (after a Redis restart) costs a second of backoff. voicelane's clients
instead retry a command once, at once, and only after a *connection* error (the pool's
connection was closed under it: reconnect and go on); a timeout is not retried (Redis stopped
answering: the caller answers 503 / UNAVAILABLE now, with a retry hint).

**Sentinel.** A :class:`RedisTarget` with sentinels gives clients whose pool asks the
sentinels for the primary's address on every (re)connect (redis-py's
``SentinelConnectionPool``); a ``READONLY`` reply (the primary was demoted under a pooled
connection) is a connection error there, so the command is retried once on the new primary.

**The stale primary.** After a failover the old primary stays a writable master until the
sentinels demote it (seconds; ~10 s measured), and pooled connections keep writing to it:
every such write is lost when it is demoted and resynchronised from the new primary. With
``replica_acks`` > 0 every write command is followed, on the same connection and in the same
round trip, by ``WAIT replica_acks replica_ack_timeout_ms``: a write no replica acknowledged
raises :class:`UnreplicatedWriteError` (a ``redis.TimeoutError``: 503 / UNAVAILABLE with a
retry hint, never retried blindly — it may or may not have been applied) and drops the
connection, so the next one asks the sentinels again. What was acknowledged exists on a
replica, and a failover promotes the replica with the most data (docs/operations.md, "Redis
high availability").
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import redis
import redis.asyncio as aredis
import redis.asyncio.client as aredis_client
import redis.asyncio.sentinel as asentinel
import redis.client as redis_client
from redis import sentinel
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from voicelane.core.redis_target import RedisTarget, target_of

CONNECT_TIMEOUT_S = 5.0

_READ_COMMANDS = """
    AUTH BITCOUNT BITPOS CLIENT COMMAND CONFIG DBSIZE DUMP ECHO EVALSHA_RO EVAL_RO EXISTS
    EXPIRETIME FCALL_RO GEODIST GEOPOS GET GETBIT GETRANGE HELLO HEXISTS HGET HGETALL HKEYS HLEN
    HMGET HRANDFIELD HSCAN HSTRLEN HVALS INFO KEYS LASTSAVE LINDEX LLEN LOLWUT LPOS LRANGE MEMORY
    MGET OBJECT PEXPIRETIME PFCOUNT PING PTTL PUBSUB RANDOMKEY ROLE SCAN SCARD SCRIPT SDIFF SELECT
    SINTER SINTERCARD SISMEMBER SMEMBERS SMISMEMBER SRANDMEMBER SSCAN STRLEN SUBSTR SUNION TIME
    TOUCH TTL TYPE WAIT XINFO XLEN XPENDING XRANGE XREAD XREVRANGE ZCARD ZCOUNT ZDIFF ZINTER
    ZINTERCARD ZLEXCOUNT ZMSCORE ZRANDMEMBER ZRANGE ZRANGEBYLEX ZRANGEBYSCORE ZRANK ZREVRANGE
    ZREVRANGEBYLEX ZREVRANGEBYSCORE ZREVRANK ZSCAN ZSCORE ZUNION PUBLISH SUBSCRIBE UNSUBSCRIBE
    PSUBSCRIBE PUNSUBSCRIBE WATCH UNWATCH MULTI DISCARD
"""
READ_COMMANDS = frozenset(_READ_COMMANDS.split())
"""Commands that change no data (or nothing a failover keeps: ``PUBLISH``); every other
command (``EVALSHA`` included: the ledger's and lanes' scripts write) waits for a replica."""


class UnreplicatedWriteError(redis.TimeoutError):
    """A write no replica acknowledged in time: it may be on a primary that is about to be
    demoted (and lose it). Not acknowledged to anyone; the caller answers 503 / retries."""


def _wait_args(client: Any) -> tuple[int, int]:
    return client.voicelane_replica_acks, client.voicelane_ack_timeout_ms


def is_write(args: tuple[Any, ...]) -> bool:
    name = args[0]
    name = name.decode() if isinstance(name, bytes) else str(name)
    return name.split(" ")[0].upper() not in READ_COMMANDS


def _check_acks(conn: Any, acked: Any, wanted: int) -> None:
    if int(acked) < wanted:
        conn.disconnect()  # the next command asks the sentinels for the primary again
        raise UnreplicatedWriteError(
            f"write acknowledged by {acked} of {wanted} replica(s) in time: "
            "the primary may be stale or cut off; retry shortly"
        )


def _replica_refused(conn: Any, error: redis.ResponseError) -> UnreplicatedWriteError:
    """``WAIT`` on a server that is a replica now: the write was refused or is lost."""
    conn.disconnect()
    return UnreplicatedWriteError(f"the primary was demoted: {error}")


class AckedRedis(redis.Redis):
    """A sentinel-managed client whose writes wait for ``voicelane_replica_acks`` replicas."""

    voicelane_replica_acks = 1
    voicelane_ack_timeout_ms = 1000

    def _send_command_parse_response(
        self, conn: Any, command_name: Any, *args: Any, **options: Any
    ) -> Any:
        result = super()._send_command_parse_response(conn, command_name, *args, **options)  # type: ignore[no-untyped-call]
        if is_write(args):
            acks, timeout_ms = _wait_args(self)
            conn.send_command("WAIT", acks, timeout_ms)
            try:
                acked = conn.read_response()
            except redis.ResponseError as error:
                raise _replica_refused(conn, error) from error
            _check_acks(conn, acked, acks)
        return result

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> AckedPipeline:
        pipe = AckedPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        pipe.voicelane_replica_acks, pipe.voicelane_ack_timeout_ms = _wait_args(self)
        return pipe


class AckedPipeline(redis_client.Pipeline):
    """A pipeline (or MULTI/EXEC) of :class:`AckedRedis`: one ``WAIT`` after it if it wrote."""

    voicelane_replica_acks = 1
    voicelane_ack_timeout_ms = 1000

    def _acked(self, connection: Any, commands: Any) -> None:
        if any(is_write(args) for args, _ in commands):
            acks, timeout_ms = _wait_args(self)
            connection.send_command("WAIT", acks, timeout_ms)
            try:
                acked = connection.read_response()
            except redis.ResponseError as error:
                raise _replica_refused(connection, error) from error
            _check_acks(connection, acked, acks)

    def _execute_transaction(self, connection: Any, commands: Any, raise_on_error: Any) -> Any:
        result = super()._execute_transaction(connection, commands, raise_on_error)
        self._acked(connection, commands)
        return result

    def _execute_pipeline(self, connection: Any, commands: Any, raise_on_error: Any) -> Any:
        result = super()._execute_pipeline(connection, commands, raise_on_error)  # type: ignore[no-untyped-call]
        self._acked(connection, commands)
        return result


class AsyncAckedRedis(aredis.Redis):
    """:class:`AckedRedis` for asyncio (the fronts)."""

    voicelane_replica_acks = 1
    voicelane_ack_timeout_ms = 1000

    async def _send_command_parse_response(
        self, conn: Any, command_name: Any, *args: Any, **options: Any
    ) -> Any:
        result = await super()._send_command_parse_response(conn, command_name, *args, **options)  # type: ignore[no-untyped-call]
        if is_write(args):
            acks, timeout_ms = _wait_args(self)
            await conn.send_command("WAIT", acks, timeout_ms)
            try:
                acked = await conn.read_response()
            except redis.ResponseError as error:
                await conn.disconnect()
                raise UnreplicatedWriteError(f"the primary was demoted: {error}") from error
            await _check_acks_async(conn, acked, acks)
        return result

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> AsyncAckedPipeline:
        pipe = AsyncAckedPipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )
        pipe.voicelane_replica_acks, pipe.voicelane_ack_timeout_ms = _wait_args(self)
        return pipe


async def _check_acks_async(conn: Any, acked: Any, wanted: int) -> None:
    if int(acked) < wanted:
        await conn.disconnect()
        raise UnreplicatedWriteError(
            f"write acknowledged by {acked} of {wanted} replica(s) in time: "
            "the primary may be stale or cut off; retry shortly"
        )


class AsyncAckedPipeline(aredis_client.Pipeline):
    voicelane_replica_acks = 1
    voicelane_ack_timeout_ms = 1000

    async def _acked(self, connection: Any, commands: Any) -> None:
        if any(is_write(args) for args, _ in commands):
            acks, timeout_ms = _wait_args(self)
            await connection.send_command("WAIT", acks, timeout_ms)
            try:
                acked = await connection.read_response()
            except redis.ResponseError as error:
                await connection.disconnect()
                raise UnreplicatedWriteError(f"the primary was demoted: {error}") from error
            await _check_acks_async(connection, acked, acks)

    async def _execute_transaction(
        self, connection: Any, commands: Any, raise_on_error: Any
    ) -> Any:
        result = await super()._execute_transaction(connection, commands, raise_on_error)
        await self._acked(connection, commands)
        return result

    async def _execute_pipeline(self, connection: Any, commands: Any, raise_on_error: Any) -> Any:
        result = await super()._execute_pipeline(connection, commands, raise_on_error)
        await self._acked(connection, commands)
        return result


def _options(socket_timeout_s: float, target: RedisTarget) -> dict[str, Any]:
    ack_s = target.replica_ack_timeout_ms / 1000 if target.ha and target.replica_acks else 0.0
    return {
        "socket_timeout": socket_timeout_s + ack_s,
        "socket_connect_timeout": min(CONNECT_TIMEOUT_S, socket_timeout_s),
    }


def _primary_client(
    manager_class: Any,
    plain_class: Any,
    acked_class: Any,
    target: RedisTarget,
    *,
    retry: Any,
    options: dict[str, Any],
) -> Any:
    """The sentinels' primary as a client of ``plain_class``, or of ``acked_class`` (every
    write waits for ``target.replica_acks`` replicas) when it asks for acknowledgements."""
    manager = manager_class(
        list(target.sentinels),
        sentinel_kwargs={"socket_timeout": options["socket_connect_timeout"]},
        **options,
    )
    acked = target.replica_acks > 0
    client = manager.master_for(
        target.master_name,
        redis_class=acked_class if acked else plain_class,
        password=target.password,
        db=target.db,
        retry=retry,
    )
    if acked:
        client.voicelane_replica_acks = target.replica_acks
        client.voicelane_ack_timeout_ms = target.replica_ack_timeout_ms
    return client


def sync_client(target: str | RedisTarget, *, socket_timeout_s: float) -> redis.Redis:
    """A client of ``target`` (a URL: one server; a :class:`RedisTarget`: maybe sentinels)."""
    target = target_of(target)
    retry = Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,))
    options = _options(socket_timeout_s, target)
    if not target.ha:
        return redis.Redis.from_url(target.url, retry=retry, **options)
    client: redis.Redis = _primary_client(
        sentinel.Sentinel, redis.Redis, AckedRedis, target, retry=retry, options=options
    )
    return client


def async_client(target: str | RedisTarget, *, socket_timeout_s: float) -> aredis.Redis:
    """:func:`sync_client` for asyncio."""
    target = target_of(target)
    retry = AsyncRetry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,))
    options = _options(socket_timeout_s, target)
    if not target.ha:
        return aredis.Redis.from_url(target.url, retry=retry, **options)
    client: aredis.Redis = _primary_client(
        asentinel.Sentinel, aredis.Redis, AsyncAckedRedis, target, retry=retry, options=options
    )
    return client


def celery_broker(target: str | RedisTarget) -> tuple[str, dict[str, Any]]:
    """Celery's ``broker_url`` and the transport options it adds for ``target``: kombu's
    ``sentinel://`` transport (one URL per sentinel, ``master_name`` in the options)."""
    target = target_of(target)
    if not target.ha:
        return target.url, {}
    auth = f":{target.password}@" if target.password else ""
    urls = ";".join(
        f"sentinel://{auth}{host}:{port}/{target.db}" for host, port in target.sentinels
    )
    return urls, {"master_name": target.master_name}


def describe(target: str | RedisTarget) -> str:
    """``target`` for a banner or a log line, without its password."""
    target = target_of(target)
    parsed = urlparse(target.url)
    if not target.ha:
        host = parsed.hostname or "127.0.0.1"
        return f"redis://{host}:{parsed.port or 6379}/{target.db}"
    sentinels = ",".join(f"{host}:{port}" for host, port in target.sentinels)
    return f"sentinel {target.master_name}@{sentinels}/{target.db}"
