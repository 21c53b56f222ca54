"""Word timings and SSML marks reach every real-time client: gRPC, the WebSocket, the Python SDK
and ``voicelane say --server --words``.

A real espeak worker (the real-time consumer on a real batcher, in-process) serves an
in-process gRPC front and the REST app's WebSocket on a real redis-server. SSML documents are
read by the real reader, in the fronts' check at submission and in the worker.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc.aio
import pytest
from starlette.testclient import TestClient

from voicelane.api.cli import main
from voicelane.api.grpc_front import Front, start_front, stop_front
from voicelane.api.rest import create_app
from voicelane.client import SpeechClient
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.lane.front import RealtimeClient
from voicelane.core.lane.worker import RealtimeWorkerClient
from voicelane.core.redis_server import free_port
from voicelane.core.settings import ApiSettings, GrpcSettings, RealtimeSettings
from voicelane.core.storage import LocalStorage, LocalStorageSettings
from voicelane.workers.batching import Batcher
from voicelane.workers.engines.espeak import EspeakEngine
from voicelane.workers.realtime import RealtimeConsumer

if TYPE_CHECKING:
    from voicelane.common.wire.speech_pb2_grpc import SpeechAsyncStub

pytestmark = pytest.mark.integration

API_KEYS = "acme:acme-key-0001"
KEY = "acme-key-0001"
ACME = (("authorization", f"Bearer {KEY}"),)
SETTINGS = RealtimeSettings(
    heartbeat_ttl_s=1.0,
    reclaim_idle_s=1.0,
    worker_ttl_s=2.0,
    claim_timeout_s=5.0,
    unavailable_after_s=3.0,
    lookahead_s=1000,
    encode_ahead_s=1000,
)
TEXT = "I paid $3.5M on Monday. Then we left for home."
WORDS = ["I", "paid", "$3.5M", "on", "Monday", "Then", "we", "left", "for", "home"]
DOCUMENT = '<speak>Hello <mark name="greeting"/>there. Goodbye now.<mark name="done"/></speak>'
WORD_KEYS = ["text", "start_ms", "end_ms", "char_start", "char_end"]


@pytest.fixture
def worker(redis_url: str) -> Iterator[RealtimeConsumer]:
    batcher = Batcher(EspeakEngine()).start()
    lane = RealtimeWorkerClient.from_url(redis_url, "w@words", SETTINGS)
    lane.publish_capabilities(EspeakEngine().capabilities())
    consumer = RealtimeConsumer(batcher, lane, SETTINGS).start()
    try:
        yield consumer
    finally:
        consumer.close()
        batcher.close()
        lane.redis.close()


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def front(redis_url: str) -> AsyncIterator[Front]:
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
    try:
        yield front
    finally:
        await stop_front(front, 0)
        await lane.close()


async def synthesize(stub: SpeechAsyncStub, text: str) -> list[pb.AudioChunk]:
    call = stub.Synthesize(pb.SynthesizeRequest(text=text), metadata=ACME, timeout=30)
    return [chunk async for chunk in call]


@pytest.mark.anyio
async def test_grpc_words_ride_with_the_captions(worker: RealtimeConsumer, front: Front) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{front.port}") as channel:
        chunks = await synthesize(pb_grpc.SpeechStub(channel), TEXT)
    words = [w for c in chunks for w in c.words]
    assert [w.text for w in words] == WORDS  # "$3.5M": five words spoken, one span
    assert all(TEXT[w.char_start : w.char_end] == w.text for w in words)
    starts = [w.start_ms for w in words]
    assert starts == sorted(set(starts)) and all(w.end_ms > w.start_ms for w in words)
    captioned = [c for c in chunks if c.captions]
    assert len(captioned) == 2
    for chunk in captioned:  # a sentence's words ride on the chunk with its caption
        (caption,) = chunk.captions
        sentence = TEXT[caption.start : caption.end].split()
        assert [w.text for w in chunk.words] == [word.rstrip(".") for word in sentence]
        assert chunk.words[0].start_ms >= caption.pts_ms
    assert not any(c.marks for c in chunks)  # plain text has none


@pytest.mark.anyio
async def test_grpc_marks_arrive_with_their_times(worker: RealtimeConsumer, front: Front) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{front.port}") as channel:
        chunks = await synthesize(pb_grpc.SpeechStub(channel), DOCUMENT)
    words = [w for c in chunks for w in c.words]
    assert [w.text for w in words] == ["Hello", "there", "Goodbye", "now"]
    assert all(DOCUMENT[w.char_start : w.char_end] == w.text for w in words)
    marks = [(m.name, m.time_ms) for c in chunks for m in c.marks]
    there = words[1]
    packets = sum(len(c.opus_packets) for c in chunks)
    assert marks[0] == ("greeting", there.start_ms)
    assert [m.name for m in chunks[-1].marks] == ["done"]  # after the last word: the final chunk
    assert words[-1].end_ms <= marks[1][1] <= packets * 20


@pytest.mark.anyio
async def test_the_sdk_and_the_cli_hand_the_words_on(
    worker: RealtimeConsumer, front: Front, tmp_path: Path
) -> None:
    target = f"127.0.0.1:{front.port}"
    async with SpeechClient(target, KEY) as client:
        result = await client.synthesize_pcm(TEXT)
        marked_result = await client.synthesize_pcm(DOCUMENT)
    assert [w.text for w in result.words] == WORDS
    assert result.words_json()[2] == {
        "text": "$3.5M",
        "start_ms": result.words[2].start_ms,
        "end_ms": result.words[2].end_ms,
        "char_start": 7,
        "char_end": 12,
    }
    assert result.words[-1].end_ms <= result.duration_s * 1000
    assert [m["name"] for m in marked_result.marks_json()] == ["greeting", "done"]

    out, words, marks = tmp_path / "say.wav", tmp_path / "words.json", tmp_path / "marks.json"
    args = ["say", DOCUMENT, "-o", str(out), "--server", target, "--key", KEY]
    code = await asyncio.to_thread(main, [*args, "--words", str(words), "--marks", str(marks)])
    assert code == 0 and out.stat().st_size > 0
    written = json.loads(words.read_text(encoding="utf-8"))
    assert [list(w) for w in written] == [WORD_KEYS] * 4
    assert [w["text"] for w in written] == ["Hello", "there", "Goodbye", "now"]
    assert all(DOCUMENT[w["char_start"] : w["char_end"]] == w["text"] for w in written)
    for got, streamed in zip(written, marked_result.words_json(), strict=True):
        assert got["start_ms"] == pytest.approx(streamed["start_ms"], abs=5)
    # Two streams of one text: espeak's audio may differ by a sample run between them (in one
    # process it is not bit-identical), so times agree within the words' tolerance; "done",
    # after the last word, is at the end of the audio.
    written_marks = json.loads(marks.read_text(encoding="utf-8"))
    streamed_marks = marked_result.marks_json()
    assert [m["name"] for m in written_marks] == [m["name"] for m in streamed_marks]
    for got, streamed in zip(written_marks, streamed_marks, strict=True):
        assert got["time_ms"] == pytest.approx(streamed["time_ms"], abs=5)


def websocket_messages(client: TestClient, text: str) -> list[dict[str, Any]]:
    """Every JSON message of one stream (the binary packets skipped)."""
    messages: list[dict[str, Any]] = []
    auth = {"Authorization": f"Bearer {KEY}"}
    with client.websocket_connect("/v1/stream", headers=auth) as ws:
        ws.send_json({"text": text, "pace": False})
        while True:
            message = ws.receive_json()
            messages.append(message)
            for _ in range(message.get("packets", 0)):
                ws.receive_bytes()
            if message["type"] in ("end", "error"):
                return messages


def test_websocket_words_and_marks_are_json(
    redis_url: str, worker: RealtimeConsumer, tmp_path: Path
) -> None:
    settings = ApiSettings(redis_url=redis_url, api_keys=API_KEYS, realtime=SETTINGS)
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "s", secret="s" * 40))
    app = create_app(settings, storage=storage, enqueue=lambda *a, **k: None)
    with TestClient(app) as client:
        plain = websocket_messages(client, TEXT)
        document = websocket_messages(client, DOCUMENT)

    messages = plain
    audio = [m for m in messages if m["type"] == "audio"]
    words = [w for m in audio for w in m["words"]]
    assert [w["text"] for w in words] == WORDS
    assert all(list(w) == WORD_KEYS for w in words)
    assert all(TEXT[w["char_start"] : w["char_end"]] == w["text"] for w in words)
    for message in audio:  # with the captions, on their clock
        if message["words"]:
            (caption,) = message["captions"]
            assert message["words"][0]["start_ms"] >= caption["pts_ms"]
    end = messages[-1]
    assert end["type"] == "end" and end["marks"] == [] and end["words"] == []

    messages = document
    marks = [m for message in messages for m in message.get("marks", [])]
    assert [m["name"] for m in marks] == ["greeting", "done"]
    assert [m["name"] for m in messages[-1]["marks"]] == ["done"]  # on the end message
    there = next(w for m in messages for w in m.get("words", []) if w["text"] == "there")
    assert marks[0]["time_ms"] == there["start_ms"]
