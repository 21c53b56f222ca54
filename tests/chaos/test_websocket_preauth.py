"""Issue 26 item 6: keyless WebSockets that each send a 16 MiB first message, deflated to a few
KiB on the wire, must not grow the API process: the message is cut by the WebSocket protocol
while it arrives (close 1009), never inflated whole nor parsed. Real processes: redis-server and
``voicelane api`` (uvicorn, as deployed); the API's peak memory (``VmHWM``) is read from /proc."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.support.stack import ACME_KEY, Stack
from voicelane.core.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SOCKETS = 24
MESSAGE_BYTES = 16 * 1024 * 1024
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("preauth")
    redis_server = RedisServer(directory / "redis").start()
    lane = Stack(directory / "stack", redis_server.url)
    try:
        lane.api()
        yield lane
    finally:
        lane.stop()
        redis_server.stop()


def peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def flood_once(url: str, request: str, closes: list[int | None]) -> None:
    try:
        with connect(url, compression="deflate", max_size=None, open_timeout=30) as socket:
            socket.send(request)
            try:
                while True:
                    socket.recv(timeout=60)
            except ConnectionClosed as closed:
                closes.append(closed.rcvd.code if closed.rcvd else None)
    except (OSError, ConnectionClosed) as error:  # cut while sending: the server closed
        closes.append(getattr(getattr(error, "rcvd", None), "code", None))


def test_keyless_deflated_16_mib_messages_leave_the_api_flat(stack: Stack) -> None:
    api = next(p for p in stack.procs if p.name == "api")
    url = stack.api_url.replace("http://", "ws://") + "/v1/stream"
    request = json.dumps({"api_key": "not-a-key-0000", "text": "a" * MESSAGE_BYTES})
    before = peak_rss_bytes(api.process.pid)
    closes: list[int | None] = []
    threads = [
        threading.Thread(target=flood_once, args=(url, request, closes)) for _ in range(SOCKETS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    grown_mib = (peak_rss_bytes(api.process.pid) - before) / MIB
    print(f"API peak RSS grew {grown_mib:.1f} MiB under {SOCKETS} sockets; closes {closes}")
    assert api.alive()
    assert len(closes) == SOCKETS and all(code == 1009 for code in closes), closes
    assert grown_mib < 32, grown_mib  # one such message inflated is 16 MiB, parsed far more


def test_a_socket_with_a_header_key_may_send_more_than_the_preauth_cap(stack: Stack) -> None:
    """The cap is for keyless sockets only: with the key in the header, a 100 KiB request is
    read and answered by the route (its text is over the 20,000 characters allowed)."""
    url = stack.api_url.replace("http://", "ws://") + "/v1/stream"
    headers = {"Authorization": f"Bearer {ACME_KEY}"}
    with connect(url, additional_headers=headers, compression="deflate") as socket:
        socket.send(json.dumps({"text": "a" * 100 * 1024}))
        event = json.loads(socket.recv(timeout=30))
        with pytest.raises(ConnectionClosed) as closed:
            socket.recv(timeout=30)
    assert event["error_code"] == "text_too_large", event
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
