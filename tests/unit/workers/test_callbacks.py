"""workers/callbacks.py and ``notify_job``: the guarded callback client connects to vetted
addresses only (the resolver is injected; the receiver is a loopback HTTP server the tests
allow), signs every callback, follows no redirect and never sends URL credentials."""

from __future__ import annotations

import ipaddress
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, cast

import httpcore
import httpx
import pytest

from voicelane.common.errors import CallbackError, InvalidInputError
from voicelane.core.callbacks import (
    AllowList,
    IPAddress,
    first_refusal,
    master_secret,
    tenant_secret,
    verify,
)
from voicelane.core.ledger import Job, JobOptions, JobState, Ledger
from voicelane.core.settings import ServiceSettings
from voicelane.core.storage import Storage
from voicelane.workers.callbacks import GuardedBackend, callback_client, post_callback
from voicelane.workers.jobs import JobContext, notify_job

SECRET = "tenant-secret-0123456789"
PUBLIC = ipaddress.ip_address("93.184.215.14")
LOOPBACK = ipaddress.ip_address("127.0.0.1")


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A loopback HTTP server that records what it was sent and answers ``status``."""

    server: HTTPServer
    received: list[Received] = field(default_factory=list)
    status: int = 204
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def port(self) -> int:
        return self.server.server_port


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    box: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            sink = box[0]
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            sink.received.append(Received(self.path, headers, body))
            self.send_response(sink.status)
            for name, value in sink.headers.items():
                self.send_header(name, value)
            self.send_header("content-length", "0")
            self.end_headers()

        do_GET = do_POST  # noqa: N815 — a followed redirect would arrive as a GET

        def log_message(self, *_args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    box.append(Receiver(server))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield box[0]
    server.shutdown()
    server.server_close()


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every address a TCP connection was opened to, through any httpcore sync backend."""
    opened: list[str] = []
    original = httpcore.SyncBackend.connect_tcp

    def spy(self: httpcore.SyncBackend, host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        opened.append(host)
        return original(self, host, port, *args, **kwargs)

    monkeypatch.setattr(httpcore.SyncBackend, "connect_tcp", spy)
    return opened


def resolver(table: dict[str, Sequence[IPAddress]]) -> Callable[[str, int], Sequence[IPAddress]]:
    def resolve(host: str, _port: int) -> Sequence[IPAddress]:
        if host not in table:
            raise OSError(f"unknown host {host}")
        return table[host]

    return resolve


def client(allow: str = "", **table: Sequence[IPAddress]) -> httpx.Client:
    hosts = {name.replace("_", "."): ips for name, ips in table.items()}
    return callback_client(AllowList.parse(allow), 5.0, resolver(hosts))


def post(http: httpx.Client, url: str, body: bytes = b'{"job":{}}') -> httpx.Response:
    with http:
        return post_callback(http, url, body, secret=SECRET, job_id="job-1")


# ---- refused before any connection -----------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "10.1.2.3", "169.254.169.254", "::1", "::ffff:127.0.0.1", "fd00:ec2::254"],
)
def test_a_host_resolving_to_a_forbidden_address_is_refused_before_connecting(
    receiver: Receiver, connections: list[str], address: str
) -> None:
    http = client(hooks_example_com=[ipaddress.ip_address(address)])
    with pytest.raises(InvalidInputError) as caught:
        post(http, f"http://hooks.example.com:{receiver.port}/hook")
    assert caught.value.field == "callback_url"
    assert str(ipaddress.ip_address(address)) in caught.value.message
    assert connections == []
    assert receiver.received == []


def test_a_host_with_one_forbidden_address_among_public_ones_is_refused(
    connections: list[str],
) -> None:
    http = client(mixed_example=[PUBLIC, LOOPBACK])
    with pytest.raises(InvalidInputError, match=r"127\.0\.0\.1.*loopback"):
        post(http, "http://mixed.example/hook")
    assert connections == []


def test_dns_rebinding_between_the_check_and_the_connect_is_refused(
    receiver: Receiver, connections: list[str]
) -> None:
    answers = [[PUBLIC], [LOOPBACK]]
    calls: list[str] = []

    def rebinding(host: str, _port: int) -> Sequence[IPAddress]:
        calls.append(host)
        return answers[min(len(calls), len(answers)) - 1]

    url = f"http://rebind.example:{receiver.port}/hook"
    # The first look (the API's check at submission) sees a public address and lets it pass...
    assert first_refusal("rebind.example", rebinding("rebind.example", 80), AllowList()) is None
    # ...the connect resolves again, sees loopback, and connects to nothing.
    http = callback_client(AllowList(), 5.0, rebinding)
    with pytest.raises(InvalidInputError, match="loopback"):
        post(http, url)
    assert calls == ["rebind.example", "rebind.example"]
    assert connections == []
    assert receiver.received == []


