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
