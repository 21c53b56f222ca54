"""kombu's Redis Sentinel transport with one crash fixed (kombu 5.7.0): what ``sentinel://``
broker URLs mean in a voicelane process once :func:`register` ran (Celery's configuration
does it: :func:`voicelane.core.batch_lane.configure_celery`).

When the primary dies under a Celery worker, the worker closes the broken connection twice.
The first close (``Connection.collect``) stops part-way — deleting the fanout queues needs the
dead primary — and then drops the transport's reference to its connection; the second close,
with the new primary named by then, gets further and restores the unacknowledged messages on a
fresh pool, whose parameters kombu reads from that dropped reference: ``AttributeError:
'NoneType' object has no attribute 'hostname'``, an "Unrecoverable error" that stops the
worker (measured in the chaos test: 2-3 of 5 SIGKILLs of the primary). This transport keeps
the reference (kombu drops it only to let it go early: the transport is discarded with the
connection anyway), so the messages are restored through the sentinels on the new primary and
the worker reconnects like after any lost connection.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import TRANSPORT_ALIASES
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


def register() -> None:
    """``sentinel://`` means :class:`Transport` in this process. A scheme, not Celery's
    ``broker_transport``: kombu resolves the transport from the URL's scheme again whenever it
    moves on to the next sentinel's URL (``Connection.switch``, after a lost connection), so a
    transport named only at construction is gone after the first failover."""
    TRANSPORT_ALIASES["sentinel"] = f"{__name__}:Transport"
