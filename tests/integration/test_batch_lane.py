"""The batch lane end to end: real redis-server, SeaweedFS's S3 (signatures checked), real
worker, API and Flower processes. Submit → done → download → decode; uploads; tenants; cancel;
callbacks; Flower."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import httpx
import pytest

from tests.integration.conftest import s3_settings
from tests.support.ledger import commit_log
from tests.support.s3_server import S3Endpoint
from tests.support.stack import OTHER_KEY, Stack, wait_for
from voicelane.common.audio import AudioFormat, probe
from voicelane.core.callbacks import tenant_secret, verify
from voicelane.core.ledger import Ledger
from voicelane.core.redis_server import RedisServer
from voicelane.core.settings import EmbeddedSettings
from voicelane.core.storage import S3Storage
from voicelane.workers.render import EmbeddedRenderer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = (ROOT / "examples" / "sample.txt").read_text(encoding="utf-8")
FINAL = ("done", "failed", "cancelled")


def s3_env(endpoint: S3Endpoint, bucket: str) -> dict[str, str]:
    return {
        "VOICELANE_STORAGE__BACKEND": "s3",
        "VOICELANE_STORAGE__S3__ENDPOINT_URL": endpoint.url,
        "VOICELANE_STORAGE__S3__BUCKET": bucket,
        "VOICELANE_STORAGE__S3__REGION": endpoint.region,
        "VOICELANE_STORAGE__S3__ACCESS_KEY_ID": endpoint.access_key_id,
        "VOICELANE_STORAGE__S3__SECRET_ACCESS_KEY": endpoint.secret_access_key,
    }


@pytest.fixture(scope="module")
def bucket() -> str:
    return f"lane-{uuid.uuid4().hex[:16]}"


@pytest.fixture(scope="module")
def lane(
    tmp_path_factory: pytest.TempPathFactory, s3_endpoint: S3Endpoint, bucket: str
) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("lane")
    redis_server = RedisServer(directory / "redis").start()
    env = {**s3_env(s3_endpoint, bucket), **CALLBACK_ENV}
    lane = Stack(directory, redis_server.url, env_overrides=env)
    try:
        lane.gpu_worker()
        lane.cpu_worker()
        lane.callback_worker()  # the callbacks queue's own consumer, as `voicelane up` runs it
        lane.api()
        yield lane
    finally:
        lane.stop()
        redis_server.stop()


@pytest.fixture(scope="module")
def s3(s3_endpoint: S3Endpoint, bucket: str) -> S3Storage:
    return S3Storage(s3_settings(s3_endpoint, bucket))


@pytest.fixture
def ledger(lane: Stack) -> Iterator[Ledger]:
    ledger = Ledger.from_url(lane.redis_url)
    yield ledger
    ledger.redis.close()


def wait_final(client: httpx.Client, job_id: str, timeout_s: float = 120) -> dict[str, Any]:
    def final() -> dict[str, Any] | None:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        return job if job["state"] in FINAL else None

    return wait_for(final, timeout_s, f"job {job_id} to finish")


def test_submit_done_download_and_duration_matches_embedded(
    lane: Stack, s3: S3Storage, tmp_path: Path
) -> None:
    with lane.client() as client:
        response = client.post("/v1/jobs", json={"text": SAMPLE, "format": "ogg"})
        assert response.status_code == 202, response.text
        assert response.headers["location"] == f"/v1/jobs/{response.json()['id']}"
        job = wait_final(client, response.json()["id"])
        assert job["state"] == "done", lane.logs()
        assert job["progress"] == 1.0 and job["chunks_done"] == job["chunks_total"] >= 1
        redirect = client.get(f"/v1/jobs/{job['id']}/audio")
        assert redirect.status_code == 302
        audio = httpx.get(redirect.headers["location"], timeout=30)
    assert audio.status_code == 200
    out = tmp_path / "job.ogg"
    out.write_bytes(audio.content)
    info = probe(out)
    assert info.codec == "opus" and info.sample_rate_hz == 24000
    assert info.duration_s == pytest.approx(job["output"]["duration_s"], abs=0.02)

    with EmbeddedRenderer(EmbeddedSettings(engine="espeak")) as renderer:
        embedded = renderer.render(SAMPLE, tmp_path / "embedded.ogg", fmt=AudioFormat.OGG)
    assert info.duration_s == pytest.approx(embedded.duration_s, rel=0.02)
    # The parts (and their timings) are gone; the finished file and its subtitles remain.
    tenant_prefix = f"acme/{job['id']}/"
    assert s3.list_keys(tenant_prefix) == [
        f"{tenant_prefix}{name}"
        for name in ("audio.ogg", "subtitles.json", "subtitles.srt", "subtitles.vtt")
    ]
    assert s3.incomplete_uploads(tenant_prefix) == []


def test_a_text_file_upload_renders_to_the_asked_format(lane: Stack, tmp_path: Path) -> None:
    with lane.client() as client:
        response = client.post(
            "/v1/jobs",
            files={"file": ("chapter.txt", "一段中文。And English too.".encode(), "text/plain")},
            data={"format": "flac", "sample_rate_hz": "16000", "voice": "auto"},
        )
        assert response.status_code == 202, response.text
        job = wait_final(client, response.json()["id"])
        assert job["state"] == "done"
        link = job["download_url"]
    out = tmp_path / "chapter.flac"
    out.write_bytes(httpx.get(link, timeout=30).content)
    info = probe(out)
    assert info.codec == "flac" and info.sample_rate_hz == 16000


def test_tenants_see_only_their_own_jobs(lane: Stack) -> None:
    with lane.client() as acme, lane.client(OTHER_KEY) as other:
        job_id = acme.post("/v1/jobs", json={"text": "Private words."}).json()["id"]
        assert other.get(f"/v1/jobs/{job_id}").status_code == 404
        assert other.get(f"/v1/jobs/{job_id}/audio").status_code == 404
        assert other.delete(f"/v1/jobs/{job_id}").status_code == 404
        assert job_id not in [j["id"] for j in other.get("/v1/jobs").json()["jobs"]]
        assert job_id in [j["id"] for j in acme.get("/v1/jobs").json()["jobs"]]
        wait_final(acme, job_id)


def _moved(url: str, key: str) -> str:
    """``url`` (path-style: /bucket/key) pointed at another key, its signature kept."""
    parts = urlsplit(url)
    bucket = parts.path.split("/")[1]
    return parts._replace(path=f"/{bucket}/{key}").geturl()


def _resigned(url: str) -> str:
    """``url`` with one character of its signature changed."""
    parts = urlsplit(url)
    query = {name: values[0] for name, values in parse_qs(parts.query).items()}
    signature = query["X-Amz-Signature"]
    query["X-Amz-Signature"] = ("0" if signature[0] != "0" else "1") + signature[1:]
    return parts._replace(query=urlencode(query, quote_via=quote)).geturl()


def test_download_links_open_only_what_they_were_signed_for(lane: Stack) -> None:
    """The API answers another tenant's job 404 itself; a link it handed out is checked by the
    store (SeaweedFS in the tests): moved to another tenant's file or re-signed, it is 403."""
    with lane.client() as acme, lane.client(OTHER_KEY) as other:
        mine = wait_final(acme, acme.post("/v1/jobs", json={"text": "Mine alone."}).json()["id"])
        theirs = wait_final(
            other, other.post("/v1/jobs", json={"text": "Theirs alone."}).json()["id"]
        )
        assert mine["state"] == theirs["state"] == "done"
        redirect = acme.get(f"/v1/jobs/{mine['id']}/audio")
        assert redirect.status_code == 302
        assert acme.get(f"/v1/jobs/{theirs['id']}/audio").status_code == 404
    link = redirect.headers["location"]
    their_key = urlsplit(theirs["download_url"]).path.split("/", 2)[2]
    assert their_key.startswith(f"other/{theirs['id']}/")

    assert httpx.get(link, timeout=30).status_code == 200
    assert httpx.get(mine["download_url"], timeout=30).status_code == 200
    subtitles = httpx.get(mine["subtitles_urls"]["srt"], timeout=30)
    assert subtitles.status_code == 200 and "-->" in subtitles.text
    for forged in (
        _moved(link, their_key),
        _moved(mine["subtitles_urls"]["srt"], their_key),
        _resigned(link),
        _resigned(mine["subtitles_urls"]["vtt"]),
    ):
        answer = httpx.get(forged, timeout=30)
        assert answer.status_code == 403, (forged, answer.text)
        assert not answer.content.startswith(b"OggS")


