"""The REST front (FastAPI): batch jobs, voices, health, metrics, signed local downloads.

``voicelane api`` serves it with uvicorn. Every error is a JSON body
``{"error": {"code": ..., "message": ...}}`` with one line of message and the status the
error class maps to (``core/errors.py``). Validation happens before anything is written:
a rejected request leaves the ledger and the queues exactly as they were.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.auth import ApiKeys
from api.speech_http import StreamFronts, install_stream_routes
from api.voices import VoiceRegistry
from core.audio import format_from_name, validate_sample_rate
from core.errors import (
    InvalidInputError,
    JobNotFoundError,
    JobStateError,
    MalformedRequestError,
    TextTooLargeError,
    UnavailableError,
    UnknownVoiceError,
    UnsupportedMediaTypeError,
    VoicelaneError,
    http_status,
)
from core.lane import LaneClient
from core.ledger import Job, JobOptions, JobState, Ledger
from core.ledger import job_summary as ledger_job_summary
from core.settings import ApiSettings
from core.storage import LocalStorage, Storage, StorageSettings, open_storage
from core.text_input import check_text, decode_text
from workers.celery_app import PLAN_TASK, QUEUES

log = logging.getLogger(__name__)

Enqueue = Callable[..., None]
AuthHeader = Annotated[str | None, Header(include_in_schema=False)]


class JobRequest(BaseModel):
    """``POST /v1/jobs`` as JSON (or the form fields beside an uploaded text file)."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="The text to speak (UTF-8), at most the configured limit.")
    voice: str = Field("auto", description="A voice id from GET /v1/voices.")
    format: str = Field("ogg", description="ogg, mp3, wav or flac.")
    sample_rate_hz: int = Field(24000, description="Output sample rate.")
    speed: float = Field(1.0, ge=0.25, le=4.0, description="Speaking-rate multiplier.")
    callback_url: str | None = Field(
        None, description="POSTed the finished or failed job (retried).", max_length=2048
    )


@dataclass
class ApiState:
    settings: ApiSettings
    keys: ApiKeys
    ledger: Ledger
    storage: Storage
    enqueue: Enqueue
    link_expiry_s: int
    lane: LaneClient
    voices: VoiceRegistry


def error_response(error: VoicelaneError | Exception, status: int | None = None) -> JSONResponse:
    code = error.code if isinstance(error, VoicelaneError) else "internal"
    message = " ".join(str(error).split()) or code
    return JSONResponse(
        {"error": {"code": code, "message": message}},
        status_code=status or http_status(error),
        headers={"WWW-Authenticate": "Bearer"} if code == "unauthenticated" else None,
    )


def _validation_message(errors: list[Any]) -> str:
    parts = []
    for error in errors[:3]:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
        parts.append(f"{where or 'body'}: {error.get('msg', 'invalid')}")
    return "; ".join(parts)


