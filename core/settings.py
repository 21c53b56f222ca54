"""Settings: one pydantic-settings object per process kind, environment prefix ``VOICELANE_``.

Nested fields use ``__``: ``VOICELANE_BATCHER__MAX_BATCH=32``. Every field is documented in
``docs/configuration.md``; keep the two in step.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from voicelane.common.audio.pcm import DEFAULT_SAMPLE_RATE_HZ
from voicelane.common.errors import ConfigError
from voicelane.core.rules import DEFAULT_VOICE
from voicelane.core.storage import StorageSettings


class BatcherSettings(BaseModel):
    """The dynamic batcher of one engine (see DESIGN.md): ``voicelane.workers.batching.Batcher``
    takes this object as its configuration."""

    model_config = ConfigDict(frozen=True)

    max_batch: int = Field(64, ge=1)
    """Most items in one engine call."""
    max_batch_cost: int | None = Field(None, ge=1)
    """Most total cost (characters of text) in one call; None: no cost limit."""
    max_wait_realtime_s: float = Field(0.005, ge=0)
    """How long the oldest real-time item may wait for its batch to fill."""
    max_wait_batch_s: float = Field(0.030, ge=0)
    """How long the oldest batch item may wait for its batch to fill."""
    grow_after_successes: int = Field(8, ge=1)
    """After an OOM halving, double max_batch back after this many good batches in a row
    (with continuous batching: this many rows completed since the last OOM)."""
    continuous: bool = True
    """For an engine that steps a running batch (``Engine.steps``): schedule it per step,
    rows joining and leaving between steps (continuous batching), instead of static batches.
    ``max_wait_*`` and ``max_batch_cost`` do not apply then. Other engines ignore this."""
    realtime_solo_steps: int = Field(32, ge=0)
    """Continuous batching: while a real-time row waits for its first audio, and a step of the
    real-time rows alone costs less than 0.6 of a step of the whole batch (measured), step the
    real-time rows alone — at most this many steps in a row before the batch rows step again
    (0: never). Where a step's cost hardly depends on its rows (a GPU), it never applies."""


class RealtimeSettings(BaseModel):
    """The real-time lane's timings, shared by fronts and workers (``VOICELANE_REALTIME__*``)."""

    heartbeat_ttl_s: float = Field(3.0, gt=0)
    """A session heartbeat lapses this long after its worker stopped refreshing it."""
    reclaim_idle_s: float = Field(3.0, gt=0)
    """A request unrefreshed this long is taken over by another worker."""
    worker_ttl_s: float = Field(3.0, gt=0)
    """A worker's capacity report counts for this long."""
    output_ttl_s: float = Field(120.0, gt=0)
    """Output streams (and so resume) live this long after their last write."""
    claim_timeout_s: float = Field(4.0, gt=0)
    """A front ends a stream with UNAVAILABLE when no worker picked it up within this."""
    unavailable_after_s: float = Field(4.0, gt=0)
    """...or when its worker's heartbeat has lapsed this long and nobody took over."""
    slots_per_worker: int = Field(80, ge=1)
    """Concurrent real-time sessions a GPU worker serves."""
    lookahead_s: float = Field(3.0, ge=0)
    """Workers submit the next sentence while less than this much audio is ahead of
    playback: real-time work stays just ahead of the listener, leaving the GPU to batch work."""
    encode_ahead_s: float = Field(0.5, ge=0)
    """Resampling and Opus encoding run at most this far ahead of playback."""
    frames_per_chunk: int = Field(10, ge=1)
    """Opus packets (20 ms each) per AudioChunk message, once the first chunk is out."""
    opus_bitrate_bps: int = Field(32000, ge=6000, le=510000)
    default_deadline_s: float = Field(300.0, gt=0)
    """Deadline of a stream whose client set none."""
    cancel_ttl_s: float = Field(300.0, gt=0)
    """A cancel mark is kept this long (longer than any worker could still be serving)."""
    max_deadline_s: float = Field(3600.0, gt=0)
    """A stream's deadline is capped at this (a client may ask for more): it bounds how long
    anything of a stream is kept, and how long a stream left open holds its tenant's slot."""


