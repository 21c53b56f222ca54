"""Operations: liveness, readiness, Prometheus metrics, and the local backend's signed files."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import FileResponse, JSONResponse, Response

from api.deps import ApiState, State
from core.batch_lane import QUEUES
from core.errors import JobNotFoundError
from core.storage import LocalStorage

log = logging.getLogger(__name__)

router = APIRouter(include_in_schema=False)


@router.get("/healthz")
async def healthz() -> JSONResponse:
    return JSONResponse({"status": "ok"})


@router.get("/readyz")
async def readyz(state: State) -> JSONResponse:
    problems: dict[str, str] = {}
    try:
        state.ledger.ping()
    except Exception as error:
        problems["redis"] = " ".join(str(error).split())[:200] or type(error).__name__
    try:
        state.storage.ping()
    except Exception as error:
        problems["storage"] = " ".join(str(error).split())[:200] or type(error).__name__
    if problems:
        return JSONResponse({"status": "unavailable", "problems": problems}, status_code=503)
    return JSONResponse({"status": "ready"})


@router.get("/metrics")
async def metrics(state: State) -> Response:
    return Response(_metrics_text(state), media_type="text/plain; version=0.0.4")


@router.get("/v1/files/{key:path}")
async def local_file(
    key: str,
    state: State,
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
    return FileResponse(storage.path_for(key), filename=filename, media_type=stored.content_type)


def _metrics_text(state: ApiState) -> bytes:
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    registry = CollectorRegistry()
    queue_depth = Gauge(
        "voicelane_queue_depth", "Messages waiting per Celery queue", ["queue"], registry=registry
    )
    active = Gauge("voicelane_jobs_active", "Jobs not in a final state", registry=registry)
    try:
        for queue in QUEUES:
            queue_depth.labels(queue=queue).set(state.ledger.queue_length(queue))
        active.set(state.ledger.active_count())
    except Exception:
        log.warning("metrics: Redis unavailable")
    return generate_latest(registry)
