"""Object storage for the batch lane: S3 (any S3-compatible endpoint) and a local directory.

Finished audio files and chunk parts live under keys ``{tenant}/{job_id}/...``. Both backends
implement :class:`Storage`; :func:`open_storage` picks one from :class:`StorageSettings`.
``docs/storage.md`` is the long form of these docstrings. One module per concern:

- :mod:`voicelane.core.storage.base`: the :class:`Storage` interface, :class:`StoredObject`, and the
key,
  prefix, content-type, file-name and link-expiry rules both backends share;
- :mod:`voicelane.core.storage.settings`: :class:`StorageSettings` (``VOICELANE_STORAGE__*``);
- :mod:`voicelane.core.storage.local`: :class:`LocalStorage`, a directory, with HMAC-signed links;
- :mod:`voicelane.core.storage.s3`: :class:`S3Storage`, through boto3 (imported lazily, on the first
  client: ``import voicelane.core.storage`` does not import boto3).

Everything public is re-exported here: import it from ``voicelane.core.storage``.

Errors
------
Every error is a :class:`~voicelane.common.errors.VoicelaneError` with a one-line message. Network
failures, timeouts and 5xx/throttling answers are :class:`StorageUnavailableError`
(transient: Celery retries them); a full store (``ENOSPC``, MinIO's 507) is their subclass
:class:`StorageFullError` (retried with a long backoff); a missing object is
:class:`StorageNotFoundError`.
"""

from __future__ import annotations

from voicelane.core.storage.base import (
    DEFAULT_CONTENT_TYPE,
    DEFAULT_PART_SIZE_BYTES,
    FULL_ERRNOS,
    MAX_FILENAME_CHARS,
    MAX_KEY_CHARS,
    MAX_LINK_EXPIRY_S,
    MAX_PART_SIZE_BYTES,
    MIB,
    MIN_PART_SIZE_BYTES,
    Storage,
    StoredObject,
    content_disposition,
    is_storage_full,
    link_expiry_s,
    validate_content_type,
    validate_filename,
    validate_key,
    validate_prefix,
)
from voicelane.core.storage.local import STALE_TEMP_AGE_S, LocalStorage
from voicelane.core.storage.s3 import (
    ABORT_AFTER_DAYS,
    ABORT_RULE_ID,
    MAX_PARTS,
    SHA256_METADATA_KEY,
    S3Storage,
)
from voicelane.core.storage.settings import LocalStorageSettings, S3Settings, StorageSettings

__all__ = [
    "ABORT_AFTER_DAYS",
    "ABORT_RULE_ID",
    "DEFAULT_CONTENT_TYPE",
    "DEFAULT_PART_SIZE_BYTES",
    "FULL_ERRNOS",
    "MAX_FILENAME_CHARS",
    "MAX_KEY_CHARS",
    "MAX_LINK_EXPIRY_S",
    "MAX_PARTS",
    "MAX_PART_SIZE_BYTES",
    "MIB",
    "MIN_PART_SIZE_BYTES",
    "SHA256_METADATA_KEY",
    "STALE_TEMP_AGE_S",
    "LocalStorage",
    "LocalStorageSettings",
    "S3Settings",
    "S3Storage",
    "Storage",
    "StorageSettings",
    "StoredObject",
    "content_disposition",
    "is_storage_full",
    "link_expiry_s",
    "open_storage",
    "validate_content_type",
    "validate_filename",
    "validate_key",
    "validate_prefix",
]


def open_storage(settings: StorageSettings, *, dev_mode: bool = False) -> Storage:
    """The backend ``settings.backend`` names (``settings``: the process's ``storage``
    section). ``dev_mode`` (the process's own dev mode, ``VOICELANE_DEV_MODE``) lets the local
    backend run without a link secret. Does not touch the network: call
    :meth:`Storage.prepare`."""
    if settings.backend == "s3":
        return S3Storage(settings.s3)
    local = settings.local
    if dev_mode and not local.dev_mode:
        local = local.model_copy(update={"dev_mode": True})
    return LocalStorage(local)
