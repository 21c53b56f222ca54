"""What the REST app's routes share: the app's state and the caller's tenant, as FastAPI
dependencies (``Depends``), and :func:`blocking` for the synchronous job ledger.

The routes are ``async``; the job ledger (and Celery's enqueue) are synchronous clients. A
route never calls them on the event loop: :func:`blocking` runs them on a bounded pool of
threads, so a slow or paused Redis delays the requests that need it and nothing else —
health and readiness answer at once whatever Redis does."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, ParamSpec, TypeVar

import anyio.to_thread
from anyio import CapacityLimiter
from fastapi import Depends, Header
from starlette.requests import HTTPConnection

from voicelane.api.auth import ApiKeys
from voicelane.api.engines import EngineCatalog
from voicelane.api.llm import LlmBridge
from voicelane.api.llm_warmup import Warmup
from voicelane.api.streams import StreamGateway
from voicelane.common.errors import MalformedRequestError
from voicelane.core.batch_lane import BatchClient
from voicelane.core.lane.front import RealtimeClient
from voicelane.core.ledger import Ledger
from voicelane.core.quotas import RequestRate
from voicelane.core.settings import ApiSettings
from voicelane.core.storage import Storage


class WebSocketGate:
    """Open WebSockets of this process, per client address and in all: past either cap a new
    socket is refused at once (an attacker's idle sockets cannot exhaust the process)."""

    def __init__(self, *, per_address: int, total: int) -> None:
        self.per_address = per_address
        self.total = total
        self._open: Counter[str] = Counter()

    @property
    def open(self) -> int:
        return self._open.total()

    def enter(self, address: str) -> bool:
        if self._open[address] >= self.per_address or self.open >= self.total:
            return False
        self._open[address] += 1
        return True

    def leave(self, address: str) -> None:
        self._open[address] -= 1
        if self._open[address] <= 0:
            del self._open[address]


@dataclass
class ApiState:
    """Everything a route needs, made once per app (``create_app``)."""

    settings: ApiSettings
    keys: ApiKeys
    ledger: Ledger
    jobs: BatchClient
    storage: Storage
    lane: RealtimeClient
    engines: EngineCatalog
    streams: StreamGateway
    rate: RequestRate
    blocking_threads: CapacityLimiter
    websockets: WebSocketGate
    llm: LlmBridge
    """The LLM lane's bridge (Ollama)."""
    llm_warmup: Warmup


P = ParamSpec("P")
R = TypeVar("R")

BLOCKING_THREADS = 32
"""Threads for the synchronous ledger calls of one API process."""


async def blocking(state: ApiState, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``fn(*args, **kwargs)`` on a worker thread: never block the event loop on Redis."""
    return await anyio.to_thread.run_sync(
        lambda: fn(*args, **kwargs), limiter=state.blocking_threads
    )


def json_body(raw: bytes) -> object:
    """A request body decoded as JSON, or 400 ``malformed_request`` saying why."""
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise MalformedRequestError(f"malformed JSON: {error}") from None
    except RecursionError:
        raise MalformedRequestError("malformed JSON: nested too deep") from None


def api_state(connection: HTTPConnection) -> ApiState:
    state: ApiState = connection.app.state.voicelane
    return state


State = Annotated[ApiState, Depends(api_state)]
AuthHeader = Annotated[str | None, Header(include_in_schema=False)]


def tenant(state: State, authorization: AuthHeader = None) -> str:
    """The caller's tenant from ``Authorization: Bearer KEY``; 401 without a valid key."""
    return state.keys.tenant_for_header(authorization)


Tenant = Annotated[str, Depends(tenant)]
