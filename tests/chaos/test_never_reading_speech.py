"""A client that never reads cannot fill Redis (issue 26, item 1).

Before: ``POST /v1/audio/speech`` (a long text, ``pcm``, 48 kHz, file-style: unpaced) whose
client never reads had the worker write the whole text's audio into the stream's output in
Redis whether anyone read it or not (8 of them took Redis from 131 to 1023 MiB in ~20 s).
Now the front records how far its client has taken the output (``vl:rt:read:{id}``) and the
worker stops rendering ahead when more than ``max_unread_output_s`` of audio is unread: what
the stream holds in Redis stays within what the client took (here: what the sockets' buffers
took, a few MiB) plus the window, and the worker gives up at the stream's deadline.

A client that reads still gets the whole audio, the same whether it reads as fast as it
can or slowly (the worker then waits for it again and again); the time a fast
reader takes is printed (compare with ``main``), never asserted.

Real processes: redis-server, the API and a GPU worker (espeak).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import redis

from tests.support.stack import ACME_KEY, Stack, wait_for
from voicelane.core.lane.keys import output_key, read_key
from voicelane.core.lane.messages import EventKind, OutputEvent, lane_request_id
from voicelane.core.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DEADLINE_S = 20
WINDOW_S = 5.0
RATE_HZ = 48_000
BYTES_PER_S = RATE_HZ * 2  # pcm: s16le mono
SENTENCE = "The committee met on Tuesday to review the budget for the coming year. "
LONG_TEXT = (SENTENCE * (20_000 // len(SENTENCE)))[:20_000]
"""20k characters: about 20 minutes of speech (over 100 MiB of 48 kHz pcm)."""
READ_TEXT = SENTENCE * 60
"""About three minutes of speech: read whole, fast and slowly."""
SOCKET_SLACK_BYTES = 4 * 1024 * 1024 + 2 * 1024 * 1024
"""What the sockets between the front and a client that never reads take before TCP stops
the front (the server's send buffer grows up to ``tcp_wmem``'s 4 MiB; the client's receive
buffer is set small), with room to spare."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("never-reading")
    redis_server = RedisServer(directory / "redis").start()
    lane = Stack(
        directory / "stack",
        redis_server.url,
        env_overrides={
            "VOICELANE_REALTIME__DEFAULT_DEADLINE_S": str(DEADLINE_S),
            "VOICELANE_REALTIME__MAX_UNREAD_OUTPUT_S": str(WINDOW_S),
        },
    )
    try:
        lane.gpu_worker()
        lane.api()
        lane.wait_realtime_workers()
        yield lane
    except BaseException:
        print(lane.logs())
        raise
    finally:
        lane.stop()
        redis_server.stop()


