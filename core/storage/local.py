"""The local directory backend: :class:`LocalStorage`, with links it signs itself.

Under ``root``: ``objects/{key}`` (the bytes), ``meta/{key}`` (JSON sidecar: size, SHA-256,
content type and the identity ``(inode, mtime_ns, size)`` of the file it describes) and
``tmp/`` (writes in progress). A write goes to a temp file in ``tmp/`` (fsynced), the sidecar is
put in place, then the temp file is renamed over ``objects/{key}``: readers see the old object
or the new one, never a part. A sidecar whose identity does not match the file (a crash between
the two renames, a file changed by hand) is ignored and the SHA-256 recomputed. Links are signed
by this module (:meth:`LocalStorage.link`, :meth:`LocalStorage.verify_link`) and served by the
API from :meth:`LocalStorage.path_for`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

from voicelane.common.errors import (
    InvalidInputError,
    InvalidKeyError,
    LinkExpiredError,
    LinkInvalidError,
    StorageConfigError,
    StorageFullError,
    StorageIntegrityError,
    StorageNotFoundError,
    StorageUnavailableError,
)
from voicelane.core.storage.base import (
    DEFAULT_CONTENT_TYPE,
    DEFAULT_PART_SIZE_BYTES,
    FULL_ERRNOS,
    Storage,
    StoredObject,
    check_part_size,
    hash_file,
    link_expiry_s,
    read_blocks,
    validate_content_type,
    validate_filename,
    validate_key,
    validate_prefix,
)
from voicelane.core.storage.settings import LocalStorageSettings

log = logging.getLogger(__name__)

STALE_TEMP_AGE_S = 24 * 3600
"""Local temp files older than this (left by a crashed process) are removed by ``prepare``."""
_SIG_RE = re.compile(r"[0-9a-f]{64}")


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
        "VOICELANE_STORAGE__LOCAL__SECRET (at least 32 characters) is required "
        "for the local storage backend unless dev mode is on"
    )


@contextlib.contextmanager
def _local_errors(action: str, key: str) -> Iterator[None]:
    """OSError from the file system → :class:`StorageFullError` when it is out of room
    (``ENOSPC``, ``EDQUOT``), else :class:`StorageUnavailableError` (I/O error, permissions:
    nothing the caller's input can fix)."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        message = f"local storage {action} {key!r} failed: {reason}"
        if exc.errno in FULL_ERRNOS:
            raise StorageFullError(message) from exc
        raise StorageUnavailableError(message) from exc


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
        self._min_free_bytes = settings.min_free_bytes
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
        check_part_size(part_size_bytes)  # unused here; validated so both backends agree
        with Path(path).open("rb") as source:  # a missing source raises here, unwrapped
            return self._write(key, read_blocks(source), content_type)

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
            size_bytes, sha256 = hash_file(self._object_path(key))
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

    def free_bytes(self) -> int:
        """Bytes an unprivileged writer may still put on the file system holding ``root``
        (``statvfs``: one system call, cheap enough for every readiness probe)."""
        st = os.statvfs(self._root)
        return st.f_bavail * st.f_frsize

    def ping(self) -> None:
        """Usable (a temp file can be made, the directories exist) and not full: less than
        ``min_free_bytes`` free is :class:`StorageFullError`."""
        try:
            fd, probe = tempfile.mkstemp(dir=self._tmp, prefix="ping-", suffix=".tmp")
            os.close(fd)
            os.unlink(probe)
            if not self._objects.is_dir() or not self._meta.is_dir():
                raise FileNotFoundError(2, "object directories are missing")
            free_bytes = self.free_bytes()
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            message = f"local storage at {self._root} is not usable: {reason}"
            if exc.errno in FULL_ERRNOS:
                raise StorageFullError(message) from exc
            raise StorageUnavailableError(message) from exc
        if free_bytes < self._min_free_bytes:
            raise StorageFullError(
                f"local storage at {self._root} has {free_bytes} bytes free, "
                f"under min_free_bytes ({self._min_free_bytes})"
            )


def _parse_expires(expires: int | str) -> int:
    if isinstance(expires, int):
        return expires
    # Only the spelling :meth:`LocalStorage.link` signs: ASCII digits, no sign, no leading
    # zero (``int()`` alone would also take ``+1``, `` 1``, ``1_0``).
    if (
        not expires.isascii()
        or not expires.isdigit()
        or len(expires) > 12
        or (len(expires) > 1 and expires.startswith("0"))
    ):
        raise LinkInvalidError("download link is malformed")
    return int(expires)
