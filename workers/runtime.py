"""The worker process: ``voicelane worker``.

A GPU worker (queue ``render``) holds one engine and one batcher, shared by every Celery
thread rendering chunks (and, with the real-time lane, by the real-time consumer): many
chunks in flight, one model, batched. A CPU worker (``--queues control,assemble``) holds no
engine; it plans jobs, assembles and uploads files, calls callbacks and runs the reconciler.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading

from core.lane import VOICES_KEY
from core.ledger import Ledger
from core.settings import WorkerSettings
from core.storage import StorageSettings, open_storage
from workers.celery_app import ASSEMBLE_QUEUE, CONTROL_QUEUE, RENDER_QUEUE, configure, enqueue
from workers.jobs import LaneContext, LeaseKeeper

log = logging.getLogger(__name__)

_context: LaneContext | None = None
_context_lock = threading.Lock()


def context() -> LaneContext:
    if _context is None:
        raise RuntimeError("the worker context is not set up (run `voicelane worker`)")
    return _context


def set_context(ctx: LaneContext | None) -> None:
    global _context  # noqa: PLW0603 - one context per worker process
    with _context_lock:
        _context = ctx


def build_context(settings: WorkerSettings, *, with_engine: bool, name: str) -> LaneContext:
    ledger = Ledger.from_url(settings.redis_url)
    storage = open_storage(StorageSettings(), dev_mode=settings.dev_mode)
    storage.prepare()
    ctx = LaneContext(
        settings=settings, ledger=ledger, storage=storage, worker_name=name, enqueue=enqueue
    )
    if with_engine:
        from workers.batcher import Batcher, BatcherConfig
        from workers.engines import create_engine

        engine = create_engine(settings.engine)
        ctx.batcher = Batcher(
            engine, BatcherConfig(**settings.batcher.model_dump()), name=f"batcher-{name}"
        ).start()
        ctx.leases = LeaseKeeper(ledger, settings.lease_ttl_s)
        voices = [v.id for v in engine.voices()]
        ledger.redis.set(VOICES_KEY.format(engine=engine.name), json.dumps(voices))
        if settings.realtime_enabled:
            from core.lane import LaneWorker
            from workers.realtime import RealtimeConsumer

            lane = LaneWorker.from_url(settings.redis_url, name, settings.realtime.timings())
            ctx.realtime = RealtimeConsumer(ctx.batcher, lane, settings.realtime).start()
    return ctx


def default_concurrency(ctx: LaneContext) -> int:
    """Chunk threads when not configured: enough to fill the batcher's batches."""
    if ctx.batcher is None:
        return 16  # CPU side: assembly, planning, callbacks
    return 4 if ctx.batcher.max_batch == 1 else 16


def run_worker(settings: WorkerSettings, *, hostname: str | None = None) -> int:
    """Run a Celery worker (threads pool) on ``settings.queues`` until it is stopped."""
    from workers import tasks  # noqa: F401 - registers the tasks
    from workers.reconciler import Reconciler

    queues = [q.strip() for q in settings.queues.split(",") if q.strip()]
    unknown = set(queues) - {CONTROL_QUEUE, RENDER_QUEUE, ASSEMBLE_QUEUE}
    if unknown:
        raise ValueError(f"unknown queues: {', '.join(sorted(unknown))}")
    kind = "gpu" if RENDER_QUEUE in queues else "cpu"
    name = hostname or f"{kind}-{os.getpid()}@{socket.gethostname()}"
    if kind == "gpu" and settings.gil_switch_interval_s:
        # Real-time sessions wake up for I/O and must get the GIL back quickly from the
        # chunk threads' numpy work: Python's default 5 ms hand-over adds up per packet.
        sys.setswitchinterval(settings.gil_switch_interval_s)
    app = configure(settings)
    ctx = build_context(settings, with_engine=RENDER_QUEUE in queues, name=name)
    set_context(ctx)
    reconciler = Reconciler(ctx).start() if CONTROL_QUEUE in queues else None
    try:
        worker = app.Worker(
            hostname=name,
            pool_cls="threads",
            concurrency=settings.concurrency or default_concurrency(ctx),
            queues=queues,
            loglevel="INFO",
            task_events=True,
            without_mingle=True,
            without_gossip=True,
            optimization="fair",
        )
        worker.start()
        return int(worker.exitcode or 0)
    finally:
        if reconciler is not None:
            reconciler.close()
        if ctx.realtime is not None:
            ctx.realtime.close()
        if ctx.leases is not None:
            ctx.leases.close()
        if ctx.batcher is not None:
            ctx.batcher.close(drain=False)
        set_context(None)
