"""Errors cross the real-time lane whole: a worker's typed error reaches every front's client
with its code and field, not only its status — and a stream leaves no key outside the lane's
table.

A real espeak worker (the real-time consumer on a real batcher, in-process) serves an
in-process gRPC front and the REST app's WebSocket, on a real redis-server. The worker
publishes one voice more than its engine has, so a request for that voice passes the fronts'
rules and the worker itself refuses it: an ``UnknownVoiceError`` about the field ``voice``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import grpc
import grpc.aio
import pytest
import redis
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from tests.support.stack import wait_for
from voicelane.api.grpc_front import start_front, stop_front
from voicelane.api.rest import create_app
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.lane import keys
from voicelane.core.lane.front import RealtimeClient
from voicelane.core.lane.keys import family, output_key
from voicelane.core.lane.messages import EventKind, OutputEvent, lane_request_id
from voicelane.core.lane.worker import RealtimeWorkerClient
from voicelane.core.redis_server import free_port
from voicelane.core.rules import EngineCapabilities, VoiceInfo
from voicelane.core.settings import ApiSettings, GrpcSettings, RealtimeSettings
from voicelane.core.storage import LocalStorage, LocalStorageSettings
from voicelane.workers.batching import Batcher
from voicelane.workers.engines.espeak import EspeakEngine
from voicelane.workers.realtime import RealtimeConsumer

if TYPE_CHECKING:
    from voicelane.common.wire.speech_pb2_grpc import SpeechAsyncStub

pytestmark = pytest.mark.integration

API_KEYS = "acme:acme-key-0001"
ACME = (("authorization", "Bearer acme-key-0001"),)
AUTH = {"Authorization": "Bearer acme-key-0001"}
GHOST = "ghost"
"""A voice the worker publishes but its engine does not have."""
SETTINGS = RealtimeSettings(
    heartbeat_ttl_s=1.0,
    reclaim_idle_s=1.0,
    worker_ttl_s=2.0,
    claim_timeout_s=5.0,
    unavailable_after_s=3.0,
    lookahead_s=1000,
    encode_ahead_s=1000,
)


@pytest.fixture
def worker(redis_url: str) -> Iterator[RealtimeConsumer]:
    engine = EspeakEngine()
    own = engine.capabilities()
    batcher = Batcher(engine).start()
    lane = RealtimeWorkerClient.from_url(redis_url, "w@errors", SETTINGS)
    lane.publish_capabilities(
        EngineCapabilities(
            own.engine,
            own.sample_rate_hz,
            own.min_speed,
            own.max_speed,
            (*own.voices, VoiceInfo(GHOST)),
            own.seed_voices,
        )
    )
    consumer = RealtimeConsumer(batcher, lane, SETTINGS).start()
    try:
        yield consumer
    finally:
        consumer.close()
        batcher.close()
        lane.redis.close()


def worker_error(redis_url: str, tenant: str, request_id: str) -> OutputEvent:
    """The error event the worker wrote to the stream's output (so it was the worker's)."""
    client = redis.Redis.from_url(redis_url)
    key = output_key(lane_request_id(tenant, request_id))
    try:
        entries = cast(list[tuple[bytes, dict[bytes, bytes]]], client.xrange(key))
        (event,) = [OutputEvent.from_fields(fields) for _, fields in entries]
    finally:
        client.close()
    return event


def assert_unknown_voice_from_the_worker(event: OutputEvent) -> None:
    assert event.kind is EventKind.ERROR and event.error is not None
    assert event.error.code == "unknown_voice" and event.error.field == "voice"


def test_a_worker_side_unknown_voice_reaches_a_websocket_client_with_its_field(
    redis_url: str, worker: RealtimeConsumer, tmp_path: Path
) -> None:
    settings = ApiSettings(redis_url=redis_url, api_keys=API_KEYS, realtime=SETTINGS)
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "s", secret="s" * 40))
    app = create_app(settings, storage=storage, enqueue=lambda *a, **k: None)
    with TestClient(app) as client, client.websocket_connect("/v1/stream", headers=AUTH) as socket:
        socket.send_json({"text": "Hello there.", "voice": GHOST})
        start = socket.receive_json()
        error = socket.receive_json()
        with pytest.raises(WebSocketDisconnect) as closed:
            socket.receive_text()

    assert start["type"] == "start"  # accepted by the front: the refusal is the worker's
    assert error["type"] == "error" and error["code"] == "INVALID_ARGUMENT"
    assert error["field"] == "voice" and GHOST in error["message"]
    assert closed.value.code == 1008  # bad input
    assert_unknown_voice_from_the_worker(worker_error(redis_url, "acme", start["request_id"]))


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def grpc_stub(redis_url: str) -> AsyncIterator[SpeechAsyncStub]:
    settings = GrpcSettings(
        redis_url=redis_url,
        api_keys=API_KEYS,
        engine="espeak",
        grpc_port=free_port(),
        shutdown_grace_s=0.5,
        realtime=SETTINGS,
    )
    lane = RealtimeClient.from_url(redis_url, SETTINGS)
    front = await start_front(settings, lane)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{front.port}")
    try:
        yield pb_grpc.SpeechStub(channel)
    finally:
        await channel.close()
        await stop_front(front, 0)
        await lane.close()


async def synthesize(stub: SpeechAsyncStub, **fields: Any) -> list[pb.AudioChunk]:
    call = stub.Synthesize(pb.SynthesizeRequest(**fields), metadata=ACME, timeout=30)
    return [chunk async for chunk in call]


@pytest.mark.anyio
async def test_a_worker_side_unknown_voice_reaches_a_grpc_client_with_its_status(
    redis_url: str, worker: RealtimeConsumer, grpc_stub: SpeechAsyncStub
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await synthesize(grpc_stub, text="Hello there.", voice=GHOST, request_id="ghostly")

    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert GHOST in (info.value.details() or "")
    assert_unknown_voice_from_the_worker(worker_error(redis_url, "acme", "ghostly"))


@pytest.mark.anyio
async def test_a_stream_leaves_only_keys_of_the_lanes_table(
    redis_url: str, worker: RealtimeConsumer, grpc_stub: SpeechAsyncStub
) -> None:
    """A stream that ends, one that fails and one its client leaves: every key of the lane's
    prefixes they leave behind (or that the worker and the front keep) is in ``KEYS``."""
    chunks = await synthesize(grpc_stub, text="Hello there. Goodbye now.")
    assert chunks[-1].final
    with pytest.raises(grpc.aio.AioRpcError):
        await synthesize(grpc_stub, text="Hello there.", voice=GHOST)
    call = grpc_stub.Synthesize(
        pb.SynthesizeRequest(text="A long one. " * 40), metadata=ACME, timeout=30
    )
    await call.read()
    call.cancel()
    client = redis.Redis.from_url(redis_url)
    try:
        await asyncio.to_thread(
            wait_for,
            lambda: worker.free_slots == SETTINGS.slots_per_worker,
            10,
            "the worker to drop the cancelled stream",
        )
        lane_keys = [
            key.decode()
            for key in cast(list[bytes], client.keys("vl:*"))
            if key.startswith((b"vl:rt:", b"vl:engine:"))
        ]
    finally:
        client.close()
    undescribed = [key for key in lane_keys if family(key) is None]
    assert not undescribed
    left = {family(key) for key in lane_keys}
    # What stays after streams were served, so the check above saw these (heartbeats and
    # inputs go with their sessions, the tenant's open-streams set with its last stream; a
    # reader's wake stream exists only if a stream opened while a read was pending).
    assert left >= {
        keys.REQUESTS_KEY,
        keys.OUTPUT_KEY,
        keys.CANCEL_KEY,
        keys.OWNER_KEY,
        keys.TENANT_KEY,
        keys.WORKERS_KEY,
        keys.CAPABILITIES_KEY,
    }
