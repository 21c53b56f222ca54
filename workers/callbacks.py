"""The guarded HTTP client of job callbacks: it reaches public addresses only.

A callback URL is the tenant's; the worker sits on the operator's network. So the check of
where a callback goes happens at connect time, on the addresses the connection uses: the
network backend (:class:`GuardedBackend`, an ``httpcore`` backend under an ``httpx.Client``)
resolves the host itself, refuses the connection if ANY address is forbidden
(:func:`voicelane.core.callbacks.forbidden_reason`) unless the host or the address is in the
operator's allow-list, and then connects to one of those vetted addresses — never to a name that
could resolve differently a second time (DNS rebinding). Numeric spellings (``0x7f000001``,
``2130706433``, ``0177.0.0.1``) resolve to the address they spell and are judged by it. TLS
still verifies the original host name (httpcore passes it as SNI).

The client takes nothing from the environment (no proxies, no netrc), follows no redirects,
and never sends URL credentials (such URLs are refused). A refusal raises
:class:`~voicelane.common.errors.InvalidInputError` (permanent: the caller must not retry); anything
else that fails is an ``httpx`` error (transient).
"""

from __future__ import annotations

import socket
import time
import typing
from collections.abc import Callable, Sequence

import httpcore
import httpx

from voicelane.common.errors import InvalidInputError
from voicelane.core.callbacks import (
    JOB_ID_HEADER,
    SIGNATURE_HEADER,
    AllowList,
    IPAddress,
    addresses,
    check_callback_url,
    first_refusal,
    invalid_url,
    literal_ip,
    sign,
)

Resolver = Callable[[str, int], Sequence[IPAddress]]
"""``(host, port) -> addresses``; raises ``OSError`` when the host does not resolve."""


def system_resolver(host: str, port: int) -> list[IPAddress]:
    """The addresses ``getaddrinfo`` gives for ``host`` (an IP literal in any spelling is
    its own address)."""
    literal = literal_ip(host)
    if literal is not None:
        return [literal]
    return addresses(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))


class GuardedBackend(httpcore.SyncBackend):
    """An httpcore network backend that connects to vetted addresses only."""

    def __init__(self, allow: AllowList, resolver: Resolver = system_resolver) -> None:
        self.allow = allow
        self.resolver = resolver

    def vetted(self, host: str, port: int) -> list[IPAddress]:
        """The addresses of ``host``; raises InvalidInputError if any may not be reached."""
        try:
            found = list(self.resolver(host, port))
        except OSError as error:
            raise httpcore.ConnectError(f"cannot resolve {host}: {error}") from None
        if not found:
            raise httpcore.ConnectError(f"{host} resolves to no address")
        reason = first_refusal(host, found, self.allow)
        if reason is not None:
            raise InvalidInputError(reason, field="callback_url")
        return found

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        failure: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        options = list(socket_options or ())
        for ip in self.vetted(host, port):
            try:
                return super().connect_tcp(str(ip), port, timeout, local_address, options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                failure = error
        assert failure is not None
        raise failure

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("callbacks do not use unix sockets")


class GuardedTransport(httpx.HTTPTransport):
    """``httpx.HTTPTransport`` whose connection pool connects through a :class:`GuardedBackend`."""

    def __init__(self, backend: GuardedBackend) -> None:
        ssl_context = httpx.create_ssl_context(trust_env=False)
        super().__init__(verify=ssl_context, trust_env=False)
        self._pool = httpcore.ConnectionPool(ssl_context=ssl_context, network_backend=backend)


def callback_client(
    allow: AllowList, timeout_s: float, resolver: Resolver = system_resolver
) -> httpx.Client:
    """An ``httpx.Client`` for callbacks: guarded connections, no redirects, nothing taken
    from the environment."""
    return httpx.Client(
        transport=GuardedTransport(GuardedBackend(allow, resolver)),
        timeout=timeout_s,
        follow_redirects=False,
        trust_env=False,
    )


def post_callback(
    client: httpx.Client,
    url: str,
    body: bytes,
    *,
    secret: str,
    job_id: str,
    now: float | None = None,
) -> httpx.Response:
    """POST ``body`` (JSON) to ``url``, signed with ``secret``. Raises InvalidInputError when
    the URL or its destination is refused (permanent), ``httpx.HTTPError`` when it failed."""
    check_callback_url(url)
    timestamp = int(time.time() if now is None else now)
    headers = {
        "content-type": "application/json",
        "user-agent": "voicelane",
        SIGNATURE_HEADER: sign(secret, body, timestamp),
        JOB_ID_HEADER: job_id,
    }
    try:
        return client.post(url, content=body, headers=headers)
    except httpx.InvalidURL as error:  # httpx reads some hosts stricter (``0177.0.0.1``)
        raise invalid_url(error) from None