def create_app(
    settings: ApiSettings | None = None,
    *,
    ledger: Ledger | None = None,
    storage: Storage | None = None,
    enqueue: Enqueue | None = None,
) -> FastAPI:
    settings = settings or ApiSettings()
    if enqueue is None:
        from workers.celery_app import configure
        from workers.celery_app import enqueue as celery_enqueue

        configure(settings)
        enqueue = celery_enqueue
    storage_settings = StorageSettings()
    # Async Redis for the streaming twins and the voice registry (connects on first use).
    lane = LaneClient.from_url(settings.redis_url, settings.realtime.timings())
    if storage is None:
        storage = open_storage(storage_settings, dev_mode=settings.dev_mode)
        storage.prepare()
    state = ApiState(
        settings=settings,
        keys=ApiKeys.from_settings(settings.api_keys, dev_mode=settings.dev_mode),
        ledger=ledger or Ledger.from_url(settings.redis_url),
        storage=storage,
        enqueue=enqueue,
        link_expiry_s=storage_settings.link_expiry_s,
        lane=lane,
        voices=VoiceRegistry(lane.redis, settings.engine),
    )
    app = FastAPI(
        title="voicelane",
        version="0.1.0",
        description="Self-hosted speech rendering: batch jobs over REST.",
    )
    app.state.voicelane = state
    _install_error_handlers(app)
    _install_routes(app, state)

    async def make_fronts() -> StreamFronts:
        from api.grpc_relay import Admission

        return StreamFronts(
            settings=settings,
            keys=state.keys,
            lane=state.lane,
            voices=state.voices,
            admission=Admission(state.lane),
        )

    install_stream_routes(app, make_fronts)
    return app


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(VoicelaneError)
    async def on_voicelane_error(_: Request, error: VoicelaneError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(_: Request, error: RequestValidationError) -> JSONResponse:
        return error_response(InvalidInputError(_validation_message(list(error.errors()))))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
        wrapped = VoicelaneError(str(error.detail))
        return JSONResponse(
            {"error": {"code": "http_error", "message": wrapped.message}},
            status_code=error.status_code,
        )

    @app.exception_handler(Exception)
    async def on_unexpected(_: Request, error: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return error_response(VoicelaneError("internal error"), 500)


def _install_routes(app: FastAPI, state: ApiState) -> None:
    settings = state.settings

    def tenant(authorization: str | None) -> str:
        return state.keys.tenant_for_header(authorization)

    @app.post("/v1/jobs", status_code=202, summary="Submit a text to render")
    async def submit_job(request: Request, authorization: AuthHeader = None) -> JSONResponse:
        owner = tenant(authorization)
        body = await _read_job_request(request, settings)
        options, text = _validate_job(state, body, await state.voices.voice_ids())
        job = state.ledger.create(owner, options, text)
        try:
            state.enqueue(PLAN_TASK, job.id)
        except Exception as error:
            log.exception("could not enqueue job %s", job.id)
            state.ledger.fail(job.id, "could not enqueue the job")
            raise UnavailableError("the job queue is unavailable") from error
        return JSONResponse(
            _job_view(state, job), status_code=202, headers={"Location": f"/v1/jobs/{job.id}"}
        )

    @app.get("/v1/jobs/{job_id}", summary="A job's state, progress, ETA and download link")
    async def get_job(job_id: str, authorization: AuthHeader = None) -> JSONResponse:
        job = state.ledger.get_for_tenant(tenant(authorization), job_id)
        return JSONResponse(_job_view(state, job))

    @app.get("/v1/jobs", summary="The caller's jobs, newest first")
    async def list_jobs(
        authorization: AuthHeader = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
        cursor: Annotated[float | None, Query()] = None,
    ) -> JSONResponse:
        owner = tenant(authorization)
        jobs, next_cursor = state.ledger.list_for_tenant(
            owner, limit=min(limit, settings.page_size_max), before=cursor
        )
        return JSONResponse(
            {
                "jobs": [_job_view(state, j, with_link=False) for j in jobs],
                "next_cursor": next_cursor,
            }
        )

    @app.get("/v1/jobs/{job_id}/audio", summary="Redirect to a fresh download link")
    async def job_audio(job_id: str, authorization: AuthHeader = None) -> Response:
        job = state.ledger.get_for_tenant(tenant(authorization), job_id)
        if job.state is not JobState.DONE or not job.output_key:
            raise JobStateError(f"job {job_id} is {job.state.value}, not done")
        return RedirectResponse(_link(state, job), status_code=302)

    @app.delete("/v1/jobs/{job_id}", summary="Cancel a job")
    async def cancel_job(job_id: str, authorization: AuthHeader = None) -> JSONResponse:
        from workers.celery_app import CLEANUP_TASK

        job = state.ledger.get_for_tenant(tenant(authorization), job_id)
        if job.state.final:
            if job.state is JobState.CANCELLED:
                return JSONResponse(_job_view(state, job))
            raise JobStateError(f"job {job_id} is already {job.state.value}")
        if state.ledger.cancel(job_id):
            state.enqueue(CLEANUP_TASK, job_id)
        refreshed = state.ledger.get_for_tenant(job.tenant, job_id)
        if refreshed.state is not JobState.CANCELLED:
            raise JobStateError(f"job {job_id} is already {refreshed.state.value}")
        return JSONResponse(_job_view(state, refreshed))

    @app.get("/v1/voices", summary="The voices of the workers' engine")
    async def voices(authorization: AuthHeader = None) -> JSONResponse:
        tenant(authorization)
        known = await state.voices.voice_ids()
        return JSONResponse({"engine": settings.engine, "voices": sorted(known)})

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        problems: dict[str, str] = {}
        try:
            state.ledger.redis.ping()
        except Exception as error:
            problems["redis"] = " ".join(str(error).split())[:200] or type(error).__name__
        try:
            state.storage.ping()
        except Exception as error:
            problems["storage"] = " ".join(str(error).split())[:200] or type(error).__name__
        if problems:
            return JSONResponse({"status": "unavailable", "problems": problems}, status_code=503)
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(_metrics_text(state), media_type="text/plain; version=0.0.4")

    @app.get("/v1/files/{key:path}", include_in_schema=False)
    async def local_file(
        key: str,
        expires: Annotated[int, Query()],
        sig: Annotated[str, Query(max_length=128)],
        filename: Annotated[str | None, Query(max_length=255)] = None,
    ) -> Response:
        storage = state.storage
        if not isinstance(storage, LocalStorage):
            raise JobNotFoundError("no such file")
        storage.verify_link(key, expires, sig, filename=filename)
        stored = storage.head(key)
        if stored is None:
            raise JobNotFoundError("no such file")
        return FileResponse(
            storage.path_for(key), filename=filename, media_type=stored.content_type
        )


async def _read_job_request(request: Request, settings: ApiSettings) -> JobRequest:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json":
        raw = await request.body()
        if len(raw) > settings.max_upload_bytes + 4096:
            raise TextTooLargeError(f"request body is over {settings.max_upload_bytes} bytes")
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise MalformedRequestError(f"malformed JSON: {error}") from None
        if not isinstance(data, dict):
            raise MalformedRequestError("the JSON body must be an object")
        return _model(data)
    if content_type == "multipart/form-data":
        form = await request.form(max_files=1, max_fields=10)
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise InvalidInputError("multipart upload needs a 'file' part holding the text")
        data_bytes = await upload.read(settings.max_upload_bytes + 1)
        if len(data_bytes) > settings.max_upload_bytes:
            raise TextTooLargeError(f"the uploaded file is over {settings.max_upload_bytes} bytes")
        text = decode_text(
            data_bytes, max_chars=settings.max_text_chars, source=upload.filename or "file"
        )
        fields: dict[str, Any] = {k: v for k, v in form.items() if k != "file"}
        return _model({**fields, "text": text})
    raise UnsupportedMediaTypeError(
        f"content type {content_type or 'none'!r} is not supported; "
        "send application/json or multipart/form-data"
    )


def _model(data: dict[str, Any]) -> JobRequest:
    try:
        return JobRequest.model_validate(data)
    except ValidationError as error:
        raise InvalidInputError(_validation_message(list(error.errors()))) from None


def _validate_job(
    state: ApiState, body: JobRequest, known: frozenset[str]
) -> tuple[JobOptions, str]:
    settings = state.settings
    text = check_text(body.text, max_chars=settings.max_text_chars)
    fmt = format_from_name(body.format)
    validate_sample_rate(fmt, body.sample_rate_hz)
    if body.voice not in known:
        raise UnknownVoiceError(f"unknown voice {body.voice!r}; GET /v1/voices lists them")
    callback = body.callback_url
    if callback is not None and not callback.startswith(("http://", "https://")):
        raise InvalidInputError("callback_url must be an http:// or https:// URL")
    options = JobOptions(
        voice=body.voice,
        format=fmt.value,
        sample_rate_hz=body.sample_rate_hz,
        speed=body.speed,
        callback_url=callback,
    )
    return options, text


def _link(state: ApiState, job: Job) -> str:
    assert job.output_key is not None
    filename = f"{job.id}.{job.output_key.rsplit('.', 1)[-1]}"
    return state.storage.link(job.output_key, expires_s=state.link_expiry_s, filename=filename)


def _job_view(state: ApiState, job: Job, *, with_link: bool = True) -> dict[str, Any]:
    view = ledger_job_summary(job)
    view["links"] = {"self": f"/v1/jobs/{job.id}", "audio": f"/v1/jobs/{job.id}/audio"}
    if with_link and job.state is JobState.DONE and job.output_key:
        view["download_url"] = _link(state, job)
        view["download_expires_in_s"] = state.link_expiry_s
    return view


def _metrics_text(state: ApiState) -> bytes:
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    registry = CollectorRegistry()
    queue_depth = Gauge(
        "voicelane_queue_depth", "Messages waiting per Celery queue", ["queue"], registry=registry
    )
    active = Gauge("voicelane_jobs_active", "Jobs not in a final state", registry=registry)
    try:
        redis = state.ledger.redis
        for queue in QUEUES:
            queue_depth.labels(queue=queue).set(redis.llen(queue))
        active.set(redis.scard("vl:jobs:active"))
    except Exception:
        log.warning("metrics: Redis unavailable")
    return generate_latest(registry)
