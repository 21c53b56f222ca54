"""voicelane.core.storage: the local directory backend, signed links, key rules, settings."""

from __future__ import annotations

import hashlib
import logging
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from pydantic import SecretStr, ValidationError

from tests.support.tiny_fs import fill, tiny_tmpfs
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
    VoicelaneError,
)
from voicelane.core.settings import ServiceSettings
from voicelane.core.storage import (
    MAX_LINK_EXPIRY_S,
    MIB,
    LocalStorage,
    LocalStorageSettings,
    S3Settings,
    StorageSettings,
    content_disposition,
    open_storage,
    validate_key,
)

SECRET = "s" * 32


def _settings(root: Path, **overrides: object) -> LocalStorageSettings:
    fields: dict[str, object] = {"root": root, "secret": SECRET}  # validated: str → SecretStr
    fields.update(overrides)
    return LocalStorageSettings.model_validate(fields)


@pytest.fixture
def storage(tmp_path: Path) -> LocalStorage:
    return LocalStorage(_settings(tmp_path / "store"))


def _files_under(directory: Path) -> list[str]:
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- objects ----------------------------------------------------------------------------------


def test_put_get_head_exists_round_trip(storage: LocalStorage) -> None:
    data = b"OggS" + bytes(range(256))
    stored = storage.put_bytes("acme/job1/final.ogg", data, content_type="audio/ogg")

    assert (stored.key, stored.size_bytes, stored.sha256, stored.content_type) == (
        "acme/job1/final.ogg",
        len(data),
        _sha256(data),
        "audio/ogg",
    )
    assert storage.get_bytes("acme/job1/final.ogg") == data
    assert storage.head("acme/job1/final.ogg") == stored
    assert storage.exists("acme/job1/final.ogg")
    assert storage.path_for("acme/job1/final.ogg").read_bytes() == data
    assert storage.path_for("acme/job1/final.ogg").is_relative_to(storage.root)


def test_put_replaces(storage: LocalStorage) -> None:
    storage.put_bytes("acme/job1/part-0", b"first", content_type="audio/wav")
    stored = storage.put_bytes("acme/job1/part-0", b"second")

    assert storage.get_bytes("acme/job1/part-0") == b"second"
    assert storage.head("acme/job1/part-0") == stored
    assert stored.content_type == "application/octet-stream"


def test_missing_object(storage: LocalStorage) -> None:
    with pytest.raises(StorageNotFoundError) as caught:
        storage.get_bytes("acme/nope/x")
    assert caught.value.permanent
    assert storage.head("acme/nope/x") is None
    assert not storage.exists("acme/nope/x")
    with pytest.raises(StorageNotFoundError):
        storage.path_for("acme/nope/x")
    storage.delete("acme/nope/x")  # idempotent


def test_a_directory_is_not_an_object(storage: LocalStorage) -> None:
    storage.put_bytes("acme/job1/a", b"x")

    assert not storage.exists("acme/job1")
    assert storage.head("acme/job1") is None
    with pytest.raises(StorageNotFoundError):
        storage.get_bytes("acme/job1")
    storage.delete("acme/job1")
    assert storage.exists("acme/job1/a")


def test_delete_is_idempotent_and_prunes_directories(storage: LocalStorage) -> None:
    storage.put_bytes("acme/job1/a", b"x")
    storage.delete("acme/job1/a")
    storage.delete("acme/job1/a")

    assert not storage.exists("acme/job1/a")
    assert _files_under(storage.root) == []
    assert sorted(p.name for p in storage.root.iterdir()) == ["meta", "objects", "tmp"]
    assert list((storage.root / "objects").iterdir()) == []


def test_key_collision_with_a_directory_is_refused(storage: LocalStorage) -> None:
    storage.put_bytes("acme/job1/a", b"x")
    with pytest.raises(InvalidKeyError, match="collides"):
        storage.put_bytes("acme/job1/a/b", b"y")
    with pytest.raises(InvalidKeyError, match="collides"):
        storage.put_bytes("acme/job1", b"y")
    assert storage.list_keys("") == ["acme/job1/a"]
    assert _files_under(storage.root / "tmp") == []