@pytest.mark.parametrize(
    "host",
    ["0x7f000001", "2130706433", "0177.0.0.1", "127.1", "[::ffff:127.0.0.1]", "[::1]", "localhost"],
)
def test_numeric_spellings_and_localhost_are_refused_by_the_system_resolver(
    receiver: Receiver, connections: list[str], host: str
) -> None:
    http = callback_client(AllowList(), 5.0)
    with pytest.raises(InvalidInputError) as caught:
        post(http, f"http://{host}:{receiver.port}/hook")
    assert caught.value.field == "callback_url"
    assert connections == []
    assert receiver.received == []


# ---- allowed receivers -----------------------------------------------------------------------


@pytest.mark.parametrize("allow", ["127.0.0.1", "127.0.0.0/8", "hooks.test"])
def test_an_allowed_loopback_receiver_gets_a_signed_callback(
    receiver: Receiver, connections: list[str], allow: str
) -> None:
    body = b'{"job":{"id":"job-1","state":"done"}}'
    http = client(allow, hooks_test=[LOOPBACK])
    with http:
        response = post_callback(
            http, f"http://hooks.test:{receiver.port}/hook?x=1", body, secret=SECRET, job_id="j-9"
        )
    assert response.status_code == 204
    assert connections == ["127.0.0.1"]  # the vetted address, not the name again
    [got] = receiver.received
    assert got.path == "/hook?x=1" and got.body == body
    assert got.headers["host"] == f"hooks.test:{receiver.port}"  # the URL's name is kept
    assert got.headers["content-type"] == "application/json"
    assert got.headers["user-agent"] == "voicelane"
    assert got.headers["x-voicelane-job-id"] == "j-9"
    assert verify(SECRET, got.body, got.headers["x-voicelane-signature"])
    assert not verify("another-secret", got.body, got.headers["x-voicelane-signature"])
    assert "authorization" not in got.headers


def test_no_redirect_is_followed(receiver: Receiver) -> None:
    receiver.status = 302
    receiver.headers = {"location": f"http://127.0.0.1:{receiver.port}/elsewhere"}
    response = post(
        client("127.0.0.1", hooks_test=[LOOPBACK]), f"http://hooks.test:{receiver.port}/"
    )
    assert response.status_code == 302
    assert [r.path for r in receiver.received] == ["/"]


def test_url_credentials_are_never_sent(receiver: Receiver, connections: list[str]) -> None:
    http = client("127.0.0.1", hooks_test=[LOOPBACK])
    with pytest.raises(InvalidInputError, match="credentials"):
        post(http, f"http://user:hunter2@hooks.test:{receiver.port}/hook")
    assert connections == []
    assert receiver.received == []


def test_a_host_that_does_not_resolve_is_a_transient_connect_error() -> None:
    with pytest.raises(httpx.ConnectError, match="cannot resolve"):
        post(client(), "http://nowhere.example/hook")


def test_the_backend_refuses_unix_sockets() -> None:
    with pytest.raises(httpcore.ConnectError):
        GuardedBackend(AllowList()).connect_unix_socket("/run/redis.sock")


# ---- notify_job ------------------------------------------------------------------------------


class OneJob:
    def __init__(self, job: Job) -> None:
        self.job = job

    def get(self, job_id: str) -> Job | None:
        return self.job if job_id == self.job.id else None


class OneJobLedger:
    """A ledger whose ``jobs`` know one job (all ``notify_job`` reads)."""

    def __init__(self, job: Job) -> None:
        self.jobs = OneJob(job)


def final_job(callback_url: str | None, state: JobState = JobState.DONE) -> Job:
    options = JobOptions(voice="en", format="ogg", sample_rate_hz=24000, callback_url=callback_url)
    return Job(
        id="job-7",
        tenant="acme",
        state=state,
        options=options,
        characters=12,
        created_at=1.0,
        updated_at=2.0,
        started_at=1.5,
        finished_at=2.0,
        chunks_total=1,
        chunks_done=1,
        audio_s=1.2,
        attempts=1,
        output_key="acme/job-7/audio.ogg",
        size_bytes=100,
        duration_s=1.2,
        sha256="0" * 64,
        error=None,
    )


def no_enqueue(
    task: str,
    *args: str | int,
    countdown_s: float | None = None,
    queue: str | None = None,
    priority: int = 0,
) -> None:
    pass


