"""The roots: one settings tree per process kind, built once when the process starts.

Each command of ``voicelane`` (:mod:`voicelane.api.cli`) builds its process's root — its flags
as keyword arguments, the environment read once (:class:`~voicelane.core.settings.environment.Root`)
— and hands it, or the sections it holds, down to what it runs. Shared parts are declared once:
the Redis URL in :class:`RedisSettings`, what every service reads in :class:`ServiceSettings`
(storage, the real-time lane), the API keys and the LLM in :class:`FrontSettings`, the
device, batcher, ChatTTS and Piper of a process that runs an engine in :class:`EngineSettings`.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, Field, field_validator, model_validator

from voicelane.common.defaults import DEFAULT_SAMPLE_RATE_HZ
from voicelane.common.errors import ConfigError
from voicelane.core.engines import CPU_ENGINES, parse_engines
from voicelane.core.redis_target import RedisTarget, parse_sentinels
from voicelane.core.rules import DEFAULT_VOICE
from voicelane.core.settings.environment import Root
from voicelane.core.settings.sections import (
    BatcherSettings,
    ChatTTSSettings,
    LlmSettings,
    PiperSettings,
    RealtimeSettings,
)
from voicelane.core.storage import StorageSettings

DEVICE_PATTERN = r"^(cpu|cuda:\d+)$"


def cpu_cores() -> int:
    """The cores this process may run on (its affinity), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


class EngineSettings(BaseModel):
    """What a process that runs an engine adds (a worker, the embedded commands)."""

    device: str = Field("cpu", pattern=DEVICE_PATTERN)
    """The engine's device: ``cpu`` or ``cuda:N`` (a worker's ``--device``); a GPU engine
    runs there, a CPU engine (espeak) refuses anything but ``cpu``. The one device setting."""
    batcher: BatcherSettings = Field(default_factory=BatcherSettings)
    chattts: ChatTTSSettings = Field(default_factory=ChatTTSSettings)
    """The ChatTTS engine's settings (used when ``engine`` is ``chattts``)."""
    piper: PiperSettings = Field(default_factory=PiperSettings)
    """The Piper engine's settings (used when ``engine`` is ``piper``)."""
    idle_unload_s: float | None = Field(None, ge=0)
    """``VOICELANE_IDLE_UNLOAD_S``: after this long without work (nothing queued, running or
    streaming in the batcher) a worker's engine frees its weights (GPU memory, resident
    memory); the next request loads it again (it waits for the load, it is not failed).
    None or 0: never. See docs/batcher.md, "Idle unload"."""


class EmbeddedSettings(Root, EngineSettings):
    """``voicelane render`` / ``say`` / ``voices``: one engine in this process, no servers."""

    engine: str = "auto"
    """``auto``: Piper (when installed) for a text without Chinese characters, espeak
    otherwise (:func:`voicelane.workers.render.embedded_engine`); or an engine's name."""
    voice: str = DEFAULT_VOICE
    sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ
    max_segment_chars: int = Field(300, ge=20)
    max_text_chars: int = Field(10_000_000, ge=1)
    paragraph_pause_s: float = Field(0.3, ge=0)
    opus_bitrate_bps: int = Field(32000, ge=6000, le=510000)
    render_window: int = Field(256, ge=1)
    """Segments in flight ahead of the encoder: bounds memory on book-sized input."""
    encode_threads: int = Field(default_factory=lambda: min(4, os.cpu_count() or 1), ge=1)
    """Ogg/Opus encoders working at once on one file, in 10 s pieces
    (:class:`voicelane.common.audio.ogg_parallel.ParallelOggWriter`); 1: one encoder, as a
    stream's. Default: the cores, at most 4."""


class CliSettings(Root):
    """The command line's own settings (every command): the client commands' key and server,
    and whether an unexpected error shows its traceback."""

    api_key: str | None = None
    """The key of ``say --server``, ``chat`` and ``jobs submit`` when ``--key`` is not given."""
    server: str = "http://127.0.0.1:8000"
    """The REST API ``jobs submit`` talks to when ``--server`` is not given."""
    debug: bool = False
    """Show the traceback of an unexpected error instead of one line."""


