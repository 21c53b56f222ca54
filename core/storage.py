"""Object storage for the batch lane: S3 (any S3-compatible endpoint) and a local directory.

Finished audio files and chunk parts live under keys ``{tenant}/{job_id}/...``. Both backends
implement :class:`Storage`; :func:`open_storage` picks one from :class:`StorageSettings`.
``docs/storage.md`` is the long form of this docstring.

Keys
----
Both backends accept the same keys (:func:`validate_key`): 1..1024 characters from
``[A-Za-z0-9._-/]``, ``/``-separated segments, no empty segment (no leading, trailing or
doubled ``/``), no ``.`` or ``..`` segment. Anything else is an :class:`InvalidKeyError`, so a
key that works on one backend works on the other and can never leave the local root.

Prefixes (:meth:`Storage.list_keys`) have S3 string semantics (``t/j1`` also matches
``t/j10/x``); :meth:`Storage.delete_prefix` therefore insists on a prefix ending in ``/``.

S3 (:class:`S3Storage`)
-----------------------
boto3 (imported lazily: ``import core`` stays light) with path-style addressing, SigV4,
``request_checksum_calculation`` / ``response_checksum_validation`` = ``"when_required"``
(non-AWS stores reject boto3's newer default checksum headers), standard retries and explicit
timeouts. Every object carries its SHA-256 as user metadata (``x-amz-meta-sha256``); bodies are
sent with ``Content-MD5`` so the store itself rejects bytes damaged in transit.

:meth:`S3Storage.upload_file` hashes the file first (the digest must be known when the upload
is created, since metadata cannot be changed afterwards), then sends it in one ``PutObject`` or,
when larger than one part, through ``CreateMultipartUpload`` / ``UploadPart`` /
``CompleteMultipartUpload``, re-hashing while it reads. Any failure (including the file changing
between the two reads, and ``KeyboardInterrupt``) aborts the multipart upload. After the upload,
``HeadObject`` must report the size and SHA-256 written, else the object is deleted and
:class:`StorageIntegrityError` raised.

Local (:class:`LocalStorage`)
-----------------------------
Under ``root``: ``objects/{key}`` (the bytes), ``meta/{key}.json`` (sidecar: size, SHA-256,
content type and the identity ``(inode, mtime_ns, size)`` of the file it describes) and
``tmp/`` (writes in progress). A write goes to a temp file in ``tmp/`` (fsynced), the sidecar is
put in place, then the temp file is renamed over ``objects/{key}``: readers see the old object
or the new one, never a part. A sidecar whose identity does not match the file (a crash between
the two renames, a file changed by hand) is ignored and the SHA-256 recomputed. Links are signed
by this module (:meth:`LocalStorage.link`, :meth:`LocalStorage.verify_link`) and served by the
API from :meth:`LocalStorage.path_for`.

Errors
------
Every error is a :class:`~core.errors.VoicelaneError` with a one-line message. Network
failures, timeouts and 5xx/throttling answers are :class:`StorageUnavailableError`
(transient: Celery retries them); a missing object is :class:`StorageNotFoundError`.
"""

from __future__ import annotations

import abc
import base64
import contextlib
import functools
import hashlib
import hmac
import itertools
import json
import logging
import math
import os
import re
import secrets
import stat
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, cast
from urllib.parse import quote, urlencode

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.errors import (
    InvalidInputError,
    InvalidKeyError,
    LinkExpiredError,
    LinkInvalidError,
    StorageConfigError,
    StorageError,
    StorageIntegrityError,
    StorageNotFoundError,
    StorageUnavailableError,
)

if TYPE_CHECKING:
    import boto3.session
    from botocore.exceptions import ClientError
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef, LifecycleRuleTypeDef

log = logging.getLogger(__name__)

MIB = 1024 * 1024
DEFAULT_PART_SIZE_BYTES = 8 * MIB
MIN_PART_SIZE_BYTES = 5 * MIB
"""S3's smallest part (all but the last); moto and MinIO enforce it too."""
MAX_PART_SIZE_BYTES = 5 * 1024 * MIB
MAX_PARTS = 10_000
MAX_KEY_CHARS = 1024
MAX_FILENAME_CHARS = 255
MAX_LINK_EXPIRY_S = 7 * 24 * 3600
"""SigV4 presigned URLs live at most 7 days; local links are clamped the same way."""
DEFAULT_CONTENT_TYPE = "application/octet-stream"
SHA256_METADATA_KEY = "sha256"
"""User-metadata name of the SHA-256 (``x-amz-meta-sha256``)."""
ABORT_RULE_ID = "voicelane-abort-incomplete-multipart-uploads"
ABORT_AFTER_DAYS = 1
STALE_TEMP_AGE_S = 24 * 3600
"""Local temp files older than this (left by a crashed process) are removed by ``prepare``."""
_READ_BLOCK_BYTES = MIB
_DELETE_BATCH = 1000


