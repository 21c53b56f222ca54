"""Documents over REST in-process (real Redis, real Celery publishing, local storage): an EPUB
upload becomes a job with its table of contents, metadata and cover; every hostile document is
a 400 naming what is wrong, with Redis exactly as it was and nothing in storage."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from tests.support.documents import (
    BuiltDocument,
    ebooklib_epub,
    hostile_documents,
    pandoc_epub,
)
from voicelane.api.rest import create_app
from voicelane.core.batch_lane import QUEUES, CeleryEnqueue
from voicelane.core.ledger import Ledger
from voicelane.core.settings import ApiSettings
from voicelane.core.storage import LocalStorage, LocalStorageSettings

pytestmark = pytest.mark.integration

ACME = {"Authorization": "Bearer acme-key-0001"}


@pytest.fixture
def api(redis_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, redis.Redis, LocalStorage]]:
    settings = ApiSettings(redis_url=redis_url, api_keys="acme:acme-key-0001")
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "storage", secret="s" * 40))
    storage.prepare()
    app = create_app(settings, storage=storage, enqueue=CeleryEnqueue(settings))
    connection = redis.Redis.from_url(redis_url)
    with TestClient(app, base_url="http://api") as client:
        yield client, connection, storage
    connection.close()


def snapshot(connection: redis.Redis) -> tuple[int, dict[str, int]]:
    return int(connection.dbsize()), {q: int(connection.llen(q)) for q in QUEUES}


@pytest.mark.parametrize("build", [pandoc_epub, ebooklib_epub], ids=["pandoc", "ebooklib"])
def test_an_epub_upload_is_a_job_with_its_toc_metadata_and_cover(
    api: tuple[TestClient, redis.Redis, LocalStorage], tmp_path: Path, build: object
) -> None:
    client, connection, storage = api
    book: BuiltDocument = build(tmp_path) if build is pandoc_epub else build()  # type: ignore[operator]
    response = client.post(
        "/v1/jobs",
        headers=ACME,
        files={"file": ("book.epub", book.data, "application/epub+zip")},
        data={"format": "m4b", "split_chapters": "true"},
    )
    assert response.status_code == 202, response.text
    view = response.json()
    assert view["input_format"] == "epub" and view["format"] == "m4b"
    assert view["title"] == book.title and view["author"] == book.author
    assert [c["title"] for c in view["chapters"]] == list(book.toc_titles)
    assert [c["level"] for c in view["chapters"]] == list(book.toc_levels)
    job = Ledger(connection).jobs.get(view["id"])
    assert job is not None
    assert [c.title for c in job.options.book.chapters] == list(book.toc_titles)
    assert job.options.book.split_chapters and job.options.book.language == book.language
    if book.cover is not None:
        assert job.options.book.cover_key is not None
        assert storage.get_bytes(job.options.book.cover_key) == book.cover
    text = Ledger(connection).jobs.text(view["id"])
    for absent in book.absent:
        assert absent not in text
    for present in book.present:
        assert present in text


HOSTILE = [h for h in hostile_documents() if not h.limits]


@pytest.mark.parametrize("hostile", HOSTILE, ids=[h.name for h in HOSTILE])
def test_a_hostile_document_is_a_400_naming_it_and_nothing_is_queued_or_stored(
    api: tuple[TestClient, redis.Redis, LocalStorage], hostile: object
) -> None:
    from tests.support.documents import Hostile

    assert isinstance(hostile, Hostile)
    client, connection, storage = api
    before = snapshot(connection)
    response = client.post(
        "/v1/jobs",
        headers=ACME,
        files={"file": (hostile.filename, hostile.data, "application/octet-stream")},
        data={"format": "m4b"},
    )
    assert response.status_code == (413 if hostile.too_large else 400), response.text
    error = response.json()["error"]
    assert error["code"] == ("text_too_large" if hostile.too_large else "invalid_document")
    assert error["field"] == "file"
    assert re.search(hostile.error, error["message"]), error["message"]
    assert "\n" not in error["message"] and "Traceback" not in response.text
    assert snapshot(connection) == before
    assert storage.list_keys("") == []


def test_markdown_in_json_reads_its_headings_as_chapters(
    api: tuple[TestClient, redis.Redis, LocalStorage],
) -> None:
    client, connection, _ = api
    text = "# Part One\n\nSome *prose* here.\n\n## A Section\n\nMore [prose](http://x.example).\n"
    response = client.post(
        "/v1/jobs", headers=ACME, json={"text": text, "input_format": "markdown"}
    )
    assert response.status_code == 202, response.text
    view = response.json()
    assert [(c["title"], c["level"]) for c in view["chapters"]] == [
        ("Part One", 1),
        ("A Section", 2),
    ]
    stored = Ledger(connection).jobs.text(view["id"])
    assert "*" not in stored and "http" not in stored and "prose here." in stored


def test_an_epub_in_json_is_refused_naming_the_field(
    api: tuple[TestClient, redis.Redis, LocalStorage],
) -> None:
    client, connection, _ = api
    before = snapshot(connection)
    response = client.post("/v1/jobs", headers=ACME, json={"text": "x", "input_format": "epub"})
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "input_format"
    assert snapshot(connection) == before


def test_subtitles_of_an_unfinished_job_are_409_and_an_unknown_format_422(
    api: tuple[TestClient, redis.Redis, LocalStorage],
) -> None:
    client, _, _ = api
    job_id = client.post("/v1/jobs", headers=ACME, json={"text": "Hello there."}).json()["id"]
    response = client.get(f"/v1/jobs/{job_id}/subtitles?format=srt", headers=ACME)
    assert response.status_code == 409 and response.json()["error"]["code"] == "job_state"
    response = client.get(f"/v1/jobs/{job_id}/subtitles?format=ass", headers=ACME)
    assert response.status_code == 422 and response.json()["error"]["field"] == "format"
    view = client.get(f"/v1/jobs/{job_id}", headers=ACME).json()
    assert view["links"]["subtitles"]["vtt"] == f"/v1/jobs/{job_id}/subtitles?format=vtt"
