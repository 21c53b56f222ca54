"""voicelane.core.storage.S3Storage against a real S3 server: SeaweedFS, started by the tests
(tests/support/s3_server.py), which checks signatures on requests and presigned links, link
expiry and Content-MD5, and keeps lifecycle rules as written. What only the code under test can
be made to do (a store error on demand, a connection cut mid-upload) is injected by wrapping
methods of the boto3 client.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import random
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import botocore.auth
import httpx
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from tests.integration.conftest import empty_and_remove, s3_settings
from tests.support.s3_server import S3Endpoint
from voicelane.common.errors import (
    InvalidInputError,
    InvalidKeyError,
    StorageError,
    StorageFullError,
    StorageIntegrityError,
    StorageNotFoundError,
    StorageUnavailableError,
)
from voicelane.core.storage import (
    ABORT_RULE_ID,
    MAX_LINK_EXPIRY_S,
    MIB,
    S3Storage,
    StorageSettings,
    open_storage,
)
from voicelane.core.storage import s3 as s3_module

pytestmark = pytest.mark.integration

PART_SIZE_BYTES = 5 * MIB  # SeaweedFS enforces S3's 5 MiB minimum (EntityTooSmall) but the last
LARGE_SIZE_BYTES = 12 * MIB  # three parts: 5 + 5 + 2 MiB


def _write_file(path: Path, size_bytes: int, seed: int = 1) -> bytes:
    data = random.Random(seed).randbytes(size_bytes)
    path.write_bytes(data)
    return data


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _client_error(code: str, status: int, operation: str) -> ClientError:
    response: Any = {  # what botocore parses from an error answer, trimmed to what we read
        "Error": {"Code": code, "Message": f"injected {code}"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, operation)


def _count_calls(
    monkeypatch: pytest.MonkeyPatch, storage: S3Storage, method: str
) -> list[dict[str, Any]]:
    """Record the keyword arguments of every call of ``storage.client.<method>``."""
    calls: list[dict[str, Any]] = []
    real: Callable[..., Any] = getattr(storage.client, method)

    def spy(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(storage.client, method, spy)
    return calls


def _raw_exists(storage: S3Storage, key: str) -> bool:
    """HEAD through boto3 directly (not through the code under test)."""
    try:
        storage.client.head_object(Bucket=storage.bucket, Key=key)
    except ClientError as exc:
        assert exc.response["Error"]["Code"] in {"404", "NoSuchKey"}
        return False
    return True


# ---- basic operations ---------------------------------------------------------------------


def test_put_get_head_exists_round_trip(s3_storage: S3Storage) -> None:
    data = b"OggS fake audio" * 100
    stored = s3_storage.put_bytes("acme/job1/final.ogg", data, content_type="audio/ogg")

    assert stored.key == "acme/job1/final.ogg"
    assert stored.size_bytes == len(data)
    assert stored.sha256 == _sha256(data)
    assert stored.content_type == "audio/ogg"
    assert s3_storage.get_bytes("acme/job1/final.ogg") == data
    assert s3_storage.head("acme/job1/final.ogg") == stored
    assert s3_storage.exists("acme/job1/final.ogg")
    answer = s3_storage.client.head_object(Bucket=s3_storage.bucket, Key="acme/job1/final.ogg")
    assert answer["Metadata"] == {"sha256": _sha256(data)}


def test_put_replaces_and_default_content_type(s3_storage: S3Storage) -> None:
    s3_storage.put_bytes("acme/job1/part-0", b"first")
    stored = s3_storage.put_bytes("acme/job1/part-0", b"second")

    assert s3_storage.get_bytes("acme/job1/part-0") == b"second"
    assert stored.content_type == "application/octet-stream"
    assert s3_storage.head("acme/job1/part-0") == stored


def test_missing_object(s3_storage: S3Storage) -> None:
    with pytest.raises(StorageNotFoundError) as caught:
        s3_storage.get_bytes("acme/nope/x")
    assert caught.value.permanent
    assert caught.value.http_status == 404
    assert s3_storage.head("acme/nope/x") is None
    assert not s3_storage.exists("acme/nope/x")
    s3_storage.delete("acme/nope/x")  # idempotent


def test_delete_is_idempotent(s3_storage: S3Storage) -> None:
    s3_storage.put_bytes("acme/job1/a", b"a")
    s3_storage.delete("acme/job1/a")
    s3_storage.delete("acme/job1/a")
    assert not s3_storage.exists("acme/job1/a")


def test_foreign_object_has_no_sha256(s3_storage: S3Storage) -> None:
    s3_storage.client.put_object(Bucket=s3_storage.bucket, Key="acme/job1/x", Body=b"abc")

    head = s3_storage.head("acme/job1/x")
    assert head is not None
    assert head.sha256 == ""
    assert head.size_bytes == 3
    assert s3_storage.get_bytes("acme/job1/x") == b"abc"


def test_get_detects_sha256_mismatch(s3_storage: S3Storage) -> None:
    s3_storage.client.put_object(
        Bucket=s3_storage.bucket,
        Key="acme/job1/x",
        Body=b"abc",
        Metadata={"sha256": _sha256(b"abd")},
    )
    with pytest.raises(StorageIntegrityError):
        s3_storage.get_bytes("acme/job1/x")


def test_keys_are_validated_before_any_request(
    s3_storage: S3Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _count_calls(monkeypatch, s3_storage, "put_object")
    for key in ("../x", "/acme/x", "acme//x", "acme/x/", "acme\\x", "acme/ü"):
        with pytest.raises(InvalidKeyError):
            s3_storage.put_bytes(key, b"x")
    assert calls == []


# ---- listing and deleting -----------------------------------------------------------------

KEYS = ["t/j1/a", "t/j1/b", "t/j1/c", "t/j10/a", "t/j2/a", "u/x"]


def test_list_keys_string_prefix_across_pages(
    s3_storage: S3Storage, s3_endpoint: S3Endpoint
) -> None:
    for key in reversed(KEYS):
        s3_storage.put_bytes(key, key.encode())
    paged = S3Storage(s3_settings(s3_endpoint, s3_storage.bucket), list_page_size=2)

    assert paged.list_keys("") == KEYS
    assert paged.list_keys("t/j1") == ["t/j1/a", "t/j1/b", "t/j1/c", "t/j10/a"]
    assert paged.list_keys("t/j1/") == ["t/j1/a", "t/j1/b", "t/j1/c"]
    assert paged.list_keys("v/") == []


def test_delete_prefix_deletes_objects_and_aborts_uploads(s3_storage: S3Storage) -> None:
    for key in KEYS:
        s3_storage.put_bytes(key, b"x")
    client, bucket = s3_storage.client, s3_storage.bucket
    client.create_multipart_upload(Bucket=bucket, Key="t/j1/final.ogg")
    client.create_multipart_upload(Bucket=bucket, Key="t/j10/final.ogg")
    assert s3_storage.incomplete_uploads("t/") == ["t/j1/final.ogg", "t/j10/final.ogg"]

    assert s3_storage.delete_prefix("t/j1/") == 3

    assert s3_storage.list_keys("") == ["t/j10/a", "t/j2/a", "u/x"]
    assert s3_storage.incomplete_uploads() == ["t/j10/final.ogg"]
    assert s3_storage.delete_prefix("t/j1/") == 0


@pytest.mark.parametrize("prefix", ["", "t/j1", "/", "../"])
def test_delete_prefix_requires_a_folder(s3_storage: S3Storage, prefix: str) -> None:
    s3_storage.put_bytes("t/j1/a", b"x")
    with pytest.raises(InvalidKeyError):
        s3_storage.delete_prefix(prefix)
    assert s3_storage.exists("t/j1/a")


# ---- upload_file ----------------------------------------------------------------------------


@pytest.mark.parametrize("size_bytes", [0, 1000, PART_SIZE_BYTES])
def test_upload_small_file_is_one_put(
    s3_storage: S3Storage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size_bytes: int
) -> None:
    data = _write_file(tmp_path / "small.ogg", size_bytes)
    creates = _count_calls(monkeypatch, s3_storage, "create_multipart_upload")
    puts = _count_calls(monkeypatch, s3_storage, "put_object")

    stored = s3_storage.upload_file(
        "acme/job1/final.ogg",
        tmp_path / "small.ogg",
        content_type="audio/ogg",
        part_size_bytes=PART_SIZE_BYTES,
    )

    assert (len(creates), len(puts)) == (0, 1)
    assert stored.size_bytes == size_bytes
    assert stored.sha256 == _sha256(data)
    assert stored.content_type == "audio/ogg"
    assert s3_storage.get_bytes("acme/job1/final.ogg") == data


def test_upload_large_file_is_multipart_and_verified(
    s3_storage: S3Storage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _write_file(tmp_path / "book.ogg", LARGE_SIZE_BYTES)
    parts = _count_calls(monkeypatch, s3_storage, "upload_part")
    heads = _count_calls(monkeypatch, s3_storage, "head_object")

    stored = s3_storage.upload_file(
        "acme/job1/book.ogg",
        str(tmp_path / "book.ogg"),
        content_type="audio/ogg",
        part_size_bytes=PART_SIZE_BYTES,
    )

    assert [len(call["Body"]) for call in parts] == [5 * MIB, 5 * MIB, 2 * MIB]
    assert all(call["ContentMD5"] for call in parts)
    assert len(heads) == 1  # verified after completing
    assert stored.size_bytes == LARGE_SIZE_BYTES
    assert stored.sha256 == _sha256(data)
    assert s3_storage.head("acme/job1/book.ogg") == stored
    assert s3_storage.get_bytes("acme/job1/book.ogg") == data
    assert s3_storage.incomplete_uploads() == []


def _damage_content_md5(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Content-MD5 sent stops matching the body: what a body damaged in transit looks like
    to the store."""
    real = s3_module._md5_b64
    monkeypatch.setattr(s3_module, "_md5_b64", lambda data: real(data + b"damaged"))


