"""The one Redis client factory: a URL or sentinels, and which writes wait for a replica."""

from __future__ import annotations

import pytest
import redis
import redis.asyncio as aredis

from voicelane.common.errors import ConfigError
from voicelane.core.redis_clients import (
    AckedRedis,
    AsyncAckedRedis,
    UnreplicatedWriteError,
    async_client,
    celery_broker,
    describe,
    is_write,
    sync_client,
)
from voicelane.core.redis_target import RedisTarget, parse_sentinels
from voicelane.core.settings import RedisSettings, WorkerSettings

SENTINELS = (("10.0.0.1", 26379), ("10.0.0.2", 26380))


def test_sentinels_parse_and_bad_ones_are_refused_with_their_text() -> None:
    assert parse_sentinels(" 10.0.0.1:26379, 10.0.0.2:26380 ,") == SENTINELS
    assert parse_sentinels("") == ()
    for bad in ("10.0.0.1", "10.0.0.1:http", ":26379", "h:70000"):
        with pytest.raises(ConfigError, match="redis_sentinels"):
            parse_sentinels(bad)


def test_settings_build_the_target_and_refuse_bad_sentinels() -> None:
    settings = WorkerSettings(
        redis_url="redis://:pw@ignored:1/3",
        redis_sentinels="10.0.0.1:26379,10.0.0.2:26380",
        redis_master_name="vl",
    )
    target = settings.redis_target()
    assert target.sentinels == SENTINELS
    assert (target.master_name, target.password, target.db) == ("vl", "pw", 3)
    assert target.replica_acks == 1  # the fix is on by default
    assert not RedisSettings().redis_target().ha
    with pytest.raises(ValueError, match="not host:port"):
        WorkerSettings(redis_sentinels="nohost")


def test_a_url_gives_a_plain_client_sentinels_an_acked_one() -> None:
    assert type(sync_client("redis://127.0.0.1:1/0", socket_timeout_s=1)) is redis.Redis
    target = RedisTarget(url="redis://:pw@x/2", sentinels=SENTINELS, replica_acks=2)
    client = sync_client(target, socket_timeout_s=1)
    assert isinstance(client, AckedRedis)
    assert (client.voicelane_replica_acks, client.voicelane_ack_timeout_ms) == (2, 1000)
    assert client.connection_pool.connection_kwargs["db"] == 2
    assert client.connection_pool.connection_kwargs["password"] == "pw"
    # The socket waits for the WAIT too.
    assert client.connection_pool.connection_kwargs["socket_timeout"] == 2.0
    off = sync_client(
        RedisTarget(url="redis://x/0", sentinels=SENTINELS, replica_acks=0), socket_timeout_s=1
    )
    assert type(off) is redis.Redis  # the fix switched off: redis-py's own client
    assert isinstance(async_client(target, socket_timeout_s=1), AsyncAckedRedis)
    assert type(async_client("redis://127.0.0.1:1/0", socket_timeout_s=1)) is aredis.Redis


def test_writes_wait_reads_do_not() -> None:
    for write in ("SET", "EVALSHA", "XADD", b"RPUSH", "INCR", "HSET", "DEL", "BLPOP"):
        assert is_write((write, "k"))
    for read in ("GET", "XREAD", "HGETALL", "PING", "WAIT", "SCRIPT LOAD", b"EVALSHA_RO"):
        assert not is_write((read, "k"))


def test_an_unreplicated_write_is_a_timeout_not_a_connection_error() -> None:
    # A timeout: the fronts answer 503 with a retry hint; never retried by the client as a
    # connection error would be (the write may have been applied).
    assert issubclass(UnreplicatedWriteError, redis.TimeoutError)
    assert not issubclass(UnreplicatedWriteError, redis.ConnectionError)


def test_celery_gets_one_sentinel_url_per_sentinel_and_the_master_name() -> None:
    assert celery_broker("redis://h:1/0") == ("redis://h:1/0", {})
    target = RedisTarget(url="redis://:pw@x/2", sentinels=SENTINELS, master_name="vl")
    url, options = celery_broker(target)
    assert url == "sentinel://:pw@10.0.0.1:26379/2;sentinel://:pw@10.0.0.2:26380/2"
    assert options == {"master_name": "vl"}


def test_descriptions_carry_no_password() -> None:
    assert describe("redis://:secret@h:7/1") == "redis://h:7/1"
    text = describe(RedisTarget(url="redis://:secret@x/0", sentinels=SENTINELS))
    assert text == "sentinel voicelane@10.0.0.1:26379,10.0.0.2:26380/0"
    assert "secret" not in text
