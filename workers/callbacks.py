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
and never sends URL credentials (such URLs are refused). ``callback_timeout_s`` is a deadline
for the whole callback — connect, TLS, send, read — not a timeout per read (issue 26: a
receiver answering one byte every 2 s held a thread indefinitely): every network step gets at
most what is left of it, and a watchdog shuts the connection's socket when it runs out (a step
already blocked: a trickled TLS handshake). Name resolution is the one step it cannot cut.

A refusal raises :class:`~voicelane.common.errors.InvalidInputError` (permanent: the caller
must not retry); anything else that fails is an ``httpx`` error (transient).
"""

from __future__ import annotations

import contextlib
import contextvars
import socket
import threading
import time
import typing
from collections.abc import Callable, Iterator, Sequence

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


class Budget:
    """One callback's total time (:func:`post_callback`): each network step is given at most
    what is left of it, and at the deadline a watchdog shuts down the sockets it watches."""

    def __init__(self, total_s: float) -> None:
        self.total_s = total_s
        self.deadline = time.monotonic() + total_s
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(total_s, self._expire)
        self._timer.daemon = True

    @property
    def message(self) -> str:
        return f"the callback deadline of {self.total_s:g} s passed"

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def bound(self, timeout: float | None, late: type[Exception]) -> float:
        """``timeout`` cut to what is left; raises ``late`` (an httpcore timeout) when
        nothing is."""
        left = self.left_s()
        if left <= 0 or self.expired:
            raise late(self.message)
        return left if timeout is None else min(timeout, left)

    def watch(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            if self.expired:
                _shut(sock)
            elif sock not in self._sockets:
                self._sockets.append(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)

    def __enter__(self) -> Budget:
        self._timer.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._timer.cancel()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


_BUDGET: contextvars.ContextVar[Budget | None] = contextvars.ContextVar(
    "voicelane_callback_budget", default=None
)


@contextlib.contextmanager
def budget(total_s: float) -> Iterator[Budget]:
    """Run the network steps inside under one :class:`Budget` of ``total_s``."""
    with Budget(total_s) as current:
        token = _BUDGET.set(current)
        try:
            yield current
        finally:
            _BUDGET.reset(token)


class DeadlineStream(httpcore.NetworkStream):
    """A connection whose reads and writes wait no longer than the current budget allows."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self.inner = inner

    def _bound(self, timeout: float | None, late: type[Exception]) -> float | None:
        current = _BUDGET.get()
        if current is None:
            return timeout
        current.watch(self.inner.get_extra_info("socket"))
        return current.bound(timeout, late)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, self._bound(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, self._bound(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(
        self,
        ssl_context: typing.Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        bounded = self._bound(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self.inner.start_tls(ssl_context, server_hostname, bounded))

    def get_extra_info(self, info: str) -> typing.Any:
        return self.inner.get_extra_info(info)


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
            current = _BUDGET.get()
            if current is not None:
                timeout = current.bound(timeout, httpcore.ConnectTimeout)
            try:
                stream = super().connect_tcp(str(ip), port, timeout, local_address, options)
                return DeadlineStream(stream)
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
    deadline_s: float | None = None,
) -> httpx.Response:
    """POST ``body`` (JSON) to ``url``, signed with ``secret``, within ``deadline_s`` in all
    (default: the client's timeout, ``callback_timeout_s``). Raises InvalidInputError when
    the URL or its destination is refused (permanent), ``httpx.HTTPError`` when it failed
    (``httpx.TimeoutException`` when the deadline passed)."""
    check_callback_url(url)
    timestamp = int(time.time() if now is None else now)
    headers = {
        "content-type": "application/json",
        "user-agent": "voicelane",
        SIGNATURE_HEADER: sign(secret, body, timestamp),
        JOB_ID_HEADER: job_id,
    }
    total_s = deadline_s if deadline_s is not None else client.timeout.read
    with budget(total_s if total_s is not None else 30.0) as current:
        try:
            return client.post(url, content=body, headers=headers)
        except httpx.InvalidURL as error:  # httpx reads some hosts stricter (``0177.0.0.1``)
            raise invalid_url(error) from None
        except httpx.TransportError as error:
            if current.expired or current.left_s() <= 0:  # cut by the watchdog: say why
                raise httpx.TimeoutException(current.message, request=error.request) from None
            raise