class RedisSettings(Root):
    """``voicelane redis``: a Redis of our own; the base of every service's settings."""

    redis_url: str = "redis://127.0.0.1:6379/0"
    """The one Redis; with ``redis_sentinels`` only its password and database are read."""
    redis_sentinels: str = ""
    """``host:port,host:port,...``: Redis through Sentinel (high availability): every client
    asks these for the primary named ``redis_master_name``; ``voicelane up`` starts no Redis
    of its own. Empty: the one Redis of ``redis_url`` (docs/operations.md, "Redis high
    availability")."""
    redis_master_name: str = Field("voicelane", min_length=1)
    redis_replica_acks: int = Field(1, ge=0)
    """With sentinels: replicas every write waits for (``WAIT``) before it is acknowledged —
    set it to the number of replicas; a write not acknowledged in time is a 503 (it may sit on
    a stale primary that a failover will wipe). 0: off — acknowledged writes can be lost in a
    failover (docs/operations.md, "Redis high availability")."""
    redis_replica_ack_timeout_ms: int = Field(1000, ge=1)
    """How long a write waits for its replica acknowledgements."""
    redis_maxmemory_bytes: int = Field(1024**3, ge=16 * 1024**2)
    """The memory budget of a Redis that voicelane starts itself (``voicelane up``,
    ``voicelane redis``); past it Redis refuses writes (``noeviction``) and new work gets
    503 / RESOURCE_EXHAUSTED. The budget is sized in docs/operations.md."""

    @field_validator("redis_sentinels")
    @classmethod
    def _sentinels_parse(cls, value: str) -> str:
        try:
            parse_sentinels(value)
        except ConfigError as error:
            raise ValueError(error.message) from None
        return value

    def redis_target(self) -> RedisTarget:
        """Where this process's clients find Redis (:mod:`voicelane.core.redis_clients`)."""
        return RedisTarget(
            url=self.redis_url,
            sentinels=parse_sentinels(self.redis_sentinels),
            master_name=self.redis_master_name,
            replica_acks=self.redis_replica_acks,
            replica_ack_timeout_ms=self.redis_replica_ack_timeout_ms,
        )


