"""The playground's route: the page and its assets are served without a key, with a strict
CSP and the other security headers, ``/`` redirects to it, nothing in it points at another
host, and every ``data-testid`` the browser tests rely on is in the page."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from starlette.testclient import TestClient

from voicelane.api.rest import create_app
from voicelane.api.routes import playground
from voicelane.core.settings import ApiSettings
from voicelane.core.storage import LocalStorage, LocalStorageSettings

TEST_IDS = (
    "api-key", "text", "voice", "format", "speed", "speak", "stop", "first-audio-ms",
    "played-ms", "captions", "job-submit", "job-file", "job-progress", "job-download",
    "job-subtitles", "chat-input", "chat-send", "chat-reply", "error",
)  # fmt: skip
"""The issue's list, exactly."""

STATIC_FILES = sorted(p for p in playground.STATIC_DIR.iterdir() if p.is_file())


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    """The whole REST app (keys required everywhere else), never started: the playground's
    routes touch neither Redis nor storage."""
    settings = ApiSettings(redis_url="redis://127.0.0.1:1/0", api_keys="acme:acme-key-0001")
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "storage", secret="s" * 40))
    yield TestClient(create_app(settings, storage=storage), base_url="http://api")


@pytest.fixture
def bare() -> TestClient:
    app = FastAPI()
    app.include_router(playground.router)
    return TestClient(app, base_url="http://api")


def test_root_redirects_to_the_playground(client: TestClient) -> None:
    response = client.get("/", follow_redirects=False)
    assert response.status_code in (302, 307)
    assert response.headers["location"] == "/playground"


def test_the_page_is_served_without_a_key_with_the_security_headers(client: TestClient) -> None:
    response = client.get("/playground")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    csp = {
        directive.split()[0]: directive.split()[1:]
        for directive in response.headers["content-security-policy"].split("; ")
    }
    assert csp["default-src"] == ["'self'"]
    assert csp["script-src"] == ["'self'"]  # no inline scripts, no eval
    assert csp["style-src"] == ["'self'"]
    assert csp["connect-src"] == ["'self'"]  # the API and its WebSocket, nothing else
    assert csp["object-src"] == ["'none'"]
    assert csp["base-uri"] == ["'none'"]
    assert csp["frame-ancestors"] == ["'none'"]
    assert set(csp["media-src"]) == {"'self'", "blob:"}
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    # the rest of the API still asks for a key
    assert client.get("/v1/jobs").status_code == 401


@pytest.mark.parametrize(
    ("name", "content_type"),
    [("app.js", "text/javascript; charset=utf-8"), ("style.css", "text/css; charset=utf-8")],
)
def test_assets_are_served_with_their_content_type(
    bare: TestClient, name: str, content_type: str
) -> None:
    response = bare.get(f"/playground/{name}")
    assert response.status_code == 200
    assert response.headers["content-type"] == content_type
    assert response.headers["x-content-type-options"] == "nosniff"
    assert "default-src 'self'" in response.headers["content-security-policy"]
    assert response.content == (playground.STATIC_DIR / name).read_bytes()


def test_every_module_the_page_imports_is_served(bare: TestClient) -> None:
    """The ES modules import each other by relative path: each one must answer."""
    for path in STATIC_FILES:
        if path.suffix != ".js":
            continue
        for imported in re.findall(r'from "\./([^"]+)"', path.read_text()):
            assert bare.get(f"/playground/{imported}").status_code == 200, (path.name, imported)


@pytest.mark.parametrize(
    "path",
    ["/playground/nothing.js", "/playground/rest.py", "/playground/..%2Frest.py",
     "/playground/index.html.bak", "/playground/.hidden.js"],
)  # fmt: skip
def test_nothing_else_is_served(bare: TestClient, path: str) -> None:
    assert bare.get(path).status_code == 404


def test_nothing_points_at_another_host() -> None:
    """Offline, and no third party: no absolute URL, no protocol-relative one, in any file
    (the WebSocket's URL is built from the page's own location)."""
    assert STATIC_FILES
    for path in STATIC_FILES:
        text = path.read_text()
        assert not re.search(r"(?:https?|wss?):/+[A-Za-z0-9]", text), path.name
        assert not re.search(r"""["'(=]\s*//[A-Za-z0-9]""", text), path.name
        assert "@import" not in text, path.name


def test_no_inline_script_or_style_in_the_page() -> None:
    html = (playground.STATIC_DIR / "index.html").read_text()
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", html, flags=re.S)
    assert scripts
    for attributes, body in scripts:
        assert 'src="/playground/' in attributes and not body.strip()
    assert "<style" not in html
    assert not re.search(r"\sstyle=", html)
    assert not re.search(r"\son[a-z]+=", html)  # no inline event handlers


def test_every_test_id_of_the_issue_is_in_the_page(bare: TestClient) -> None:
    html = bare.get("/playground").text
    for test_id in TEST_IDS:
        assert html.count(f'data-testid="{test_id}"') == 1, test_id
    assert re.search(r'<progress[^>]*data-testid="job-progress"', html)
    assert re.search(r'<a[^>]*data-testid="job-download"', html)
    assert re.search(r'<a[^>]*data-testid="job-subtitles"', html)
    assert re.search(r'data-testid="error"[^>]*role="alert"', html)


def test_every_control_has_a_label_and_the_page_a_language() -> None:
    html = (playground.STATIC_DIR / "index.html").read_text()
    assert re.search(r'<html lang="[a-z]{2}', html)
    assert "<main>" in html and "<h1>" in html
    controls = re.findall(r"<(?:input|select|textarea|progress)\b[^>]*\bid=\"([^\"]+)\"", html)
    assert controls
    for control in controls:
        assert f'<label for="{control}"' in html, control
