"""API keys per tenant: ``VOICELANE_API_KEYS="tenant:key,tenant:key"``, kept hashed in memory.

Keys are compared as SHA-256 digests with :func:`hmac.compare_digest`, so neither the keys
nor timing leak. The same keys serve REST (``Authorization: Bearer KEY``) and gRPC
(``authorization`` metadata).
"""

from __future__ import annotations

import hashlib
import hmac
import re

from voicelane.common.errors import AuthError, ConfigError

DEV_KEYS = "demo:demo-key"
_TENANT = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_MIN_KEY_CHARS = 8


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


class ApiKeys:
    """tenant ↔ key, from the ``tenant:key,tenant:key`` setting."""

    def __init__(self, spec: str) -> None:
        self._tenants: list[tuple[bytes, str]] = []
        for entry in (e.strip() for e in spec.split(",")):
            if not entry:
                continue
            tenant, sep, key = entry.partition(":")
            if not sep or not _TENANT.match(tenant):
                raise ConfigError(
                    "VOICELANE_API_KEYS entries are tenant:key with a tenant of letters, "
                    "digits, _ or - (up to 64)"
                )
            if len(key) < _MIN_KEY_CHARS:
                raise ConfigError(f"the key of tenant {tenant!r} is shorter than 8 characters")
            self._tenants.append((_digest(key), tenant))
        if not self._tenants:
            raise ConfigError("VOICELANE_API_KEYS holds no keys")

    @classmethod
    def from_settings(cls, api_keys: str | None, *, dev_mode: bool) -> ApiKeys:
        if api_keys:
            return cls(api_keys)
        if dev_mode:
            return cls(DEV_KEYS)
        raise ConfigError("set VOICELANE_API_KEYS (tenant:key,...) or VOICELANE_DEV_MODE=1")

    def tenant_for(self, key: str) -> str:
        """The tenant owning ``key``; AuthError if none does."""
        digest = _digest(key)
        found: str | None = None
        for known, tenant in self._tenants:  # no early exit: constant work per request
            if hmac.compare_digest(known, digest):
                found = tenant
        if found is None:
            raise AuthError("invalid API key")
        return found

    def tenant_for_header(self, authorization: str | None) -> str:
        if not authorization:
            raise AuthError("missing Authorization: Bearer <API key>")
        scheme, _, key = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise AuthError("Authorization must be 'Bearer <API key>'")
        return self.tenant_for(key.strip())
