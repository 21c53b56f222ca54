"""A real S3-protocol HTTP server for tests: moto's server, in-process, on a free port.

``ThreadedMotoServer`` serves real HTTP on 127.0.0.1; boto3 talks to it through
``endpoint_url`` exactly as it would to MinIO. moto does NOT verify presigned URL signatures
or expiry, Content-MD5 headers, or run lifecycle rules: tests that need those enforced must not
rely on it (``docs/storage.md``).

Set ``VOICELANE_TEST_S3_ENDPOINT_URL`` (with ``..._ACCESS_KEY_ID`` / ``..._SECRET_ACCESS_KEY``)
to run the same tests against another store, MinIO for example.

Without moto the caller skips, visibly, unless ``CI`` is set: then it fails.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

DUMMY_ACCESS_KEY_ID = "voicelane-test"
DUMMY_SECRET_ACCESS_KEY = "voicelane-test-secret"
REGION = "us-east-1"
ENV_ENDPOINT = "VOICELANE_TEST_S3_ENDPOINT_URL"


@dataclass(frozen=True)
class S3Endpoint:
    """Where the test S3 server listens and the (dummy) credentials it accepts."""

    url: str
    access_key_id: str = DUMMY_ACCESS_KEY_ID
    secret_access_key: str = DUMMY_SECRET_ACCESS_KEY
    region: str = REGION
    is_moto: bool = True


def _require_moto() -> None:
    try:
        import moto.server  # noqa: F401
    except ImportError:
        message = "moto[server] is not installed: S3 integration tests cannot run"
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
        is_moto=False,
    )


@contextmanager
def running_s3_server() -> Iterator[S3Endpoint]:
    """Start moto's S3 server on 127.0.0.1 and a free port, yield its endpoint, stop it.

    Dummy AWS credentials are put in the environment while it runs, so no client in the
    test process can ever pick up real ones.
    """
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ACCESS_KEY_ID", DUMMY_ACCESS_KEY_ID)
        env.setenv("AWS_SECRET_ACCESS_KEY", DUMMY_SECRET_ACCESS_KEY)
        env.setenv("AWS_DEFAULT_REGION", REGION)
        env.delenv("AWS_PROFILE", raising=False)
        external = _external_endpoint()
        if external is not None:
            yield external
            return
        _require_moto()
        from moto.server import ThreadedMotoServer

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            yield S3Endpoint(url=f"http://{host}:{port}")
        finally:
            server.stop()
