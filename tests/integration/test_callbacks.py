"""Callbacks end to end: the REST front refuses callback URLs that point inside (in-process
API, real Redis), hands each tenant its signing secret, and the CPU worker — real processes
— refuses a destination at connect time even when the API let it through."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from starlette.testclient import TestClient

from tests.support.stack import Stack, wait_for
from voicelane.api.rest import create_app
from voicelane.core.callbacks import SIGNATURE_HEADER, master_secret, tenant_secret, verify
from voicelane.core.redis_server import RedisServer
from voicelane.core.settings import ApiSettings
from voicelane.core.storage import LocalStorage, LocalStorageSettings

pytestmark = pytest.mark.integration

KEYS = "acme:acme-key-0001,other:other-key-0002"
ACME = {"Authorization": "Bearer acme-key-0001"}
OTHER = {"Authorization": "Bearer other-key-0002"}
MASTER = "callback-master-secret-0123456789"


class Sink:
    """A loopback HTTP receiver in a thread: records every request it gets."""

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.event = threading.Event()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                sink.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()
                sink.event.set()

            def log_message(self, *_args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.server.server_port}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sink() -> Iterator[Sink]:
    receiver = Sink()
    yield receiver
    receiver.close()


# ---- the REST front, in process --------------------------------------------------------------


def app_client(redis_url: str, tmp_path: Path, **settings: Any) -> TestClient:
    fields: dict[str, Any] = {"redis_url": redis_url, "api_keys": KEYS, **settings}
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "storage", secret="s" * 40))
    storage.prepare()
    sent: list[tuple[str, tuple[str | int, ...]]] = []

    def enqueue(
        task: str,
        *args: str | int,
        countdown_s: float | None = None,
        queue: str | None = None,
        priority: int = 0,
    ) -> None:
        sent.append((task, args))

    app = create_app(ApiSettings(**fields), storage=storage, enqueue=enqueue)
    return TestClient(app, base_url="http://api")


@pytest.fixture
def api(redis_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, redis.Redis]]:
    client = app_client(redis_url, tmp_path, callback_signing_secret=MASTER)
    connection = redis.Redis.from_url(redis_url)
    yield client, connection
    client.close()
    connection.close()


REFUSED = [
    ("http://127.0.0.1:9/hook", "loopback"),
    ("http://localhost:9/hook", "loopback"),
    ("http://0x7f000001/hook", "loopback"),
    ("http://2130706433/hook", "loopback"),
    ("http://0177.0.0.1/hook", "callback_url"),
    ("http://127.1/hook", "loopback"),
    ("http://[::1]/hook", "loopback"),
    ("http://[::ffff:127.0.0.1]/hook", "IPv4-mapped"),
    ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
    ("http://[fd00:ec2::254]/", "cloud metadata"),
    ("http://10.0.0.7/hook", "private"),
    ("http://192.168.1.1/hook", "private"),
    ("http://100.64.0.1/hook", "shared"),
    ("http://0.0.0.0:6379/", "unspecified"),
    ("http://user:secret@hooks.example.com/", "credentials"),
    ("http://hooks.example.com/#x", "fragment"),
    ("ftp://hooks.example.com/", "http:// or https://"),
    ("file:///etc/passwd", "http:// or https://"),
]


@pytest.mark.parametrize(("url", "says"), REFUSED)
def test_the_api_refuses_callbacks_that_point_inside(
    api: tuple[TestClient, redis.Redis], url: str, says: str
) -> None:
    client, connection = api
    before = connection.dbsize()
    response = client.post("/v1/jobs", json={"text": "Hi.", "callback_url": url}, headers=ACME)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "callback_url" and error["code"] == "invalid_input"
    assert says in error["message"] and "\n" not in error["message"]
    assert error["message"].startswith("callback_url")
    assert "secret" not in error["message"]  # credentials never echoed
    assert connection.dbsize() == before  # nothing written


def test_the_api_accepts_an_allowed_receiver(redis_url: str, tmp_path: Path) -> None:
    url = "http://127.0.0.1:9/hook"
    with app_client(
        redis_url, tmp_path, callback_signing_secret=MASTER, callback_allow="127.0.0.0/8"
    ) as client:
        response = client.post("/v1/jobs", json={"text": "Hi.", "callback_url": url}, headers=ACME)
    assert response.status_code == 202, response.text
    assert response.json()["callback_url"] == url


def test_callbacks_are_off_without_a_secret_outside_dev_mode(
    redis_url: str, tmp_path: Path
) -> None:
    body = {"text": "Hi.", "callback_url": "https://hooks.example.com/x"}
    with app_client(redis_url, tmp_path) as client:
        response = client.post("/v1/jobs", json=body, headers=ACME)
        assert response.status_code == 422
        error = response.json()["error"]
        assert error["field"] == "callback_url"
        assert error["message"] == "callbacks are off: set VOICELANE_CALLBACK_SIGNING_SECRET"
        secret = client.get("/v1/callbacks/secret", headers=ACME)
        assert secret.status_code == 404
        assert "VOICELANE_CALLBACK_SIGNING_SECRET" in secret.json()["error"]["message"]
        assert client.post("/v1/jobs", json={"text": "Hi."}, headers=ACME).status_code == 202


def test_each_tenant_reads_its_own_secret(api: tuple[TestClient, redis.Redis]) -> None:
    client, _ = api
    assert client.get("/v1/callbacks/secret").status_code == 401
    acme = client.get("/v1/callbacks/secret", headers=ACME).json()
    other = client.get("/v1/callbacks/secret", headers=OTHER).json()
    assert acme == {
        "secret": tenant_secret(MASTER, "acme"),
        "header": "x-voicelane-signature",
        "scheme": "t=<unix>,v1=<hex hmac-sha256 of '<t>.<body>'>",
    }
    assert other["secret"] == tenant_secret(MASTER, "other") != acme["secret"]
    assert MASTER not in (acme["secret"], other["secret"])


def test_dev_mode_signs_with_the_documented_dev_secret(redis_url: str, tmp_path: Path) -> None:
    with app_client(redis_url, tmp_path, dev_mode=True) as client:
        got = client.get("/v1/callbacks/secret", headers=ACME).json()
    dev = master_secret(None, dev_mode=True)
    assert dev is not None and got["secret"] == tenant_secret(dev, "acme")


# ---- the worker, real processes ---------------------------------------------------------------


@pytest.fixture(scope="module")
def lane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The API allows loopback receivers; the CPU worker (which sends callbacks) does not."""
    directory = tmp_path_factory.mktemp("callbacks")
    redis_server = RedisServer(directory / "redis").start()
    env = {"VOICELANE_CALLBACK_SIGNING_SECRET": MASTER, "VOICELANE_CALLBACK_ALLOW": "127.0.0.1"}
    lane = Stack(directory, redis_server.url, env_overrides=env)
    try:
        lane.gpu_worker()
        lane.spawn(
            "cpu",
            "worker",
            "--queues",
            "control,assemble,callbacks",
            "--hostname",
            "cpu@test",
            extra_env={"VOICELANE_CALLBACK_ALLOW": ""},
        )
        lane.api()
        yield lane
    finally:
        lane.stop()
        redis_server.stop()