def test_cancel_mid_job_stops_rendering_and_removes_parts(
    lane: Stack, ledger: Ledger, s3: S3Storage
) -> None:
    text = " ".join(f"Sentence number {i} of a long chapter that goes on." for i in range(1500))
    with lane.client() as client:
        job_id = client.post("/v1/jobs", json={"text": text}).json()["id"]
        wait_for(
            lambda: client.get(f"/v1/jobs/{job_id}").json()["chunks_done"] >= 3,
            60,
            "a few chunks",
        )
        response = client.delete(f"/v1/jobs/{job_id}")
        assert response.status_code == 200
        assert response.json()["state"] == "cancelled"
        committed_at_cancel = len(commit_log(ledger.redis, job_id))
        job = client.get(f"/v1/jobs/{job_id}").json()
        assert job["chunks_done"] < job["chunks_total"]
        # No part survives (the cleanup task and any in-flight chunk remove theirs).
        wait_for(lambda: s3.list_keys(f"acme/{job_id}/") == [], 30, "parts to be removed")
        # A second cancel is harmless; the state never leaves cancelled.
        assert client.delete(f"/v1/jobs/{job_id}").status_code == 200
        assert client.get(f"/v1/jobs/{job_id}").json()["state"] == "cancelled"
        assert client.get(f"/v1/jobs/{job_id}/audio").status_code == 409
    assert len(commit_log(ledger.redis, job_id)) == committed_at_cancel  # nothing committed after