def test_a_body_damaged_in_transit_is_refused_by_the_store(
    s3_storage: S3Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    _damage_content_md5(monkeypatch)

    with pytest.raises(StorageError, match="BadDigest"):
        s3_storage.put_bytes("acme/job1/final.ogg", b"OggS audio")

    assert not _raw_exists(s3_storage, "acme/job1/final.ogg")


def test_a_part_damaged_in_transit_fails_the_upload_and_leaves_nothing(
    s3_storage: S3Storage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_file(tmp_path / "book.ogg", LARGE_SIZE_BYTES)
    parts = _count_calls(monkeypatch, s3_storage, "upload_part")
    _damage_content_md5(monkeypatch)

    with pytest.raises(StorageError, match="BadDigest"):
        s3_storage.upload_file(
            "acme/job1/book.ogg",
            tmp_path / "book.ogg",
            content_type="audio/ogg",
            part_size_bytes=PART_SIZE_BYTES,
        )

    assert len(parts) == 1  # the first part was refused
    assert s3_storage.incomplete_uploads() == []
    assert not _raw_exists(s3_storage, "acme/job1/book.ogg")


def test_part_size_below_the_s3_minimum_is_refused(s3_storage: S3Storage, tmp_path: Path) -> None:
    _write_file(tmp_path / "f", 10)
    with pytest.raises(ValueError, match="part_size_bytes"):
        s3_storage.upload_file("a/b", tmp_path / "f", content_type="audio/ogg", part_size_bytes=MIB)


def _fail_on_part(
    monkeypatch: pytest.MonkeyPatch, storage: S3Storage, number: int, error: BaseException
) -> list[int]:
    """Make ``upload_part`` raise ``error`` for part ``number``; returns the parts sent."""
    real = storage.client.upload_part
    sent: list[int] = []

    def flaky(**kwargs: Any) -> Any:
        if kwargs["PartNumber"] == number:
            raise error
        sent.append(kwargs["PartNumber"])
        return real(**kwargs)

    monkeypatch.setattr(storage.client, "upload_part", flaky)
    return sent


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (RuntimeError("injected"), RuntimeError),
        (EndpointConnectionError(endpoint_url="http://injected"), StorageUnavailableError),
        (_client_error("SlowDown", 503, "UploadPart"), StorageUnavailableError),
        (KeyboardInterrupt(), KeyboardInterrupt),
    ],
    ids=["bug", "network", "throttled", "interrupt"],
)
def test_failure_mid_multipart_leaves_nothing_behind(
    s3_storage: S3Storage,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    error: BaseException,
    expected: type[BaseException],
) -> None:
    _write_file(tmp_path / "book.ogg", LARGE_SIZE_BYTES)
    sent = _fail_on_part(monkeypatch, s3_storage, 2, error)
    aborts = _count_calls(monkeypatch, s3_storage, "abort_multipart_upload")

    with pytest.raises(expected):
        s3_storage.upload_file(
            "acme/job1/book.ogg",
            tmp_path / "book.ogg",
            content_type="audio/ogg",
            part_size_bytes=PART_SIZE_BYTES,
        )

    assert sent == [1]
    assert len(aborts) == 1
    assert s3_storage.incomplete_uploads() == []
    assert not _raw_exists(s3_storage, "acme/job1/book.ogg")


