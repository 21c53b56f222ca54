"""Job callbacks over REST: a tenant's signing secret, and the check of a ``callback_url``
at submission.

The check here is early, for a clear 422; the worker checks again, authoritatively, on the
addresses it connects to (:mod:`voicelane.workers.callbacks`). At submission a literal address, or a
host whose addresses (resolved within :data:`RESOLVE_TIMEOUT_S`) are all forbidden, is
refused unless the operator allows it; a host that does not resolve in time is accepted.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from voicelane.api.deps import State, Tenant
from voicelane.common.errors import InvalidInputError, NotFoundError
from voicelane.core.callbacks import (
    SIGNATURE_HEADER,
    SIGNATURE_SCHEME,
    AllowList,
    IPAddress,
    addresses,
    callback_destination,
    invalid_url,
    literal_ip,
    master_secret,
    refusal,
    tenant_secret,
)
from voicelane.core.settings import ApiSettings

router = APIRouter(tags=["callbacks"])

RESOLVE_TIMEOUT_S = 2.0
"""How long a submission waits for the callback host to resolve before accepting it."""
_MAX_LOOKUPS = 8
_LOOKUPS = ThreadPoolExecutor(_MAX_LOOKUPS, thread_name_prefix="callback-lookup")
_RESOLVING = threading.BoundedSemaphore(_MAX_LOOKUPS)
"""Lookups in flight at once (a lookup that timed out keeps its thread until it ends); past
it the early check is skipped: the worker's check stays."""
CALLBACKS_OFF = "callbacks are off: set VOICELANE_CALLBACK_SIGNING_SECRET"


@router.get("/v1/callbacks/secret", summary="The caller's callback signing secret")
async def callback_secret(state: State, tenant: Tenant) -> JSONResponse:
    settings = state.settings
    master = master_secret(settings.callback_signing_secret, dev_mode=settings.dev_mode)
    if master is None:
        raise NotFoundError(CALLBACKS_OFF)
    return JSONResponse(
        {
            "secret": tenant_secret(master, tenant),
            "header": SIGNATURE_HEADER,
            "scheme": SIGNATURE_SCHEME,
        }
    )


async def check_callback(settings: ApiSettings, url: str | None) -> str | None:
    """``url`` if a job may call it back; raises InvalidInputError (``callback_url``) for a
    malformed URL, when callbacks are off, or for a destination that may not be reached."""
    if url is None:
        return None
    host, port = callback_destination(url)
    try:
        httpx.URL(url)  # what the worker's client will make of it
    except httpx.InvalidURL as error:
        raise invalid_url(error) from None
    if master_secret(settings.callback_signing_secret, dev_mode=settings.dev_mode) is None:
        raise InvalidInputError(CALLBACKS_OFF, field="callback_url")
    allow = AllowList.parse(settings.callback_allow)
    literal = literal_ip(host)
    found = [literal] if literal is not None else await _resolve(host, port)
    refusals = [refusal(host, ip, allow) for ip in found]
    if found and all(refusals):
        raise InvalidInputError(str(refusals[0]), field="callback_url")
    return url


async def _resolve(host: str, port: int) -> list[IPAddress]:
    """``host``'s addresses; empty when it does not resolve within the timeout."""
    if not _RESOLVING.acquire(blocking=False):
        return []
    lookup = _LOOKUPS.submit(_lookup, host, port)
    lookup.add_done_callback(lambda _: _RESOLVING.release())  # run, failed or cancelled
    try:
        return await asyncio.wait_for(asyncio.wrap_future(lookup), RESOLVE_TIMEOUT_S)
    except TimeoutError:
        return []


def _lookup(host: str, port: int) -> list[IPAddress]:
    try:
        return addresses(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
    except (OSError, UnicodeError, ValueError):
        return []
