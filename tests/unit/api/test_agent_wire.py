"""The agent protocol's messages: what a client message must be (a fault of the connection or
of one context), a context's options, and word spans mapped back into the text as appended."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from voicelane.api.agent_wire import (
    ConnectionFaultError,
    ContextFaultError,
    ContextOptions,
    TextSpans,
    audio_message,
    auth_key,
    parse_client_message,
)
from voicelane.api.streams import StreamChunk
from voicelane.common.audio.stream import StreamEncoding
from voicelane.common.errors import InvalidInputError
from voicelane.core.word_timings import WordTiming


def parse(**body: Any) -> Any:
    return parse_client_message(json.dumps(body))


def test_an_append_with_its_options() -> None:
    message = parse(type="append", context_id="turn-1", text="Hi.", voice="v", close=True)
    assert (message.type, message.context_id, message.text, message.close) == (
        "append", "turn-1", "Hi.", True,
    )  # fmt: skip
    assert message.options == {"voice": "v"}


@pytest.mark.parametrize(
    "raw",
    [
        b"binary",
        "{",
        "[1]",
        json.dumps({"type": "append", "text": "Hi."}),
        json.dumps({"type": "append", "context_id": "a b"}),
        json.dumps({"type": "append", "context_id": "x" * 65}),
        json.dumps({"type": "append", "context_id": 5}),
        json.dumps({"context_id": None}),
    ],
    ids=["binary", "not json", "not an object", "no id", "space", "too long", "number", "null"],
)
def test_what_cannot_be_tied_to_a_context_is_the_connections_fault(raw: Any) -> None:
    with pytest.raises(ConnectionFaultError) as fault:
        parse_client_message(raw)
    assert str(fault.value)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"type": "speak"}, "type"),
        ({"type": "flush", "text": "x"}, "text"),
        ({"type": "append", "pitch": 2}, "pitch"),
        ({"type": "append", "text": 5}, "text"),
        ({"type": "append", "close": "yes"}, "close"),
    ],
)
def test_a_bad_message_of_a_context_is_that_contexts_fault(
    body: dict[str, Any], field: str
) -> None:
    with pytest.raises(ContextFaultError) as fault:
        parse(context_id="A.b:c-1_2", **body)
    assert fault.value.context_id == "A.b:c-1_2"
    assert fault.value.error.field == field


def test_context_ids_of_every_allowed_character() -> None:
    assert parse(type="cancel", context_id="Az09_.:-").context_id == "Az09_.:-"
    assert parse(type="cancel", context_id="x" * 64).context_id == "x" * 64


def test_an_auth_message_carries_its_key() -> None:
    assert auth_key(json.dumps({"type": "auth", "api_key": "k-1"})) == "k-1"
    assert auth_key(json.dumps({"type": "append", "context_id": "a"})) is None
    assert auth_key(b"bytes") is None
    with pytest.raises(ConnectionFaultError):
        auth_key(json.dumps({"type": "auth", "api_key": ""}))


def test_options_have_defaults_and_a_later_append_may_only_repeat_them() -> None:
    options = ContextOptions.parse({"voice": "en", "encoding": "opus"})
    assert options.sample_rate_hz == 24000 and options.encoding is StreamEncoding.OPUS
    options.check_same({"voice": "en", "sample_rate_hz": 24000})
    with pytest.raises(InvalidInputError) as refused:
        options.check_same({"voice": "de"})
    assert refused.value.field == "voice"


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"encoding": "mp3"}, "encoding"),
        ({"sample_rate_hz": "24000"}, "sample_rate_hz"),
        ({"speed": True}, "speed"),
        ({"normalize": 1}, "normalize"),
        ({"lexicons": "x"}, "lexicons"),
        ({"voice": 3}, "voice"),
    ],
)
def test_options_of_the_wrong_kind_name_their_field(given: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        ContextOptions.parse(given)
    assert refused.value.field == field


def timing(start: int, end: int) -> WordTiming:
    return WordTiming("?", 10, 20, start, end)


def test_spans_of_the_spoken_text_are_spans_of_the_appended_text() -> None:
    spans = TextSpans()
    for appended, spoken in [("\ufeffHel", "Hel"), ("lo \x07wor", "lo wor"), ("ld.", "ld.")]:
        spans.append(appended)
        spans.spoken(appended, spoken)
    text = "\ufeffHello \x07world."
    assert spans.text == text
    # "Hello" is [0, 5) and "world." [6, 12) of the spoken "Hello world."
    hello = spans.word(timing(0, 5))
    world = spans.word(timing(6, 12))
    assert (hello["char_start"], hello["char_end"], hello["text"]) == (1, 6, "Hello")
    assert (world["char_start"], world["char_end"], world["text"]) == (8, 14, "world.")
    assert text[world["char_start"] : world["char_end"]] == "world."
    assert (hello["start_ms"], hello["end_ms"]) == (10, 20)


def test_spans_without_anything_left_out_are_as_spoken() -> None:
    spans = TextSpans()
    for piece in ("One two", " three."):
        spans.append(piece)
        spans.spoken(piece, piece)
    assert spans.span(8, 14) == (8, 14)
    assert spans.word(timing(4, 7))["text"] == "two"


def chunk(data: tuple[bytes, ...], rate_hz: int = 16000) -> StreamChunk:
    return StreamChunk("r", 3, data, 400, rate_hz, 0, 0, False, ())


def test_audio_messages_of_pcm_and_opus() -> None:
    pcm = audio_message("c", chunk((b"\x00\x01" * 160, b"\x00\x01" * 160)), StreamEncoding.PCM)
    assert pcm["duration_ms"] == 20 and pcm["pts_ms"] == 400 and pcm["seq"] == 3
    assert len(base64.b64decode(pcm["audio"])) == 640
    opus = audio_message("c", chunk((b"a", b"b", b"c")), StreamEncoding.OPUS)
    assert opus["duration_ms"] == 60 and [base64.b64decode(p) for p in opus["packets"]] == [
        b"a", b"b", b"c",
    ]  # fmt: skip
    assert "audio" not in opus
