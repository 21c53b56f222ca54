"""The OpenAI routes' bodies (in-process, real Redis): a lone surrogate (JSON's ``"\\ud800"``)
in any string is ``invalid_input`` naming the field (``param``) and the offset — as on REST —
not ``malformed_request``; JSON that does not parse is ``malformed_request``. Both are 400, in
OpenAI's error shape (issue 24: the OpenAI routes answer bad input as OpenAI does; they were
422 before)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from voicelane.api.rest import create_app
from voicelane.core.batch_lane import CeleryEnqueue
from voicelane.core.settings import ApiSettings
from voicelane.core.storage import LocalStorage, LocalStorageSettings

pytestmark = pytest.mark.integration

ACME = {"Authorization": "Bearer acme-key-0001", "content-type": "application/json"}


@pytest.fixture
def client(redis_url: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = ApiSettings(redis_url=redis_url, api_keys="acme:acme-key-0001")
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "storage", secret="s" * 40))
    storage.prepare()
    app = create_app(settings, storage=storage, enqueue=CeleryEnqueue(settings))
    with TestClient(app, base_url="http://api") as client:
        yield client


@pytest.mark.parametrize(
    ("path", "body", "field", "where"),
    [
        ("/v1/audio/speech", b'{"input": "Hi \\ud800 there."}', "input", "offset 3"),
        ("/v1/audio/speech", b'{"input": "Hi.", "voice": "\\udfff"}', "voice", "offset 0"),
        (
            "/v1/chat/completions",
            b'{"messages": [{"role": "user", "content": "Say \\udc00 hi."}]}',
            "messages",
            "offset 4",
        ),
    ],
    ids=["speech input", "speech voice", "chat message"],
)
def test_a_lone_surrogate_is_400_with_param_and_offset(
    client: TestClient, path: str, body: bytes, field: str, where: str
) -> None:
    response = client.post(path, content=body, headers=ACME)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_input" and error["param"] == field, error
    assert error["type"] == "invalid_request_error", error
    assert "lone surrogate" in error["message"] and where in error["message"], error


def test_json_that_does_not_parse_is_still_400(client: TestClient) -> None:
    response = client.post("/v1/audio/speech", content=b'{"input": "Hi', headers=ACME)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_request"
    assert response.json()["error"]["type"] == "invalid_request_error"
