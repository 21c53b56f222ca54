"""A chat through the real stack with a real LLM: redis-server, a GPU worker (espeak),
``voicelane grpc`` and ``voicelane api`` on the ``openai`` backend, llama.cpp's server with
SmolLM2-135M (tests/support/llm_server.py). The model's own words are what is spoken."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator

import grpc
import numpy as np
import openai
import pytest

from tests.integration.test_chat import METADATA, QUESTION, decode_opus
from tests.support.llm_server import MODEL, LocalLlm
from tests.support.stack import ACME_KEY, Stack
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.redis_server import RedisServer
from voicelane.core.speakable import clean_for_speech

pytestmark = pytest.mark.integration

MAX_REPLY_TOKENS = 40


@pytest.fixture(scope="module")
def lane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, LocalLlm]]:
    directory = tmp_path_factory.mktemp("chat-llm")
    redis_server = RedisServer(directory / "redis").start()
    llm = LocalLlm(directory / "llm.log", parallel=2).start()
    stack = Stack(
        directory / "stack",
        redis_server.url,
        env_overrides={
            **llm.env_overrides(),
            "VOICELANE_LLM__MAX_REPLY_TOKENS": str(MAX_REPLY_TOKENS),
            "VOICELANE_LLM__PRELOAD": "1",
        },
    )
    try:
        stack.gpu_worker()
        stack.wait_realtime_workers()
        stack.grpc()
        stack.api()
        yield stack, llm
    finally:
        stack.stop()
        llm.stop()
        redis_server.stop()


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def test_a_grpc_chat_speaks_the_models_reply(lane: tuple[Stack, LocalLlm]) -> None:
    stack, _ = lane
    request = pb.ChatRequest(messages=[pb.ChatMessage(role="user", content=QUESTION)])
    with grpc.insecure_channel(stack.grpc_target) as channel:
        responses = list(pb_grpc.SpeechStub(channel).Chat(request, metadata=METADATA, timeout=120))
    kinds = [r.WhichOneof("event") for r in responses]
    assert kinds[0] == "text_delta" and kinds[-1] == "stats"
    text = "".join(r.text_delta for r in responses if r.WhichOneof("event") == "text_delta")
    stats = responses[-1].stats
    assert stats.model == MODEL
    assert 0 < stats.reply_tokens <= MAX_REPLY_TOKENS and stats.prompt_tokens > 10
    assert stats.done_reason in ("stop", "length")
    assert 0 < stats.time_to_first_token_ms < stats.time_to_first_audio_ms
    audio = [r.audio for r in responses if r.WhichOneof("event") == "audio"]
    pcm = decode_opus(audio)
    assert len(pcm) / 24000 > 1.0 and float(np.abs(pcm).max()) > 0.05
    # What was spoken is the model's text, cleaned for speech, word for word.
    spoken = " ".join(c.text for a in audio for c in a.captions)
    assert words(spoken) == words(clean_for_speech(text)) == words(stats.spoken_text)
    assert len(words(spoken)) >= 5


def test_the_openai_route_streams_the_models_text_and_audio(
    lane: tuple[Stack, LocalLlm],
) -> None:
    stack, _ = lane
    client = openai.OpenAI(base_url=f"{stack.api_url}/v1", api_key=ACME_KEY, max_retries=0)
    stream = client.chat.completions.create(
        model="gpt-4o-audio-preview",  # an OpenAI name: the configured model
        messages=[{"role": "user", "content": QUESTION}],
        modalities=["text", "audio"],
        audio={"voice": "alloy", "format": "pcm16"},
        stream=True,
    )
    pcm = bytearray()
    transcript: list[str] = []
    for chunk in stream:
        audio = chunk.choices[0].delta.audio if chunk.choices else None
        if audio is not None:
            pcm += base64.b64decode(audio.data or "")
            transcript.append(audio.transcript or "")
    samples = np.frombuffer(bytes(pcm), dtype="<i2")
    assert len(samples) / 24000 > 1.0 and int(np.abs(samples).max()) > 1000
    assert len(words(" ".join(transcript))) >= 5
