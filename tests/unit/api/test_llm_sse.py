"""OpenAI's streamed chat completion read line by line: text, the end's numbers, errors."""

from __future__ import annotations

import json

import pytest

from voicelane.api.llm_sse import SseReply, StreamError


def data(chunk: object) -> str:
    return f"data: {json.dumps(chunk)}"


def test_a_stream_becomes_text_and_numbers() -> None:
    reply = SseReply("asked")
    lines = [
        data({"model": "served", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}),
        "",
        ": keep-alive",
        data({"choices": [{"index": 0, "delta": {"content": "Hello"}}]}),
        data({"choices": [{"index": 0, "delta": {"content": " there."}, "finish_reason": None}]}),
        data({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
        data(
            {
                "choices": [],
                "usage": {"prompt_tokens": 12, "completion_tokens": 3},
                "timings": {"prompt_ms": 40.5, "predicted_ms": 30.25},
            }
        ),
        "data: [DONE]",
    ]
    texts = [reply.feed(line) for line in lines]
    assert texts == ["", None, None, "Hello", " there.", "", "", ""]
    assert reply.done and reply.events == 6
    end = reply.end(total_ms=99.0)
    assert (end.model, end.prompt_tokens, end.reply_tokens) == ("served", 12, 3)
    assert (end.prompt_eval_ms, end.eval_ms, end.total_ms) == (40.5, 30.25, 99.0)
    assert end.done_reason == "length"


def test_only_the_first_choice_is_read_and_the_model_asked_is_the_fallback() -> None:
    reply = SseReply("asked")
    text = reply.feed(
        data({"choices": [{"index": 1, "delta": {"content": "B"}}, {"delta": {"content": "A"}}]})
    )
    assert text == "A"
    assert reply.end(total_ms=1.0).model == "asked"


def test_an_error_event_raises_its_message_on_one_line() -> None:
    reply = SseReply("m")
    with pytest.raises(StreamError, match=r"^out of memory: slot 0$"):
        reply.feed(data({"error": {"message": "out of memory:\n  slot 0", "code": 500}}))


@pytest.mark.parametrize("line", ["data: {not json", "data: [1, 2]"])
def test_a_malformed_event_is_a_value_error(line: str) -> None:
    with pytest.raises(ValueError):
        SseReply("m").feed(line)
