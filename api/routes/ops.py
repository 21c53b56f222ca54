"""Operations: liveness, readiness, Prometheus metrics, and the local backend's signed files.

``/healthz`` touches nothing; ``/readyz`` asks Redis and storage with a short timeout each,
so both answer within a second whatever Redis does, and name what is down without saying
where it is or what it said (that goes to the log): ``redis`` (unreachable), ``store_full``
(Redis answers but is at its ``maxmemory`` and refuses writes), ``storage``, ``storage_full``
(the local storage's file system is under ``min_free_bytes`` free), ``llm``.
``/metrics`` needs the metrics token (``VOICELANE_METRICS_TOKEN``) when one is set; without
one it is open in dev mode only.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from typing import Annotated

from fastapi import APIRouter, Header, Query
from fastapi.responses import FileResponse, JSONResponse, Response

from voicelane.api.deps import ApiState, State, blocking
from voicelane.common.errors import AuthError, JobNotFoundError, StorageFullError
from voicelane.core.batch_lane import QUEUES
from voicelane.core.storage import LocalStorage

log = logging.getLogger(__name__)

router = APIRouter(include_in_schema=False)

PROBE_TIMEOUT_S = 0.4
"""Each readiness probe (Redis, storage) gets this long."""
EXPIRES_MAX_CHARS = 20
"""A link's ``expires`` as it came (a string: only the spelling that was signed counts, which
:meth:`~voicelane.core.storage.LocalStorage.verify_link` checks; an int here would take
``+1``, ``01`` or ``1.0`` for ``1``)."""
STORE_FULL = "store_full"
"""The problem readiness names while Redis is reachable but at its ``maxmemory`` (it refuses
writes; the fronts answer 503 ``store_full`` meanwhile)."""
STORAGE_FULL = "storage_full"
"""The problem readiness names while the local storage's file system has less free space
than ``storage.local.min_free_bytes`` (jobs would fail to write their parts and outputs; the
batch lane retries them with a long backoff meanwhile). Not probed for S3: a bucket has no
free space to ask about; a full MinIO shows up as ``storage_full`` errors on writes."""


@router.get("/healthz")
async def healthz() -> JSONResponse:
    return JSONResponse({"status": "ok"})


@router.get("/readyz")
async def readyz(state: State) -> JSONResponse:
    probes = {
        "redis": asyncio.wait_for(state.lane.refuses_writes(), PROBE_TIMEOUT_S),
        "storage": asyncio.wait_for(blocking(state, state.storage.ping), PROBE_TIMEOUT_S),
    }
    results = await asyncio.gather(*probes.values(), return_exceptions=True)
    problems = []
    for name, result in zip(probes, results, strict=True):
        if isinstance(result, StorageFullError):
            problems.append(STORAGE_FULL)  # under min_free_bytes (or ENOSPC): writes will fail
            log.warning("readiness: storage is full: %s", " ".join(str(result).split())[:200])
        elif isinstance(result, BaseException):
            problems.append(name)
            detail = " ".join(str(result).split())[:200] or type(result).__name__
            log.warning("readiness: %s: %s", name, detail)
        elif name == "redis" and result:
            problems.append(STORE_FULL)  # at maxmemory: every write is refused
            log.warning("readiness: Redis is at its maxmemory and refuses writes")
    if not state.llm_warmup.ready:
        problems.append("llm")  # the LLM's warm-up (VOICELANE_LLM__PRELOAD) has not finished
    if problems:
        return JSONResponse({"status": "unavailable", "problems": problems}, status_code=503)
    return JSONResponse({"status": "ready"})


@router.get("/metrics")
async def metrics(state: State, authorization: Annotated[str | None, Header()] = None) -> Response:
    _check_metrics_token(state, authorization)
    text = await asyncio.wait_for(blocking(state, _metrics_text, state), PROBE_TIMEOUT_S * 2)
    return Response(text, media_type="text/plain; version=0.0.4")


def _check_metrics_token(state: ApiState, authorization: str | None) -> None:
    token = state.settings.metrics_token
    if token is None:
        if state.settings.dev_mode:
            return
        raise AuthError("set VOICELANE_METRICS_TOKEN to scrape /metrics")
    scheme, _, given = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        given.strip().encode(), token.encode()
    ):
        raise AuthError("/metrics needs Authorization: Bearer <metrics token>")


@router.api_route("/v1/files/{key:path}", methods=["GET", "HEAD"])
async def local_file(
    key: str,
    state: State,
    expires: Annotated[str, Query(max_length=EXPIRES_MAX_CHARS)],
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
    from prometheus_client import REGISTRY, CollectorRegistry, Gauge, generate_latest

    registry = CollectorRegistry()
    queue_depth = Gauge(
        "voicelane_queue_depth", "Messages waiting per Celery queue", ["queue"], registry=registry
    )
    active = Gauge("voicelane_jobs_active", "Jobs not in a final state", registry=registry)
    jobs = Gauge(
        "voicelane_jobs", "Jobs not in a final state, by state", ["state"], registry=registry
    )
    try:
        for queue in QUEUES:
            queue_depth.labels(queue=queue).set(state.ledger.queues.length(queue))
        active.set(state.ledger.jobs.active_count())
        for job_state in ("queued", "planning", "rendering", "assembling"):
            jobs.labels(state=job_state).set(0)
        for job_state, count in state.ledger.jobs.active_by_state().items():
            jobs.labels(state=job_state).set(count)
    except Exception:
        log.warning("metrics: Redis unavailable")
    # This process's own (the WebSocket and OpenAI fronts' stream latency, ...).
    return generate_latest(registry) + generate_latest(REGISTRY)
