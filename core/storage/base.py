"""The storage interface and the rules both backends share.

:class:`Storage` is what the batch lane codes against; :class:`StoredObject` is what it gets
back. The helpers here validate what callers pass in, the same way on every backend.

Keys
----
Both backends accept the same keys (:func:`validate_key`): 1..1024 characters from
``[A-Za-z0-9._-/]``, ``/``-separated segments, no empty segment (no leading, trailing or
doubled ``/``), no ``.`` or ``..`` segment. Anything else is an :class:`InvalidKeyError`, so a
key that works on one backend works on the other and can never leave the local root.

Prefixes (:meth:`Storage.list_keys`) have S3 string semantics (``t/j1`` also matches
``t/j10/x``); :meth:`Storage.delete_prefix` therefore insists on a prefix ending in ``/``.
"""

from __future__ import annotations

import abc
import errno
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

from voicelane.common.errors import InvalidInputError, InvalidKeyError, StorageFullError

MIB = 1024 * 1024
DEFAULT_PART_SIZE_BYTES = 8 * MIB
MIN_PART_SIZE_BYTES = 5 * MIB
"""S3's smallest part (all but the last); SeaweedFS and MinIO enforce it too."""
MAX_PART_SIZE_BYTES = 5 * 1024 * MIB
MAX_KEY_CHARS = 1024
MAX_FILENAME_CHARS = 255
MAX_LINK_EXPIRY_S = 7 * 24 * 3600
"""SigV4 presigned URLs live at most 7 days; local links are clamped the same way."""
DEFAULT_CONTENT_TYPE = "application/octet-stream"
_READ_BLOCK_BYTES = MIB


FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""``OSError`` numbers that mean "no room" (disk or quota full)."""


def is_storage_full(error: BaseException) -> bool:
    """Whether ``error`` says a disk is out of room: a :class:`StorageFullError` from a
    backend, or a raw ``ENOSPC``/``EDQUOT`` (a worker's own temp files, while assembling).
    The batch lane retries these with a long backoff instead of its quick attempts."""
    return isinstance(error, StorageFullError) or (
        isinstance(error, OSError) and error.errno in FULL_ERRNOS
    )


# ---- validation helpers ------------------------------------------------------------------

_KEY_RE = re.compile(r"[A-Za-z0-9._-]{1,255}(?:/[A-Za-z0-9._-]{1,255})*")
_CONTENT_TYPE_RE = re.compile(r"[!-~][ -~]{0,254}")
_FILENAME_FORBIDDEN_RE = re.compile(r"[\x00-\x1f\x7f/\\]")


def validate_key(key: str, *, what: str = "key") -> str:
    """Return ``key`` if it is a valid storage key, else raise :class:`InvalidKeyError`."""
    if (
        len(key) > MAX_KEY_CHARS
        or _KEY_RE.fullmatch(key) is None
        or any(segment in {".", ".."} for segment in key.split("/"))
    ):
        raise InvalidKeyError(
            f"invalid storage {what} {key[:100]!r}: use 1..{MAX_KEY_CHARS} characters of "
            "[A-Za-z0-9._-] in /-separated segments of 1..255, none '.' or '..'"
        )
    return key


def validate_prefix(prefix: str, *, folder: bool = False) -> str:
    """A listing prefix: ``""`` or a valid key, optionally ending in ``/``. With ``folder``
    it must be non-empty and end in ``/`` (what :meth:`Storage.delete_prefix` requires)."""
    if folder and not prefix.endswith("/"):
        raise InvalidKeyError(f"prefix {prefix[:100]!r} to delete must be non-empty and end in '/'")
    if prefix:
        validate_key(prefix.removesuffix("/"), what="prefix")
    return prefix


def validate_content_type(content_type: str) -> str:
    if _CONTENT_TYPE_RE.fullmatch(content_type) is None:
        raise InvalidInputError(f"invalid content type {content_type[:100]!r}")
    return content_type


def validate_filename(filename: str) -> str:
    """A download file name: 1..255 characters, no control characters, no ``/`` or ``\\``."""
    if (
        not filename
        or len(filename) > MAX_FILENAME_CHARS
        or filename in {".", ".."}
        or _FILENAME_FORBIDDEN_RE.search(filename)
    ):
        raise InvalidInputError(f"invalid download file name {filename[:100]!r}")
    return filename


def content_disposition(filename: str) -> str:
    """``Content-Disposition: attachment`` for ``filename`` (RFC 6266: an ASCII fallback plus
    the exact name percent-encoded as UTF-8)."""
    validate_filename(filename)
    fallback = "".join(c if " " <= c <= "~" and c not in '"\\' else "_" for c in filename)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


def link_expiry_s(expires_s: int) -> int:
    """Validate a link lifetime and clamp it to :data:`MAX_LINK_EXPIRY_S`."""
    if expires_s < 1:
        raise InvalidInputError(f"link expiry must be at least 1 s, got {expires_s}")
    return min(expires_s, MAX_LINK_EXPIRY_S)


def check_part_size(part_size_bytes: int) -> None:
    """Raise ValueError for a multipart part size outside what S3 accepts (both backends)."""
    if not MIN_PART_SIZE_BYTES <= part_size_bytes <= MAX_PART_SIZE_BYTES:
        raise ValueError(
            f"part_size_bytes must be {MIN_PART_SIZE_BYTES}..{MAX_PART_SIZE_BYTES}, "
            f"got {part_size_bytes}"
        )


def hash_file(path: Path) -> tuple[int, str]:
    """``(size_bytes, sha256 hex)`` of a file, read in blocks."""
    hasher = hashlib.sha256()
    size_bytes = 0
    with path.open("rb") as source:
        while block := source.read(_READ_BLOCK_BYTES):
            hasher.update(block)
            size_bytes += len(block)
    return size_bytes, hasher.hexdigest()


def read_blocks(source: BinaryIO) -> Iterator[bytes]:
    """``source`` in blocks of a fixed size, until it is exhausted."""
    while block := source.read(_READ_BLOCK_BYTES):
        yield block


# ---- the interface -----------------------------------------------------------------------


@dataclass(frozen=True)
class StoredObject:
    key: str
    size_bytes: int
    sha256: str
    """Hex SHA-256 of the bytes; ``""`` for an S3 object not written through this module."""
    content_type: str


class Storage(abc.ABC):
    """Object storage of the batch lane. Implementations are safe to share between threads."""

    def prepare(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Create what the backend needs (bucket, lifecycle rule, directories). Idempotent;
        call once at process start."""

    @abc.abstractmethod
    def put_bytes(
        self, key: str, data: bytes, *, content_type: str = DEFAULT_CONTENT_TYPE
    ) -> StoredObject:
        """Store ``data`` under ``key`` (replacing any object there)."""

    @abc.abstractmethod
    def get_bytes(self, key: str) -> bytes:
        """The object's bytes; :class:`StorageNotFoundError` if missing,
        :class:`StorageIntegrityError` if they do not match the stored SHA-256."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool: ...

    @abc.abstractmethod
    def head(self, key: str) -> StoredObject | None:
        """Size, SHA-256 and content type, or None when there is no such object."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Delete the object; deleting a missing object is not an error."""

    @abc.abstractmethod
    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix`` (non-empty, ending in ``/``) and abort
        incomplete multipart uploads there. Returns the number of objects deleted."""

    @abc.abstractmethod
    def list_keys(self, prefix: str) -> list[str]:
        """Keys starting with ``prefix`` (string prefix, ``""`` for all), sorted."""

    @abc.abstractmethod
    def upload_file(
        self,
        key: str,
        path: str | os.PathLike[str],
        *,
        content_type: str,
        part_size_bytes: int = DEFAULT_PART_SIZE_BYTES,
    ) -> StoredObject:
        """Store a local file, verified (size and SHA-256) before returning."""

    @abc.abstractmethod
    def incomplete_uploads(self, prefix: str = "") -> list[str]:
        """Keys with multipart uploads still open under ``prefix`` (sorted, unique)."""

    @abc.abstractmethod
    def link(self, key: str, *, expires_s: int = 3600, filename: str | None = None) -> str:
        """A download URL valid for ``expires_s`` (clamped to 7 days). With ``filename`` the
        download is served as an attachment of that name. Does not check the object exists."""

    @abc.abstractmethod
    def ping(self) -> None:
        """Readiness: return if the store is usable, else raise
        :class:`StorageUnavailableError` with a one-line reason."""