KEYS = ["t/j1/a", "t/j1/b", "t/j1/c", "t/j10/a", "t/j2/a", "u/x"]


def test_list_keys_has_string_prefix_semantics(storage: LocalStorage) -> None:
    for key in reversed(KEYS):
        storage.put_bytes(key, key.encode())

    assert storage.list_keys("") == KEYS
    assert storage.list_keys("t/j1") == ["t/j1/a", "t/j1/b", "t/j1/c", "t/j10/a"]
    assert storage.list_keys("t/j1/") == ["t/j1/a", "t/j1/b", "t/j1/c"]
    assert storage.list_keys("t/j1/b") == ["t/j1/b"]
    assert storage.list_keys("t") == KEYS[:5]
    assert storage.list_keys("v/") == []
    assert storage.incomplete_uploads() == []


def test_delete_prefix(storage: LocalStorage) -> None:
    for key in KEYS:
        storage.put_bytes(key, b"x")

    assert storage.delete_prefix("t/j1/") == 3
    assert storage.list_keys("") == ["t/j10/a", "t/j2/a", "u/x"]
    assert storage.delete_prefix("t/j1/") == 0
    assert not (storage.root / "objects" / "t" / "j1").exists()
    assert not (storage.root / "meta" / "t" / "j1").exists()


@pytest.mark.parametrize("prefix", ["", "t/j1", "/", "../", "t//"])
def test_delete_prefix_requires_a_folder(storage: LocalStorage, prefix: str) -> None:
    storage.put_bytes("t/j1/a", b"x")
    with pytest.raises(InvalidKeyError):
        storage.delete_prefix(prefix)
    assert storage.exists("t/j1/a")


# ---- keys ---------------------------------------------------------------------------------------

BAD_KEYS = [
    "",
    "/abs/path",
    "../escape",
    "a/../../escape",
    "a/..",
    "..",
    ".",
    "a/./b",
    "a//b",
    "a/",
    "a\\b",
    "..\\..\\x",
    "a\x00b",
    "a b",
    "a\nb",
    "tenant/jöb",
    "a/b?c",
    "a%2F..",
    "x" * 256,
    "/".join(["x" * 255] * 4) + "/y",
]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_keys_are_rejected_everywhere(storage: LocalStorage, key: str) -> None:
    operations: list[Callable[[], object]] = [
        lambda: storage.put_bytes(key, b"x"),
        lambda: storage.get_bytes(key),
        lambda: storage.head(key),
        lambda: storage.exists(key),
        lambda: storage.delete(key),
        lambda: storage.path_for(key),
        lambda: storage.link(key),
    ]
    for operation in operations:
        with pytest.raises(InvalidKeyError) as caught:
            operation()
        assert isinstance(caught.value, InvalidInputError)
        assert caught.value.permanent
        assert "\n" not in caught.value.message
    assert _files_under(storage.root) == []


@pytest.mark.parametrize(
    "key", ["a", "acme/job-1/part_0001.ogg", "A.b-c_d/..e/.f", "/".join(["x" * 255] * 4)]
)
def test_good_keys_are_accepted(storage: LocalStorage, key: str) -> None:
    assert validate_key(key) == key
    storage.put_bytes(key, b"x")
    assert storage.list_keys("") == [key]