def context(job: Job, **settings: Any) -> JobContext:
    return JobContext(
        settings=ServiceSettings(**settings),
        ledger=cast(Ledger, OneJobLedger(job)),
        storage=cast(Storage, None),
        worker_name="cpu@test",
        enqueue=no_enqueue,
    )


def test_notify_job_signs_with_the_tenants_secret(receiver: Receiver) -> None:
    job = final_job(f"http://hooks.test:{receiver.port}/done")
    ctx = context(job, callback_signing_secret="master-0001")
    status = notify_job(ctx, job.id, client=client("127.0.0.1", hooks_test=[LOOPBACK]))
    assert status == 204
    [got] = receiver.received
    assert json.loads(got.body)["job"]["id"] == "job-7"
    assert got.headers["x-voicelane-job-id"] == "job-7"
    signature = got.headers["x-voicelane-signature"]
    assert verify(tenant_secret("master-0001", "acme"), got.body, signature)
    assert not verify(tenant_secret("master-0001", "other"), got.body, signature)
    assert not verify("master-0001", got.body, signature)


def test_notify_job_uses_the_dev_secret_in_dev_mode_only(receiver: Receiver) -> None:
    job = final_job(f"http://hooks.test:{receiver.port}/done")
    http = client("127.0.0.1", hooks_test=[LOOPBACK])
    assert notify_job(context(job), job.id, client=http) == 0  # callbacks are off
    assert receiver.received == []
    http = client("127.0.0.1", hooks_test=[LOOPBACK])
    assert notify_job(context(job, dev_mode=True), job.id, client=http) == 204
    dev = master_secret(None, dev_mode=True)
    assert dev is not None
    body, header = receiver.received[0].body, receiver.received[0].headers["x-voicelane-signature"]
    assert verify(tenant_secret(dev, "acme"), body, header)


def test_notify_job_gives_up_on_a_refused_destination_without_retrying(
    receiver: Receiver, connections: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    job = final_job(f"http://hooks.test:{receiver.port}/done")
    ctx = context(job, callback_signing_secret="master-0001")
    with caplog.at_level("WARNING", logger="voicelane.workers.jobs"):
        status = notify_job(ctx, job.id, client=client(hooks_test=[LOOPBACK]))
    assert status == 0  # returned, not raised: the task does not retry
    assert connections == [] and receiver.received == []
    [line] = [r.getMessage() for r in caplog.records]
    assert "job-7" in line and "refused" in line and "loopback" in line


def test_notify_job_refuses_credentials_in_the_url(receiver: Receiver) -> None:
    job = final_job(f"http://u:p@hooks.test:{receiver.port}/done")
    ctx = context(job, callback_signing_secret="master-0001")
    assert notify_job(ctx, job.id, client=client("127.0.0.1", hooks_test=[LOOPBACK])) == 0
    assert receiver.received == []


def test_notify_job_refuses_loopback_with_its_own_client(receiver: Receiver) -> None:
    job = final_job(f"http://127.0.0.1:{receiver.port}/done")
    assert notify_job(context(job, callback_signing_secret="m"), job.id) == 0
    assert receiver.received == []
    allowed = context(job, callback_signing_secret="m", callback_allow="127.0.0.1")
    assert notify_job(allowed, job.id) == 204
    assert len(receiver.received) == 1


@pytest.mark.parametrize("status", [500, 503, 429])
def test_notify_job_retries_5xx_and_429(receiver: Receiver, status: int) -> None:
    receiver.status = status
    job = final_job(f"http://hooks.test:{receiver.port}/done")
    ctx = context(job, callback_signing_secret="master-0001")
    with pytest.raises(CallbackError, match=str(status)):
        notify_job(ctx, job.id, client=client("127.0.0.1", hooks_test=[LOOPBACK]))


def test_notify_job_retries_when_the_receiver_is_unreachable(receiver: Receiver) -> None:
    port = receiver.port
    receiver.server.shutdown()
    receiver.server.server_close()
    job = final_job(f"http://hooks.test:{port}/done")
    ctx = context(job, callback_signing_secret="master-0001")
    with pytest.raises(CallbackError, match="job-7"):
        notify_job(ctx, job.id, client=client("127.0.0.1", hooks_test=[LOOPBACK]))


def test_notify_job_does_nothing_for_a_job_without_callback_or_not_final() -> None:
    ctx = context(final_job(None), callback_signing_secret="m")
    assert notify_job(ctx, "job-7", client=client()) == 0
    running = context(final_job("http://x.example/", JobState.RENDERING), dev_mode=True)
    assert notify_job(running, "job-7", client=client()) == 0
    assert notify_job(ctx, "unknown", client=client()) == 0
