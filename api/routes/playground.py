"""The web playground: a page served by the API at ``/playground`` (``/`` redirects there).

Static files only (``api/playground/``: HTML, ES modules, CSS), shipped in the wheel with
the code; no key is needed to load them — the page asks for the key and sends it with each
API call it makes. Every response carries a strict Content-Security-Policy (this origin
only: scripts, styles, WebSocket; ``blob:`` for audio and workers), ``nosniff`` and no
referrer. ``docs/playground.md``.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response
from starlette.exceptions import HTTPException

router = APIRouter(include_in_schema=False)

STATIC_DIR = Path(__file__).resolve().parent.parent / "playground"
"""``api/playground/`` (installed: ``voicelane/api/playground/``)."""

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
ASSET_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}\.(?:js|css|svg)")
"""An asset's name: one path segment, no dots but its extension (no ``..``, no folders)."""

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data: blob:",
        "media-src 'self' blob:",
        "worker-src 'self' blob:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
"""This origin only. ``connect-src 'self'`` covers the page's own WebSocket (``ws:`` on an
``http:`` page, ``wss:`` on ``https:``) in CSP level 3, which every current browser
implements."""

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


@functools.cache
def _read(name: str) -> bytes | None:
    """A static file's bytes (read once per process), or None when there is no such file."""
    path = STATIC_DIR / name
    return path.read_bytes() if path.is_file() else None


def _static(name: str) -> Response:
    body = _read(name)
    if body is None:
        raise HTTPException(404, "Not Found")
    media_type = CONTENT_TYPES[Path(name).suffix]
    return Response(body, media_type=media_type, headers=SECURITY_HEADERS)


@router.get("/")
async def root() -> RedirectResponse:
    return RedirectResponse("/playground", status_code=307)


@router.get("/playground")
async def page() -> Response:
    return _static("index.html")


@router.get("/playground/")
async def page_slash() -> RedirectResponse:
    return RedirectResponse("/playground", status_code=307)


@router.get("/playground/{name}")
async def asset(name: str) -> Response:
    if not ASSET_NAME.fullmatch(name):
        raise HTTPException(404, "Not Found")
    return _static(name)
