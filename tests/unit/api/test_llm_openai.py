"""The OpenAI-compatible backend's errors, typed (the real server: tests/integration/
test_llm_openai.py)."""

from __future__ import annotations

import httpx
import pytest

from voicelane.api.llm_openai import HttpStatusError, _detail, map_error
from voicelane.api.llm_sse import StreamError
from voicelane.common.errors import (
    DeadlineExceededError,
    InvalidInputError,
    NotFoundError,
    UnavailableError,
    VoicelaneError,
)

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
