"""voicelane.api.openai_sse: OpenAI's speech stream events, byte for byte."""

from __future__ import annotations

import base64
import json

from voicelane.api.openai_sse import audio_delta, audio_done, error_event, usage


def parse(event: bytes) -> dict[str, object]:
    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    assert event.count(b"\n") == 2  # one line: a JSON without newlines
    data: dict[str, object] = json.loads(event[len(b"data: ") :])
    return data


def test_a_delta_carries_the_audio_in_base64() -> None:
    audio = bytes(range(256)) * 3
    event = parse(audio_delta(audio))
    assert event["type"] == "speech.audio.delta"
    assert base64.b64decode(str(event["audio"])) == audio


def test_done_carries_the_usage_in_characters_and_20_ms_frames() -> None:
    event = parse(audio_done(42, 1001))
    assert event == {
        "type": "speech.audio.done",
        "usage": {"input_tokens": 42, "output_tokens": 51, "total_tokens": 93},
    }
    assert usage(3, 0) == {"input_tokens": 3, "output_tokens": 0, "total_tokens": 3}


def test_an_error_event_has_a_type_and_openais_error() -> None:
    body = {"error": {"message": "m", "type": "server_error", "param": None, "code": "internal"}}
    assert parse(error_event(body)) == {"type": "error", **body}
