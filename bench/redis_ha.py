"""Benchmark: what a write costs when it waits for a replica (Redis through Sentinel).

A primary, a replica and three sentinels on loopback (``tests/support/sentinel.py``). One
client from voicelane's factory (``core/redis_clients.py``) writes ``--writes`` times, each
write timed: an ``INCR``, and a Lua script (``EVALSHA``, like a ledger commit), with
``redis_replica_acks`` 0 (redis-py's sentinel client as is: the stale-primary trap open) and
1 (every write followed by ``WAIT 1``, in the same round trip). Prints p50/p99 per write and
the ratio.

Run: ``.venv/bin/python bench/redis_ha.py [--writes 5000]``
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.tables import percentile
from tests.support.sentinel import SentinelCluster
from voicelane.core.redis_clients import sync_client

SCRIPT = "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]); return redis.call('HLEN', KEYS[1])"


def timed_writes(cluster: SentinelCluster, acks: int, writes: int) -> dict[str, list[float]]:
    client = sync_client(cluster.target(replica_acks=acks), socket_timeout_s=5.0)
    script = client.register_script(SCRIPT)
    times: dict[str, list[float]] = {"INCR": [], "EVALSHA": []}
    try:
        for n in range(writes):
            started = time.perf_counter()
            client.incr(f"bench:{acks}")
            times["INCR"].append(time.perf_counter() - started)
            started = time.perf_counter()
            script(keys=[f"bench:h:{acks}"], args=[n % 100, n])
            times["EVALSHA"].append(time.perf_counter() - started)
    finally:
        client.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root, SentinelCluster(Path(root)) as cluster:
        for acks in (0, 1):  # warm up: connections, the script loaded
            timed_writes(cluster, acks, 200)
        results = {acks: timed_writes(cluster, acks, args.writes) for acks in (0, 1)}
    print(f"{'command':8} {'acks':>4} {'p50 µs':>8} {'p99 µs':>8}")
    for command in ("INCR", "EVALSHA"):
        for acks, times in sorted(results.items()):
            values = times[command]
            p50, p99 = percentile(values, 0.5) * 1e6, percentile(values, 0.99) * 1e6
            print(f"{command:8} {acks:>4} {p50:8.0f} {p99:8.0f}")


if __name__ == "__main__":
    main()
