"""kombu's Redis Sentinel transport with one crash fixed (kombu 5.7.0): Celery's broker
transport when voicelane runs through sentinels (``batch_lane.SENTINEL_TRANSPORT``).

When the primary dies under a Celery worker, the worker closes the broken connection twice.
The first close (``Connection.collect``) stops part-way — deleting the fanout queues needs the
dead primary — and then drops the transport's reference to its connection; the second close,
with the new primary named by then, gets further and restores the unacknowledged messages on a
fresh pool, whose parameters kombu reads from that dropped reference: ``AttributeError:
'NoneType' object has no attribute 'hostname'``, an "Unrecoverable error" that stops the
worker (measured in the chaos test: 3 of 5 SIGKILLs of the primary). This transport keeps
the reference (kombu drops it only to let it go early: the transport is discarded with the
connection anyway), so the messages are restored through the sentinels on the new primary and
the worker reconnects like after any lost connection.
"""

from __future__ import annotations

from typing import Any

from kombu.transport.redis import SentinelTransport


class Transport(SentinelTransport):  # type: ignore[misc]
    _kept_client: Any = None

    @property
    def client(self) -> Any:
        """The kombu ``Connection`` this transport serves; never cleared once set."""
        return self._kept_client

    @client.setter
    def client(self, value: Any) -> None:
        if value is not None:
            self._kept_client = value