CALLBACK_MASTER_SECRET = "lane-callback-master-0123456789"
CALLBACK_ENV = {
    # The receiver below listens on loopback: only an allow-listed one may be called back.
    "VOICELANE_CALLBACK_ALLOW": "127.0.0.1",
    "VOICELANE_CALLBACK_SIGNING_SECRET": CALLBACK_MASTER_SECRET,
}


class _CallbackSink(BaseHTTPRequestHandler):
    received: list[tuple[dict[str, str], bytes]] = []  # noqa: RUF012 - shared with the test
    event = threading.Event()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        type(self).received.append(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(204)
        self.end_headers()
        type(self).event.set()

    def log_message(self, *_args: object) -> None:
        pass


def test_callback_receives_the_finished_job(lane: Stack) -> None:
    server = HTTPServer(("127.0.0.1", 0), _CallbackSink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/hook"
        with lane.client() as client:
            job_id = client.post(
                "/v1/jobs", json={"text": "Call me back.", "callback_url": url}
            ).json()["id"]
            assert _CallbackSink.event.wait(60), lane.logs()
            secret = client.get("/v1/callbacks/secret").json()["secret"]
        headers, body = _CallbackSink.received[-1]
        payload = json.loads(body)["job"]
        assert payload["id"] == job_id and payload["state"] == "done"
        assert "text" not in payload
        assert headers["x-voicelane-job-id"] == job_id
        # The receiver's check: the tenant's secret, from GET /v1/callbacks/secret.
        assert secret == tenant_secret(CALLBACK_MASTER_SECRET, "acme")
        assert verify(secret, body, headers["x-voicelane-signature"])
        assert not verify(secret, body + b" ", headers["x-voicelane-signature"])
    finally:
        server.shutdown()


def test_flower_answers_with_auth_only_and_is_read_only(lane: Stack) -> None:
    lane.flower()
    auth = ("watcher", "flower-pass")

    def workers_listed() -> dict[str, Any] | None:
        response = httpx.get(f"{lane.flower_url}/api/workers", auth=auth, timeout=10)
        data: dict[str, Any] = response.json() if response.status_code == 200 else {}
        return data if {"gpu@test", "cpu@test"} <= set(data) else None

    wait_for(workers_listed, 60, "Flower to list both workers")

    with lane.client() as client:

        def plan_task_seen() -> bool:
            # Task events are not stored: jobs that ran before Flower's event receiver was
            # listening are never seen. Keep submitting until one is.
            job_id = client.post("/v1/jobs", json={"text": "Seen by Flower."}).json()["id"]
            wait_final(client, job_id)
            response = httpx.get(f"{lane.flower_url}/api/tasks", auth=auth, timeout=10)
            tasks = response.json().values() if response.status_code == 200 else []
            return any(t.get("name") == "voicelane.plan" for t in tasks)

        wait_for(plan_task_seen, 60, "Flower to see the plan task")
    tasks = httpx.get(f"{lane.flower_url}/api/tasks", auth=auth, timeout=10).json()
    assert all("Seen by Flower" not in json.dumps(t) for t in tasks.values())  # ids only
    assert httpx.get(f"{lane.flower_url}/api/workers", timeout=10).status_code == 401
    wrong = httpx.get(f"{lane.flower_url}/api/workers", auth=("watcher", "nope"), timeout=10)
    assert wrong.status_code == 401
    shutdown = httpx.post(f"{lane.flower_url}/api/worker/shutdown/gpu@test", auth=auth, timeout=10)
    assert shutdown.status_code == 404  # read-only: the control API is not there
    assert lane.procs[0].alive()


def test_the_cli_uploads_an_epub_and_fetches_its_m4b_and_subtitles(
    lane: Stack, tmp_path: Path
) -> None:
    """``voicelane jobs submit book.epub --format m4b -o ... --subtitles book.srt`` against the
    running lane: the book's chapters in the file, its sentences in the subtitles."""
    import subprocess
    import sys

    import srt

    from tests.support.documents import pandoc_epub
    from tests.support.stack import ACME_KEY

    built = pandoc_epub(tmp_path)
    source = tmp_path / "book.epub"
    source.write_bytes(built.data)
    audio, subtitles = tmp_path / "book.m4b", tmp_path / "book.srt"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "voicelane.api.cli",
            "jobs",
            "submit",
            str(source),
            "--server",
            f"http://127.0.0.1:{lane.api_port}",
            "--key",
            ACME_KEY,
            "--format",
            "m4b",
            "-o",
            str(audio),
            "--subtitles",
            str(subtitles),
            "--timeout",
            "180",
        ],
        env=lane.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr + lane.logs()
    info = probe(audio)
    assert info.codec == "aac" and info.duration_s > 5
    cues = list(srt.parse(subtitles.read_text(encoding="utf-8")))
    assert cues and cues[-1].end.total_seconds() <= info.duration_s + 0.3
    assert any(built.toc_titles[0] in c.content for c in cues)
