"""Settings of the storage backends: ``settings.storage`` of every service,
``VOICELANE_STORAGE__*`` (see ``docs/storage.md``).

Plain pydantic models, nested in the process's settings (:mod:`voicelane.core.settings`),
reading nothing themselves: importing this module loads neither boto3 nor a backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from voicelane.core.storage.base import MAX_LINK_EXPIRY_S


class LocalStorageSettings(BaseModel):
    """The local directory backend (the embedded default)."""

    model_config = ConfigDict(hide_input_in_errors=True)

    root: Path = Path("var/storage")
    """Relative paths are taken from the working directory."""
    secret: SecretStr | None = Field(None, min_length=32)
    """HMAC key of download links; required unless ``dev_mode``."""
    public_base_url: str = "http://127.0.0.1:8000"
    """Where clients reach the API that serves ``/v1/files/...``."""
    dev_mode: bool = False
    """Without a secret, sign links with a random per-process key (links die with it)."""
    min_free_bytes: int = Field(256 * 1024 * 1024, ge=0)
    """Readiness (``/readyz``) answers 503 ``storage_full`` while the file system holding
    ``root`` has less free space than this (0: never); see docs/operations.md."""

    @field_validator("public_base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("public_base_url must start with http:// or https://")
        return value.rstrip("/")


class S3Settings(BaseModel):
    """An S3-compatible endpoint (AWS when ``endpoint_url`` is None; SeaweedFS in compose)."""

    model_config = ConfigDict(hide_input_in_errors=True)

    endpoint_url: str | None = None
    public_endpoint_url: str | None = None
    """Endpoint used to sign download links when clients reach the store under another name
    than the workers do (``http://s3:9000`` inside compose, ``http://localhost:9000``
    outside); the signature covers the host, so it must be the one clients use."""
    bucket: str = Field("voicelane", pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None
    """Both or neither; neither = boto3's default credential chain (env, profile, role)."""
    connect_timeout_s: float = Field(5.0, gt=0)
    read_timeout_s: float = Field(60.0, gt=0)
    max_attempts: int = Field(5, ge=1, le=20)
    """Attempts per request, the first included (boto3 ``standard`` retry mode)."""
    addressing_style: Literal["path", "virtual", "auto"] = "path"

    @model_validator(mode="after")
    def _credentials_paired(self) -> S3Settings:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("set both access_key_id and secret_access_key, or neither")
        return self


class StorageSettings(BaseModel):
    """Object storage: ``VOICELANE_STORAGE__BACKEND``, ``VOICELANE_STORAGE__S3__BUCKET``..."""

    model_config = ConfigDict(hide_input_in_errors=True)

    backend: Literal["local", "s3"] = "local"
    link_expiry_s: int = Field(3600, ge=1, le=MAX_LINK_EXPIRY_S)
    """Lifetime of download links; the API passes it to :meth:`Storage.link`."""
    local: LocalStorageSettings = Field(default_factory=LocalStorageSettings)
    s3: S3Settings = Field(default_factory=S3Settings)
