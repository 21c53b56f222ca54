"""OpenAI's speech API through the real ``openai`` SDK against a real stack (redis-server,
``voicelane api``, an espeak worker): every ``response_format`` decoded, OpenAI's server-sent
events, speed 0.25 and 4.0, OpenAI's voice names (``marin``) and voice objects, the model and
voice lists, and OpenAI's error classes (issue 24).

The audio is read back by PyAV, not by voicelane's own decoders. Two renders of the same text
and voice are not the same samples (their lengths differ by a few ms), so the voice a request
spoke with is read from ``X-Voicelane-Voice``.
"""

from __future__ import annotations

import base64
import io
import json
import math
from collections.abc import Iterator
from typing import Any

import av
import httpx
import numpy as np
import openai
import pytest

from tests.support.stack import ACME_KEY, OTHER_KEY, Stack
from voicelane.core.redis_server import RedisServer

pytestmark = pytest.mark.integration

TEXT = "The committee met on Tuesday to review the budget for the coming year."
RATE_HZ = 24000
"""OpenAI's output rate, the route's default."""
MAX_STREAMS = 2
"""The stack's ``tenant_max_streams``: a third stream of a tenant is refused with 429."""
LONG_TEXT = "The river runs past the old mill, and the children wave at the boats. " * 200


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("openai")
    redis_server = RedisServer(directory / "redis").start()
    lane = Stack(
        directory / "lane",
        redis_server.url,
        env_overrides={
            "VOICELANE_TENANT_MAX_STREAMS": str(MAX_STREAMS),
            "VOICELANE_OPENAI_VOICES": json.dumps({"narrator": "espeak:en-gb-scotland"}),
        },
    )
    try:
        lane.gpu_worker()
        lane.api()
        lane.wait_realtime_workers()
        yield lane
    finally:
        lane.stop()
        redis_server.stop()


def sdk(stack: Stack, key: str = ACME_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.api_url}/v1", api_key=key, max_retries=0)


def speech(stack: Stack, **fields: Any) -> bytes:
    """The audio of one SDK request (model tts-1, voice alloy, pcm unless ``fields`` say)."""
    request: dict[str, Any] = {
        "model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": "pcm", **fields,
    }  # fmt: skip
    return sdk(stack).audio.speech.create(**request).content


def spoken_voice(stack: Stack, voice: Any) -> str:
    """The voice a request speaks as (``X-Voicelane-Voice``), its audio checked to be speech."""
    response = sdk(stack).audio.speech.with_raw_response.create(
        model="tts-1", voice=voice, input=TEXT, response_format="pcm"
    )
    assert pcm_duration_s(response.content) > 2.0
    return str(response.headers["x-voicelane-voice"])


def pcm_duration_s(pcm: bytes) -> float:
    assert len(pcm) % 2 == 0
    return len(pcm) / 2 / RATE_HZ


def decoded(data: bytes) -> tuple[np.ndarray[Any, Any], int]:
    """The audio of a file, decoded by PyAV (FFmpeg): mono float samples and the rate."""
    samples = []
    with av.open(io.BytesIO(data), mode="r") as container:
        stream = container.streams.audio[0]
        rate = int(stream.codec_context.sample_rate or 0)
        for frame in container.decode(stream):
            samples.append(frame.to_ndarray()[0])  # mono: planar or packed, one row
    audio = np.concatenate(samples)
    if np.issubdtype(audio.dtype, np.integer):
        return audio.astype(np.float64) / 32768, rate
    return audio.astype(np.float64), rate


@pytest.fixture(scope="module")
def reference_pcm(stack: Stack) -> bytes:
    return speech(stack)


@pytest.mark.parametrize(
    ("fmt", "media_type"),
    [
        ("mp3", "audio/mpeg"),
        ("opus", "audio/ogg"),
        ("aac", "audio/aac"),  # StreamEncoding.AAC: passes once the audio branch is merged
        ("flac", "audio/flac"),
        ("wav", "audio/wav"),
        ("pcm", "audio/pcm"),
    ],
)
def test_every_format_decodes_to_the_same_length(
    stack: Stack, reference_pcm: bytes, fmt: str, media_type: str
) -> None:
    response = sdk(stack).audio.speech.with_raw_response.create(
        model="tts-1",
        voice="alloy",
        input=TEXT,
        response_format=fmt,  # type: ignore[arg-type]
    )
    assert response.headers["content-type"].startswith(media_type)
    data = response.content
    expected_s = pcm_duration_s(reference_pcm)
    assert expected_s > 2.0
    if fmt == "pcm":
        assert pcm_duration_s(data) == pytest.approx(expected_s, rel=0.02)
        return
    samples, rate = decoded(data)
    assert rate == (48000 if fmt == "opus" else RATE_HZ), rate  # FFmpeg decodes Opus at 48 kHz
    assert len(samples) / rate == pytest.approx(expected_s, rel=0.05, abs=0.05), fmt
    assert float(np.sqrt(np.mean(samples**2))) > 0.01  # speech, not silence


