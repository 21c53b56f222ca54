"""The REST front (FastAPI): ``create_app`` builds the app from its routers.

``voicelane api`` serves it with uvicorn. Routes live in :mod:`voicelane.api.routes` (``jobs``,
``speech``, ``ops``), each an ``APIRouter`` whose routes take the app's state and the
caller's tenant as dependencies (:mod:`voicelane.api.deps`). Every error is a JSON body
``{"error": {"code": ..., "message": ..., "field"?: ...}}`` with one line of message and the
status the error class maps to (``core/errors.py``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis
from anyio import CapacityLimiter
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from voicelane.api.auth import ApiKeys
from voicelane.api.body_limit import BodyLimit, route_limits
from voicelane.api.deps import BLOCKING_THREADS, ApiState, WebSocketGate
from voicelane.api.engines import EngineRegistry
from voicelane.api.failures import service_error
from voicelane.api.llm import LlmBridge
from voicelane.api.llm_warmup import Warmup
from voicelane.api.routes import callbacks, chat, jobs, ops, speech
from voicelane.api.routes.speech import MAX_SPEECH_BODY_BYTES
from voicelane.api.streams import StreamGateway
from voicelane.common.errors import InvalidInputError, VoicelaneError, http_status
from voicelane.core.batch_lane import BatchClient, CeleryEnqueue, Enqueue
from voicelane.core.ledger import Ledger
from voicelane.core.quotas import RequestRate
from voicelane.core.realtime_lane import RealtimeClient
from voicelane.core.settings import ApiSettings
from voicelane.core.storage import Storage, open_storage

log = logging.getLogger(__name__)

LEDGER_TIMEOUT_S = 3.0
"""A REST request waits at most this for one Redis reply, then answers 503."""


def error_response(error: VoicelaneError | Exception, status: int | None = None) -> JSONResponse:
    code = error.code if isinstance(error, VoicelaneError) else "internal"
    message = " ".join(str(error).split()) or code
    body: dict[str, str] = {"code": code, "message": message}
    if isinstance(error, VoicelaneError) and error.field:
        body["field"] = error.field
    headers: dict[str, str] = {}
    if code == "unauthenticated":
        headers["WWW-Authenticate"] = "Bearer"
    if isinstance(error, VoicelaneError) and error.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, math.ceil(error.retry_after_s)))
    return JSONResponse({"error": body}, status_code=status or http_status(error), headers=headers)


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
    ledger = ledger or Ledger.from_url(settings.redis_url, socket_timeout_s=LEDGER_TIMEOUT_S)
    # Async Redis for the real-time lane, the quotas and the engine's capabilities (connects
    # on first use).
    lane = RealtimeClient.from_url(settings.redis_url, settings.realtime)
    engines = EngineRegistry(lane, settings.engine)
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
        streams=StreamGateway(settings, lane, engines, rate=rate),
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
    for router in (jobs.router, speech.router, chat.router, ops.router, callbacks.router):
        app.include_router(router)
    return app


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(VoicelaneError)
    async def on_voicelane_error(_: Request, error: VoicelaneError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(_: Request, error: RequestValidationError) -> JSONResponse:
        errors = list(error.errors())
        location = [str(p) for p in errors[0].get("loc", ()) if p != "body"] if errors else []
        field = location[-1] if location else None
        return error_response(InvalidInputError(jobs.validation_message(errors), field=field))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
        wrapped = VoicelaneError(str(error.detail))
        return JSONResponse(
            {"error": {"code": "http_error", "message": wrapped.message}},
            status_code=error.status_code,
        )

    @app.exception_handler(redis.RedisError)
    async def on_redis_error(_: Request, error: redis.RedisError) -> JSONResponse:
        known = service_error(error)
        if known is None:
            log.exception("Redis error")
            return error_response(VoicelaneError("internal error"), 500)
        log.warning("%s: %s", known.code, " ".join(str(error).split())[:200])
        return error_response(known)

    @app.exception_handler(Exception)
    async def on_unexpected(_: Request, error: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return error_response(VoicelaneError("internal error"), 500)
