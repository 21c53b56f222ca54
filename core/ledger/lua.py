"""The ledger's Lua scripts: ``.lua`` files beside these modules, read once, registered per
Redis client.

A script may start with libraries — files of ``local function``\\ s shared by several scripts
(``lock.lua``: the one lock; ``ending.lua``: what every final state does). They are prepended
to the script's own file, so each script stays one atomic ``EVALSHA``.
"""

from __future__ import annotations

import redis
from redis.commands.core import Script

from voicelane.core.lua import read_script

_PACKAGE = __name__.rpartition(".")[0]


def register(client: redis.Redis, name: str, *, libraries: tuple[str, ...] = ()) -> Script:
    """``{name}.lua`` after its ``libraries``, registered with ``client`` (redis-py loads it
    into Redis on first use and again after a Redis restart)."""
    parts = (read_script(_PACKAGE, f"{part}.lua") for part in (*libraries, name))
    return client.register_script("\n".join(parts))