def sse_events(stack: Stack, **fields: Any) -> tuple[str, list[dict[str, Any]]]:
    """The content type and the events of an SSE speech request, through the SDK."""
    request: dict[str, Any] = {
        "model": "gpt-4o-mini-tts", "voice": "alloy", "input": TEXT, "response_format": "pcm",
        "stream_format": "sse", **fields,
    }  # fmt: skip
    events = []
    with sdk(stack).audio.speech.with_streaming_response.create(**request) as response:
        content_type = response.headers["content-type"]
        for line in response.iter_lines():
            if not line:
                continue
            assert line.startswith("data: "), line
            events.append(json.loads(line[len("data: ") :]))
    return content_type, events


def test_sse_sends_openais_deltas_then_done_with_usage(stack: Stack, reference_pcm: bytes) -> None:
    content_type, events = sse_events(stack)
    assert content_type.startswith("text/event-stream")
    *deltas, done = events
    assert deltas and all(e["type"] == "speech.audio.delta" for e in deltas)
    assert set(deltas[0]) == {"type", "audio"}
    audio = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert pcm_duration_s(audio) == pytest.approx(pcm_duration_s(reference_pcm), rel=0.02)
    assert done["type"] == "speech.audio.done"
    usage = done["usage"]
    assert usage["input_tokens"] == len(TEXT)
    frames = pcm_duration_s(audio) * 1000 / 20
    assert abs(usage["output_tokens"] - frames) <= 2, (usage, frames)
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


@pytest.mark.parametrize("fmt", ["mp3", "wav"])
def test_sse_carries_a_file_format_too(stack: Stack, reference_pcm: bytes, fmt: str) -> None:
    _, events = sse_events(stack, response_format=fmt)
    assert events[-1]["type"] == "speech.audio.done"
    data = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    samples, rate = decoded(data)
    assert len(samples) / rate == pytest.approx(pcm_duration_s(reference_pcm), rel=0.05, abs=0.05)


@pytest.mark.parametrize("speed", [0.25, 4.0])
def test_openais_whole_speed_range_scales_the_duration(
    stack: Stack, reference_pcm: bytes, speed: float
) -> None:
    """Beyond espeak's own range (0.5-2.5) the gateway time-stretches (the audio branch's
    ``stretch_speed``): within 10% of the duration at speed 1.0 divided by the speed."""
    pcm = speech(stack, speed=speed)
    expected_s = pcm_duration_s(reference_pcm) / speed
    assert pcm_duration_s(pcm) == pytest.approx(expected_s, rel=0.10)