class EmbeddedSettings(BaseSettings):
    """The embedded default: ``voicelane render`` / ``say`` in one process, no servers."""

    model_config = SettingsConfigDict(
        env_prefix="VOICELANE_", env_nested_delimiter="__", extra="ignore"
    )

    engine: str = "espeak"
    voice: str = DEFAULT_VOICE
    sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ
    max_segment_chars: int = Field(300, ge=20)
    max_text_chars: int = Field(10_000_000, ge=1)
    paragraph_pause_s: float = Field(0.3, ge=0)
    opus_bitrate_bps: int = Field(32000, ge=6000, le=510000)
    render_window: int = Field(256, ge=1)
    """Segments in flight ahead of the encoder: bounds memory on book-sized input."""
    batcher: BatcherSettings = Field(default_factory=BatcherSettings)


class ServiceSettings(BaseSettings):
    """What every service process shares (workers, API, gRPC front, Flower, ``up``)."""

    model_config = SettingsConfigDict(
        env_prefix="VOICELANE_", env_nested_delimiter="__", extra="ignore"
    )

    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_maxmemory_bytes: int = Field(1024**3, ge=16 * 1024**2)
    """The memory budget of a Redis that voicelane starts itself (``voicelane up``,
    ``voicelane redis``); past it Redis refuses writes (``noeviction``) and new work gets
    503 / RESOURCE_EXHAUSTED. The budget is sized in docs/operations.md."""
    dev_mode: bool = False
    """Allows built-in development secrets (API key, Flower password). Never in production."""
    metrics_port: int | None = Field(None, ge=1, le=65535)
    """Where a worker or the gRPC front serves its Prometheus ``/metrics`` (None: not served;
    the REST API serves it on its own port). ``voicelane up`` gives each process one."""
    metrics_host: str = "127.0.0.1"
    engine: str = "espeak"
    max_text_chars: int = Field(1_000_000, ge=1)
    max_segment_chars: int = Field(300, ge=20)
    chunk_target_audio_s: float = Field(20.0, gt=0)
    """A job's chunks hold about this much audio (estimated from the text)."""
    chunk_max_chars: int = Field(1200, ge=20)
    paragraph_pause_s: float = Field(0.3, ge=0)
    max_chunk_attempts: int = Field(3, ge=1)
    lease_ttl_s: float = Field(10.0, gt=0)
    """A chunk's lease lapses this long after its worker stopped renewing it (died)."""
    render_time_limit_s: float = Field(600.0, gt=0)
    """Longest a chunk may take (queue wait in the batcher included) before it is retried."""
    stall_timeout_s: float = Field(120.0, gt=0)
    """A job with no progress for this long gets its unfinished work re-enqueued."""
    reconcile_interval_s: float = Field(2.0, gt=0)
    callback_timeout_s: float = Field(5.0, gt=0)
    callback_max_attempts: int = Field(5, ge=1)
    callback_signing_secret: str | None = None
    """Master secret of the callback signatures (each tenant's secret is derived from it);
    required for callbacks unless dev_mode. See docs/security.md."""
    callback_allow: str = ""
    """Comma-separated hosts and networks (CIDR) callbacks may reach even though they are
    private, loopback or link-local (an operator's own receivers); empty: none."""

    @field_validator("callback_allow")
    @classmethod
    def _allow_list_parses(cls, value: str) -> str:
        from voicelane.core.callbacks import AllowList

        try:
            AllowList.parse(value)
        except ConfigError as error:
            raise ValueError(error.message) from None
        return value

    max_stream_text_chars: int = Field(20_000, ge=1)
    """Longest text one real-time stream may speak (in total, for Converse)."""
    tenant_requests_per_s: float = Field(20.0, gt=0)
    """Submissions (jobs and streams, every front together) a tenant may make per second,
    sustained; over it: 429 / RESOURCE_EXHAUSTED with a retry hint."""
    tenant_request_burst: int = Field(40, ge=1)
    """...and in one burst."""
    tenant_max_queued_chars: int = Field(5_000_000, ge=1)
    """Characters of a tenant's unfinished jobs, together (5 M characters are about 90 hours
    of speech): bounds what one tenant can put in Redis."""
    tenant_max_streams: int = Field(16, ge=1)
    """Real-time streams one tenant may hold open at once (every front together)."""
    job_retention_s: float = Field(30 * 24 * 3600.0, gt=0)
    """A job that ended is forgotten this long after: its record and its files (the
    reconciler sweeps them). Its id then answers 404."""
    render_queue_target: int = Field(16, ge=1)
    """Chunks kept waiting in the ``render`` queue; the rest wait in per-tenant lists and are
    fed in turn (round robin over tenants). Keep it about the number of render threads of
    all GPU workers: higher keeps GPUs busier, lower lets a new tenant in sooner."""
    realtime: RealtimeSettings = Field(default_factory=RealtimeSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    """Object storage (its own variables: ``VOICELANE_STORAGE_*``, see docs/storage.md)."""


class WorkerSettings(ServiceSettings):
    """``voicelane worker``: one engine + one batcher + a Celery consumer (GPU side), or the
    CPU side (``--queues control,assemble``) without an engine."""

    device: str = Field("cpu", pattern=r"^(cpu|cuda:\d+)$")
    """The engine's device: ``cpu`` or ``cuda:N`` (``--device``); a GPU engine runs there, a
    CPU engine (espeak) refuses anything but ``cpu``."""
    concurrency: int | None = Field(None, ge=1)
    """Celery threads: chunks rendered at once, all feeding the one batcher. None: 16 for an
    engine that batches, 4 for one that renders one utterance at a time (espeak) — more
    threads would only compete with real-time sessions for the process's CPU."""
    queues: str = "render"
    batcher: BatcherSettings = Field(default_factory=BatcherSettings)
    realtime_enabled: bool = True
    """A render worker also serves the real-time lane (its stream requests)."""
    gil_switch_interval_s: float = Field(0.001, ge=0)
    """``sys.setswitchinterval`` of a render worker (Python's default is 0.005): how long a
    busy thread may keep the GIL from a real-time session that woke up. 0: leave it."""


CPU_ENGINES = frozenset({"espeak"})
"""Engines that run on the CPU: for them a core is the device."""


class StackSettings(ServiceSettings):
    """``voicelane up``: the whole stack on one machine."""

    render_workers: int | None = Field(None, ge=1)
    """Render (GPU-side) worker processes. None: one per CPU core for a CPU engine (one
    batcher per device, a core being the device: each process has its own GIL), one for a
    GPU engine (one worker per GPU; run more by hand on a multi-GPU host)."""

    metrics_base_port: int = Field(9101, ge=1, le=65000)
    """The workers and the gRPC front serve ``/metrics`` on consecutive ports from here (the
    API on its own port); the list is written to ``{state_dir}/prometheus-targets.json``."""

    llm_standin_port: int = Field(11434, ge=1, le=65535)
    """``up --llm-standin``: the port of the stand-in Ollama server (Ollama's own port)."""

    def render_worker_count(self) -> int:
        if self.render_workers is not None:
            return self.render_workers
        if self.engine in CPU_ENGINES:
            return max(
                1,
                len(os.sched_getaffinity(0))
                if hasattr(os, "sched_getaffinity")
                else (os.cpu_count() or 1),
            )
        return 1


class ApiSettings(ServiceSettings):
    """``voicelane api``: the REST front."""

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    api_keys: str | None = None
    """``tenant:key,tenant:key``; required unless dev_mode (then ``demo:demo-key``)."""
    max_upload_bytes: int = Field(8 * 1024 * 1024, ge=1)
    """Largest job body (JSON or upload); bigger bodies are refused while they stream in."""
    page_size_max: int = Field(100, ge=1)
    websocket_auth_timeout_s: float = Field(5.0, gt=0)
    """A WebSocket must send its request (and key) within this, or it is closed."""
    websocket_max_per_address: int = Field(32, ge=1)
    """Open WebSockets per client address (this API process); more are closed at once."""
    websocket_max_connections: int = Field(2000, ge=1)
    """Open WebSockets in this API process, all clients together."""
    metrics_token: str | None = None
    """Bearer token for ``/metrics``; unset: ``/metrics`` is open in dev mode only."""


class FlowerSettings(ServiceSettings):
    """``voicelane flower``: read-only Flower with basic auth."""

    flower_host: str = "127.0.0.1"
    flower_port: int = Field(5555, ge=1, le=65535)
    flower_basic_auth: str | None = None
    """``user:password``; required unless dev_mode (then ``admin:admin``)."""


class GrpcSettings(ServiceSettings):
    """``voicelane grpc``: the thin gRPC front of the real-time lane."""

    grpc_host: str = "127.0.0.1"
    grpc_port: int = Field(50051, ge=1, le=65535)
    api_keys: str | None = None
    """The same ``tenant:key,...`` as the REST API; required unless dev_mode."""
    max_message_bytes: int = Field(1024 * 1024, ge=1024)
    max_concurrent_rpcs: int = Field(1000, ge=1)
    keepalive_time_s: float = Field(30.0, gt=0)
    keepalive_timeout_s: float = Field(10.0, gt=0)
    shutdown_grace_s: float = Field(5.0, ge=0)
