"""The local backend's signed download links through the API (real Redis, local storage):
a link answers GET and HEAD; its ``expires`` counts only in the one spelling that was signed
(digits, no sign, no leading zero, no fraction); an expired link is 403 ``link_expired``, one
altered is 403 ``link_invalid`` (docs/storage.md: both permanent, the code tells them apart)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from starlette.testclient import TestClient

from voicelane.api.rest import create_app
from voicelane.core.batch_lane import CeleryEnqueue
from voicelane.core.settings import ApiSettings
from voicelane.core.storage import LocalStorage, LocalStorageSettings

pytestmark = pytest.mark.integration

KEY = "acme/job-1/audio.ogg"
AUDIO = b"OggS" + bytes(range(256)) * 8


@pytest.fixture
def served(redis_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, LocalStorage]]:
    settings = ApiSettings(redis_url=redis_url, api_keys="acme:acme-key-0001")
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "storage", secret="s" * 40))
    storage.prepare()
    storage.put_bytes(KEY, AUDIO, content_type="audio/ogg")
    app = create_app(settings, storage=storage, enqueue=CeleryEnqueue(settings))
    with TestClient(app, base_url="http://api") as client:
        yield client, storage


def path_of(link: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(link)
    return parts.path, {name: values[0] for name, values in parse_qs(parts.query).items()}


def test_a_link_answers_get_and_head(served: tuple[TestClient, LocalStorage]) -> None:
    client, storage = served
    path, query = path_of(storage.link(KEY))
    got = client.get(path, params=query)
    assert got.status_code == 200 and got.content == AUDIO
    head = client.head(path, params=query)
    assert head.status_code == 200, head.text
    assert head.content == b"" and int(head.headers["content-length"]) == len(AUDIO)
    assert head.headers["content-type"] == "audio/ogg"


@pytest.mark.parametrize(
    "respell",
    [
        lambda e: "0" + e,
        lambda e: "+" + e,
        lambda e: e + ".0",
        lambda e: " " + e,
        lambda e: e + " ",
        lambda e: "1_" + e[1:] if e.startswith("1") else e[:1] + "_" + e[1:],
    ],
    ids=["leading zero", "plus sign", "fraction", "leading space", "trailing space", "underscore"],
)
def test_only_the_signed_spelling_of_expires_counts(
    served: tuple[TestClient, LocalStorage], respell: object
) -> None:
    client, storage = served
    path, query = path_of(storage.link(KEY))
    assert callable(respell)
    query["expires"] = respell(query["expires"])
    response = client.get(path, params=query)
    assert response.status_code == 403, (query["expires"], response.status_code, response.text)
    assert response.json()["error"]["code"] == "link_invalid"


def test_an_expired_link_is_403_link_expired(
    served: tuple[TestClient, LocalStorage], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, storage = served
    with monkeypatch.context() as past:
        past.setattr(time, "time", lambda: 1_000_000_000.0)
        link = storage.link(KEY, expires_s=60)
    path, query = path_of(link)
    for method in ("GET", "HEAD"):
        response = client.request(method, path, params=query)
        assert response.status_code == 403, (method, response.status_code)
    assert client.get(path, params=query).json()["error"]["code"] == "link_expired"
