"""voicelane.api.body_limit: bodies over their route's limit are refused while they stream in."""

from __future__ import annotations

import asyncio

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient
from starlette.types import Message

from voicelane.api.body_limit import OPENAI_PATHS, BodyLimit, route_limits
from voicelane.common.errors import TextTooLargeError

LIMITS = route_limits(max_upload_bytes=1000, speech_bytes=500)


async def echo(request: Request) -> JSONResponse:
    try:
        return JSONResponse({"size": len(await request.body())})
    except TextTooLargeError as error:
        return JSONResponse({"error": error.message}, status_code=413)


def client() -> TestClient:
    app = Starlette(routes=[Route("/{path:path}", echo, methods=["POST"])])
    return TestClient(BodyLimit(app, LIMITS))


def test_limits_per_route() -> None:
    assert LIMITS("POST", "/v1/jobs") == 1000 + 64 * 1024
    assert LIMITS("POST", "/v1/audio/speech") == 500
    assert LIMITS("DELETE", "/v1/jobs/x") == LIMITS("POST", "/other") == 64 * 1024
    assert LIMITS("PUT", "/v1/lexicons/brands") == 2 * 1024 * 1024
    assert LIMITS("PUT", "/v1/lexicons/brands/default") == 64 * 1024
    assert LIMITS("POST", "/v1/voices") == LIMITS("POST", "/v1/voices/") == 10 * 1024 * 1024
    assert LIMITS("DELETE", "/v1/voices/alice") == LIMITS("POST", "/v1/voices/x") == 64 * 1024


def test_a_body_within_the_limit_passes() -> None:
    response = client().post("/v1/audio/speech", content=b"x" * 500)
    assert response.json() == {"size": 500}


def test_an_announced_body_over_the_limit_is_refused_unread() -> None:
    response = client().post("/v1/audio/speech", content=b"x" * 501)
    assert response.status_code == 413 and response.json()["error"]["code"] == "text_too_large"
    assert response.json()["error"]["type"] == "invalid_request_error"  # OpenAI's shape there
    response = client().post("/v1/text", content=b"x" * 501)
    assert response.status_code == 413 and response.json()["error"]["code"] == "text_too_large"
    assert "type" not in response.json()["error"]  # voicelane's shape elsewhere


def test_the_openai_paths_are_the_openai_routes() -> None:
    """Every route of the REST app's routers that answers in OpenAI's flavour, and no other."""
    import importlib
    import pkgutil

    from fastapi.routing import APIRoute

    import voicelane.api.routes
    from voicelane.api.openai_compat import OpenAIRoute

    routes: list[APIRoute] = []
    for module in pkgutil.iter_modules(voicelane.api.routes.__path__):
        routes_module = importlib.import_module(f"voicelane.api.routes.{module.name}")
        router = getattr(routes_module, "router", None)
        routes.extend(r for r in getattr(router, "routes", ()) if isinstance(r, APIRoute))
    assert {r.path for r in routes if isinstance(r, OpenAIRoute)} == OPENAI_PATHS


def test_a_streamed_body_is_cut_when_it_passes_the_limit() -> None:
    """Driven as ASGI, as a server would: the body arrives in 100-byte messages (chunked,
    no Content-Length), and the app must stop reading soon after 500 bytes."""
    app = Starlette(routes=[Route("/{path:path}", echo, methods=["POST"])])
    limited = BodyLimit(app, LIMITS)
    read = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal read
        read += 1
        return {"type": "http.request", "body": b"x" * 100, "more_body": read < 100}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/audio/speech",
        "headers": [(b"transfer-encoding", b"chunked")],
        "query_string": b"",
    }
    asyncio.run(limited(scope, receive, send))
    assert sent[0]["status"] == 413
    assert read <= 7  # 600 bytes: the first message past the limit ends it
