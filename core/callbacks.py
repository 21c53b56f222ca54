"""Job callbacks: which URLs and addresses they may reach, and how they are signed.

Pure functions (no network; stdlib and :mod:`voicelane.common.errors` only), shared by the REST
front (which checks a ``callback_url`` at submission) and the CPU worker (which vets every address
it connects to, :mod:`voicelane.workers.callbacks`).

**Destinations.** A callback goes to a public address only: :func:`forbidden_reason` names
what an address is when it is not one (loopback, private, link-local and cloud metadata,
shared, multicast, reserved, unspecified; IPv4 embedded in IPv6 — mapped, compatible, NAT64,
6to4 — is judged by its IPv4 address). The operator's allow-list (``callback_allow``,
:class:`AllowList`) names hosts and networks that may be reached all the same.

**Signatures.** Every callback carries ``x-voicelane-signature: t=<unix s>,v1=<hex>``, where
``<hex>`` is HMAC-SHA256 over ``f"{t}."`` followed by the body's bytes, keyed with the tenant's
secret (:func:`tenant_secret`, derived from the operator's master secret; a tenant reads it
at ``GET /v1/callbacks/secret``). A receiver recomputes it and compares in constant time,
and refuses a timestamp more than 5 minutes away from its clock (:func:`verify`: copy it).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from voicelane.common.errors import ConfigError, InvalidInputError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

SIGNATURE_HEADER = "x-voicelane-signature"
JOB_ID_HEADER = "x-voicelane-job-id"
SIGNATURE_SCHEME = "t=<unix>,v1=<hex hmac-sha256 of '<t>.<body>'>"
DEV_SIGNING_SECRET = "voicelane-dev-callback-secret-not-for-production"
"""The master secret in dev mode when ``callback_signing_secret`` is unset (documented, so
never secret: dev mode only)."""
MAX_URL_CHARS = 2048
DEFAULT_TOLERANCE_S = 300
_FIELD = "callback_url"
_TENANT_CONTEXT = b"voicelane-callback:"


# ---- URLs ---------------------------------------------------------------------------------


def check_callback_url(url: str) -> str:
    """``url`` if it may be a callback URL: http(s), a host, no credentials, no fragment, at
    most 2048 characters, no spaces or control characters. Raises
    :class:`~voicelane.common.errors.InvalidInputError` (``field="callback_url"``) otherwise. Where
    the host points is checked separately (:func:`refusal`), against its resolved addresses."""
    callback_destination(url)
    return url


def callback_destination(url: str) -> tuple[str, int]:
    """The host (lower case, no brackets) and port a checked callback URL connects to."""
    if len(url) > MAX_URL_CHARS:
        raise _invalid(f"callback_url is longer than {MAX_URL_CHARS} characters")
    if any(c <= " " or c in "\x7f\\" for c in url):
        raise _invalid("callback_url must not hold spaces, control characters or backslashes")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise invalid_url(error) from None
    if parts.scheme.lower() not in ("http", "https"):
        raise _invalid("callback_url must be an http:// or https:// URL")
    if "@" in parts.netloc:
        raise _invalid("callback_url must not carry credentials (user info before the host)")
    if "#" in url:
        raise _invalid("callback_url must not have a fragment (#...)")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise _invalid("callback_url has no host")
    if port == 0:
        raise _invalid("callback_url has port 0")
    return host, port or (443 if parts.scheme.lower() == "https" else 80)


def _invalid(message: str) -> InvalidInputError:
    return InvalidInputError(message, field=_FIELD)


def invalid_url(detail: object) -> InvalidInputError:
    """The error for a callback URL that cannot be parsed (here, or by the HTTP client)."""
    return _invalid(f"callback_url is not a valid URL: {detail}")


def literal_ip(host: str) -> IPAddress | None:
    """The address ``host`` spells, if it is an IP literal: ``::1``, ``[::1]``, ``10.0.0.1``
    and the spellings ``inet_aton`` takes too (``0x7f000001``, ``2130706433``,
    ``0177.0.0.1``, ``127.1``), which resolvers turn into addresses without asking DNS."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    if bare[:1].isdigit() and all(c in "0123456789abcdefxABCDEFX." for c in bare):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(bare))
        except OSError:
            return None
    return None


def addresses(infos: Iterable[tuple[Any, ...]]) -> list[IPAddress]:
    """The distinct addresses of ``socket.getaddrinfo`` results, in their order."""
    found: list[IPAddress] = []
    for info in infos:
        ip = ipaddress.ip_address(str(info[4][0]))
        if ip not in found:
            found.append(ip)
    return found


# ---- destinations ---------------------------------------------------------------------------


IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _nets(*pairs: tuple[str, str]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(net), why) for net, why in pairs)