def open_unread_speech(lane: Stack, text: str) -> tuple[socket.socket, str]:
    """``POST /v1/audio/speech`` over a raw socket whose receive buffer is small, reading the
    response's head only (for its request id); the body is never read."""
    body = json.dumps(
        {"input": text, "voice": "alloy", "response_format": "pcm", "sample_rate_hz": RATE_HZ}
    ).encode()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", lane.api_port))
    head = (
        f"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {ACME_KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + body)
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(1)  # one byte at a time: nothing of the body is taken
    lines = received.decode().split("\r\n")
    assert lines[0].startswith("HTTP/1.1 200"), received
    request_id = next(
        line.split(":", 1)[1].strip() for line in lines if line.lower().startswith("x-request-id")
    )
    return sock, request_id


def output_state(client: redis.Redis, lane_id: str) -> tuple[int, int, EventKind | None]:
    """The stream's output in Redis: entries, audio bytes, and how it ended (None: not yet)."""
    entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(output_key(lane_id))  # type: ignore[assignment]
    audio = 0
    ended = None
    for _, fields in entries:
        event = OutputEvent.from_fields(fields)
        audio += sum(len(piece) for piece in event.data)
        if event.kind in (EventKind.END, EventKind.ERROR):
            ended = event.kind
    return len(entries), audio, ended


def test_a_client_that_never_reads_holds_its_stream_to_a_window_in_redis(stack: Stack) -> None:
    client = redis.Redis.from_url(stack.redis_url)
    sockets: list[socket.socket] = []
    try:
        lane_ids = []
        for _ in range(2):  # one tenant, two streams: the tenant's total is their sum
            sock, request_id = open_unread_speech(stack, LONG_TEXT)
            sockets.append(sock)
            lane_ids.append(lane_request_id("acme", request_id))
        peak_bytes = dict.fromkeys(lane_ids, 0)
        bound = SOCKET_SLACK_BYTES + 2 * WINDOW_S * BYTES_PER_S
        started = time.monotonic()

        def over_or_past_bound() -> bool:
            over = True
            for lane_id in lane_ids:
                _, audio, ended = output_state(client, lane_id)
                peak_bytes[lane_id] = max(peak_bytes[lane_id], audio)
                over = over and ended is not None
            return over or max(peak_bytes.values()) > bound

        # Before the fix the worker writes the whole text's audio, read or not: past the bound
        # within seconds. After, it waits for a reader that never comes and gives up at the
        # deadline (an error entry): the streams end.
        wait_for(over_or_past_bound, DEADLINE_S + 60, "both streams to end or fail")
        whole_text_bytes = len(LONG_TEXT) / 15 * BYTES_PER_S  # ~15 characters a second
        for lane_id in lane_ids:
            entries, audio, ended = output_state(client, lane_id)
            print(
                f"{lane_id}: {entries} entries, {audio / 2**20:.1f} MiB of audio in Redis "
                f"after {time.monotonic() - started:.1f} s (peak "
                f"{peak_bytes[lane_id] / 2**20:.1f} MiB; the whole text would be "
                f"~{whole_text_bytes / 2**20:.0f} MiB); ended with {ended}; read mark "
                f"{client.get(read_key(lane_id))!r}; used_memory "
                f"{client.info('memory')['used_memory'] / 2**20:.0f} MiB"
            )
        peak = max(peak_bytes.values())
        assert peak <= bound, (
            f"{peak / 2**20:.1f} MiB of output in Redis for a client that read none of it "
            f"(bound {bound / 2**20:.1f} MiB)"
        )
        for lane_id in lane_ids:
            assert output_state(client, lane_id)[2] is EventKind.ERROR  # the deadline
        print(f"tenant total: {sum(peak_bytes.values()) / 2**20:.1f} MiB at most")
    finally:
        for sock in sockets:
            sock.close()
        client.close()


async def read_speech(lane: Stack, text: str, *, slow: bool) -> tuple[bytes, float]:
    """The whole response of ``text`` as pcm at 48 kHz, read as it comes or slowly (a pause
    after every 64 KiB: about 3 MiB a second), and the seconds it took."""
    payload = {"input": text, "voice": "alloy", "response_format": "pcm", "sample_rate_hz": RATE_HZ}
    started = time.monotonic()
    pieces: list[bytes] = []
    async with (
        httpx.AsyncClient(
            base_url=lane.api_url, headers={"Authorization": f"Bearer {ACME_KEY}"}, timeout=60
        ) as http,
        http.stream("POST", "/v1/audio/speech", json=payload) as response,
    ):
        assert response.status_code == 200
        async for piece in response.aiter_bytes(64 * 1024):
            pieces.append(piece)
            if slow:
                await asyncio.sleep(0.02)  # a slow reader, not a wait for a condition
    return b"".join(pieces), time.monotonic() - started


def test_a_reading_client_gets_the_whole_audio_unchanged(stack: Stack, tmp_path: Path) -> None:
    fast, fast_s = asyncio.run(read_speech(stack, READ_TEXT, slow=False))
    slow, slow_s = asyncio.run(read_speech(stack, READ_TEXT, slow=True))
    audio_s = len(fast) / BYTES_PER_S
    print(
        f"{audio_s:.1f} s of 48 kHz pcm ({len(fast) / 2**20:.1f} MiB): read as it came in "
        f"{fast_s:.2f} s ({audio_s / fast_s:.0f}x real time), slowly in {slow_s:.2f} s"
    )
    assert audio_s > 3 * WINDOW_S  # long enough that the worker waited for the slow reader
    # The same audio, waits or not — to a few samples per sentence: two reads of one text
    # differ that much on main too (where the engine's chunks are cut moves the resampler's
    # sentence edges), so no byte-for-byte comparison.
    sentences = READ_TEXT.count(".")
    assert abs(len(slow) - len(fast)) <= sentences * BYTES_PER_S // 1000  # 1 ms a sentence
    rms = [
        float(np.sqrt(np.mean(np.frombuffer(a, "<i2").astype(np.float64) ** 2)))
        for a in (fast, slow)
    ]
    assert rms[0] > 100  # speech, not silence
    assert rms[1] == pytest.approx(rms[0], rel=0.01)
