"""S3Storage.ensure_bucket's lifecycle rule, against botocore's Stubber (no server): the rule is
read back after it is written, and a store that answers 200 but keeps no such rule (SeaweedFS)
is logged, not trusted. The same against real servers: tests/integration/test_storage_s3.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.stub import Stubber

from voicelane.core.storage import ABORT_RULE_ID, S3Settings, S3Storage

BUCKET = "unit-bucket"
ABORT_RULE: dict[str, Any] = {
    "ID": ABORT_RULE_ID,
    "Status": "Enabled",
    "Filter": {"Prefix": ""},
    "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
}


@pytest.fixture
def stubbed() -> Iterator[tuple[S3Storage, Stubber]]:
    storage = S3Storage(
        S3Settings(
            endpoint_url="http://127.0.0.1:9",
            bucket=BUCKET,
            access_key_id="unit",
            secret_access_key="unit-secret",
        )
    )
    with Stubber(storage.client) as stubber:
        stubber.add_response("head_bucket", {}, {"Bucket": BUCKET})
        yield storage, stubber
        stubber.assert_no_pending_responses()


def _no_rules(stubber: Stubber) -> None:
    stubber.add_client_error(
        "get_bucket_lifecycle_configuration",
        service_error_code="NoSuchLifecycleConfiguration",
        http_status_code=404,
    )


def test_a_kept_rule_is_not_reported(
    stubbed: tuple[S3Storage, Stubber], caplog: pytest.LogCaptureFixture
) -> None:
    storage, stubber = stubbed
    _no_rules(stubber)
    stubber.add_response("put_bucket_lifecycle_configuration", {})
    stubber.add_response("get_bucket_lifecycle_configuration", {"Rules": [ABORT_RULE]})

    with caplog.at_level(logging.WARNING, logger="voicelane.core.storage"):
        storage.ensure_bucket()

    assert caplog.text == ""


def test_a_rule_accepted_but_dropped_is_reported(
    stubbed: tuple[S3Storage, Stubber], caplog: pytest.LogCaptureFixture
) -> None:
    storage, stubber = stubbed
    _no_rules(stubber)
    stubber.add_response("put_bucket_lifecycle_configuration", {})
    _no_rules(stubber)  # what SeaweedFS answers after the 200

    with caplog.at_level(logging.WARNING, logger="voicelane.core.storage"):
        storage.ensure_bucket()

    assert "accepted the rule but did not keep it" in caplog.text
    assert BUCKET in caplog.text


def test_an_existing_rule_is_not_written_again(
    stubbed: tuple[S3Storage, Stubber], caplog: pytest.LogCaptureFixture
) -> None:
    storage, stubber = stubbed
    stubber.add_response("get_bucket_lifecycle_configuration", {"Rules": [ABORT_RULE]})

    storage.ensure_bucket()  # a put would find no stubbed answer and raise

    assert caplog.text == ""
