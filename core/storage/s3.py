"""The S3 backend: :class:`S3Storage`, for any S3-compatible endpoint.

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
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import itertools
import logging
import math
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from voicelane.common.errors import (
    StorageConfigError,
    StorageError,
    StorageFullError,
    StorageIntegrityError,
    StorageNotFoundError,
    StorageUnavailableError,
)
from voicelane.core.storage.base import (
    DEFAULT_CONTENT_TYPE,
    DEFAULT_PART_SIZE_BYTES,
    Storage,
    StoredObject,
    check_part_size,
    content_disposition,
    hash_file,
    link_expiry_s,
    validate_content_type,
    validate_key,
    validate_prefix,
)
from voicelane.core.storage.settings import S3Settings

if TYPE_CHECKING:
    import boto3.session
    from botocore.exceptions import ClientError
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef, LifecycleRuleTypeDef

log = logging.getLogger(__name__)

MAX_PARTS = 10_000
SHA256_METADATA_KEY = "sha256"
"""User-metadata name of the SHA-256 (``x-amz-meta-sha256``)."""
ABORT_RULE_ID = "voicelane-abort-incomplete-multipart-uploads"
ABORT_AFTER_DAYS = 1
_DELETE_BATCH = 1000


def _md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode("ascii")


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
_FULL_CODES = frozenset({"XMinioStorageFull", "InsufficientStorage", "507"})
"""A store out of room (MinIO: ``XMinioStorageFull``, HTTP 507): :class:`StorageFullError`."""
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
    if code in _FULL_CODES or status == 507:
        return StorageFullError(text)
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
                    self._log_no_lifecycle(f"{code} from the store")
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
                self._log_no_lifecycle(f"{code} from the store")
                return
        kept = self._lifecycle_rules()
        if kept is not None and not any(_aborts_everything(rule) for rule in kept):
            # Older SeaweedFS releases answer 200 and keep only Expiration rules.
            self._log_no_lifecycle("the store accepted the rule but did not keep it")

    def _log_no_lifecycle(self, reason: str) -> None:
        log.warning(
            "storage: bucket %s has no AbortIncompleteMultipartUpload rule (%s); "
            "abandoned multipart uploads must be cleaned another way",
            self._bucket,
            reason,
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
        check_part_size(part_size_bytes)
        source = Path(path)
        size_bytes, sha256 = hash_file(source)
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
