"""The WebSocket stream's defences, in-process against a real Redis: a socket must send its
request (and key) in time, an address and the process hold a bounded number of sockets, and
bad frames or values are refused with an error message, never an internal error."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from voicelane.api.rest import create_app
from voicelane.core.settings import ApiSettings
from voicelane.core.storage import LocalStorage, LocalStorageSettings

pytestmark = pytest.mark.integration

KEYS = "acme:acme-key-0001"
AUTH = {"Authorization": "Bearer acme-key-0001"}


@pytest.fixture
def client(redis_url: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = ApiSettings(
        redis_url=redis_url,
        api_keys=KEYS,
        websocket_auth_timeout_s=0.5,
        websocket_max_per_address=3,
        websocket_max_connections=1000,
    )
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "s", secret="s" * 40))
    with TestClient(create_app(settings, storage=storage, enqueue=lambda *a, **k: None)) as c:
        yield c


def first_event(client: TestClient, send: Any, headers: dict[str, str] | None = None) -> Any:
    with client.websocket_connect(
        "/v1/stream", headers=AUTH if headers is None else headers
    ) as socket:
        send(socket)
        event = socket.receive_json()
        with pytest.raises(WebSocketDisconnect) as closed:
            socket.receive_text()
        return event, closed.value.code


def test_a_socket_that_sends_nothing_is_closed_after_the_timeout(client: TestClient) -> None:
    started = time.monotonic()
    event, code = first_event(client, lambda socket: None, headers={})
    assert time.monotonic() - started < 5
    assert event["type"] == "error" and event["code"] == "DEADLINE_EXCEEDED" and code == 1008


def test_one_address_holds_a_bounded_number_of_sockets(client: TestClient) -> None:
    idle = [client.websocket_connect("/v1/stream", headers=AUTH) for _ in range(3)]
    for socket in idle:
        socket.__enter__()
    try:
        event, code = first_event(client, lambda socket: None)
        assert event["code"] == "RESOURCE_EXHAUSTED" and code == 1013
    finally:
        for s in idle:
            s.__exit__(None, None, None)
    # Once they are gone, the address may connect again.
    event, _ = first_event(client, lambda socket: socket.send_text("{"))
    assert event["code"] == "INVALID_ARGUMENT"


@pytest.mark.parametrize(
    ("send", "field"),
    [
        (lambda s: s.send_bytes(b"\x00\x01binary"), None),
        (lambda s: s.send_text(json.dumps({"text": "Hi.", "client_ts_ms": 1e23})), "client_ts_ms"),
        (lambda s: s.send_text(json.dumps({"text": "Hi.", "client_ts_ms": -5})), "client_ts_ms"),
        (
            lambda s: s.send_text('{"text": "Hi \\ud800."}'),
            None,
        ),  # jiter refuses it as invalid JSON
        (lambda s: s.send_text(json.dumps({"text": "Hi.", "speed": 9})), "speed"),
        (lambda s: s.send_text('{"text": ' + "[" * 3000 + "]" * 3000 + "}"), None),
    ],
    ids=["binary", "huge client_ts_ms", "negative client_ts_ms", "surrogate", "speed", "deep"],
)
def test_bad_frames_and_values_are_invalid_argument(
    client: TestClient, send: Any, field: str | None
) -> None:
    event, code = first_event(client, send)
    assert event["type"] == "error" and event["code"] == "INVALID_ARGUMENT", event
    assert code == 1008
    if field is not None:
        assert event.get("field") == field, event


def test_a_bad_header_key_is_refused_before_the_request_is_read(client: TestClient) -> None:
    event, code = first_event(client, lambda s: None, headers={"Authorization": "Bearer nope-0000"})
    assert event["code"] == "UNAUTHENTICATED" and code == 1008


def test_a_keyless_request_over_the_preauth_cap_is_refused_unparsed(client: TestClient) -> None:
    """Issue 26 item 6: a socket without an Authorization header carries its key in its request,
    which is read before the key is checked: over ``websocket_preauth_max_bytes`` (64 KiB) it is
    refused with close 1009 and never parsed (an unknown key would otherwise be the answer)."""
    request = json.dumps({"text": "a" * (64 * 1024), "api_key": "not-a-key-0000"})
    event, code = first_event(client, lambda s: s.send_text(request), headers={})
    assert code == 1009, (event, code)
    assert event["type"] == "error" and event.get("field") == "api_key", event
    assert "Authorization header" in event["message"], event


def test_a_keyless_request_under_the_preauth_cap_is_read(client: TestClient) -> None:
    request = json.dumps({"text": "a" * 1000, "api_key": "not-a-key-0000"})
    event, code = first_event(client, lambda s: s.send_text(request), headers={})
    assert event["code"] == "UNAUTHENTICATED" and code == 1008, event