# ---- settings ----------------------------------------------------------------------------


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

    @field_validator("public_base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("public_base_url must start with http:// or https://")
        return value.rstrip("/")


class S3Settings(BaseModel):
    """An S3-compatible endpoint (AWS when ``endpoint_url`` is None; MinIO in compose)."""

    model_config = ConfigDict(hide_input_in_errors=True)

    endpoint_url: str | None = None
    public_endpoint_url: str | None = None
    """Endpoint used to sign download links when clients reach the store under another name
    than the workers do (``http://minio:9000`` inside compose, ``http://localhost:9000``
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


class StorageSettings(BaseSettings):
    """Object storage: ``VOICELANE_STORAGE_BACKEND``, ``VOICELANE_STORAGE_S3__BUCKET``..."""

    model_config = SettingsConfigDict(
        env_prefix="VOICELANE_STORAGE_",
        env_nested_delimiter="__",
        extra="ignore",
        hide_input_in_errors=True,
    )

    backend: Literal["local", "s3"] = "local"
    link_expiry_s: int = Field(3600, ge=1, le=MAX_LINK_EXPIRY_S)
    """Lifetime of download links; the API passes it to :meth:`Storage.link`."""
    local: LocalStorageSettings = Field(default_factory=LocalStorageSettings)
    s3: S3Settings = Field(default_factory=S3Settings)


# ---- validation helpers ------------------------------------------------------------------

_KEY_RE = re.compile(r"[A-Za-z0-9._-]{1,255}(?:/[A-Za-z0-9._-]{1,255})*")
_CONTENT_TYPE_RE = re.compile(r"[!-~][ -~]{0,254}")
_FILENAME_FORBIDDEN_RE = re.compile(r"[\x00-\x1f\x7f/\\]")
_SIG_RE = re.compile(r"[0-9a-f]{64}")


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


def _check_part_size(part_size_bytes: int) -> None:
    if not MIN_PART_SIZE_BYTES <= part_size_bytes <= MAX_PART_SIZE_BYTES:
        raise ValueError(
            f"part_size_bytes must be {MIN_PART_SIZE_BYTES}..{MAX_PART_SIZE_BYTES}, "
            f"got {part_size_bytes}"
        )


def _hash_file(path: Path) -> tuple[int, str]:
    """``(size_bytes, sha256 hex)`` of a file, read in blocks."""
    hasher = hashlib.sha256()
    size_bytes = 0
    with path.open("rb") as source:
        while block := source.read(_READ_BLOCK_BYTES):
            hasher.update(block)
            size_bytes += len(block)
    return size_bytes, hasher.hexdigest()


def _read_blocks(source: BinaryIO) -> Iterator[bytes]:
    while block := source.read(_READ_BLOCK_BYTES):
        yield block


def _md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode("ascii")


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


# ---- local directory backend -------------------------------------------------------------


@dataclass(frozen=True)
class _Sidecar:
    size_bytes: int
    sha256: str
    content_type: str
    inode: int
    mtime_ns: int

    def describes(self, st: os.stat_result) -> bool:
        return (self.inode, self.mtime_ns, self.size_bytes) == (
            st.st_ino,
            st.st_mtime_ns,
            st.st_size,
        )


@functools.cache
def _dev_secret() -> bytes:
    return secrets.token_bytes(32)


def _local_secret(settings: LocalStorageSettings) -> bytes:
    if settings.secret is not None:
        return settings.secret.get_secret_value().encode("utf-8")
    if settings.dev_mode:
        log.warning(
            "storage: no link secret set; dev mode signs local download links with a random "
            "per-process secret (links stop working when the process restarts)"
        )
        return _dev_secret()
    raise StorageConfigError(
        "VOICELANE_STORAGE_LOCAL__SECRET (at least 32 characters) is required "
        "for the local storage backend unless dev mode is on"
    )


@contextlib.contextmanager
def _local_errors(action: str, key: str) -> Iterator[None]:
    """OSError from the file system → :class:`StorageUnavailableError` (disk full, I/O error,
    permissions: nothing the caller's input can fix)."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise StorageUnavailableError(f"local storage {action} {key!r} failed: {reason}") from exc


def _unlink_file(path: Path) -> None:
    """Remove ``path`` if it is a file; a directory or a missing path is left alone."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        if path.is_file():
            path.unlink()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalStorage(Storage):
    """Objects as files under ``settings.root`` (layout in the module docstring)."""

    def __init__(self, settings: LocalStorageSettings) -> None:
        self._secret = _local_secret(settings)
        self._root = settings.root.expanduser().resolve()
        self._objects = self._root / "objects"
        self._meta = self._root / "meta"
        self._tmp = self._root / "tmp"
        self._base_url = settings.public_base_url.rstrip("/")
        self.prepare()

    @property
    def root(self) -> Path:
        return self._root

    def prepare(self) -> None:
        with _local_errors("prepare", str(self._root)):
            for directory in (self._objects, self._meta, self._tmp):
                directory.mkdir(parents=True, exist_ok=True)
            self._sweep_stale_temp_files()

    def _sweep_stale_temp_files(self) -> None:
        cutoff = time.time() - STALE_TEMP_AGE_S
        for entry in self._tmp.iterdir():
            with contextlib.suppress(FileNotFoundError):
                if entry.stat().st_mtime < cutoff:
                    entry.unlink()

    # -- paths --

    def _object_path(self, key: str) -> Path:
        return self._objects / validate_key(key)

    def _meta_path(self, key: str) -> Path:
        # The meta tree mirrors the object tree, so both collide (or not) on the same keys.
        return self._meta / validate_key(key)

    def path_for(self, key: str) -> Path:
        """The file holding ``key``, for the API to serve; :class:`StorageNotFoundError` if
        there is no such object."""
        path = self._object_path(key)
        if not path.is_file():
            raise StorageNotFoundError(f"no object {key!r}")
        return path

    # -- writes --

    def put_bytes(
        self, key: str, data: bytes, *, content_type: str = DEFAULT_CONTENT_TYPE
    ) -> StoredObject:
        return self._write(key, [data], content_type)

    def upload_file(
        self,
        key: str,
        path: str | os.PathLike[str],
        *,
        content_type: str,
        part_size_bytes: int = DEFAULT_PART_SIZE_BYTES,
    ) -> StoredObject:
        validate_key(key)
        validate_content_type(content_type)
        _check_part_size(part_size_bytes)  # unused here; validated so both backends agree
        with Path(path).open("rb") as source:  # a missing source raises here, unwrapped
            return self._write(key, _read_blocks(source), content_type)

    def _write(self, key: str, blocks: Iterable[bytes], content_type: str) -> StoredObject:
        validate_key(key)
        validate_content_type(content_type)
        with _local_errors("write", key):
            fd, temp_name = tempfile.mkstemp(dir=self._tmp, prefix="put-", suffix=".tmp")
            temp = Path(temp_name)
            try:
                size_bytes, sha256 = self._fill(fd, blocks)
                st = temp.stat()
                sidecar = _Sidecar(size_bytes, sha256, content_type, st.st_ino, st.st_mtime_ns)
                self._write_sidecar(key, sidecar)
                self._place(key, temp, self._object_path(key))
            except BaseException:
                temp.unlink(missing_ok=True)
                raise
        return StoredObject(key, size_bytes, sha256, content_type)

    @staticmethod
    def _fill(fd: int, blocks: Iterable[bytes]) -> tuple[int, str]:
        hasher = hashlib.sha256()
        size_bytes = 0
        with os.fdopen(fd, "wb") as out:
            for block in blocks:
                out.write(block)
                hasher.update(block)
                size_bytes += len(block)
            out.flush()
            os.fsync(out.fileno())
        return size_bytes, hasher.hexdigest()

    def _write_sidecar(self, key: str, sidecar: _Sidecar) -> None:
        fd, temp_name = tempfile.mkstemp(dir=self._tmp, prefix="meta-", suffix=".tmp")
        temp = Path(temp_name)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(asdict(sidecar), out)
            self._place(key, temp, self._meta_path(key))
        except BaseException:
            temp.unlink(missing_ok=True)
            raise

    def _place(self, key: str, temp: Path, target: Path) -> None:
        """Rename ``temp`` onto ``target``, creating parents. A concurrent delete may prune
        a parent between mkdir and rename: try again."""
        for attempt in range(3):
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(temp, target)
            except FileNotFoundError:
                if attempt == 2:
                    raise
            except (FileExistsError, NotADirectoryError, IsADirectoryError) as exc:
                _unlink_file(self._meta_path(key))
                raise InvalidKeyError(
                    f"key {key!r} collides with another object's path (the local backend "
                    "cannot hold both 'a/b' and 'a/b/c')"
                ) from exc
            else:
                _fsync_dir(target.parent)
                return

    # -- reads --

    def _read_sidecar(self, key: str) -> _Sidecar | None:
        try:
            fields = json.loads(self._meta_path(key).read_text(encoding="utf-8"))
            return _Sidecar(**fields)
        except (OSError, ValueError, TypeError):
            return None

    def _stat(self, key: str) -> os.stat_result | None:
        try:
            st = self._object_path(key).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return st if stat.S_ISREG(st.st_mode) else None

    def head(self, key: str) -> StoredObject | None:
        with _local_errors("head", key):
            st = self._stat(key)
            if st is None:
                return None
            sidecar = self._read_sidecar(key)
            if sidecar is not None and sidecar.describes(st):
                return StoredObject(key, st.st_size, sidecar.sha256, sidecar.content_type)
            size_bytes, sha256 = _hash_file(self._object_path(key))
            content_type = sidecar.content_type if sidecar is not None else DEFAULT_CONTENT_TYPE
            return StoredObject(key, size_bytes, sha256, content_type)

    def get_bytes(self, key: str) -> bytes:
        path = self._object_path(key)
        with _local_errors("get", key):
            try:
                with path.open("rb") as source:
                    st = os.fstat(source.fileno())
                    data = source.read()
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
                raise StorageNotFoundError(f"no object {key!r}") from exc
            sidecar = self._read_sidecar(key)
        known = sidecar is not None and sidecar.describes(st)
        if known and sidecar is not None and hashlib.sha256(data).hexdigest() != sidecar.sha256:
            raise StorageIntegrityError(f"object {key!r} does not match its stored sha256")
        return data

    def exists(self, key: str) -> bool:
        with _local_errors("exists", key):
            return self._stat(key) is not None

    def list_keys(self, prefix: str) -> list[str]:
        validate_prefix(prefix)
        start = self._objects / prefix[: prefix.rfind("/") + 1]
        keys: list[str] = []
        with _local_errors("list", prefix):
            for directory, _subdirs, files in os.walk(start):
                base = Path(directory).relative_to(self._objects).as_posix()
                for name in files:
                    key = name if base == "." else f"{base}/{name}"
                    if key.startswith(prefix):
                        keys.append(key)
        return sorted(keys)

    # -- deletes --

    def delete(self, key: str) -> None:
        path = self._object_path(key)
        with _local_errors("delete", key):
            _unlink_file(path)
            _unlink_file(self._meta_path(key))
            self._prune(path.parent, self._objects)
            self._prune(self._meta_path(key).parent, self._meta)

    def delete_prefix(self, prefix: str) -> int:
        validate_prefix(prefix, folder=True)
        keys = self.list_keys(prefix)
        for key in keys:
            self.delete(key)
        return len(keys)

    @staticmethod
    def _prune(directory: Path, stop: Path) -> None:
        """Remove now-empty directories from ``directory`` up to (not including) ``stop``."""
        while directory != stop and directory.is_relative_to(stop):
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent

    def incomplete_uploads(self, prefix: str = "") -> list[str]:
        """Always empty: a local write is one temp file, removed on failure (a crashed
        process's temp files are swept by :meth:`prepare` after a day)."""
        validate_prefix(prefix)
        return []

    # -- links --

    def _sign(self, key: str, expires: int, filename: str | None) -> str:
        message = f"{key}\n{expires}\n{filename or ''}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def link(self, key: str, *, expires_s: int = 3600, filename: str | None = None) -> str:
        """``{public_base_url}/v1/files/{key}?expires={unix_ts}&sig={hex}[&filename=...]``."""
        validate_key(key)
        if filename is not None:
            validate_filename(filename)
        expires = int(time.time()) + link_expiry_s(expires_s)
        query = {"expires": str(expires), "sig": self._sign(key, expires, filename)}
        if filename is not None:
            query["filename"] = filename
        return f"{self._base_url}/v1/files/{key}?{urlencode(query, quote_via=quote)}"

    def verify_link(
        self,
        key: str,
        expires: int | str,
        sig: str,
        filename: str | None = None,
        now: float | None = None,
    ) -> None:
        """Check a link's parameters as the API received them: :class:`LinkInvalidError` if
        anything was malformed or changed, :class:`LinkExpiredError` if it is past ``expires``
        (``now`` defaults to the current time)."""
        filename = filename or None
        try:
            validate_key(key)
            if filename is not None:
                validate_filename(filename)
        except InvalidInputError as exc:
            raise LinkInvalidError("download link is malformed") from exc
        expires_ts = _parse_expires(expires)
        if _SIG_RE.fullmatch(sig) is None or not hmac.compare_digest(
            self._sign(key, expires_ts, filename), sig
        ):
            raise LinkInvalidError("download link signature is invalid")
        if (time.time() if now is None else now) >= expires_ts:
            raise LinkExpiredError("download link has expired")

    def ping(self) -> None:
        try:
            fd, probe = tempfile.mkstemp(dir=self._tmp, prefix="ping-", suffix=".tmp")
            os.close(fd)
            os.unlink(probe)
            if not self._objects.is_dir() or not self._meta.is_dir():
                raise FileNotFoundError(2, "object directories are missing")
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise StorageUnavailableError(
                f"local storage at {self._root} is not usable: {reason}"
            ) from exc


def _parse_expires(expires: int | str) -> int:
    if isinstance(expires, int):
        return expires
    if not expires.isascii() or not expires.isdigit() or len(expires) > 12:
        raise LinkInvalidError("download link is malformed")
    return int(expires)


# ---- S3 backend --------------------------------------------------------------------------

_NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound", "NoSuchUpload"})
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "RequestTimeout",
        "ServiceUnavailable",
        "InternalError",
        "NoSuchBucket",
    }
)
_LIFECYCLE_UNSUPPORTED_CODES = frozenset(
    {"NotImplemented", "MethodNotAllowed", "AccessDenied", "UnsupportedOperation"}
)


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _client_error(exc: ClientError, action: str, key: str) -> StorageError:
    code = _error_code(exc)
    message = str(exc.response.get("Error", {}).get("Message", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
    text = f"storage {action} {key!r} failed: {code or status} {message}".strip()
    if code in _NOT_FOUND_CODES:
        return StorageNotFoundError(text)
    if status >= 500 or status == 429 or code in _TRANSIENT_CODES:
        return StorageUnavailableError(text)
    return StorageError(text)


@contextlib.contextmanager
def _s3_errors(action: str, key: str) -> Iterator[None]:
    """Translate botocore's exceptions into storage errors; anything else passes through."""
    from botocore import exceptions as boto

    try:
        yield
    except boto.ClientError as exc:
        raise _client_error(exc, action, key) from exc
    except (boto.ConnectionError, boto.HTTPClientError, boto.IncompleteReadError) as exc:
        raise StorageUnavailableError(f"storage {action} {key!r} failed: {exc}") from exc
    except (boto.NoCredentialsError, boto.PartialCredentialsError) as exc:
        raise StorageConfigError(f"storage {action} {key!r} failed: {exc}") from exc
    except boto.BotoCoreError as exc:
        raise StorageError(f"storage {action} {key!r} failed: {exc}") from exc


_CLIENT_LOCK = threading.Lock()


@functools.cache
def _boto3_session() -> boto3.session.Session:
    """One boto3 session per process: loading the S3 model is the slow part of making a
    client (~0.2 s), and a session caches it. Sessions are not thread-safe, so clients are
    made under :data:`_CLIENT_LOCK`; the clients themselves are."""
    import boto3.session

    return boto3.session.Session()


def _make_s3_client(
    settings: S3Settings, *, endpoint_url: str | None, max_attempts: int
) -> S3Client:
    from botocore.config import Config

    config = Config(
        region_name=settings.region,
        signature_version="s3v4",
        s3={"addressing_style": settings.addressing_style},
        connect_timeout=settings.connect_timeout_s,
        read_timeout=settings.read_timeout_s,
        retries={"mode": "standard", "max_attempts": max_attempts},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    secret = settings.secret_access_key
    with _CLIENT_LOCK:
        return _boto3_session().client(
            "s3",
            endpoint_url=endpoint_url,
            aws_access_key_id=settings.access_key_id,
            aws_secret_access_key=None if secret is None else secret.get_secret_value(),
            config=config,
        )


def _aborts_everything(rule: dict[str, Any]) -> bool:
    """An enabled rule that aborts incomplete multipart uploads bucket-wide (no filter, or
    an empty prefix: a tag or size filter does not cover every upload)."""
    bucket_wide = rule.get("Filter") in (None, {}, {"Prefix": ""}) and not rule.get("Prefix")
    return (
        bucket_wide and rule.get("Status") == "Enabled" and "AbortIncompleteMultipartUpload" in rule
    )


@dataclass(frozen=True)
class _UploadedParts:
    completed: list[CompletedPartTypeDef]
    size_bytes: int
    sha256: str


class S3Storage(Storage):
    """Objects in one bucket of an S3-compatible store (see the module docstring)."""

    def __init__(self, settings: S3Settings, *, list_page_size: int = 1000) -> None:
        self._settings = settings
        self._bucket = settings.bucket
        self._list_page_size = list_page_size
        self._client = _make_s3_client(
            settings, endpoint_url=settings.endpoint_url, max_attempts=settings.max_attempts
        )
        self._presigner: S3Client | None = None
        self._pinger: S3Client | None = None

    @property
    def client(self) -> S3Client:
        """The boto3 client (thread-safe), for tests and tools."""
        return self._client

    @property
    def bucket(self) -> str:
        return self._bucket

    # -- bucket setup --

    def prepare(self) -> None:
        self.ensure_bucket()

    def ensure_bucket(self) -> None:
        """Create the bucket if missing and make sure a lifecycle rule aborts multipart
        uploads left open for a day (skipped, with a log line, where the store does not
        support lifecycle rules or we may not set them). Existing rules are kept."""
        if not self._bucket_exists():
            self._create_bucket()
        self._ensure_abort_rule()

    def _bucket_exists(self) -> bool:
        try:
            with _s3_errors("head bucket", self._bucket):
                self._client.head_bucket(Bucket=self._bucket)
        except StorageNotFoundError:
            return False
        return True

    def _create_bucket(self) -> None:
        from botocore.exceptions import ClientError

        with _s3_errors("create bucket", self._bucket):
            try:
                if self._settings.region == "us-east-1":
                    self._client.create_bucket(Bucket=self._bucket)
                else:
                    self._client.create_bucket(
                        Bucket=self._bucket,
                        CreateBucketConfiguration={
                            "LocationConstraint": cast(Any, self._settings.region)
                        },
                    )
            except ClientError as exc:
                if _error_code(exc) != "BucketAlreadyOwnedByYou":
                    raise
                return  # created concurrently by another process
        log.info("storage: created bucket %s", self._bucket)

    def _lifecycle_rules(self) -> list[dict[str, Any]] | None:
        """The bucket's lifecycle rules; None when the store does not support them."""
        from botocore.exceptions import ClientError

        with _s3_errors("get lifecycle", self._bucket):
            try:
                answer = self._client.get_bucket_lifecycle_configuration(Bucket=self._bucket)
            except ClientError as exc:
                code = _error_code(exc)
                if code == "NoSuchLifecycleConfiguration":
                    return []
                if code in _LIFECYCLE_UNSUPPORTED_CODES:
                    self._log_no_lifecycle(code)
                    return None
                raise
        return [cast(dict[str, Any], rule) for rule in answer.get("Rules", [])]

    def _ensure_abort_rule(self) -> None:
        from botocore.exceptions import ClientError

        rules = self._lifecycle_rules()
        if rules is None or any(_aborts_everything(rule) for rule in rules):
            return
        ours = {
            "ID": ABORT_RULE_ID,
            "Status": "Enabled",
            "Filter": {"Prefix": ""},
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ABORT_AFTER_DAYS},
        }
        with _s3_errors("put lifecycle", self._bucket):
            try:
                self._client.put_bucket_lifecycle_configuration(
                    Bucket=self._bucket,
                    LifecycleConfiguration={
                        "Rules": cast("list[LifecycleRuleTypeDef]", [*rules, ours])
                    },
                )
            except ClientError as exc:
                code = _error_code(exc)
                if code not in _LIFECYCLE_UNSUPPORTED_CODES:
                    raise
                self._log_no_lifecycle(code)

    def _log_no_lifecycle(self, code: str) -> None:
        log.warning(
            "storage: bucket %s has no AbortIncompleteMultipartUpload rule (%s from the "
            "store); abandoned multipart uploads must be cleaned another way",
            self._bucket,
            code,
        )

    # -- writes --

    def put_bytes(
        self, key: str, data: bytes, *, content_type: str = DEFAULT_CONTENT_TYPE
    ) -> StoredObject:
        validate_key(key)
        validate_content_type(content_type)
        sha256 = hashlib.sha256(data).hexdigest()
        with _s3_errors("put", key):
            self._client.put_object(
                Bucket=self._bucket,
                Key=key,
                Body=data,
                ContentType=content_type,
                ContentMD5=_md5_b64(data),
                Metadata={SHA256_METADATA_KEY: sha256},
            )
        return StoredObject(key, len(data), sha256, content_type)

    def upload_file(
        self,
        key: str,
        path: str | os.PathLike[str],
        *,
        content_type: str,
        part_size_bytes: int = DEFAULT_PART_SIZE_BYTES,
    ) -> StoredObject:
        validate_key(key)
        validate_content_type(content_type)
        _check_part_size(part_size_bytes)
        source = Path(path)
        size_bytes, sha256 = _hash_file(source)
        if size_bytes <= part_size_bytes:
            stored = self.put_bytes(key, source.read_bytes(), content_type=content_type)
            if stored.sha256 != sha256:
                self._delete_quietly(key)
                raise StorageIntegrityError(f"{source} changed while it was stored as {key!r}")
        else:
            part_size_bytes = max(part_size_bytes, math.ceil(size_bytes / MAX_PARTS))
            self._upload_multipart(
                key,
                source,
                content_type=content_type,
                size_bytes=size_bytes,
                sha256=sha256,
                part_size_bytes=part_size_bytes,
            )
        return self._verify_stored(key, size_bytes, sha256)

    def _upload_multipart(
        self,
        key: str,
        source: Path,
        *,
        content_type: str,
        size_bytes: int,
        sha256: str,
        part_size_bytes: int,
    ) -> None:
        with _s3_errors("upload", key):
            upload_id = self._client.create_multipart_upload(
                Bucket=self._bucket,
                Key=key,
                ContentType=content_type,
                Metadata={SHA256_METADATA_KEY: sha256},
            )["UploadId"]
        try:
            with _s3_errors("upload", key):
                parts = self._upload_parts(key, upload_id, source, part_size_bytes)
                if parts.size_bytes != size_bytes or parts.sha256 != sha256:
                    raise StorageIntegrityError(f"{source} changed while it was uploaded")
                self._client.complete_multipart_upload(
                    Bucket=self._bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts.completed},
                )
        except BaseException:
            self._abort_quietly(key, upload_id)
            raise

    def _upload_parts(
        self, key: str, upload_id: str, source: Path, part_size_bytes: int
    ) -> _UploadedParts:
        hasher = hashlib.sha256()
        completed: list[CompletedPartTypeDef] = []
        size_bytes = 0
        with source.open("rb") as reader:
            for number in itertools.count(1):
                block = reader.read(part_size_bytes)
                if not block:
                    break
                hasher.update(block)
                size_bytes += len(block)
                answer = self._client.upload_part(
                    Bucket=self._bucket,
                    Key=key,
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=block,
                    ContentMD5=_md5_b64(block),
                )
                completed.append({"PartNumber": number, "ETag": answer["ETag"]})
        return _UploadedParts(completed, size_bytes, hasher.hexdigest())

    def _verify_stored(self, key: str, size_bytes: int, sha256: str) -> StoredObject:
        """HEAD the object just written; on any mismatch delete it and raise."""
        stored = self.head(key)
        if stored is None:
            problem = "the object is missing"
        elif stored.size_bytes != size_bytes:
            problem = f"size is {stored.size_bytes} bytes, wrote {size_bytes}"
        elif stored.sha256 != sha256:
            problem = "sha256 metadata differs from the bytes read"
        else:
            return stored
        self._delete_quietly(key)
        raise StorageIntegrityError(f"upload of {key!r} failed verification: {problem}")

    def _abort(self, key: str, upload_id: str) -> None:
        try:
            with _s3_errors("abort upload", key):
                self._client.abort_multipart_upload(
                    Bucket=self._bucket, Key=key, UploadId=upload_id
                )
        except StorageNotFoundError:
            pass  # already aborted or completed

    def _abort_quietly(self, key: str, upload_id: str) -> None:
        try:
            self._abort(key, upload_id)
        except StorageError as exc:
            log.warning(
                "storage: could not abort multipart upload %s of %r (%s); "
                "the lifecycle rule or delete_prefix will",
                upload_id,
                key,
                exc,
            )

    def _delete_quietly(self, key: str) -> None:
        try:
            self.delete(key)
        except StorageError as exc:
            log.warning("storage: could not delete unverified object %r: %s", key, exc)

    # -- reads --

    def get_bytes(self, key: str) -> bytes:
        validate_key(key)
        with _s3_errors("get", key):
            answer = self._client.get_object(Bucket=self._bucket, Key=key)
            data = answer["Body"].read()
        expected = answer.get("Metadata", {}).get(SHA256_METADATA_KEY)
        if expected and hashlib.sha256(data).hexdigest() != expected:
            raise StorageIntegrityError(f"object {key!r} does not match its stored sha256")
        return data

    def head(self, key: str) -> StoredObject | None:
        validate_key(key)
        try:
            with _s3_errors("head", key):
                answer = self._client.head_object(Bucket=self._bucket, Key=key)
        except StorageNotFoundError:
            return None
        return StoredObject(
            key=key,
            size_bytes=answer["ContentLength"],
            sha256=answer.get("Metadata", {}).get(SHA256_METADATA_KEY, ""),
            content_type=answer.get("ContentType", DEFAULT_CONTENT_TYPE),
        )

    def exists(self, key: str) -> bool:
        return self.head(key) is not None

    def list_keys(self, prefix: str) -> list[str]:
        validate_prefix(prefix)
        paginator = self._client.get_paginator("list_objects_v2")
        keys: list[str] = []
        with _s3_errors("list", prefix):
            for page in paginator.paginate(
                Bucket=self._bucket,
                Prefix=prefix,
                PaginationConfig={"PageSize": self._list_page_size},
            ):
                keys.extend(item["Key"] for item in page.get("Contents", []))
        return sorted(keys)

    def _open_uploads(self, prefix: str) -> list[tuple[str, str]]:
        """``(key, upload_id)`` of the multipart uploads open under ``prefix``."""
        paginator = self._client.get_paginator("list_multipart_uploads")
        uploads: list[tuple[str, str]] = []
        with _s3_errors("list uploads", prefix):
            for page in paginator.paginate(Bucket=self._bucket, Prefix=prefix):
                uploads.extend(
                    (upload["Key"], upload["UploadId"]) for upload in page.get("Uploads", [])
                )
        return uploads

    def incomplete_uploads(self, prefix: str = "") -> list[str]:
        validate_prefix(prefix)
        return sorted({key for key, _upload_id in self._open_uploads(prefix)})

    # -- deletes --

    def delete(self, key: str) -> None:
        validate_key(key)
        with _s3_errors("delete", key):
            self._client.delete_object(Bucket=self._bucket, Key=key)

    def delete_prefix(self, prefix: str) -> int:
        validate_prefix(prefix, folder=True)
        for key, upload_id in self._open_uploads(prefix):
            self._abort(key, upload_id)
        keys = self.list_keys(prefix)
        for start in range(0, len(keys), _DELETE_BATCH):
            self._delete_batch(keys[start : start + _DELETE_BATCH])
        return len(keys)

    def _delete_batch(self, keys: list[str]) -> None:
        with _s3_errors("delete", keys[0]):
            answer = self._client.delete_objects(
                Bucket=self._bucket,
                Delete={"Objects": [{"Key": key} for key in keys], "Quiet": True},
            )
        errors = answer.get("Errors", [])
        if errors:
            first = errors[0]
            raise StorageError(
                f"storage delete failed for {len(errors)} keys, first {first.get('Key')!r}: "
                f"{first.get('Code')} {first.get('Message')}"
            )

    # -- links and readiness --

    def link(self, key: str, *, expires_s: int = 3600, filename: str | None = None) -> str:
        """A presigned GET URL (SigV4, ``X-Amz-Expires`` = ``expires_s`` clamped to 7 days)."""
        validate_key(key)
        params: dict[str, str] = {"Bucket": self._bucket, "Key": key}
        if filename is not None:
            params["ResponseContentDisposition"] = content_disposition(filename)
        with _s3_errors("link", key):
            return self._presigning_client().generate_presigned_url(
                "get_object", Params=params, ExpiresIn=link_expiry_s(expires_s)
            )

    def _presigning_client(self) -> S3Client:
        public_url = self._settings.public_endpoint_url
        if public_url is None:
            return self._client
        if self._presigner is None:
            self._presigner = _make_s3_client(
                self._settings, endpoint_url=public_url, max_attempts=1
            )
        return self._presigner

    def ping(self) -> None:
        """HEAD the bucket once (a dedicated client without retries: readiness reports the
        store's state now, not after a retry schedule)."""
        if self._pinger is None:
            self._pinger = _make_s3_client(
                self._settings, endpoint_url=self._settings.endpoint_url, max_attempts=1
            )
        try:
            with _s3_errors("ping", self._bucket):
                self._pinger.head_bucket(Bucket=self._bucket)
        except StorageUnavailableError:
            raise
        except StorageNotFoundError as exc:
            raise StorageUnavailableError(f"bucket {self._bucket!r} does not exist") from exc
        except StorageError as exc:
            raise StorageUnavailableError(str(exc)) from exc


# ---- factory -----------------------------------------------------------------------------


def open_storage(settings: StorageSettings | None = None, *, dev_mode: bool = False) -> Storage:
    """The backend ``settings.backend`` names (settings from the environment by default).
    ``dev_mode`` (the process's own dev mode, ``VOICELANE_DEV_MODE``) lets the local backend
    run without a link secret. Does not touch the network: call :meth:`Storage.prepare`."""
    settings = settings or StorageSettings()
    if settings.backend == "s3":
        return S3Storage(settings.s3)
    local = settings.local
    if dev_mode and not local.dev_mode:
        local = local.model_copy(update={"dev_mode": True})
    return LocalStorage(local)