def voices(stack: Stack) -> dict[str, dict[str, Any]]:
    response = httpx.get(
        f"{stack.api_url}/v1/audio/voices",
        headers={"Authorization": f"Bearer {ACME_KEY}"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    listed = response.json()
    assert listed["object"] == "list"
    return {voice["id"]: voice for voice in listed["data"]}


def test_marin_and_cedar_speak_as_the_voices_they_map_to(stack: Stack) -> None:
    listed = voices(stack)
    for name in ("marin", "cedar"):
        target = listed[name]["maps_to"]
        assert target.startswith("espeak:en"), listed[name]
        assert spoken_voice(stack, name) == target
    assert listed["marin"]["maps_to"] != listed["alloy"]["maps_to"] == "auto"  # a choice
    assert spoken_voice(stack, "alloy") == "auto"


def test_a_voice_object_is_its_id(stack: Stack) -> None:
    assert spoken_voice(stack, {"id": "espeak:en-gb"}) == "espeak:en-gb"
    assert spoken_voice(stack, {"id": "marin"}) == voices(stack)["marin"]["maps_to"]


def test_the_setting_maps_an_alias_of_the_operators(stack: Stack) -> None:
    assert voices(stack)["narrator"]["maps_to"] == "espeak:en-gb-scotland"
    assert spoken_voice(stack, "narrator") == "espeak:en-gb-scotland"


def test_the_voice_list_has_every_openai_name_and_the_engines_voices(stack: Stack) -> None:
    listed = voices(stack)
    for name in ("alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage",
                 "shimmer", "verse", "marin", "cedar"):  # fmt: skip
        assert listed[name]["object"] == "audio.voice" and listed[name]["maps_to"], name
    assert listed["espeak:en-us"]["engine"] == "espeak"
    assert listed["espeak:en-us"]["languages"] == ["en-us"]
    refused = httpx.get(f"{stack.api_url}/v1/audio/voices", timeout=30)
    assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"


def test_the_models_list_through_the_sdk(stack: Stack) -> None:
    ids = [model.id for model in sdk(stack).models.list()]
    assert ids[:3] == ["tts-1", "tts-1-hd", "gpt-4o-mini-tts"]
    assert "espeak" in ids
    with pytest.raises(openai.AuthenticationError):
        sdk(stack, key="not-a-key-000").models.list()


def test_instructions_are_answered_with_a_warning(stack: Stack) -> None:
    response = sdk(stack).audio.speech.with_raw_response.create(
        model="gpt-4o-mini-tts", voice="alloy", input=TEXT, response_format="pcm",
        instructions="Speak in a cheerful tone.",
    )  # fmt: skip
    assert response.headers["x-voicelane-warning"].startswith("instructions ignored")
    plain = sdk(stack).audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input=TEXT, response_format="pcm"
    )
    assert "x-voicelane-warning" not in plain.headers


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"response_format": "ogg"}, "response_format"),
        ({"input": ""}, "input"),
        ({"voice": "no-such-voice"}, "voice"),
        ({"speed": 9.0}, "speed"),
        ({"stream_format": "chunks"}, "stream_format"),
        ({"input": 42}, "input"),  # the wrong type: pydantic's error, 400 all the same
    ],
    ids=["format", "empty input", "voice", "speed", "stream format", "input not a string"],
)
def test_bad_input_is_openais_bad_request_with_the_param(
    stack: Stack, fields: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        speech(stack, **fields)
    error = caught.value
    assert error.status_code == 400
    assert error.param == param and error.type == "invalid_request_error", error.body
    assert isinstance(error.code, str) and error.code


def test_a_wrong_key_is_openais_authentication_error(stack: Stack) -> None:
    with pytest.raises(openai.AuthenticationError) as caught:
        sdk(stack, key="not-a-key-000").audio.speech.create(
            model="tts-1", voice="alloy", input=TEXT
        )
    assert caught.value.status_code == 401


def test_a_tenant_over_its_streams_gets_openais_rate_limit_error(stack: Stack) -> None:
    """Two long streams of the tenant held open (their client does not read: backpressure keeps
    them running), then a third: 429, which the SDK raises as RateLimitError."""
    body = {"model": "tts-1", "voice": "alloy", "input": LONG_TEXT, "response_format": "pcm"}
    headers = {"Authorization": f"Bearer {OTHER_KEY}"}
    with (
        httpx.Client(base_url=stack.api_url, headers=headers, timeout=30) as client,
        client.stream("POST", "/v1/audio/speech", json=body) as first,
        client.stream("POST", "/v1/audio/speech", json=body) as second,
    ):
        assert (first.status_code, second.status_code) == (200, 200)
        with pytest.raises(openai.RateLimitError) as caught:
            sdk(stack, OTHER_KEY).audio.speech.create(model="tts-1", voice="alloy", input=TEXT)
    error = caught.value
    assert error.code == "quota_exceeded" and error.response.headers.get("retry-after")
    assert math.isfinite(float(error.response.headers["retry-after"]))


def test_the_chat_route_answers_bad_input_in_openais_shape(stack: Stack) -> None:
    """``/v1/chat/completions`` is an OpenAI route too: an audio format it cannot stream is a
    BadRequestError naming ``audio`` (no LLM is needed to refuse it)."""
    with pytest.raises(openai.BadRequestError) as caught:
        sdk(stack).chat.completions.create(
            model="gpt-4o-audio-preview",
            modalities=["text", "audio"],
            audio={"voice": "alloy", "format": "mp3"},
            messages=[{"role": "user", "content": "Hi?"}],
            stream=True,
        )
    assert caught.value.param == "audio"
