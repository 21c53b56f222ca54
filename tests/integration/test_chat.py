"""The LLM lane end to end: real redis-server, GPU worker (espeak), ``voicelane grpc`` and
``voicelane api`` processes, the stand-in Ollama server (the real ``ollama`` client in the
fronts talks to it over HTTP), and clients over gRPC, WebSocket and the official ``openai``
package."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
import time
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import openai
import pytest
import redis
import websockets

from tests.support.stack import ACME_KEY, Stack, wait_for
from voicelane.api.ollama_standin import OllamaStandin, StandinConfig, default_reply
from voicelane.common.audio import OpusStreamDecoder
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.lane.keys import output_key
from voicelane.core.lane.messages import lane_request_id
from voicelane.core.redis_server import RedisServer, free_port
from voicelane.core.speakable import clean_for_speech

pytestmark = pytest.mark.integration

METADATA = (("authorization", f"Bearer {ACME_KEY}"),)
MODEL = "qwen2.5:7b"
QUESTION = "What should I pack for a weekend in the mountains?"
READ_TIMEOUT_S = 1.5


@pytest.fixture(scope="module")
def standin() -> Iterator[OllamaStandin]:
    with OllamaStandin(StandinConfig(tokens_per_s=60)) as server:
        yield server


@pytest.fixture(scope="module")
def lane(tmp_path_factory: pytest.TempPathFactory, standin: OllamaStandin) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("chat")
    redis_server = RedisServer(directory / "redis").start()
    stack = Stack(
        directory / "stack",
        redis_server.url,
        env_overrides={
            "OLLAMA_HOST": standin.url,
            "VOICELANE_LLM__MODEL": MODEL,
            "VOICELANE_LLM__READ_TIMEOUT_S": str(READ_TIMEOUT_S),
            "VOICELANE_LLM__PRELOAD": "1",
        },
    )
    try:
        stack.gpu_worker()
        stack.wait_realtime_workers()
        stack.grpc()
        stack.api()
        yield stack
    finally:
        stack.stop()
        redis_server.stop()


def ask(text: str = QUESTION) -> list[pb.ChatMessage]:
    return [pb.ChatMessage(role="user", content=text)]


def squash(text: str) -> str:
    """Whitespace differs between the cleaned reply and the sentences the worker speaks."""
    return re.sub(r"\s+", "", text)


def decode_opus(chunks: list[pb.AudioChunk], rate_hz: int = 24000) -> np.ndarray:
    decoder = OpusStreamDecoder(rate_hz)
    parts = [decoder.decode(packet) for chunk in chunks for packet in chunk.opus_packets]
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


def chat_call(lane: Stack, request: pb.ChatRequest) -> tuple[list[pb.ChatResponse], Any]:
    with grpc.insecure_channel(lane.grpc_target) as channel:
        call = pb_grpc.SpeechStub(channel).Chat(request, metadata=METADATA, timeout=60)
        responses: list[pb.ChatResponse] = []
        try:
            for response in call:
                responses.append(response)
        except grpc.RpcError as error:
            return responses, error
    return responses, None


def test_the_preload_reached_ollama_before_the_fronts_were_ready(
    lane: Stack, standin: OllamaStandin
) -> None:
    preloads = [
        r.body for r in standin.requests
        if r.path == "/api/chat" and r.body is not None and not r.body.get("messages")
    ]  # fmt: skip
    assert len(preloads) >= 2  # the API and the gRPC front
    assert all(body["options"]["num_ctx"] == 2048 for body in preloads)


def test_a_grpc_chat_speaks_the_reply_sentence_by_sentence(
    lane: Stack, standin: OllamaStandin
) -> None:
    responses, error = chat_call(lane, pb.ChatRequest(messages=ask(), client_ts_ms=123))
    assert error is None
    kinds = [r.WhichOneof("event") for r in responses]
    assert kinds[0] == "text_delta" and kinds[-1] == "stats"
    text = "".join(r.text_delta for r in responses if r.WhichOneof("event") == "text_delta")
    body = next(r.body for r in reversed(standin.requests) if r.body and r.body.get("messages"))
    assert text == default_reply(body)
    assert body["options"]["num_ctx"] == 2048 and body["keep_alive"] == "30m"
    assert body["model"] == MODEL
    audio = [r.audio for r in responses if r.WhichOneof("event") == "audio"]
    assert audio[-1].final and all(a.client_ts_ms == 123 for a in audio)
    pcm = decode_opus(audio)
    assert len(pcm) / 24000 > 1.0 and float(np.abs(pcm).max()) > 0.05
    captions = [c for a in audio for c in a.captions]
    assert len(captions) >= 2  # sentence by sentence
    stats = responses[-1].stats
    spoken = clean_for_speech(text)
    assert "**" not in spoken
    assert squash("".join(c.text for c in captions)) == squash(spoken)
    assert stats.spoken_text == spoken
    assert stats.reply_tokens > 0 and stats.prompt_tokens > 0
    assert 0 < stats.time_to_first_token_ms < stats.time_to_first_audio_ms
    assert stats.model == MODEL and stats.done_reason == "stop"
    # Audio started while the LLM was still writing: the first chunk came before the last
    # text delta.
    first_audio = kinds.index("audio")
    last_text = max(i for i, kind in enumerate(kinds) if kind == "text_delta")
    assert first_audio < last_text


def test_barge_in_stops_the_llm_and_the_speech(lane: Stack, standin: OllamaStandin) -> None:
    before = len(standin.generations)
    with grpc.insecure_channel(lane.grpc_target) as channel:
        call = pb_grpc.SpeechStub(channel).Chat(
            pb.ChatRequest(messages=ask("Tell me a long story.")), metadata=METADATA, timeout=60
        )
        first_audio: pb.AudioChunk | None = None
        for response in call:
            if response.WhichOneof("event") == "audio" and response.audio.opus_packets:
                first_audio = response.audio
                break
        assert first_audio is not None
        cancelled_at = time.monotonic()
        call.cancel()
    wait_for(lambda: len(standin.generations) > before, 10, "the generation")
    generation = standin.generations[before]
    wait_for(lambda: generation.disconnected_at is not None, 5, "the stand-in to see it")
    assert generation.disconnected_at is not None
    assert generation.disconnected_at - cancelled_at < 1.0
    assert generation.tokens_sent < generation.tokens_planned  # it stopped generating
    # No more audio is made: the request's output stream stops growing within a batch step.
    client = redis.Redis.from_url(lane.redis_url)
    key = output_key(lane_request_id("acme", first_audio.request_id))
    try:
        time.sleep(0.5)
        settled = client.xlen(key)
        time.sleep(1.0)
        assert client.xlen(key) == settled
    finally:
        client.close()


@pytest.mark.parametrize(
    ("model", "code", "audio_first"),
    [
        ("no-such-model", grpc.StatusCode.NOT_FOUND, False),
        ("busy", grpc.StatusCode.UNAVAILABLE, False),
        ("error-mid", grpc.StatusCode.UNAVAILABLE, True),
        ("disconnect", grpc.StatusCode.UNAVAILABLE, True),
        ("stall", grpc.StatusCode.DEADLINE_EXCEEDED, True),
    ],
)
def test_llm_failures_map_to_statuses(
    lane: Stack, model: str, code: grpc.StatusCode, audio_first: bool
) -> None:
    responses, error = chat_call(lane, pb.ChatRequest(messages=ask(), model=model))
    assert error is not None and error.code() == code, (error, responses)
    texts = [r for r in responses if r.WhichOneof("event") == "text_delta"]
    audio = [r.audio for r in responses if r.WhichOneof("event") == "audio"]
    if audio_first:  # the reply so far was spoken, then the status
        assert texts and any(a.opus_packets for a in audio)
        assert len(decode_opus(audio)) > 0
    else:
        assert not texts and not audio
    assert not any(r.WhichOneof("event") == "stats" for r in responses)


def test_an_unreachable_ollama_is_unavailable(lane: Stack) -> None:
    front = Stack(lane.directory / "second", lane.redis_url, env_overrides={
        "OLLAMA_HOST": f"http://127.0.0.1:{free_port()}",
    })  # fmt: skip
    try:
        front.grpc()
        responses, error = chat_call(front, pb.ChatRequest(messages=ask()))
    finally:
        front.stop()
    assert error is not None and error.code() == grpc.StatusCode.UNAVAILABLE
    assert "unreachable" in (error.details() or "")
    assert responses == []


def test_bad_messages_are_invalid_argument(lane: Stack) -> None:
    for request in (
        pb.ChatRequest(),
        pb.ChatRequest(messages=[pb.ChatMessage(role="wizard", content="hi")]),
        pb.ChatRequest(messages=[pb.ChatMessage(role="user", content="")]),
    ):
        _responses, error = chat_call(lane, request)
        assert error is not None and error.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_websocket_chat(lane: Stack) -> None:
    async def run() -> list[Any]:
        url = lane.api_url.replace("http", "ws") + "/v1/stream"
        headers = {"Authorization": f"Bearer {ACME_KEY}"}
        messages: list[Any] = []
        async with websockets.connect(url, additional_headers=headers) as socket:
            await socket.send(json.dumps({"messages": [{"role": "user", "content": QUESTION}]}))
            async for message in socket:
                messages.append(json.loads(message) if isinstance(message, str) else message)
        return messages

    messages = asyncio.run(run())
    events = [m["type"] for m in messages if isinstance(m, dict)]
    assert events[0] == "start" and events[-2:] == ["stats", "end"]
    assert "text" in events and "audio" in events
    assert events.index("text") < events.index("audio")
    text = "".join(m["delta"] for m in messages if isinstance(m, dict) and m["type"] == "text")
    stats = next(m for m in messages if isinstance(m, dict) and m["type"] == "stats")
    assert stats["spoken_text"] == clean_for_speech(text)
    assert stats["reply_tokens"] > 0 and stats["time_to_first_audio_ms"] > 0
    packets = [m for m in messages if isinstance(m, bytes)]
    decoder = OpusStreamDecoder(24000)
    pcm = np.concatenate([decoder.decode(p) for p in packets])
    assert len(pcm) / 24000 > 1.0


def openai_client(lane: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{lane.api_url}/v1", api_key=ACME_KEY, max_retries=0)


def test_the_openai_client_gets_text_and_audio_whole(lane: Stack) -> None:
    completion = openai_client(lane).chat.completions.create(
        model="gpt-4o-audio-preview",
        modalities=["text", "audio"],
        audio={"voice": "alloy", "format": "wav"},
        messages=[{"role": "user", "content": QUESTION}],
    )
    message = completion.choices[0].message
    assert message.audio is not None and message.audio.transcript
    with wave.open(io.BytesIO(base64.b64decode(message.audio.data))) as wav:
        assert wav.getframerate() == 24000 and wav.getnframes() / 24000 > 1.0
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    assert completion.choices[0].finish_reason == "stop"
    assert "**" not in message.audio.transcript


def test_the_openai_client_gets_text_and_audio_streamed(lane: Stack) -> None:
    stream = openai_client(lane).chat.completions.create(
        model="gpt-4o-audio-preview",
        modalities=["text", "audio"],
        audio={"voice": "alloy", "format": "pcm16"},
        messages=[{"role": "user", "content": QUESTION}],
        stream=True,
    )
    pcm = bytearray()
    transcript: list[str] = []
    finish: str | None = None
    for chunk in stream:
        choice = chunk.choices[0]
        audio = choice.delta.audio
        if audio is not None:
            pcm += base64.b64decode(audio.data or "")
            transcript.append(audio.transcript or "")
        finish = choice.finish_reason or finish
    samples = np.frombuffer(bytes(pcm), dtype="<i2")
    assert len(samples) / 24000 > 1.0 and int(np.abs(samples).max()) > 1000
    assert finish == "stop"
    assert squash("".join(transcript))  # the spoken sentences, as their audio started


def test_the_openai_client_text_only(lane: Stack) -> None:
    completion = openai_client(lane).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}]
    )
    assert completion.choices[0].message.content
    assert completion.choices[0].message.audio is None


def test_the_openai_route_maps_errors(lane: Stack) -> None:
    client = openai_client(lane)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="no-such-model",
            modalities=["text", "audio"],
            audio={"voice": "alloy", "format": "wav"},
            messages=[{"role": "user", "content": QUESTION}],
        )
    with pytest.raises(openai.BadRequestError):  # OpenAI's 400 for bad input (issue 24; was 422)
        client.chat.completions.create(
            model=MODEL,
            modalities=["text", "audio"],
            audio={"voice": "alloy", "format": "mp3"},
            messages=[{"role": "user", "content": QUESTION}],
            stream=True,
        )


def test_the_cli_chat_writes_the_spoken_reply(lane: Stack, tmp_path: Path) -> None:
    import subprocess
    import sys

    output = tmp_path / "reply.wav"
    done = subprocess.run(
        [sys.executable, "-m", "voicelane.api.cli", "chat", QUESTION, "-o", str(output),
         "--server", lane.grpc_target, "--key", ACME_KEY],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "s of speech" in done.stdout and output.stat().st_size > 10_000
