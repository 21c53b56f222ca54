"""The sentinel broker transport: Celery uses it with sentinels, and it keeps its connection
when kombu closes it (kombu 5.7 then restored a dead primary's unacknowledged messages from a
cleared reference, and the worker exited)."""

from __future__ import annotations

from celery import Celery

from voicelane.core.batch_lane import configure_celery
from voicelane.core.kombu_sentinel import Transport
from voicelane.core.settings import ServiceSettings


def app_for(settings: ServiceSettings) -> Celery:
    app = Celery("test")
    configure_celery(app, settings)
    return app


def test_celery_goes_through_the_fixed_transport_with_sentinels_even_after_a_switch() -> None:
    sentinels = ServiceSettings(
        redis_url="redis://:pw@any/2", redis_sentinels="127.0.0.1:26379,127.0.0.1:26380"
    )
    connection = app_for(sentinels).connection_for_write()
    try:
        assert isinstance(connection.transport, Transport)
        assert connection.alt == [
            "sentinel://:pw@127.0.0.1:26379/2",
            "sentinel://:pw@127.0.0.1:26380/2",
        ]
        # After a lost connection kombu moves on to the next URL and resolves its transport
        # from the URL's scheme again (a transport named only at construction was lost there).
        connection.maybe_switch_next()
        assert connection.port == 26380
        assert isinstance(connection.transport, Transport)
    finally:
        connection.release()
    plain = app_for(ServiceSettings(redis_url="redis://127.0.0.1:6379/0")).connection_for_write()
    try:
        assert not isinstance(plain.transport, Transport)
    finally:
        plain.release()


def test_the_transport_keeps_its_connection_when_kombu_closes_it() -> None:
    sentinels = ServiceSettings(redis_url="redis://any/0", redis_sentinels="127.0.0.1:26379")
    connection = app_for(sentinels).connection_for_write()
    transport = connection.transport
    connection.release()  # kombu sets transport.client = None here
    assert transport.client is connection
    assert transport.client.hostname  # what restoring unacked messages reads (a new pool)
