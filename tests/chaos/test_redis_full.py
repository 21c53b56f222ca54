"""Redis at its ``maxmemory`` (``noeviction``): every front answers 503 ``store_full`` with a
retry hint (REST, the OpenAI routes, the WebSocket stream, gRPC), never 500 / INTERNAL / 1011,
and ``/readyz`` says not ready (``store_full``) until Redis takes writes again. Real processes:
redis-server with a small ``maxmemory`` that the test fills, a GPU worker (espeak), the API and
the gRPC front.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
import redis
import websockets

from tests.support.redis import fill_to_maxmemory
from tests.support.stack import ACME_KEY, Stack, wait_for
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

AUTH = {"Authorization": f"Bearer {ACME_KEY}"}
METADATA = (("authorization", f"Bearer {ACME_KEY}"),)
MAXMEMORY_BYTES = 24 * 1024 * 1024
FILLER = "test:filler:"


@pytest.fixture
def full(tmp_path: Path) -> Iterator[tuple[Stack, redis.Redis]]:
    redis_server = RedisServer(tmp_path / "redis", maxmemory_bytes=MAXMEMORY_BYTES).start()
    stack = Stack(tmp_path / "stack", redis_server.url)
    client = redis.Redis.from_url(redis_server.url)
    try:
        stack.gpu_worker()
        stack.api()
        stack.grpc()
        stack.wait_realtime_workers()
        fill_to_maxmemory(client, FILLER)
        yield stack, client
    except BaseException:
        print(stack.logs())
        raise
    finally:
        client.close()
        stack.stop()
        redis_server.stop()


def assert_store_full(response: httpx.Response) -> None:
    assert response.status_code == 503, (response.status_code, response.text)
    assert response.json()["error"]["code"] == "store_full", response.text
    assert int(response.headers["Retry-After"]) > 0


async def websocket_first_event(url: str) -> tuple[dict[str, object], int | None]:
    async with websockets.connect(url, additional_headers=AUTH) as socket:
        await socket.send(json.dumps({"text": "The store is full."}))
        event: dict[str, object] = {}
        try:
            async for frame in socket:
                if isinstance(frame, str):
                    event = json.loads(frame)
                    if event.get("type") == "error":
                        break
        except websockets.ConnectionClosed:
            pass
        await socket.wait_closed()
        return event, socket.close_code


async def grpc_status(target: str) -> grpc.aio.AioRpcError | None:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.SpeechStub(channel)
        try:
            async for _ in stub.Synthesize(
                pb.SynthesizeRequest(text="The store is full."), metadata=METADATA, timeout=30
            ):
                pass
        except grpc.aio.AioRpcError as error:
            return error
    return None


def test_every_front_answers_store_full_while_redis_is_at_maxmemory(
    full: tuple[Stack, redis.Redis],
) -> None:
    lane, client = full
    with httpx.Client(base_url=lane.api_url, headers=AUTH, timeout=30) as http:
        ready = http.get("/readyz")
        assert ready.status_code == 503, ready.text
        assert "store_full" in ready.json()["problems"], ready.text

        assert_store_full(http.post("/v1/jobs", json={"text": "The store is full."}))
        assert_store_full(
            http.post(
                "/v1/audio/speech", json={"input": "The store is full.", "response_format": "wav"}
            )
        )

        ws_url = lane.api_url.replace("http://", "ws://") + "/v1/stream"
        event, close_code = asyncio.run(websocket_first_event(ws_url))
        assert event.get("code") == "RESOURCE_EXHAUSTED", event
        assert event.get("error_code") == "store_full", event
        assert float(str(event.get("retry_after_s"))) > 0
        assert close_code == 1013

        error = asyncio.run(grpc_status(lane.grpc_target))
        assert error is not None and error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
        assert "memory" in (error.details() or ""), error.details()

        # Room again: ready, and work is taken.
        for key in client.scan_iter(f"{FILLER}*", count=1000):
            client.delete(key)
        wait_for(lambda: http.get("/readyz").status_code == 200, 30, "readiness after room")
        assert http.post("/v1/jobs", json={"text": "Room again."}).status_code == 202
