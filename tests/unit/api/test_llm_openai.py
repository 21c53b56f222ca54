"""The OpenAI-compatible backend's errors, typed (the real server: tests/integration/
test_llm_openai.py)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from voicelane.api.llm_backend import Delta
from voicelane.api.llm_openai import HttpStatusError, OpenAIBackend, _detail, map_error
from voicelane.api.llm_sse import StreamError
from voicelane.common.errors import (
    DeadlineExceededError,
    InvalidInputError,
    NotFoundError,
    UnavailableError,
    VoicelaneError,
)
from voicelane.core.settings import LlmSettings

LABEL = "the LLM at http://llm:8080/v1"


def mapped(error: BaseException, *, started: bool = False) -> VoicelaneError:
    return map_error(error, label=LABEL, model="m1", started=started)


@pytest.mark.parametrize(
    ("status", "kind", "retry"),
    [
        (404, NotFoundError, None),
        (400, InvalidInputError, None),
        (401, UnavailableError, None),
        (429, UnavailableError, 1.0),
        (503, UnavailableError, 1.0),
        (500, UnavailableError, None),
    ],
)
def test_http_statuses_map_to_typed_errors(
    status: int, kind: type[VoicelaneError], retry: float | None
) -> None:
    error = mapped(HttpStatusError(status, "said so"))
    assert type(error) is kind
    assert LABEL in str(error) and "said so" in str(error)
    assert getattr(error, "retry_after_s", None) == retry


def test_a_missing_model_names_the_model_field() -> None:
    error = mapped(HttpStatusError(404, "no such model"))
    assert isinstance(error, NotFoundError) and error.field == "model" and "'m1'" in str(error)


def test_the_api_key_refusal_says_so() -> None:
    assert "refused the API key" in str(mapped(HttpStatusError(401, "invalid key")))


def test_transport_errors_and_timeouts() -> None:
    assert isinstance(mapped(httpx.ReadTimeout("slow")), DeadlineExceededError)
    assert "mid-reply" in str(mapped(httpx.ReadTimeout("slow"), started=True))
    assert "unreachable" in str(mapped(httpx.ConnectError("refused")))
    assert "mid-reply" in str(mapped(httpx.RemoteProtocolError("cut"), started=True))
    assert "failed mid-reply: boom" in str(mapped(StreamError("boom"), started=True))
    assert "malformed" in str(mapped(ValueError("bad json"), started=True))


def test_error_bodies_are_read_as_openai_writes_them() -> None:
    assert _detail(b'{"error": {"message": "The model `x` does not exist.", "code": 404}}') == (
        "The model `x` does not exist."
    )
    assert _detail(b"plain\ntext") == "plain text"
    assert _detail(b"") == "(no body)"


# ---- the request and the model check, against a scripted server ------------------------------

SSE = (
    'data: {"model": "m1", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}\n\n'
    'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}\n\n'
    'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
    'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 1}}\n\n'
    "data: [DONE]\n\n"
)


class Scripted:
    """A server answering ``/models`` and ``/chat/completions``; remembers the requests."""

    def __init__(self, *, models: int = 200, sse: str = SSE) -> None:
        self.models_status = models
        self.sse = sse
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path.endswith("/models"):
            return httpx.Response(self.models_status, json={"data": [{"id": "m1"}]})
        return httpx.Response(200, text=self.sse, headers={"content-type": "text/event-stream"})


def backend(server: Scripted, **settings: object) -> OpenAIBackend:
    fields: dict[str, object] = {"backend": "openai", "base_url": "http://llm/v1/", "model": "m1"}
    return OpenAIBackend(
        LlmSettings(**{**fields, **settings}), transport=httpx.MockTransport(server)
    )


async def collect(llm: OpenAIBackend, model: str = "m1") -> list[Delta]:
    try:
        return [delta async for delta in llm.stream(model, [{"role": "user", "content": "x"}])]
    finally:
        await llm.close()


def test_the_request_is_openais_streamed_chat_completion() -> None:
    server = Scripted()
    deltas = asyncio.run(collect(backend(server, api_key="sk-1", max_reply_tokens=9)))
    assert [d.text for d in deltas] == ["", "Hi", ""]
    end = deltas[-1].end
    assert end is not None and (end.prompt_tokens, end.reply_tokens) == (7, 1)
    assert end.done_reason == "stop" and end.model == "m1"
    listing, chat = server.requests
    assert str(listing.url) == "http://llm/v1/models"
    assert str(chat.url) == "http://llm/v1/chat/completions"
    assert chat.headers["authorization"] == "Bearer sk-1"
    body = json.loads(chat.content)
    assert body == {
        "model": "m1", "messages": [{"role": "user", "content": "x"}], "stream": True,
        "stream_options": {"include_usage": True}, "max_tokens": 9,
    }  # fmt: skip


def test_a_model_not_listed_is_refused_before_the_request() -> None:
    server = Scripted()
    with pytest.raises(HttpStatusError) as caught:
        asyncio.run(collect(backend(server), model="other"))
    assert caught.value.status == 404 and "it has: m1" in caught.value.detail
    assert [r.url.path for r in server.requests] == ["/v1/models"]


def test_a_server_without_a_model_list_is_trusted() -> None:
    server = Scripted(models=404)
    deltas = asyncio.run(collect(backend(server), model="anything"))
    assert deltas[-1].end is not None


def test_a_stream_without_done_ends_without_an_end() -> None:
    server = Scripted(sse=SSE.replace("data: [DONE]\n\n", ""))
    deltas = asyncio.run(collect(backend(server)))
    assert all(d.end is None for d in deltas)  # the bridge calls that "ended without done"