def test_traversal_cannot_reach_outside_the_root(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_bytes(b"do not serve")
    storage = LocalStorage(_settings(tmp_path / "store"))
    for key in ("../../secret.txt", "objects/../../../secret.txt"):
        with pytest.raises(InvalidKeyError):
            storage.get_bytes(key)
        with pytest.raises(InvalidKeyError):
            storage.path_for(key)


# ---- writes are atomic ---------------------------------------------------------------------


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_failed_write_leaves_no_temp_file_and_keeps_the_old_object(
    storage: LocalStorage, monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    old = storage.put_bytes("acme/job1/a", b"old", content_type="audio/ogg")
    real_fsync = os.fsync
    calls: list[int] = []

    def failing_fsync(fd: int) -> None:
        calls.append(fd)
        raise error

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises((StorageUnavailableError, KeyboardInterrupt)) as caught:
        storage.put_bytes("acme/job1/a", b"new")
    monkeypatch.setattr(os, "fsync", real_fsync)

    assert calls
    if isinstance(error, OSError):
        assert isinstance(caught.value, StorageUnavailableError)
        assert "No space left on device" in str(caught.value)
        assert not caught.value.permanent
    assert _files_under(storage.root / "tmp") == []
    assert storage.get_bytes("acme/job1/a") == b"old"
    assert storage.head("acme/job1/a") == old


def test_failed_rename_leaves_nothing(
    storage: LocalStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_replace(src: object, dst: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(StorageUnavailableError, match="Input/output error"):
        storage.put_bytes("acme/job1/a", b"new")
    monkeypatch.undo()

    assert _files_under(storage.root / "tmp") == []
    assert not storage.exists("acme/job1/a")


def test_failed_source_read_leaves_nothing(storage: LocalStorage, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        storage.upload_file("acme/job1/a", tmp_path / "missing.ogg", content_type="audio/ogg")
    assert _files_under(storage.root) == []


def test_stale_temp_files_are_swept_on_prepare(storage: LocalStorage) -> None:
    stale = storage.root / "tmp" / "put-crashed.tmp"
    fresh = storage.root / "tmp" / "put-in-flight.tmp"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"x")
    os.utime(stale, (1_000_000, 1_000_000))

    storage.prepare()

    assert not stale.exists()
    assert fresh.exists()


# ---- upload_file and the sidecar -------------------------------------------------------------


def test_upload_file(storage: LocalStorage, tmp_path: Path) -> None:
    data = random.Random(3).randbytes(3 * MIB + 17)
    (tmp_path / "book.ogg").write_bytes(data)

    stored = storage.upload_file(
        "acme/job1/book.ogg", tmp_path / "book.ogg", content_type="audio/ogg"
    )

    assert stored.size_bytes == len(data)
    assert stored.sha256 == _sha256(data)
    assert storage.head("acme/job1/book.ogg") == stored
    assert storage.get_bytes("acme/job1/book.ogg") == data
    with pytest.raises(ValueError, match="part_size_bytes"):
        storage.upload_file("a/b", tmp_path / "book.ogg", content_type="x/y", part_size_bytes=1)


def test_head_recomputes_sha256_when_the_file_changed_behind_our_back(
    storage: LocalStorage,
) -> None:
    storage.put_bytes("acme/job1/a", b"original", content_type="audio/ogg")
    storage.path_for("acme/job1/a").write_bytes(b"changed by hand")

    head = storage.head("acme/job1/a")

    assert head is not None
    assert head.sha256 == _sha256(b"changed by hand")
    assert head.size_bytes == len(b"changed by hand")
    assert storage.get_bytes("acme/job1/a") == b"changed by hand"


def test_get_detects_corruption_the_sidecar_can_see(storage: LocalStorage) -> None:
    storage.put_bytes("acme/job1/a", b"original")
    path = storage.path_for("acme/job1/a")
    st = path.stat()
    with path.open("r+b") as f:  # same size, same inode, mtime put back: bit rot
        f.write(b"O")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    with pytest.raises(StorageIntegrityError):
        storage.get_bytes("acme/job1/a")


def test_missing_sidecar_falls_back_to_recomputing(storage: LocalStorage) -> None:
    storage.put_bytes("acme/job1/a", b"abc", content_type="audio/ogg")
    (storage.root / "meta" / "acme" / "job1" / "a").unlink()

    assert storage.head("acme/job1/a") == storage.head("acme/job1/a")
    head = storage.head("acme/job1/a")
    assert head is not None
    assert (head.sha256, head.content_type) == (_sha256(b"abc"), "application/octet-stream")


def test_invalid_content_type_is_refused(storage: LocalStorage) -> None:
    with pytest.raises(InvalidInputError):
        storage.put_bytes("a/b", b"x", content_type="audio/ogg\r\nX-Evil: 1")


# ---- links ----------------------------------------------------------------------------------


def _link_params(url: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    query = {name: values[0] for name, values in parse_qs(parts.query).items()}
    return parts.path.removeprefix("/v1/files/"), query


def test_link_format(storage: LocalStorage) -> None:
    url = storage.link("acme/job1/final.ogg", expires_s=600)

    assert url.startswith("http://127.0.0.1:8000/v1/files/acme/job1/final.ogg?expires=")
    key, query = _link_params(url)
    assert key == "acme/job1/final.ogg"
    assert sorted(query) == ["expires", "sig"]
    assert len(query["sig"]) == 64
    storage.verify_link(key, query["expires"], query["sig"])
    storage.verify_link(key, int(query["expires"]), query["sig"], now=int(query["expires"]) - 1)


def test_link_with_filename(storage: LocalStorage) -> None:
    url = storage.link("acme/job1/final.ogg", filename="Chapter 1 & ü.ogg")
    key, query = _link_params(url)

    assert "filename=Chapter%201%20%26%20%C3%BC.ogg" in url
    assert query["filename"] == "Chapter 1 & ü.ogg"
    storage.verify_link(key, query["expires"], query["sig"], filename=query["filename"])


def test_link_base_url_is_configurable(tmp_path: Path) -> None:
    storage = LocalStorage(_settings(tmp_path, public_base_url="https://tts.example.com/"))
    assert storage.link("a/b").startswith("https://tts.example.com/v1/files/a/b?")


def test_tampered_links_are_rejected(storage: LocalStorage) -> None:
    key, query = _link_params(storage.link("acme/job1/final.ogg", filename="a.ogg"))
    expires, sig, filename = query["expires"], query["sig"], query["filename"]
    flipped = ("0" if sig[0] != "0" else "1") + sig[1:]
    attempts = {
        "tampered sig": (key, expires, flipped, filename),
        "uppercase sig": (key, expires, sig.upper(), filename),
        "short sig": (key, expires, sig[:-1], filename),
        "empty sig": (key, expires, "", filename),
        "non-ascii sig": (key, expires, "é" * 64, filename),
        "other key": ("acme/job2/final.ogg", expires, sig, filename),
        "other tenant": ("evil/job1/final.ogg", expires, sig, filename),
        "later expiry": (key, str(int(expires) + 1), sig, filename),
        "changed filename": (key, expires, sig, "b.ogg"),
        "dropped filename": (key, expires, sig, None),
        "malformed expires": (key, expires + "x", sig, filename),
        "negative expires": (key, "-" + expires, sig, filename),
        "traversal key": ("../acme/job1/final.ogg", expires, sig, filename),
        "bad filename": (key, expires, sig, "a\nb.ogg"),
    }
    for name, (k, e, s, f) in attempts.items():
        with pytest.raises(LinkInvalidError) as caught:
            storage.verify_link(k, e, s, filename=f)
        assert caught.value.http_status == 403, name
    key2, query2 = _link_params(storage.link("acme/job1/final.ogg"))
    with pytest.raises(LinkInvalidError):  # a filename added to a link signed without one
        storage.verify_link(key2, query2["expires"], query2["sig"], filename="a.ogg")


def test_expired_link_is_rejected(storage: LocalStorage) -> None:
    key, query = _link_params(storage.link("acme/job1/final.ogg", expires_s=60))
    expires = int(query["expires"])

    storage.verify_link(key, expires, query["sig"], now=expires - 0.5)
    for now in (expires, expires + 3600):
        with pytest.raises(LinkExpiredError) as caught:
            storage.verify_link(key, expires, query["sig"], now=now)
        assert caught.value.http_status == 403


def test_links_from_another_secret_are_rejected(storage: LocalStorage, tmp_path: Path) -> None:
    other = LocalStorage(_settings(tmp_path / "other", secret="t" * 32))
    key, query = _link_params(other.link("acme/job1/final.ogg"))
    with pytest.raises(LinkInvalidError):
        storage.verify_link(key, query["expires"], query["sig"])


def test_link_expiry_is_clamped_and_validated(storage: LocalStorage) -> None:
    _, query = _link_params(storage.link("a/b", expires_s=10 * MAX_LINK_EXPIRY_S))
    _, now_query = _link_params(storage.link("a/b", expires_s=1))
    lifetime_s = int(query["expires"]) - int(now_query["expires"]) + 1
    assert MAX_LINK_EXPIRY_S - 2 <= lifetime_s <= MAX_LINK_EXPIRY_S + 2
    for bad in (0, -5):
        with pytest.raises(InvalidInputError):
            storage.link("a/b", expires_s=bad)
    for filename in ("", "a/b.ogg", "..", "a\r\nb", "x" * 256):
        with pytest.raises(InvalidInputError):
            storage.link("a/b", filename=filename)


def test_content_disposition() -> None:
    assert content_disposition("a.ogg") == "attachment; filename=\"a.ogg\"; filename*=UTF-8''a.ogg"
    header = content_disposition('Ch "1" ü.mp3')
    assert header == (
        "attachment; filename=\"Ch _1_ _.mp3\"; filename*=UTF-8''Ch%20%221%22%20%C3%BC.mp3"
    )


# ---- secret, readiness, settings ----------------------------------------------------------------


def test_secret_is_required_outside_dev_mode(tmp_path: Path) -> None:
    with pytest.raises(StorageConfigError, match="VOICELANE_STORAGE__LOCAL__SECRET") as caught:
        LocalStorage(LocalStorageSettings(root=tmp_path))
    assert caught.value.permanent
    with pytest.raises(ValidationError) as invalid:
        LocalStorageSettings(root=tmp_path, secret=SecretStr("tiny-secret-xyz"))
    assert "tiny-secret-xyz" not in str(invalid.value)  # secrets never echoed in errors


def test_dev_mode_generates_a_per_process_secret(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="voicelane.core.storage"):
        first = LocalStorage(LocalStorageSettings(root=tmp_path / "a", dev_mode=True))
    second = LocalStorage(LocalStorageSettings(root=tmp_path / "b", dev_mode=True))
    assert "random per-process secret" in caplog.text

    key, query = _link_params(first.link("a/b"))
    second.verify_link(key, query["expires"], query["sig"])  # same process, same secret
    with pytest.raises(LinkInvalidError):
        LocalStorage(_settings(tmp_path / "c")).verify_link(key, query["expires"], query["sig"])


def test_ping(storage: LocalStorage) -> None:
    storage.ping()
    shutil.rmtree(storage.root)
    with pytest.raises(StorageUnavailableError) as caught:
        storage.ping()
    assert "\n" not in caught.value.message
    assert not caught.value.permanent
    storage.prepare()
    storage.ping()


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VOICELANE_STORAGE__BACKEND", "s3")
    monkeypatch.setenv("VOICELANE_STORAGE__LINK_EXPIRY_S", "120")
    monkeypatch.setenv("VOICELANE_STORAGE__S3__ENDPOINT_URL", "http://minio:9000")
    monkeypatch.setenv("VOICELANE_STORAGE__S3__BUCKET", "audio-files")
    monkeypatch.setenv("VOICELANE_STORAGE__S3__ACCESS_KEY_ID", "key")
    monkeypatch.setenv("VOICELANE_STORAGE__S3__SECRET_ACCESS_KEY", "very-secret-value")
    monkeypatch.setenv("VOICELANE_STORAGE__S3__MAX_ATTEMPTS", "3")
    monkeypatch.setenv("VOICELANE_STORAGE__LOCAL__ROOT", str(tmp_path))

    service = ServiceSettings()  # storage is read as part of a service's settings
    settings = service.storage

    assert settings.backend == "s3"
    assert settings.link_expiry_s == 120
    assert settings.s3.endpoint_url == "http://minio:9000"
    assert settings.s3.bucket == "audio-files"
    assert settings.s3.max_attempts == 3
    assert settings.s3.addressing_style == "path"
    assert settings.local.root == tmp_path
    assert "very-secret-value" not in repr(settings)
    assert "very-secret-value" not in repr(service)


def test_settings_validation(tmp_path: Path) -> None:
    with pytest.raises(ValidationError):
        S3Settings(bucket="Not_A_Bucket")
    with pytest.raises(ValidationError):
        S3Settings(access_key_id="only-the-id")
    with pytest.raises(ValidationError):
        StorageSettings(link_expiry_s=MAX_LINK_EXPIRY_S + 1)
    with pytest.raises(ValidationError):
        LocalStorageSettings(public_base_url="ftp://x")


def test_open_storage_local(tmp_path: Path) -> None:
    settings = StorageSettings(local=LocalStorageSettings(root=tmp_path))
    with pytest.raises(StorageConfigError):
        open_storage(settings)
    storage = open_storage(settings, dev_mode=True)
    assert isinstance(storage, LocalStorage)
    assert storage.root == tmp_path.resolve()


def test_error_classes() -> None:
    assert issubclass(StorageUnavailableError, VoicelaneError)
    assert not StorageUnavailableError.permanent
    assert StorageUnavailableError.http_status == 503
    assert StorageUnavailableError.grpc_status == "UNAVAILABLE"
    assert StorageNotFoundError.permanent
    assert StorageNotFoundError.http_status == 404
    assert not StorageIntegrityError.permanent
    assert issubclass(InvalidKeyError, InvalidInputError)
    assert LinkInvalidError.permanent
    assert LinkExpiredError.permanent


def test_ping_reports_storage_full_under_min_free_bytes(tmp_path: Path) -> None:
    # Repro (issue 26, item 8): /readyz said ready with the disk full. Ask for more free
    # space than any disk has: ping must say "full", not "usable" or merely "unavailable".
    storage = LocalStorage(_settings(tmp_path / "store", min_free_bytes=2**62))
    assert 0 < storage.free_bytes() < 2**62
    with pytest.raises(StorageFullError) as caught:
        storage.ping()
    assert caught.value.code == "storage_full"
    assert not caught.value.permanent
    assert caught.value.http_status == 503
    assert "min_free_bytes" in caught.value.message and "\n" not in caught.value.message
    LocalStorage(_settings(tmp_path / "other", min_free_bytes=0)).ping()  # 0: never full


def test_a_full_file_system_is_storage_full(tmp_path: Path) -> None:
    # Repro (issue 26, item 8): ENOSPC while writing a part was a plain StorageUnavailable
    # (retried 3 times quickly, then the job failed). It must be StorageFullError, and the
    # failed write must leave no temp file behind.
    with tiny_tmpfs(tmp_path / "tiny") as root:
        storage = LocalStorage(_settings(root / "store", min_free_bytes=MIB))
        storage.put_bytes("t/j/small", b"x" * 1000)
        storage.ping()
        with pytest.raises(StorageFullError) as caught:
            storage.put_bytes("t/j/big", os.urandom(8 * MIB))
        assert "No space left" in caught.value.message
        assert isinstance(caught.value, StorageUnavailableError)  # still transient
        assert _files_under(root / "store" / "tmp") == []
        assert not storage.exists("t/j/big")
        fill(root)
        with pytest.raises(StorageFullError):
            storage.ping()
        (root / "filler").unlink()
        storage.ping()
        assert storage.get_bytes("t/j/small") == b"x" * 1000