def test_source_changing_during_multipart_upload_is_caught(
    s3_storage: S3Storage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "book.ogg"
    _write_file(source, LARGE_SIZE_BYTES)
    real = s3_storage.client.upload_part

    def rewrite_after_first(**kwargs: Any) -> Any:
        answer = real(**kwargs)
        if kwargs["PartNumber"] == 1:  # someone rewrites the file's tail under us
            with source.open("r+b") as f:
                f.seek(LARGE_SIZE_BYTES - 10)
                f.write(b"0123456789")
        return answer

    monkeypatch.setattr(s3_storage.client, "upload_part", rewrite_after_first)
    with pytest.raises(StorageIntegrityError, match="changed"):
        s3_storage.upload_file(
            "acme/job1/book.ogg", source, content_type="audio/ogg", part_size_bytes=PART_SIZE_BYTES
        )

    assert s3_storage.incomplete_uploads() == []
    assert not _raw_exists(s3_storage, "acme/job1/book.ogg")


def _tamper_head(
    monkeypatch: pytest.MonkeyPatch, storage: S3Storage, change: Callable[[dict[str, Any]], None]
) -> None:
    real = storage.client.head_object

    def tampered(**kwargs: Any) -> Any:
        answer = dict(real(**kwargs))
        change(answer)
        return answer

    monkeypatch.setattr(storage.client, "head_object", tampered)


def _wrong_size(answer: dict[str, Any]) -> None:
    answer["ContentLength"] += 1


def _wrong_sha256(answer: dict[str, Any]) -> None:
    answer["Metadata"] = {"sha256": "0" * 64}


@pytest.mark.parametrize("size_bytes", [1000, LARGE_SIZE_BYTES], ids=["single", "multipart"])
@pytest.mark.parametrize("change", [_wrong_size, _wrong_sha256], ids=["size", "sha256"])
def test_integrity_mismatch_deletes_the_object(
    s3_storage: S3Storage,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    size_bytes: int,
    change: Callable[[dict[str, Any]], None],
) -> None:
    _write_file(tmp_path / "book.ogg", size_bytes)
    _tamper_head(monkeypatch, s3_storage, change)

    with pytest.raises(StorageIntegrityError, match="verification") as caught:
        s3_storage.upload_file(
            "acme/job1/book.ogg",
            tmp_path / "book.ogg",
            content_type="audio/ogg",
            part_size_bytes=PART_SIZE_BYTES,
        )

    assert not caught.value.permanent  # a retry re-uploads
    assert not _raw_exists(s3_storage, "acme/job1/book.ogg")
    assert s3_storage.incomplete_uploads() == []


# ---- links ------------------------------------------------------------------------------------


def test_presigned_link_downloads_as_attachment(s3_storage: S3Storage) -> None:
    data = b"OggS" + bytes(range(256)) * 10
    s3_storage.put_bytes("acme/job1/final.ogg", data, content_type="audio/ogg")

    url = s3_storage.link("acme/job1/final.ogg", expires_s=600, filename="Chapter 1 – “ü”.ogg")

    query = parse_qs(urlsplit(url).query)
    assert query["X-Amz-Expires"] == ["600"]
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    response = httpx.get(url, timeout=10)
    assert response.status_code == 200
    assert response.content == data
    assert response.headers["content-type"] == "audio/ogg"
    disposition = response.headers["content-disposition"]
    assert disposition.startswith('attachment; filename="Chapter 1 _ ___.ogg"; ')
    assert "filename*=UTF-8''Chapter%201%20%E2%80%93%20%E2%80%9C%C3%BC%E2%80%9D.ogg" in disposition


def test_presigned_link_without_filename(s3_storage: S3Storage) -> None:
    s3_storage.put_bytes("acme/job1/final.ogg", b"abc")
    url = s3_storage.link("acme/job1/final.ogg")

    assert parse_qs(urlsplit(url).query)["X-Amz-Expires"] == ["3600"]
    response = httpx.get(url, timeout=10)
    assert (response.status_code, response.content) == (200, b"abc")
    assert "content-disposition" not in response.headers


# What a link's holder may try, and the store itself must refuse (moto, used before, accepted all).
SECRET_BYTES = b"OggS acme's private audio"
OTHER_BYTES = b"OggS another job's audio"
OTHER_TENANT_BYTES = b"OggS another tenant's audio"


def _with_query(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    query = {name: values[0] for name, values in parse_qs(parts.query).items()}
    query.update(changes)
    return parts._replace(query=urlencode(query, quote_via=quote)).geturl()


def _with_path(url: str, key: str) -> str:
    parts = urlsplit(url)
    bucket = parts.path.split("/")[1]
    return parts._replace(path=f"/{bucket}/{key}").geturl()


def _tampered_signature(storage: S3Storage, endpoint: S3Endpoint) -> str:
    url = storage.link("acme/job1/final.ogg", expires_s=600)
    signature = parse_qs(urlsplit(url).query)["X-Amz-Signature"][0]
    flipped = ("0" if signature[0] != "0" else "1") + signature[1:]  # always a different digit
    assert flipped != signature
    return _with_query(url, **{"X-Amz-Signature": flipped})


def _moved_to_another_job(storage: S3Storage, endpoint: S3Endpoint) -> str:
    return _with_path(storage.link("acme/job1/final.ogg", expires_s=600), "acme/job2/final.ogg")


def _moved_to_another_tenant(storage: S3Storage, endpoint: S3Endpoint) -> str:
    return _with_path(storage.link("acme/job1/final.ogg", expires_s=600), "other/job9/final.ogg")


def _raised_expiry(storage: S3Storage, endpoint: S3Endpoint) -> str:
    url = storage.link("acme/job1/final.ogg", expires_s=600)
    return _with_query(url, **{"X-Amz-Expires": str(MAX_LINK_EXPIRY_S)})


def _wrong_secret(storage: S3Storage, endpoint: S3Endpoint) -> str:
    forger = S3Storage(
        s3_settings(endpoint, storage.bucket, secret_access_key="not-the-secret-at-all")
    )
    return forger.link("acme/job1/final.ogg", expires_s=600)


def _unknown_access_key(storage: S3Storage, endpoint: S3Endpoint) -> str:
    forger = S3Storage(s3_settings(endpoint, storage.bucket, access_key_id="nobody-we-know"))
    return forger.link("acme/job1/final.ogg", expires_s=600)


def _expired(storage: S3Storage, endpoint: S3Endpoint) -> str:
    """Signed by the code under test two hours ago, valid for one minute."""
    signed_at = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) - datetime.timedelta(
        hours=2
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(botocore.auth, "get_current_datetime", lambda *_args, **_kw: signed_at)
        return storage.link("acme/job1/final.ogg", expires_s=60)


def _unsigned(storage: S3Storage, endpoint: S3Endpoint) -> str:
    return urlsplit(storage.link("acme/job1/final.ogg"))._replace(query="").geturl()


@pytest.mark.parametrize(
    "forge",
    [
        _tampered_signature,
        _moved_to_another_job,
        _moved_to_another_tenant,
        _raised_expiry,
        _wrong_secret,
        _unknown_access_key,
        _expired,
        _unsigned,
    ],
    ids=lambda forge: forge.__name__.strip("_"),
)
def test_a_forged_link_is_refused_by_the_store(
    s3_storage: S3Storage, s3_endpoint: S3Endpoint, forge: Callable[[S3Storage, S3Endpoint], str]
) -> None:
    s3_storage.put_bytes("acme/job1/final.ogg", SECRET_BYTES, content_type="audio/ogg")
    s3_storage.put_bytes("acme/job2/final.ogg", OTHER_BYTES, content_type="audio/ogg")
    s3_storage.put_bytes("other/job9/final.ogg", OTHER_TENANT_BYTES, content_type="audio/ogg")
    genuine = httpx.get(s3_storage.link("acme/job1/final.ogg", expires_s=600), timeout=10)
    assert (genuine.status_code, genuine.content) == (200, SECRET_BYTES)

    forged = httpx.get(forge(s3_storage, s3_endpoint), timeout=10)

    assert forged.status_code == 403, forged.text
    assert b"OggS" not in forged.content
    if forge is _expired:
        assert "expired" in forged.text.lower()


def test_link_expiry_is_clamped_and_validated(s3_storage: S3Storage) -> None:
    url = s3_storage.link("acme/job1/final.ogg", expires_s=30 * 24 * 3600)
    assert parse_qs(urlsplit(url).query)["X-Amz-Expires"] == [str(MAX_LINK_EXPIRY_S)]
    with pytest.raises(InvalidInputError):
        s3_storage.link("acme/job1/final.ogg", expires_s=0)
    with pytest.raises(InvalidInputError):
        s3_storage.link("acme/job1/final.ogg", filename="a\r\nSet-Cookie: x")
    with pytest.raises(InvalidKeyError):
        s3_storage.link("../etc/passwd")


def test_links_are_signed_for_the_public_endpoint(s3_endpoint: S3Endpoint) -> None:
    settings = s3_settings(
        s3_endpoint, "public-test", public_endpoint_url="http://files.example.test:9000"
    )
    url = S3Storage(settings).link("acme/job1/final.ogg", expires_s=60)
    assert url.startswith("http://files.example.test:9000/public-test/acme/job1/final.ogg?")


# ---- readiness, bucket setup, errors -----------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens there once the socket is closed


def test_ping(s3_storage: S3Storage) -> None:
    s3_storage.ping()


def test_ping_fails_fast_with_one_line_when_the_endpoint_is_down(
    s3_endpoint: S3Endpoint,
) -> None:
    settings = s3_settings(
        s3_endpoint, "anything", connect_timeout_s=1.0, read_timeout_s=1.0, max_attempts=1
    )
    settings = settings.model_copy(update={"endpoint_url": f"http://127.0.0.1:{_closed_port()}"})
    storage = S3Storage(settings)

    started = time.monotonic()
    with pytest.raises(StorageUnavailableError) as caught:
        storage.ping()
    elapsed_s = time.monotonic() - started

    assert elapsed_s < 3.0
    assert "\n" not in caught.value.message
    assert "ping" in caught.value.message
    assert not caught.value.permanent


def test_ping_fails_when_the_bucket_is_missing(s3_endpoint: S3Endpoint) -> None:
    storage = S3Storage(s3_settings(s3_endpoint, "no-such-bucket-here"))
    with pytest.raises(StorageUnavailableError, match="does not exist"):
        storage.ping()


def test_ensure_bucket_creates_bucket_and_abort_rule(
    s3_endpoint: S3Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    storage = S3Storage(s3_settings(s3_endpoint, f"fresh-{uuid.uuid4().hex[:16]}"))
    with pytest.raises(StorageUnavailableError, match="does not exist"):
        storage.ping()

    with caplog.at_level(logging.WARNING, logger="voicelane.core.storage"):
        storage.ensure_bucket()
        storage.ensure_bucket()  # idempotent

    rules = _lifecycle_rules(storage)  # read back from the store: kept as written
    assert [rule.get("ID") for rule in rules] == [ABORT_RULE_ID]
    assert rules[0].get("AbortIncompleteMultipartUpload") == {"DaysAfterInitiation": 1}
    assert caplog.text == ""
    storage.ping()
    storage.put_bytes("acme/job1/a", b"x")
    assert storage.list_keys("") == ["acme/job1/a"]
    empty_and_remove(storage)


def _lifecycle_rules(storage: S3Storage) -> list[dict[str, Any]]:
    try:
        answer = storage.client.get_bucket_lifecycle_configuration(Bucket=storage.bucket)
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "NoSuchLifecycleConfiguration"
        return []
    return [dict(rule) for rule in answer["Rules"]]


def test_ensure_bucket_keeps_existing_rules(s3_storage: S3Storage) -> None:
    client, bucket = s3_storage.client, s3_storage.bucket
    client.put_bucket_lifecycle_configuration(
        Bucket=bucket,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "expire-tmp",
                    "Status": "Enabled",
                    "Filter": {"Prefix": "tmp/"},
                    "Expiration": {"Days": 30},
                }
            ]
        },
    )
    s3_storage.ensure_bucket()

    by_id = {rule.get("ID"): rule for rule in _lifecycle_rules(s3_storage)}
    assert sorted(str(rule_id) for rule_id in by_id) == sorted([ABORT_RULE_ID, "expire-tmp"])
    assert by_id["expire-tmp"].get("Expiration") == {"Days": 30}
    assert by_id["expire-tmp"].get("Filter") == {"Prefix": "tmp/"}