_FORBIDDEN_V4 = _nets(
    ("0.0.0.0/8", "unspecified"),
    ("127.0.0.0/8", "loopback"),
    ("10.0.0.0/8", "private"),
    ("172.16.0.0/12", "private"),
    ("192.168.0.0/16", "private"),
    ("100.64.0.0/10", "shared (carrier-grade NAT)"),
    ("169.254.169.254/32", "link-local (cloud metadata)"),
    ("169.254.0.0/16", "link-local"),
    ("192.0.0.0/24", "reserved (IETF protocol assignments)"),
    ("192.0.2.0/24", "reserved (documentation)"),
    ("198.51.100.0/24", "reserved (documentation)"),
    ("203.0.113.0/24", "reserved (documentation)"),
    ("198.18.0.0/15", "reserved (benchmarking)"),
    ("192.88.99.0/24", "reserved (6to4 relay)"),
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "broadcast"),
    ("240.0.0.0/4", "reserved"),
)
_FORBIDDEN_V6 = _nets(
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("fd00:ec2::254/128", "unique local (cloud metadata)"),
    ("fc00::/7", "unique local (private)"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
    ("64:ff9b:1::/48", "reserved (local-use NAT64)"),
    ("100::/64", "reserved (discard-only)"),
    ("2001:db8::/32", "reserved (documentation)"),
    ("3fff::/20", "reserved (documentation)"),
    ("2001::/23", "reserved (IETF protocol assignments, Teredo)"),
)
_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
_COMPATIBLE = ipaddress.ip_network("::/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _embedded_v4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 address carries, and the form it carries it in."""
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _MAPPED:
        return low32, "IPv4-mapped"
    if ip in _TRANSLATED:
        return low32, "IPv4-translated"
    if ip in _COMPATIBLE and int(ip) > 1:
        return low32, "IPv4-compatible"
    if ip in _NAT64:
        return low32, "NAT64"
    if ip.sixtofour is not None:
        return ip.sixtofour, "6to4"
    return None


def forbidden_reason(ip: IPAddress) -> str | None:
    """What ``ip`` is when a callback may not connect to it (``"loopback"``, ``"private"``,
    ``"link-local (cloud metadata)"``, ``"loopback (IPv4-mapped IPv6)"``...); None for a
    public address."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_v4(ip)
        if embedded is not None:
            inner, form = embedded
            reason = forbidden_reason(inner)
            if reason is not None:
                return f"{reason} ({form} IPv6)"
            if form in ("IPv4-compatible", "IPv4-translated"):
                return f"reserved ({form} IPv6)"
            return None
        table = _FORBIDDEN_V6
    else:
        table = _FORBIDDEN_V4
    for network, reason in table:
        if ip in network:
            return reason
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        return "not globally routable"
    return None


@dataclass(frozen=True)
class AllowList:
    """Hosts (exact names, any case) and networks callbacks may reach even though they are
    not public: the operator's own receivers (``callback_allow``)."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, setting: str) -> AllowList:
        """``"hooks.internal, 10.1.2.0/24, 127.0.0.1, ::1"``: comma-separated host names,
        addresses and CIDR networks. Raises :class:`~voicelane.common.errors.ConfigError` for an
        entry that is neither."""
        hosts: set[str] = set()
        networks: list[IPNetwork] = []
        for raw in setting.split(","):
            entry = raw.strip().lower()
            if not entry:
                continue
            bare = entry[1:-1] if entry.startswith("[") and entry.endswith("]") else entry
            try:
                networks.append(ipaddress.ip_network(bare, strict=False))
                continue
            except ValueError:
                pass
            name = bare.rstrip(".")
            if not name or "/" in name or any(not (c.isalnum() or c in "-._") for c in name):
                raise ConfigError(
                    f"callback_allow: {raw.strip()!r} is neither a host name nor a network"
                )
            hosts.add(name)
        return cls(frozenset(hosts), tuple(networks))

    def allows(self, host: str, ip: IPAddress) -> bool:
        """Whether the operator allows ``host`` (by name), or the address it resolved to."""
        if host.lower().rstrip(".").strip("[]") in self.hosts:
            return True
        candidates: list[IPAddress] = [ip]
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            candidates.append(ip.ipv4_mapped)
        return any(c in network for c in candidates for network in self.networks)


def refusal(host: str, ip: IPAddress, allow: AllowList) -> str | None:
    """Why a callback to ``host`` may not connect to ``ip`` (one line); None when it may."""
    if allow.allows(host, ip):
        return None
    reason = forbidden_reason(ip)
    if reason is None:
        return None
    try:
        literal = ipaddress.ip_address(host.strip("[]")) == ip
    except ValueError:
        literal = False
    where = host if literal else f"{host} resolves to {ip}, which"
    return (
        f"callback_url: {where} is {reason}; callbacks go to public addresses only "
        "(or to hosts in VOICELANE_CALLBACK_ALLOW)"
    )


def first_refusal(host: str, ips: Sequence[IPAddress], allow: AllowList) -> str | None:
    """The refusal of the first address of ``ips`` that may not be reached, if any."""
    return next((r for ip in ips if (r := refusal(host, ip, allow)) is not None), None)


# ---- signatures -----------------------------------------------------------------------------


def master_secret(configured: str | None, *, dev_mode: bool) -> str | None:
    """The master signing secret: the configured one, :data:`DEV_SIGNING_SECRET` in dev mode
    without one, or None (callbacks are off)."""
    if configured:
        return configured
    return DEV_SIGNING_SECRET if dev_mode else None


def tenant_secret(master: str, tenant: str) -> str:
    """A tenant's signing secret: HMAC-SHA256(master, ``"voicelane-callback:" + tenant``), hex."""
    return hmac.new(master.encode(), _TENANT_CONTEXT + tenant.encode(), hashlib.sha256).hexdigest()


def _digest(secret: str, timestamp: str, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The signature header's value: ``t=<unix s>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>``."""
    return f"t={timestamp},v1={_digest(secret, str(timestamp), body)}"


def verify(
    secret: str,
    body: bytes,
    header: str,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> bool:
    """Whether ``header`` signs ``body`` with ``secret`` and its timestamp is within
    ``tolerance_s`` of ``now`` (replays of old callbacks fail). Several ``v1=`` entries may
    be given (any one matching suffices); comparisons are constant-time."""
    timestamp: str | None = None
    signatures: list[str] = []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t":
            timestamp = value
        elif key == "v1":
            signatures.append(value)
    if timestamp is None or not (timestamp.isascii() and timestamp.isdigit()) or not signatures:
        return False
    now = time.time() if now is None else now
    if abs(now - int(timestamp)) > tolerance_s:
        return False
    expected = _digest(secret, timestamp, body).encode()
    return any(hmac.compare_digest(expected, s.encode()) for s in signatures)
