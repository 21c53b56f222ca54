"""The REST API in-process (real Redis, real Celery publishing, local storage): every kind of
bad input gets a 4xx JSON error naming the problem, and leaves Redis exactly as it was."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from api.rest import create_app
from core.batch_lane import QUEUES, CeleryEnqueue
from core.settings import ApiSettings
from core.storage import LocalStorage, LocalStorageSettings

pytestmark = pytest.mark.integration

KEYS = "acme:acme-key-0001,other:other-key-0002"
ACME = {"Authorization": "Bearer acme-key-0001"}
OTHER = {"Authorization": "Bearer other-key-0002"}


@pytest.fixture
def api(redis_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, redis.Redis]]:
    settings = ApiSettings(redis_url=redis_url, api_keys=KEYS, max_text_chars=5000)
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "storage", secret="s" * 40))
    storage.prepare()
    app = create_app(settings, storage=storage, enqueue=CeleryEnqueue(settings))
    client = TestClient(app, base_url="http://api")
    connection = redis.Redis.from_url(redis_url)
    yield client, connection
    client.close()
    connection.close()


def snapshot(connection: redis.Redis) -> tuple[int, dict[str, int]]:
    return int(connection.dbsize()), {q: int(connection.llen(q)) for q in QUEUES}


BAD_REQUESTS: list[tuple[str, dict[str, Any], int, str, str]] = [
    ("empty text", {"json": {"text": ""}}, 422, "invalid_input", "no text to speak"),
    ("whitespace", {"json": {"text": " \n\t "}}, 422, "invalid_input", "no text to speak"),
    ("too long", {"json": {"text": "x" * 5001}}, 413, "text_too_large", "limit is 5,000"),
    ("binary text", {"json": {"text": "a\x00b"}}, 422, "invalid_input", "looks binary"),
    (
        "unknown voice",
        {"json": {"text": "Hi.", "voice": "klingon"}},
        422,
        "unknown_voice",
        "klingon",
    ),
    (
        "unknown format",
        {"json": {"text": "Hi.", "format": "aiff"}},
        422,
        "unsupported_format",
        "aiff",
    ),
    (
        "bad rate",
        {"json": {"text": "Hi.", "sample_rate_hz": 44100}},
        422,
        "unsupported_format",
        "44100",
    ),
    ("bad speed", {"json": {"text": "Hi.", "speed": 9}}, 422, "invalid_input", "speed"),
    ("unknown field", {"json": {"text": "Hi.", "colour": "red"}}, 422, "invalid_input", "colour"),
    ("text not a string", {"json": {"text": 42}}, 422, "invalid_input", "text"),
    (
        "bad callback",
        {"json": {"text": "Hi.", "callback_url": "file:///etc/passwd"}},
        422,
        "invalid_input",
        "callback_url",
    ),
    (
        "malformed JSON",
        {"content": b'{"text": "Hi."', "headers": {"content-type": "application/json"}},
        400,
        "malformed_request",
        "malformed JSON",
    ),
    (
        "JSON array",
        {"content": b'["Hi."]', "headers": {"content-type": "application/json"}},
        400,
        "malformed_request",
        "object",
    ),
    (
        "wrong content type",
        {"content": b"text=Hi.", "headers": {"content-type": "text/plain"}},
        415,
        "unsupported_media_type",
        "text/plain",
    ),
    (
        "invalid UTF-8 upload",
        {"files": {"file": ("a.txt", b"caf\xe9 au lait", "text/plain")}},
        422,
        "invalid_input",
        "not valid UTF-8",
    ),
    (
        "binary upload",
        {"files": {"file": ("a.bin", bytes(range(256)), "application/octet-stream")}},
        422,
        "invalid_input",
        "looks binary",
    ),
    (
        "upload without a file",
        {"data": {"voice": "auto"}, "files": {"other": ("a.txt", b"x", "text/plain")}},
        422,
        "invalid_input",
        "'file' part",
    ),
]


@pytest.mark.parametrize(
    ("name", "request_kwargs", "status", "code", "message"),
    BAD_REQUESTS,
    ids=[b[0] for b in BAD_REQUESTS],
)
def test_bad_submissions_are_4xx_json_and_change_nothing(
    api: tuple[TestClient, redis.Redis],
    name: str,
    request_kwargs: dict[str, Any],
    status: int,
    code: str,
    message: str,
) -> None:
    client, connection = api
    before = snapshot(connection)
    headers = {**ACME, **request_kwargs.pop("headers", {})}
    response = client.post("/v1/jobs", headers=headers, **request_kwargs)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert message.lower() in error["message"].lower()
    assert "\n" not in error["message"]
    assert snapshot(connection) == before


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "missing Authorization"),
        ({"Authorization": "Bearer wrong-key-123"}, "invalid API key"),
        ({"Authorization": "Basic YWNtZTprZXk="}, "Bearer"),
        ({"Authorization": "Bearer "}, "Bearer"),
    ],
)
def test_missing_or_wrong_key_is_401_and_changes_nothing(
    api: tuple[TestClient, redis.Redis], headers: dict[str, str], message: str
) -> None:
    client, connection = api
    before = snapshot(connection)
    response = client.post("/v1/jobs", headers=headers, json={"text": "Hello."})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert message in response.json()["error"]["message"]
    assert client.get("/v1/jobs", headers=headers).status_code == 401
    assert client.get("/v1/voices", headers=headers).status_code == 401
    assert snapshot(connection) == before


def test_a_good_submission_is_queued_with_ids_only(api: tuple[TestClient, redis.Redis]) -> None:
    client, connection = api
    response = client.post("/v1/jobs", headers=ACME, json={"text": "Secret words here."})
    assert response.status_code == 202
    job = response.json()
    assert job["state"] == "queued" and job["characters"] == 18
    messages = connection.lrange("control", 0, -1)
    assert len(messages) == 1
    assert job["id"].encode() in messages[0]
    assert b"Secret words" not in messages[0]


def test_another_tenants_or_unknown_job_is_404(api: tuple[TestClient, redis.Redis]) -> None:
    client, _ = api
    created = client.post("/v1/jobs", headers=ACME, json={"text": "Mine."})
    assert created.status_code == 202, created.text
    job_id = created.json()["id"]
    for path in (f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/audio"):
        response = client.get(path, headers=OTHER)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "job_not_found"
    assert client.delete(f"/v1/jobs/{job_id}", headers=OTHER).status_code == 404
    assert client.get("/v1/jobs/" + "0" * 32, headers=ACME).status_code == 404
    assert client.get("/v1/jobs/not-an-id", headers=ACME).status_code == 404
    assert client.get(f"/v1/jobs/{job_id}", headers=ACME).json()["id"] == job_id


def test_audio_of_an_unfinished_job_is_409(api: tuple[TestClient, redis.Redis]) -> None:
    client, _ = api
    job_id = client.post("/v1/jobs", headers=ACME, json={"text": "Not yet."}).json()["id"]
    response = client.get(f"/v1/jobs/{job_id}/audio", headers=ACME)
    assert response.status_code == 409
    assert "queued" in response.json()["error"]["message"]


def test_cancel_a_queued_job(api: tuple[TestClient, redis.Redis]) -> None:
    client, connection = api
    job_id = client.post("/v1/jobs", headers=ACME, json={"text": "Stop me."}).json()["id"]
    response = client.delete(f"/v1/jobs/{job_id}", headers=ACME)
    assert response.status_code == 200 and response.json()["state"] == "cancelled"
    assert connection.llen("control") == 2  # plan, then cleanup
    assert not connection.sismember("vl:jobs:active", job_id)


def test_paging_lists_own_jobs_newest_first(api: tuple[TestClient, redis.Redis]) -> None:
    client, _ = api
    ids = [
        client.post("/v1/jobs", headers=ACME, json={"text": f"Job {i}."}).json()["id"]
        for i in range(3)
    ]
    first = client.get("/v1/jobs?limit=2", headers=ACME).json()
    assert [j["id"] for j in first["jobs"]] == ids[::-1][:2]
    second = client.get(f"/v1/jobs?limit=2&cursor={first['next_cursor']}", headers=ACME).json()
    assert [j["id"] for j in second["jobs"]] == [ids[0]] and second["next_cursor"] is None
    assert client.get("/v1/jobs?limit=0", headers=ACME).status_code == 422


def test_voices_health_ready_metrics_and_openapi(api: tuple[TestClient, redis.Redis]) -> None:
    client, _ = api
    voices = client.get("/v1/voices", headers=ACME).json()
    assert {"auto", "en-us", "cmn"} <= set(voices["voices"])
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}
    metrics = client.get("/metrics").text
    assert 'voicelane_queue_depth{queue="render"}' in metrics
    schema = client.get("/openapi.json").json()
    assert "/v1/jobs" in schema["paths"] and "/v1/jobs/{job_id}/audio" in schema["paths"]
    assert client.get("/docs").status_code == 200


def test_readyz_reports_redis_down(tmp_path: Path) -> None:
    settings = ApiSettings(redis_url="redis://127.0.0.1:9/0", api_keys=KEYS)
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "s", secret="s" * 40))
    app = create_app(settings, storage=storage, enqueue=lambda *a, **k: None)
    with TestClient(app, base_url="http://api") as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    assert "redis" in response.json()["problems"]


def test_signed_local_links_are_checked(api: tuple[TestClient, redis.Redis]) -> None:
    client, _ = api
    assert client.get("/v1/files/acme/x/audio.ogg?expires=1&sig=" + "0" * 64).status_code in (
        403,
        410,
        400,
    )
    assert client.get("/v1/files/acme/x/audio.ogg").status_code == 422