@pytest.mark.parametrize("operation", ["get", "put"])
def test_lifecycle_not_implemented_is_logged_not_raised(
    s3_storage: S3Storage,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    operation: str,
) -> None:
    s3_storage.client.delete_bucket_lifecycle(Bucket=s3_storage.bucket)

    def not_implemented(**kwargs: Any) -> Any:
        raise _client_error("NotImplemented", 501, "BucketLifecycle")

    monkeypatch.setattr(
        s3_storage.client, f"{operation}_bucket_lifecycle_configuration", not_implemented
    )
    with caplog.at_level(logging.WARNING, logger="voicelane.core.storage"):
        s3_storage.ensure_bucket()
    assert "NotImplemented" in caplog.text


@pytest.mark.parametrize(
    ("code", "status", "unavailable"),
    [("SlowDown", 503, True), ("InternalError", 500, True), ("AccessDenied", 403, False)],
)
def test_store_errors_are_classified(
    s3_storage: S3Storage,
    monkeypatch: pytest.MonkeyPatch,
    code: str,
    status: int,
    unavailable: bool,
) -> None:
    def failing(**kwargs: Any) -> Any:
        raise _client_error(code, status, "PutObject")

    monkeypatch.setattr(s3_storage.client, "put_object", failing)
    with pytest.raises(StorageError) as caught:
        s3_storage.put_bytes("acme/job1/a", b"x")
    assert isinstance(caught.value, StorageUnavailableError) is unavailable
    assert not caught.value.permanent  # store trouble is never the caller's input: retried
    assert code in caught.value.message
    assert "\n" not in caught.value.message


@pytest.mark.parametrize(("code", "status"), [("XMinioStorageFull", 507), ("InternalError", 507)])
def test_a_full_store_is_storage_full(
    s3_storage: S3Storage, monkeypatch: pytest.MonkeyPatch, code: str, status: int
) -> None:
    # Issue 26, item 8: a full MinIO was a plain storage_unavailable (3 quick attempts).
    def failing(**kwargs: Any) -> Any:
        raise _client_error(code, status, "PutObject")

    monkeypatch.setattr(s3_storage.client, "put_object", failing)
    with pytest.raises(StorageFullError) as caught:
        s3_storage.put_bytes("acme/job1/a", b"x")
    assert caught.value.code == "storage_full" and not caught.value.permanent


def test_open_storage_builds_the_s3_backend(s3_storage: S3Storage, s3_endpoint: S3Endpoint) -> None:
    settings = StorageSettings(backend="s3", s3=s3_settings(s3_endpoint, s3_storage.bucket))
    storage = open_storage(settings)
    assert isinstance(storage, S3Storage)
    storage.put_bytes("acme/job1/a", b"x")
    assert s3_storage.get_bytes("acme/job1/a") == b"x"