class ServiceSettings(RedisSettings):
    """What every service process shares (workers, API, gRPC front, Flower, ``up``)."""

    dev_mode: bool = False
    """Allows built-in development secrets (API key, Flower password). Never in production."""
    metrics_port: int | None = Field(None, ge=1, le=65535)
    """Where a worker or the gRPC front serves its Prometheus ``/metrics`` (None: not served;
    the REST API serves it on its own port). ``voicelane up`` gives each process one."""
    metrics_host: str = "127.0.0.1"
    engine: str = "espeak"
    """A worker's engine (one per worker process); the fronts' when ``engines`` is unset."""
    engines: str = ""
    """The engines the deployment serves, in order of preference (``piper,espeak``): the
    fronts route each voice to its engine (docs/engines.md, "Several engines"), and
    ``voicelane up`` starts render workers for each. Empty: ``engine`` alone."""
    max_text_chars: int = Field(1_000_000, ge=1)
    max_segment_chars: int = Field(300, ge=20)
    chunk_target_audio_s: float = Field(20.0, gt=0)
    """A job's chunks hold about this much audio (estimated from the text)."""
    chunk_max_chars: int = Field(1200, ge=20)
    paragraph_pause_s: float = Field(0.3, ge=0)
    chapter_pause_s: float = Field(1.5, ge=0, le=30)
    """Silence between a document's chapters in a job's audio (after the paragraph pause)."""
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
    tenant_max_stored_bytes: int = Field(10 * 1024**3, ge=1)
    """Bytes of a tenant's finished outputs (done jobs' audio files until ``job_retention_s``
    forgets them, 10 GiB): past it new jobs are refused with 429 ``quota_exceeded``, so one
    tenant cannot fill the storage for everyone (checked at submission)."""
    tenant_max_streams: int = Field(16, ge=1)
    """Real-time streams one tenant may hold open at once (every front together)."""
    job_retention_s: float = Field(30 * 24 * 3600.0, gt=0)
    """A job that ended is forgotten this long after: its record and its files (the
    reconciler sweeps them). Its id then answers 404."""
    render_queue_target: int = Field(16, ge=1)
    """Chunks kept waiting in the ``render`` queue; the rest wait in per-tenant lists and are
    fed in turn (round robin over tenants), and a tenant with none queued gets one in
    regardless, at the front (docs/batch-lane.md, "Fair feed"). Keep it about the number of
    render threads of all GPU workers: higher keeps GPUs busier between feeds."""
    realtime: RealtimeSettings = Field(default_factory=RealtimeSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    """Object storage (``VOICELANE_STORAGE__*``, docs/storage.md)."""

    def served_engines(self) -> tuple[str, ...]:
        """``engines`` parsed (ConfigError when it names an unknown engine), or ``engine``."""
        if self.engines.strip():
            return parse_engines(self.engines, field="engines")
        return (self.engine,)


class WorkerSettings(ServiceSettings, EngineSettings):
    """``voicelane worker``: one engine + one batcher + a Celery consumer (GPU side), or the
    CPU side (``--queues control,assemble``; ``callbacks``: the callback worker) without an
    engine."""

    concurrency: int | None = Field(None, ge=1)
    """Celery threads: chunks rendered at once, all feeding the one batcher. None: 16 for an
    engine that batches, 4 for one that renders one utterance at a time (espeak) — more
    threads would only compete with real-time sessions for the process's CPU."""
    queues: str = "render"
    realtime_enabled: bool = True
    """A render worker also serves the real-time lane (its stream requests)."""
    gil_switch_interval_s: float = Field(0.001, ge=0)
    """``sys.setswitchinterval`` of a render worker (Python's default is 0.005): how long a
    busy thread may keep the GIL from a real-time session that woke up. 0: leave it."""


class FrontSettings(ServiceSettings):
    """What the two fronts that take API keys share (REST and gRPC)."""

    api_keys: str | None = None
    """``tenant:key,tenant:key``; required unless dev_mode (then ``demo:demo-key``)."""
    llm: LlmSettings = Field(default_factory=LlmSettings)
    """The front's LLM bridge (``VOICELANE_LLM__*``; docs/llm.md)."""


class ApiSettings(FrontSettings):
    """``voicelane api``: the REST front."""

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    max_upload_bytes: int = Field(8 * 1024 * 1024, ge=1)
    """Largest job body (JSON or upload); bigger bodies are refused while they stream in."""
    page_size_max: int = Field(100, ge=1)
    websocket_auth_timeout_s: float = Field(5.0, gt=0)
    """A WebSocket must send its request (and key) within this, or it is closed."""
    websocket_max_per_address: int = Field(32, ge=1)
    """Open WebSockets per client address (this API process); more are closed at once."""
    websocket_max_connections: int = Field(2000, ge=1)
    """Open WebSockets in this API process, all clients together."""
    websocket_preauth_max_bytes: int = Field(64 * 1024, ge=1024)
    """Largest message (inflated, if the client deflates) of a WebSocket without an
    ``Authorization`` header: its request carries its key and is read before the key is
    checked. Bigger ones are cut while they arrive, close 1009 (docs/security.md)."""
    websocket_max_message_bytes: int = Field(1024 * 1024, ge=1024)
    """Largest message (inflated) of a WebSocket with its key in the headers."""
    agent_max_contexts: int = Field(8, ge=1)
    """Open contexts per agent-protocol WebSocket (``GET /v1/agent``); an ``append`` opening
    one more is an error of that context (``too_many_contexts``)."""
    metrics_token: str | None = None
    """Bearer token for ``/metrics``; unset: ``/metrics`` is open in dev mode only."""
    tenant_max_voices: int = Field(32, ge=1)
    """Voices one tenant may keep (``POST /v1/voices``); more are refused (413) until it
    deletes one."""
    voice_clip_min_s: float = Field(3.0, gt=0)
    """Shortest reference clip of a clip voice (zero-shot needs some speech to go on)."""
    voice_clip_max_s: float = Field(30.0, gt=0, le=30.0)
    """Longest reference clip; decoding an upload stops as soon as it passes this."""
    voice_clip_max_bytes: int = Field(512 * 1024, ge=1024)
    """Largest reference clip as stored (Ogg Opus, 48 kbps: 30 s are about 180 KB)."""
    openai_voices: dict[str, str] = Field(default_factory=dict)
    """OpenAI's voice names (or aliases of the operator's own) → voicelane voice ids, for the
    OpenAI routes (``{"ash": "piper:en_US-joe-medium"}``; JSON in
    ``VOICELANE_OPENAI_VOICES``). A name left out takes its default over the engines served
    (:mod:`voicelane.api.openai_voices`; ``GET /v1/audio/voices`` shows the mapping)."""

    @field_validator("openai_voices")
    @classmethod
    def _openai_voices_named(cls, value: dict[str, str]) -> dict[str, str]:
        for name, voice in value.items():
            if not name.strip() or not voice.strip():
                raise ValueError(f"openai_voices: {name!r} → {voice!r}: a name and a voice")
        return {name.strip().lower(): voice.strip() for name, voice in value.items()}

    @model_validator(mode="after")
    def _clip_bounds_consistent(self) -> ApiSettings:
        if self.voice_clip_min_s > self.voice_clip_max_s:
            raise ValueError("voice_clip_min_s must not be above voice_clip_max_s")
        return self


class GrpcSettings(FrontSettings):
    """``voicelane grpc``: the thin gRPC front of the real-time lane."""

    grpc_host: str = "127.0.0.1"
    grpc_port: int = Field(50051, ge=1, le=65535)
    max_message_bytes: int = Field(1024 * 1024, ge=1024)
    max_concurrent_rpcs: int = Field(1000, ge=1)
    """Calls with a key this process holds at once, all tenants together; over it:
    RESOURCE_EXHAUSTED ``no_capacity``. Counted by the front after the key is checked (not
    grpcio's limit of the same name, which counted health checks and keyless calls too)."""
    tenant_max_rpcs: int = Field(100, ge=1)
    """Calls one tenant may hold open on this process at once (any method); over it:
    RESOURCE_EXHAUSTED ``quota_exceeded`` with a retry hint. Its idle calls count against
    itself only."""
    max_public_rpcs: int = Field(100, ge=1)
    """Keyless calls that can stay open (health ``Watch``, server reflection) held at once;
    health ``Check`` is never counted."""
    converse_start_timeout_s: float = Field(5.0, gt=0)
    """A ``Converse`` call must send its ``start`` within this, or it ends with
    DEADLINE_EXCEEDED (its place freed for others)."""
    keepalive_time_s: float = Field(30.0, gt=0)
    keepalive_timeout_s: float = Field(10.0, gt=0)
    shutdown_grace_s: float = Field(5.0, ge=0)


class WyomingSettings(FrontSettings):
    """``voicelane wyoming``: the Wyoming protocol server (Home Assistant's voice protocol).
    Wyoming has no authentication: every client acts as the tenant of ``wyoming_api_key``
    (docs/security.md, "Wyoming")."""

    wyoming_host: str = "127.0.0.1"
    """Where it listens; anyone who reaches it speaks as its tenant, so keep it on a trusted
    network (loopback by default)."""
    wyoming_port: int = Field(10200, ge=1, le=65535)
    wyoming_api_key: str | None = None
    """The API key (one of ``api_keys``) whose tenant Wyoming clients act as: its quotas, its
    voices and lexicons. Unset: the dev-mode tenant (``demo``) in dev mode without
    ``api_keys``; otherwise the server refuses to start."""
    wyoming_max_connections: int = Field(64, ge=1)
    """Connections held at once; more are answered with an error and closed."""
    wyoming_idle_timeout_s: float = Field(60.0, gt=0)
    """A connection with nothing to do (no synthesis running) for this long is closed."""
    wyoming_max_event_bytes: int = Field(256 * 1024, ge=4096)
    """Largest event a client may send (its header line, data and payload together); a
    bigger one is answered with an error and the connection closed."""
    wyoming_samples_per_chunk: int = Field(1024, ge=64, le=65536)
    """Samples per ``audio-chunk`` event (wyoming-piper's 1024: about 46 ms at 22,050 Hz)."""
    shutdown_grace_s: float = Field(5.0, ge=0)


class FlowerSettings(ServiceSettings):
    """``voicelane flower``: read-only Flower with basic auth."""

    flower_host: str = "127.0.0.1"
    flower_port: int = Field(5555, ge=1, le=65535)
    flower_basic_auth: str | None = None
    """``user:password``; required unless dev_mode (then ``admin:admin``)."""


class StackSettings(WorkerSettings, ApiSettings, GrpcSettings, WyomingSettings, FlowerSettings):
    """``voicelane up``: the whole stack on one machine. Its tree is the union of its
    children's (they read the same environment), so a setting any child would refuse stops
    ``up`` at start instead of a child in a restart loop."""

    render_workers: int | None = Field(None, ge=1)
    """Render (GPU-side) worker processes. None: one per CPU core for a CPU engine (one
    batcher per device, a core being the device: each process has its own GIL), one for a
    GPU engine (one worker per GPU; run more by hand on a multi-GPU host)."""

    metrics_base_port: int = Field(9101, ge=1, le=65000)
    """The workers, the gRPC front and the Wyoming server serve ``/metrics`` on consecutive
    ports from here (the API on its own port); the list is written to
    ``{state_dir}/prometheus-targets.json``."""

    llm_standin_port: int = Field(11434, ge=1, le=65535)
    """``up --llm-standin``: the port of the stand-in Ollama server (Ollama's own port)."""
    llm_local_port: int = Field(8080, ge=1, le=65535)
    """``up --llm local``: the port of the local LLM server (llama.cpp's own default)."""
    llm_local_threads: int = Field(2, ge=1)
    """``up --llm local``: CPU threads the local LLM generates with."""

    def render_worker_count(self, engine: str | None = None) -> int:
        """Render workers of ``engine`` (None: ``engine``'s). A GPU engine gets one; the CPU
        engines served share the cores: one worker per core each when one is served, the
        cores divided between them when several are (at least one each)."""
        if self.render_workers is not None:
            return self.render_workers
        engine = engine or self.engine
        if engine not in CPU_ENGINES:
            return 1
        cores = cpu_cores()
        cpu_served = [name for name in self.served_engines() if name in CPU_ENGINES] or [engine]
        return max(1, cores // len(cpu_served))


ROOTS: tuple[type[Root], ...] = (
    EmbeddedSettings,
    CliSettings,
    RedisSettings,
    WorkerSettings,
    ApiSettings,
    GrpcSettings,
    WyomingSettings,
    FlowerSettings,
    StackSettings,
)
"""Every process kind's root (``ServiceSettings`` and ``FrontSettings`` are shared bases)."""
