"""Settings: one pydantic-settings object per process kind, environment prefix ``VOICELANE_``.

Nested fields use ``__``: ``VOICELANE_BATCHER__MAX_BATCH=32``. Every field is documented in
``docs/configuration.md``; keep the two in step.
"""

from __future__ import annotations

from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class BatcherSettings(BaseModel):
    """The dynamic batcher of one engine (see DESIGN.md)."""

    max_batch: int = Field(64, ge=1)
    max_batch_cost: int | None = Field(None, ge=1)
    max_wait_realtime_s: float = Field(0.005, ge=0)
    max_wait_batch_s: float = Field(0.030, ge=0)
    grow_after_successes: int = Field(8, ge=1)


class EmbeddedSettings(BaseSettings):
    """The embedded default: ``voicelane render`` / ``say`` in one process, no servers."""

    model_config = SettingsConfigDict(
        env_prefix="VOICELANE_", env_nested_delimiter="__", extra="ignore"
    )

    engine: str = "espeak"
    voice: str = "auto"
    sample_rate_hz: int = 24000
    max_segment_chars: int = Field(300, ge=20)
    max_text_chars: int = Field(10_000_000, ge=1)
    paragraph_pause_s: float = Field(0.3, ge=0)
    opus_bitrate_bps: int = Field(32000, ge=6000, le=510000)
    render_window: int = Field(256, ge=1)
    """Segments in flight ahead of the encoder: bounds memory on book-sized input."""
    batcher: BatcherSettings = Field(default_factory=BatcherSettings)


class LaneSettings(BaseSettings):
    """What every process of the two lanes shares (worker, CPU worker, API, Flower, up)."""

    model_config = SettingsConfigDict(
        env_prefix="VOICELANE_", env_nested_delimiter="__", extra="ignore"
    )

    redis_url: str = "redis://127.0.0.1:6379/0"
    dev_mode: bool = False
    """Allows built-in development secrets (API key, Flower password). Never in production."""
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


class WorkerSettings(LaneSettings):
    """``voicelane worker``: one engine + one batcher + a Celery consumer (GPU side), or the
    CPU side (``--queues control,assemble``) without an engine."""

    device: str = "cpu"
    concurrency: int = Field(16, ge=1)
    """Celery threads: chunks rendered at once, all feeding the one batcher."""
    queues: str = "render"
    batcher: BatcherSettings = Field(default_factory=BatcherSettings)


class ApiSettings(LaneSettings):
    """``voicelane api``: the REST front."""

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    api_keys: str | None = None
    """``tenant:key,tenant:key``; required unless dev_mode (then ``demo:demo-key``)."""
    max_upload_bytes: int = Field(8 * 1024 * 1024, ge=1)
    page_size_max: int = Field(100, ge=1)


class FlowerSettings(LaneSettings):
    """``voicelane flower``: read-only Flower with basic auth."""

    flower_host: str = "127.0.0.1"
    flower_port: int = Field(5555, ge=1, le=65535)
    flower_basic_auth: str | None = None
    """``user:password``; required unless dev_mode (then ``admin:admin``)."""