def test_the_worker_refuses_at_connect_time_what_the_api_let_through(
    lane: Stack, sink: Sink
) -> None:
    with lane.client() as client:
        response = client.post("/v1/jobs", json={"text": "Call me.", "callback_url": sink.url()})
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]

        def final() -> str | None:
            state = str(client.get(f"/v1/jobs/{job_id}").json()["state"])
            return state if state in ("done", "failed") else None

        assert wait_for(final, 120, "the job to end") == "done", lane.logs()
    cpu = next(p for p in lane.procs if p.name == "cpu")
    refused = f"callback of job {job_id} refused"
    wait_for(lambda: refused in cpu.log.read_text(errors="replace"), 30, "the refusal")
    time.sleep(1.0)  # a retry would come within a second or two
    assert not sink.event.is_set() and sink.received == []
    lines = [line for line in cpu.log.read_text().splitlines() if refused in line]
    assert len(lines) == 1, lines  # permanent: logged once, never retried
    assert "loopback" in lines[0]


def test_a_signed_callback_reaches_a_receiver_the_worker_allows(lane: Stack, sink: Sink) -> None:
    """The same stack, a second CPU worker that allows loopback takes the control and
    callbacks queues."""
    allowing = lane.spawn(
        "cpu-allowing",
        "worker",
        "--queues",
        "control,assemble,callbacks",
        "--hostname",
        "cpu-allowing@test",
    )
    old = next(p for p in lane.procs if p.name == "cpu")
    old.stop()
    try:
        with lane.client() as client:
            job_id = client.post(
                "/v1/jobs", json={"text": "Call me back.", "callback_url": sink.url()}
            ).json()["id"]
        assert sink.event.wait(120), lane.logs()
        headers, body = sink.received[-1]
        assert headers["x-voicelane-job-id"] == job_id
        assert verify(tenant_secret(MASTER, "acme"), body, headers[SIGNATURE_HEADER])
        assert not verify(tenant_secret(MASTER, "other"), body, headers[SIGNATURE_HEADER])
    finally:
        allowing.stop()


# ---- the deadline: a receiver that trickles its answer is cut ------------------------------


def test_a_trickling_receiver_is_cut_at_the_callback_deadline() -> None:
    """Issue 26 item 5: ``callback_timeout_s`` bounds the whole callback (connect, send, read),
    not each read. The receiver sends its 60-byte answer a byte every 0.1 s (about 6 s, each
    read well within the 1 s budget); the callback must fail as a timeout instead of waiting
    for it."""
    from tests.support.trickle import Trickler
    from voicelane.core.callbacks import AllowList
    from voicelane.workers.callbacks import callback_client, post_callback

    trickler = Trickler(every_s=0.1)
    try:
        with (
            callback_client(AllowList.parse("127.0.0.1"), 1.0) as client,
            pytest.raises(httpx.TimeoutException) as raised,
        ):
            post_callback(client, trickler.url(), b"{}", secret="s", job_id="j")
        assert "deadline" in str(raised.value)
        assert trickler.completed == 0  # the answer never got through
    finally:
        trickler.close()
