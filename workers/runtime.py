"""The worker process: ``voicelane worker``.

A GPU worker (queue ``render``) holds one engine and one batcher, shared by every Celery
thread rendering chunks (and, with the real-time lane, by the real-time consumer): many
chunks in flight, one model, batched. It publishes the engine's capabilities (voices, speed
range) for the fronts' request rules. A CPU worker (``--queues control,assemble``) holds no
engine; it plans jobs, assembles and uploads files and runs the reconciler. A callback worker
(``--queues callbacks``) holds no engine either and only calls job callbacks: a slow receiver
holds its threads, never the CPU worker's.

:class:`WorkerProcess` is the process's lifecycle (what starts and stops with it); the
:class:`~voicelane.workers.jobs.JobContext` it installs (:mod:`voicelane.workers.context`) is what
the tasks need.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass

from celery.signals import worker_ready

from voicelane.core import metrics
from voicelane.core.batch_lane import ASSEMBLE_QUEUE, CALLBACKS_QUEUE, CONTROL_QUEUE, RENDER_QUEUE
from voicelane.core.engines import render_queue
from voicelane.core.lane.worker import RealtimeWorkerClient
from voicelane.core.ledger import Ledger
from voicelane.core.settings import WorkerSettings
from voicelane.core.storage import open_storage
from voicelane.workers import context
from voicelane.workers.batching import Batcher
from voicelane.workers.celery_app import configure, enqueue
from voicelane.workers.jobs import JobContext, LeaseKeeper
from voicelane.workers.metrics import register_worker_metrics
from voicelane.workers.realtime import RealtimeConsumer
from voicelane.workers.reconciler import Reconciler

log = logging.getLogger(__name__)


@dataclass
class WorkerProcess:
    """What runs beside the Celery consumer in one worker process, and its shutdown."""

    jobs: JobContext
    realtime: RealtimeConsumer | None = None
    reconciler: Reconciler | None = None

    def close(self) -> None:
        if self.reconciler is not None:
            self.reconciler.close()
        if self.realtime is not None:
            self.realtime.close()
        if self.jobs.leases is not None:
            self.jobs.leases.close()
        if self.jobs.batcher is not None:
            self.jobs.batcher.close(drain=False)


def start_worker_process(
    settings: WorkerSettings, *, queues: list[str], name: str
) -> WorkerProcess:
    ledger = Ledger.from_url(settings.redis_target())
    storage = open_storage(settings.storage, dev_mode=settings.dev_mode)
    storage.prepare()
    jobs = JobContext(
        settings=settings, ledger=ledger, storage=storage, worker_name=name, enqueue=enqueue
    )
    jobs.leases = LeaseKeeper(ledger, settings.lease_ttl_s)
    process = WorkerProcess(jobs)
    if render_queue(settings.engine) in queues:
        from voicelane.workers.engines import create_engine

        engine = create_engine(
            settings.engine, device=settings.device, chattts=settings.chattts, piper=settings.piper
        )
        jobs.batcher = Batcher(
            engine,
            settings.batcher,
            name=f"batcher-{name}",
            idle_unload_s=settings.idle_unload_s,
        ).start()
        lane = RealtimeWorkerClient.from_url(
            settings.redis_target(), name, settings.realtime, engine=engine.name
        )
        lane.publish_capabilities(engine.capabilities())
        if settings.realtime_enabled:
            process.realtime = RealtimeConsumer(jobs.batcher, lane, settings.realtime).start()
    if CONTROL_QUEUE in queues:
        process.reconciler = Reconciler(jobs).start()
    return process


def worker_queues(settings: WorkerSettings) -> list[str]:
    """The Celery queues of ``settings.queues``: ``render`` is the render queue of the
    worker's engine (``render.piper``), the only one it may take."""
    queues = []
    for given in settings.queues.split(","):
        name = render_queue(settings.engine) if given.strip() == RENDER_QUEUE else given.strip()
        if name and name not in queues:
            queues.append(name)
    allowed = {CONTROL_QUEUE, render_queue(settings.engine), ASSEMBLE_QUEUE, CALLBACKS_QUEUE}
    unknown = set(queues) - allowed
    if unknown:
        raise ValueError(
            f"unknown queues: {', '.join(sorted(unknown))} (a {settings.engine} worker takes "
            f"{', '.join(sorted(allowed))}, or render)"
        )
    return queues


def default_concurrency(jobs: JobContext) -> int:
    """Chunk threads when not configured: enough to fill the batcher's batches."""
    if jobs.batcher is None:
        return 16  # CPU side: assembly, planning (or callbacks)
    return 4 if jobs.batcher.max_batch == 1 else 16


def _reload_on_sighup(batcher: Batcher) -> None:
    """SIGHUP hot-swaps the engine's weights (``Batcher.reload``) instead of Celery's default
    (restarting the whole worker, which drops its real-time streams). Installed once the
    worker is ready, over Celery's own handler."""

    def reload(*_: object) -> None:
        log.info("SIGHUP: reloading engine %s", batcher.engine.name)
        batcher.reload()  # the batcher logs the outcome (memory before/after, or the failure)

    def install(**_: object) -> None:
        signal.signal(signal.SIGHUP, reload)

    worker_ready.connect(install, weak=False)


def run_worker(settings: WorkerSettings, *, hostname: str | None = None) -> int:
    """Run a Celery worker (threads pool) on ``settings.queues`` until it is stopped."""
    from voicelane.workers import tasks  # noqa: F401 - registers the tasks

    queues = worker_queues(settings)
    kind = "gpu" if render_queue(settings.engine) in queues else "cpu"
    name = hostname or f"{kind}-{os.getpid()}@{socket.gethostname()}"
    if kind == "gpu" and settings.gil_switch_interval_s:
        # Real-time sessions wake up for I/O and must get the GIL back quickly from the
        # chunk threads' numpy work: Python's default 5 ms hand-over adds up per packet.
        sys.setswitchinterval(settings.gil_switch_interval_s)
    app = configure(settings)
    process = start_worker_process(settings, queues=queues, name=name)
    context.install(process.jobs)
    if process.jobs.batcher is not None:
        _reload_on_sighup(process.jobs.batcher)
    if settings.metrics_port:
        realtime = process.realtime
        register_worker_metrics(
            settings.device,
            process.jobs.batcher,
            (lambda: realtime.free_slots) if realtime is not None else None,
            settings.realtime.slots_per_worker,
        )
        metrics.serve(settings.metrics_port, settings.metrics_host)
    try:
        worker = app.Worker(
            hostname=name,
            pool_cls="threads",
            concurrency=settings.concurrency or default_concurrency(process.jobs),
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
        process.close()
        context.install(None)
