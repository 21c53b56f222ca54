"""The REST API in-process (real Redis, real Celery publishing, local storage): every kind of
bad input gets a 4xx JSON error naming the problem, and leaves Redis exactly as it was."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from voicelane.api.rest import create_app
from voicelane.core.batch_lane import QUEUES, CeleryEnqueue
from voicelane.core.ledger import ChunkPlan, JobState, Ledger
from voicelane.core.ledger.keys import ACTIVE_JOBS
from voicelane.core.settings import ApiSettings
from voicelane.core.storage import LocalStorage, LocalStorageSettings

pytestmark = pytest.mark.integration

KEYS = "acme:acme-key-0001,other:other-key-0002"
ACME = {"Authorization": "Bearer acme-key-0001"}
OTHER = {"Authorization": "Bearer other-key-0002"}
METRICS_TOKEN = "metrics-token-0003"


@pytest.fixture
def api(redis_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, redis.Redis]]:
    settings = ApiSettings(
        redis_url=redis_url, api_keys=KEYS, max_text_chars=5000, metrics_token=METRICS_TOKEN
    )
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "storage", secret="s" * 40))
    storage.prepare()
    app = create_app(settings, storage=storage, enqueue=CeleryEnqueue(settings))
    connection = redis.Redis.from_url(redis_url)
    with TestClient(app, base_url="http://api") as client:  # one event loop for the app
        yield client, connection
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
        "lone surrogate in the text",
        {
            "content": b'{"text": "Hi \\ud800 there."}',
            "headers": {"content-type": "application/json"},
        },
        422,
        "invalid_input",
        "lone surrogate",
    ),
    (
        "lone surrogate in the voice",
        {
            "content": b'{"text": "Hi.", "voice": "\\udfff"}',
            "headers": {"content-type": "application/json"},
        },
        422,
        "invalid_input",
        "voice",
    ),
    (
        "JSON nested 2000 deep",
        {
            "content": b'{"text": ' + b"[" * 2000 + b"]" * 2000 + b"}",
            "headers": {"content-type": "application/json"},
        },
        400,
        "malformed_request",
        "deep",
    ),
    (
        "punctuation only",
        {"json": {"text": "... --- !!!"}},
        422,
        "invalid_input",
        "nothing to speak",
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
    assert not connection.sismember(ACTIVE_JOBS.key(), job_id)


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
    metrics = client.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).text
    assert 'voicelane_queue_depth{queue="render.espeak"}' in metrics
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=ACME).status_code == 401  # a tenant key is not it
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
    body = response.json()
    assert body["problems"] == ["redis"]
    assert "127.0.0.1" not in response.text and ":9" not in response.text  # nothing leaks


def test_readyz_reports_storage_full(redis_url: str, tmp_path: Path) -> None:
    # Repro (issue 26, item 8): /readyz answered ready with the storage's disk full. A
    # threshold above any disk's free space stands for a full one (tests/unit/core/
    # test_storage_local.py fills a real tmpfs).
    settings = ApiSettings(redis_url=redis_url, api_keys=KEYS)
    storage = LocalStorage(
        LocalStorageSettings(root=tmp_path / "s", secret="s" * 40, min_free_bytes=2**62)
    )
    app = create_app(settings, storage=storage, enqueue=lambda *a, **k: None)
    with TestClient(app, base_url="http://api") as client:
        response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["problems"] == ["storage_full"]
    assert str(tmp_path) not in response.text  # where it is stays in the log


def test_signed_local_links_are_checked(api: tuple[TestClient, redis.Redis]) -> None:
    client, _ = api
    assert client.get("/v1/files/acme/x/audio.ogg?expires=1&sig=" + "0" * 64).status_code in (
        403,
        410,
        400,
    )
    assert client.get("/v1/files/acme/x/audio.ogg").status_code == 422


def test_a_nan_cursor_is_a_4xx(api: tuple[TestClient, redis.Redis]) -> None:
    client, _ = api
    for cursor in ("nan", "inf", "-inf"):
        response = client.get(f"/v1/jobs?cursor={cursor}", headers=ACME)
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == "cursor"


def test_a_body_over_the_limit_is_refused_while_it_streams(
    api: tuple[TestClient, redis.Redis],
) -> None:
    """(That the app stops reading a chunked body at the limit is shown, as a server feeds
    it, in tests/unit/api/test_body_limit.py: the test client reads the whole body first.)"""
    client, connection = api
    before = snapshot(connection)

    def body() -> Iterator[bytes]:
        yield b'{"text": "'
        for _ in range(16):  # 16 MiB, chunked: no Content-Length to refuse it by
            yield b"a" * (1024 * 1024)
        yield b'"}'

    headers = {**ACME, "content-type": "application/json"}
    response = client.post("/v1/jobs", headers=headers, content=body())
    assert response.status_code == 413 and response.json()["error"]["code"] == "text_too_large"
    announced = client.post(
        "/v1/audio/speech",
        headers={**ACME, "content-type": "application/json", "content-length": str(2**31)},
        content=b"{}",
    )
    assert announced.status_code == 413
    assert snapshot(connection) == before


def test_tenants_are_held_to_their_request_rate(redis_url: str, tmp_path: Path) -> None:
    settings = ApiSettings(
        redis_url=redis_url, api_keys=KEYS, tenant_requests_per_s=0.5, tenant_request_burst=2
    )
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "s", secret="s" * 40))
    app = create_app(settings, storage=storage, enqueue=lambda *a, **k: None)
    with TestClient(app, base_url="http://api") as client:
        codes = [client.post("/v1/jobs", headers=ACME, json={"text": "Hi."}) for _ in range(3)]
        other = client.post("/v1/jobs", headers=OTHER, json={"text": "Hi."})
    assert [r.status_code for r in codes] == [202, 202, 429]
    refused = codes[-1]
    assert refused.json()["error"]["code"] == "quota_exceeded"
    assert int(refused.headers["Retry-After"]) >= 1
    assert other.status_code == 202  # another tenant has its own bucket


def test_tenants_are_held_to_their_queued_characters(redis_url: str, tmp_path: Path) -> None:
    settings = ApiSettings(redis_url=redis_url, api_keys=KEYS, tenant_max_queued_chars=100)
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "s", secret="s" * 40))
    app = create_app(settings, storage=storage, enqueue=lambda *a, **k: None)
    text = "Sixty characters of text, give or take a few, for the quota."
    with TestClient(app, base_url="http://api") as client:
        first = client.post("/v1/jobs", headers=ACME, json={"text": text})
        second = client.post("/v1/jobs", headers=ACME, json={"text": text})
        assert first.status_code == 202 and second.status_code == 429
        assert second.json()["error"]["field"] == "text" and "Retry-After" in second.headers
        assert client.post("/v1/jobs", headers=OTHER, json={"text": text}).status_code == 202
        client.delete(f"/v1/jobs/{first.json()['id']}", headers=ACME)  # gives them back
        assert client.post("/v1/jobs", headers=ACME, json={"text": text}).status_code == 202


def test_tenants_are_held_to_their_stored_bytes(redis_url: str, tmp_path: Path) -> None:
    # Repro (issue 26, item 8): no per-tenant storage quota. A tenant whose finished outputs
    # hold tenant_max_stored_bytes gets 429 quota_exceeded; another tenant does not.
    settings = ApiSettings(redis_url=redis_url, api_keys=KEYS, tenant_max_stored_bytes=1000)
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "s", secret="s" * 40))
    app = create_app(settings, storage=storage, enqueue=lambda *a, **k: None)
    ledger = Ledger.from_url(redis_url)
    with TestClient(app, base_url="http://api") as client:
        first = client.post("/v1/jobs", headers=ACME, json={"text": "Hello there."})
        assert first.status_code == 202
        job_id = first.json()["id"]
        assert ledger.jobs.transition(job_id, JobState.PLANNING, only_from=(JobState.QUEUED,))
        plan = ChunkPlan(
            texts=("Hello there.",), paragraph_ends=(True,), start=0, end=12, last=True
        )
        job = ledger.jobs.get(job_id)
        assert job is not None and ledger.jobs.save_plan(job, [plan])
        lease = ledger.chunks.acquire(job_id, 0, "w", ttl_s=30)
        assert ledger.chunks.commit(job_id, 0, lease, 1.0) == "assemble"
        assert ledger.assembly.acquire(job_id, "w", ttl_s=30)
        finished = ledger.assembly.finish(
            job_id, owner="w", key="k", size_bytes=1000, duration_s=1.0, sha256="x"
        )
        assert finished == "done"
        refused = client.post("/v1/jobs", headers=ACME, json={"text": "One more."})
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "quota_exceeded"
        assert "1,000 bytes" in refused.json()["error"]["message"]
        assert client.post("/v1/jobs", headers=OTHER, json={"text": "Mine."}).status_code == 202
    ledger.redis.close()


def test_a_redis_that_is_gone_is_a_503_not_a_500(tmp_path: Path) -> None:
    settings = ApiSettings(redis_url="redis://127.0.0.1:9/0", api_keys=KEYS)
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "s", secret="s" * 40))
    app = create_app(settings, storage=storage, enqueue=lambda *a, **k: None)
    with TestClient(app, base_url="http://api") as client:
        response = client.get("/v1/jobs", headers=ACME)
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "unavailable" and "Retry-After" in response.headers


def test_the_apis_llm_settings_reach_its_bridge(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app's bridge is built from its settings' LLM section (``VOICELANE_LLM__*`` and
    Ollama's own host), not from settings of its own."""
    monkeypatch.setenv("VOICELANE_LLM__MODEL", "llama3:8b")
    monkeypatch.setenv("VOICELANE_LLM__PRELOAD", "false")
    monkeypatch.setenv("OLLAMA_HOST", "http://ollama-box:11434")
    settings = ApiSettings(redis_url=redis_url, api_keys=KEYS)
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "s", secret="s" * 40))
    app = create_app(settings, storage=storage, enqueue=lambda *a, **k: None)
    bridge = app.state.voicelane.llm
    assert bridge.settings is settings.llm
    assert (bridge.settings.model, bridge.host) == ("llama3:8b", "http://ollama-box:11434")
