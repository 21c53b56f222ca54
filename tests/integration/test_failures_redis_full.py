"""The one error mapping (:func:`voicelane.api.failures.client_error`) against a real
redis-server at its ``maxmemory`` (``noeviction``): every form a refused write reaches the
fronts in — a plain command, a pipeline, a transaction, a Lua script's write, a Lua script
that wraps the refusal in its own error — is 503 ``store_full`` with a retry hint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support.redis import fill_to_maxmemory
from voicelane.api.failures import FULL_RETRY_S, client_error
from voicelane.common.errors import StoreFullError
from voicelane.core.redis_server import RedisServer

pytestmark = pytest.mark.integration

WRAPPING_SCRIPT = """
local reply = redis.pcall('SET', KEYS[1], 'v')
if type(reply) == 'table' and reply.err then
  return redis.error_reply('wrapped: ' .. reply.err)
end
return reply
"""


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    server = RedisServer(
        Path(tmp_path_factory.mktemp("redis-full")), maxmemory_bytes=4 * 1024 * 1024
    ).start()
    client = redis.Redis.from_url(server.url)
    try:
        fill_to_maxmemory(client)
        yield client
    finally:
        client.close()
        server.stop()


def pipelined(client: redis.Redis, *, transaction: bool) -> list[Any]:
    pipeline = client.pipeline(transaction=transaction)
    pipeline.get("a")
    pipeline.set("a", "b")
    pipeline.incr("c")
    return pipeline.execute()


WRITES: dict[str, Callable[[redis.Redis], Any]] = {
    "command": lambda r: r.xadd("s", {"a": "b"}),
    "pipeline": lambda r: pipelined(r, transaction=False),
    "transaction": lambda r: pipelined(r, transaction=True),
    "script write": lambda r: r.eval(
        "redis.call('GET', KEYS[1]); redis.call('SET', KEYS[1], 1)", 1, "k"
    ),
    "script wraps the refusal": lambda r: r.eval(WRAPPING_SCRIPT, 1, "k"),
}


@pytest.mark.parametrize("write", list(WRITES), ids=list(WRITES))
def test_a_refused_write_is_store_full_however_it_arrives(full: redis.Redis, write: str) -> None:
    with pytest.raises(redis.RedisError) as refused:
        WRITES[write](full)
    error = client_error(refused.value, where=write)
    assert isinstance(error, StoreFullError), (type(refused.value), str(refused.value), error)
    assert error.retry_after_s == FULL_RETRY_S
