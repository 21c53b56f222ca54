"""voicelane.client.jobs: an error answer of the REST API raises RemoteError with what the
body and ``Retry-After`` said (code, message, field, retry hint)."""

from __future__ import annotations

import httpx
import pytest

from voicelane.client import JobsClient
from voicelane.common.errors import RemoteError, exit_status


def client_answering(response: httpx.Response) -> JobsClient:
    return JobsClient(
        "http://api.test", "key", transport=httpx.MockTransport(lambda request: response)
    )


def test_a_refusal_carries_code_field_and_retry_hint() -> None:
    body = {"error": {"code": "quota_exceeded", "message": "text: over quota", "field": "text"}}
    client = client_answering(httpx.Response(429, json=body, headers={"Retry-After": "7"}))
    with pytest.raises(RemoteError) as caught:
        client.submit("Hello.")
    error = caught.value
    assert (error.status, error.code, error.field, error.retry_after_s) == (
        "RESOURCE_EXHAUSTED",
        "quota_exceeded",
        "text",
        7.0,
    )
    assert error.message == "server answered 429: text: over quota"
    assert not error.permanent


def test_bad_input_exits_as_bad_input() -> None:
    body = {"error": {"code": "unknown_voice", "message": "voice 'x' is unknown", "field": "voice"}}
    client = client_answering(httpx.Response(422, json=body))
    with pytest.raises(RemoteError) as caught:
        client.get("some-job")
    assert (caught.value.status, caught.value.code) == ("INVALID_ARGUMENT", "unknown_voice")
    assert caught.value.permanent and exit_status(caught.value) == 2


def test_a_body_that_is_not_json() -> None:
    client = client_answering(httpx.Response(502, text="<html>bad gateway</html>"))
    with pytest.raises(RemoteError) as caught:
        client.get("some-job")
    assert (caught.value.status, caught.value.code) == ("INTERNAL", "remote_error")
    assert caught.value.message == "server answered 502: <html>bad gateway</html>"
