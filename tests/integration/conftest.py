"""Fixtures of the integration tests: real servers, started by the tests themselves."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.support.s3_server import S3Endpoint, running_s3_server
from voicelane.core.storage import S3Settings, S3Storage


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    """SeaweedFS over real HTTP on 127.0.0.1, one per session, signatures checked (or
    ``VOICELANE_TEST_S3_ENDPOINT_URL``)."""
    with running_s3_server(tmp_path_factory.mktemp("seaweedfs")) as endpoint:
        yield endpoint


def s3_settings(endpoint: S3Endpoint, bucket: str, **overrides: object) -> S3Settings:
    """Settings for ``endpoint`` with small timeouts, so a broken test fails fast."""
    fields: dict[str, object] = {
        "endpoint_url": endpoint.url,
        "bucket": bucket,
        "region": endpoint.region,
        "access_key_id": endpoint.access_key_id,
        "secret_access_key": endpoint.secret_access_key,
        "connect_timeout_s": 2.0,
        "read_timeout_s": 10.0,
        "max_attempts": 2,
    }
    fields.update(overrides)
    return S3Settings.model_validate(fields)


@pytest.fixture
def s3_storage(s3_endpoint: S3Endpoint) -> Iterator[S3Storage]:
    """An :class:`S3Storage` on a fresh bucket (bucket and lifecycle rule in place)."""
    storage = S3Storage(s3_settings(s3_endpoint, f"test-{uuid.uuid4().hex[:20]}"))
    storage.prepare()
    yield storage
    empty_and_remove(storage)


def empty_and_remove(storage: S3Storage) -> None:
    """Teardown: abort uploads, delete objects and the bucket (one server serves the session)."""
    client = storage.client
    for upload in client.list_multipart_uploads(Bucket=storage.bucket).get("Uploads", []):
        client.abort_multipart_upload(
            Bucket=storage.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
        )
    for key in storage.list_keys(""):
        storage.delete(key)
    client.delete_bucket(Bucket=storage.bucket)
