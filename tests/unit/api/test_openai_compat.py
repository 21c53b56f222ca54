"""voicelane.api.openai_compat: an OpenAI route's failures in OpenAI's flavour, and only its."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.testclient import TestClient
from pydantic import BaseModel

from voicelane.api.openai_compat import OpenAIRoute, openai_body
from voicelane.common.errors import AuthError, QuotaExceededError


class Body(BaseModel):
    input: str
    speed: float | None = None


def key(request: Request) -> str:
    if request.headers.get("authorization") != "Bearer k":
        raise AuthError("missing or unknown API key")
    return "acme"


Key = Annotated[str, Depends(key)]


def app() -> FastAPI:
    openai = APIRouter(route_class=OpenAIRoute)
    plain = APIRouter()

    @openai.post("/v1/audio/speech")
    async def speech(request: Request, _key: Key) -> dict[str, str]:
        body = await openai_body(request, Body)
        if body.input == "busy":
            raise QuotaExceededError("tenant over its rate", retry_after_s=2)
        return {"input": body.input}

    @openai.get("/v1/models")
    async def models(_key: Key, limit: int = 10) -> dict[str, int]:
        return {"limit": limit}

    @plain.post("/v1/jobs")
    async def jobs(request: Request) -> dict[str, str]:
        body = await openai_body(request, Body)
        return {"input": body.input}

    application = FastAPI()
    application.include_router(openai)
    application.include_router(plain)
    return application


AUTH = {"Authorization": "Bearer k"}


def test_a_body_of_the_wrong_shape_is_400_with_param() -> None:
    response = TestClient(app()).post("/v1/audio/speech", json={"input": 3}, headers=AUTH)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error", "input", "invalid_input",
    )  # fmt: skip
    assert error["message"].startswith("input:")


def test_json_that_does_not_parse_is_400_malformed_request() -> None:
    response = TestClient(app()).post("/v1/audio/speech", content=b'{"input', headers=AUTH)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_request"


def test_the_key_is_checked_in_the_openai_flavour() -> None:
    response = TestClient(app()).post("/v1/audio/speech", json={"input": "Hi."})
    assert response.status_code == 401 and response.headers["WWW-Authenticate"] == "Bearer"
    assert response.json()["error"]["type"] == "authentication_error"


def test_a_quota_is_429_with_retry_after() -> None:
    response = TestClient(app()).post("/v1/audio/speech", json={"input": "busy"}, headers=AUTH)
    assert response.status_code == 429 and response.headers["Retry-After"] == "2"
    assert response.json()["error"]["type"] == "rate_limit_error"


def test_a_bad_query_parameter_is_400_too() -> None:
    response = TestClient(app()).get("/v1/models?limit=many", headers=AUTH)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "limit"


def test_other_routes_keep_their_own_failures() -> None:
    """A route without the route class is untouched: the app's own handlers answer it (here
    none, so the error escapes)."""
    client = TestClient(app(), raise_server_exceptions=False)
    assert client.post("/v1/jobs", json={"input": 3}).status_code == 500
    assert client.post("/v1/jobs", json={"input": "Hi."}).json() == {"input": "Hi."}
