"""What the REST app's routes share: the app's state and the caller's tenant, as FastAPI
dependencies (``Depends``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header
from starlette.requests import HTTPConnection

from api.auth import ApiKeys
from api.engines import EngineRegistry
from api.streams import StreamGateway
from core.batch_lane import BatchClient
from core.ledger import Ledger
from core.realtime_lane import RealtimeClient
from core.settings import ApiSettings
from core.storage import Storage


@dataclass
class ApiState:
    """Everything a route needs, made once per app (``create_app``)."""

    settings: ApiSettings
    keys: ApiKeys
    ledger: Ledger
    jobs: BatchClient
    storage: Storage
    lane: RealtimeClient
    engines: EngineRegistry
    streams: StreamGateway


def api_state(connection: HTTPConnection) -> ApiState:
    state: ApiState = connection.app.state.voicelane
    return state


State = Annotated[ApiState, Depends(api_state)]
AuthHeader = Annotated[str | None, Header(include_in_schema=False)]


def tenant(state: State, authorization: AuthHeader = None) -> str:
    """The caller's tenant from ``Authorization: Bearer KEY``; 401 without a valid key."""
    return state.keys.tenant_for_header(authorization)


Tenant = Annotated[str, Depends(tenant)]
