"""The REST front (FastAPI): ``create_app`` builds the app from its routers.

``voicelane api`` serves it with uvicorn. Routes live in :mod:`voicelane.api.routes` (``jobs``,
``speech``, ``openai_speech``, ``ops``, ``lexicons``, ``voices``...), each an ``APIRouter`` whose
routes take the app's state and the caller's tenant as dependencies (:mod:`voicelane.api.deps`).
Every error is a JSON body ``{"error": {"code": ..., "message": ..., "field"?: ...}}`` with one
line of message and the status the error class maps to: :func:`voicelane.api.failures.http_reply`,
the same mapping as every front's — except on the OpenAI routes (``openai_speech``,
``openai_catalog``, ``chat``), which answer in OpenAI's shape and statuses
(:mod:`voicelane.api.openai_compat`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from anyio import CapacityLimiter
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from voicelane.api.auth import ApiKeys
from voicelane.api.body_limit import BodyLimit, route_limits
from voicelane.api.deps import BLOCKING_THREADS, ApiState, WebSocketGate
from voicelane.api.engines import EngineCatalog
from voicelane.api.failures import KNOWN_FAILURES, http_reply, invalid_input
from voicelane.api.llm import LlmBridge
from voicelane.api.llm_warmup import Warmup
from voicelane.api.openai_compat import MAX_SPEECH_BODY_BYTES
from voicelane.api.routes import (
    agent,
    callbacks,
    chat,
    jobs,
    lexicons,
    openai_catalog,
    openai_speech,
    ops,
    playground,
    speech,
    text,
    voices,
)
from voicelane.api.streams import StreamGateway
from voicelane.api.text_options import TextOptionsResolver
from voicelane.api.voice_options import VoiceResolver
from voicelane.common.error_wire import http_body
from voicelane.common.errors import WireError, status_for_http
from voicelane.core.batch_lane import BatchClient, CeleryEnqueue, Enqueue
from voicelane.core.lane.front import RealtimeClient
from voicelane.core.ledger import Ledger
from voicelane.core.quotas import RequestRate
from voicelane.core.settings import ApiSettings
from voicelane.core.storage import Storage, open_storage

LEDGER_TIMEOUT_S = 3.0
"""A REST request waits at most this for one Redis reply, then answers 503."""


def error_response(error: BaseException, request: Request) -> JSONResponse:
    """Any exception of a route, as the response its client gets."""
    reply = http_reply(error, where=f"{request.method} {request.url.path}")
    return JSONResponse(reply.body, status_code=reply.status_code, headers=reply.headers)


def create_app(
    settings: ApiSettings,
    *,
    ledger: Ledger | None = None,
    storage: Storage | None = None,
    enqueue: Enqueue | None = None,
    llm: LlmBridge | None = None,
) -> FastAPI:
    llm = llm or LlmBridge(settings.llm)
    if storage is None:
        storage = open_storage(settings.storage, dev_mode=settings.dev_mode)
        storage.prepare()
    ledger = ledger or Ledger.from_url(settings.redis_target(), socket_timeout_s=LEDGER_TIMEOUT_S)
    # Async Redis for the real-time lane, the quotas and the engine's capabilities (connects
    # on first use).
    lane = RealtimeClient.from_url(settings.redis_target(), settings.realtime)
    engines = EngineCatalog(lane, settings.served_engines())
    rate = RequestRate(
        lane.redis, per_s=settings.tenant_requests_per_s, burst=settings.tenant_request_burst
    )
    state = ApiState(
        settings=settings,
        keys=ApiKeys.from_settings(settings.api_keys, dev_mode=settings.dev_mode),
        ledger=ledger,
        jobs=BatchClient(ledger, enqueue or CeleryEnqueue(settings)),
        storage=storage,
        lane=lane,
        engines=engines,
        streams=StreamGateway(
            settings,
            lane,
            engines,
            rate=rate,
            text_options=TextOptionsResolver(ledger.lexicons.resolve),
            voices=VoiceResolver.over(ledger.voices),
        ),
        rate=rate,
        blocking_threads=CapacityLimiter(BLOCKING_THREADS),
        websockets=WebSocketGate(
            per_address=settings.websocket_max_per_address,
            total=settings.websocket_max_connections,
        ),
        llm=llm,
        llm_warmup=Warmup(llm),
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        state.llm_warmup.start()
        yield
        await state.llm_warmup.stop()
        await llm.close()
        await state.streams.close()  # the stream gateway's output reader

    app = FastAPI(
        title="voicelane",
        version="0.1.0",
        description="Self-hosted speech rendering: batch jobs and live streams.",
        lifespan=lifespan,
    )
    app.state.voicelane = state
    app.add_middleware(
        BodyLimit, limit_for=route_limits(settings.max_upload_bytes, MAX_SPEECH_BODY_BYTES)
    )
    _install_error_handlers(app)
    routers = (jobs.router, speech.router, chat.router, text.router, ops.router, callbacks.router)
    openai = (openai_speech.router, openai_catalog.router)
    others = (agent.router, lexicons.router, voices.router, playground.router)
    for router in (*routers, *openai, *others):
        app.include_router(router)
    return app


def _install_error_handlers(app: FastAPI) -> None:
    """Every failure of a route → :func:`error_response`. The known failures get a handler of
    their own (an ``Exception`` handler runs outside the app, and Starlette re-raises after
    it, so that the server logs the bug too)."""

    async def on_error(request: Request, error: Exception) -> JSONResponse:
        return error_response(error, request)

    for known in (*KNOWN_FAILURES, Exception):
        app.add_exception_handler(known, on_error)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        return error_response(invalid_input(error.errors(), located=True), request)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
        """Starlette's own refusals (no such route, method not allowed)."""
        message = " ".join(str(error.detail).split())
        wire = WireError("http_error", message, status_for_http(error.status_code))
        return JSONResponse(http_body(wire), status_code=error.status_code)
