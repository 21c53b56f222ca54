"""voicelane.api.failures: every exception a front meets → one typed error → each wire.

Each kind of failure (a typed error, Redis unreachable or full, a request that is not its
model's shape, JSON that does not parse, a bug) goes through each renderer (gRPC, HTTP,
server-sent event, WebSocket), and every wire says the same code, field and retry hint.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from pydantic import BaseModel, ValidationError

from voicelane.api.failures import (
    FULL_RETRY_S,
    INTERNAL_MESSAGE,
    UNREACHABLE_RETRY_S,
    client_error,
    grpc_reply,
    http_reply,
    invalid_input,
    openai_reply,
    sse_error,
    websocket_reply,
)
from voicelane.api.grpc_errors import status_code
from voicelane.api.routes.jobs import JobRequest
from voicelane.api.routes.speech import WebSocketRequest
from voicelane.common.errors import (
    AuthError,
    InvalidInputError,
    JobNotFoundError,
    MalformedRequestError,
    NoCapacityError,
    QuotaExceededError,
    StoreFullError,
    TextTooLargeError,
    UnavailableError,
    UnknownVoiceError,
    UnsupportedMediaTypeError,
    VoicelaneError,
)


def validation_error(data: Any, model: type[BaseModel] = JobRequest) -> ValidationError:
    """What a front's request model (a job's, by default) raises for ``data``."""
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    return caught.value


def unparsable_json() -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        WebSocketRequest.model_validate_json('{"text": ')
    return caught.value


@dataclass(frozen=True)
class Expected:
    """What every wire must say about one failure: its code, gRPC status, HTTP status and
    WebSocket close code; its field, retry hint and message."""

    statuses: tuple[str, str, int, int]
    field: str | None = None
    retry_after_s: float | None = None
    message: str | None = None
    """The exact message; None: any (checked to be the same on every wire)."""


CASES: list[tuple[str, BaseException, Expected]] = [
    (
        "typed error with a field",
        UnknownVoiceError("voice 'x' is unknown", field="voice"),
        Expected(("unknown_voice", "INVALID_ARGUMENT", 422, 1008), "voice", None,
                 "voice 'x' is unknown"),
    ),
    (
        "quota with a retry hint",
        QuotaExceededError("tenant over its rate", retry_after_s=2.5),
        Expected(("quota_exceeded", "RESOURCE_EXHAUSTED", 429, 1013), None, 2.5,
                 "tenant over its rate"),
    ),
    (
        "Redis unreachable",
        redis.ConnectionError("Error 111 connecting to 10.0.0.7:6379. Connection refused."),
        Expected(("unavailable", "UNAVAILABLE", 503, 1011), None, UNREACHABLE_RETRY_S),
    ),
    (
        "Redis timed out",
        redis.TimeoutError("Timeout reading from socket"),
        Expected(("unavailable", "UNAVAILABLE", 503, 1011), None, UNREACHABLE_RETRY_S),
    ),
    (
        "Redis at maxmemory",
        redis.exceptions.OutOfMemoryError(
            "command not allowed when used memory > 'maxmemory'."
        ),  # the class redis-py's parser gives an -OOM reply; its text lost the prefix
        Expected(("store_full", "RESOURCE_EXHAUSTED", 503, 1013), None, FULL_RETRY_S),
    ),
    (
        "Redis at maxmemory, wrapped by a Lua script (redis.pcall, then error_reply)",
        redis.ResponseError("wrapped: OOM command not allowed when used memory > 'maxmemory'."),
        Expected(("store_full", "RESOURCE_EXHAUSTED", 503, 1013), None, FULL_RETRY_S),
    ),
    (
        "Redis at maxmemory, a plain ResponseError with redis-py 8's text",
        redis.ResponseError(
            "command not allowed when used memory > 'maxmemory'. script: 7cd7, on @user_script:1."
        ),
        Expected(("store_full", "RESOURCE_EXHAUSTED", 503, 1013), None, FULL_RETRY_S),
    ),
    (
        "request not the model's shape",
        validation_error({"text": "Hi.", "speed": "fast"}),
        Expected(("invalid_input", "INVALID_ARGUMENT", 422, 1008), "speed"),
    ),
    (
        "JSON that does not parse",
        unparsable_json(),
        Expected(("malformed_request", "INVALID_ARGUMENT", 400, 1008)),
    ),
    (
        "a bug",
        RuntimeError("secret internals: the user's text was 'hello'"),
        Expected(("internal", "INTERNAL", 500, 1011), None, None, INTERNAL_MESSAGE),
    ),
    (
        "another Redis error",
        redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        Expected(("internal", "INTERNAL", 500, 1011), None, None, INTERNAL_MESSAGE),
    ),
]  # fmt: skip
IDS = [name for name, _, _ in CASES]
OPENAI_TYPE = {
    400: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


@pytest.mark.parametrize(("name", "error", "want"), CASES, ids=IDS)
def test_every_wire_says_the_same(name: str, error: BaseException, want: Expected) -> None:
    code, status, http_status, ws_close = want.statuses
    known = client_error(error)
    assert (known.code, known.grpc_status, known.http_status) == (code, status, http_status)
    assert (known.field, known.retry_after_s) == (want.field, want.retry_after_s)
    message = known.message
    if want.message is not None:
        assert message == want.message

    grpc = grpc_reply(error)
    assert (grpc.status, grpc.details) == (status, message)
    trailers = dict(grpc.trailers)
    assert len(trailers) == len(grpc.trailers)  # each key once
    assert trailers.pop("error-code") == code
    assert trailers.pop("error-field", None) == want.field
    retry_ms = trailers.pop("retry-after-ms", None)
    assert retry_ms == (
        None if want.retry_after_s is None else str(round(want.retry_after_s * 1000))
    )
    assert not trailers
    assert status_code(grpc).name == status

    http = http_reply(error)
    assert http.status_code == http_status
    body = {"code": code, "message": message}
    if want.field is not None:
        body["field"] = want.field
    assert http.body == {"error": body}
    retry_after = http.headers.get("Retry-After")
    assert retry_after == (
        None if want.retry_after_s is None else str(max(1, math.ceil(want.retry_after_s)))
    )

    openai = openai_reply(error)
    openai_status = 400 if http_status == 422 else http_status  # OpenAI's: bad input is 400
    assert openai.status_code == openai_status
    assert openai.body == {
        "error": {
            "message": message, "type": OPENAI_TYPE[openai_status], "param": want.field,
            "code": code,
        }
    }  # fmt: skip
    assert openai.headers.get("Retry-After") == retry_after
    assert sse_error(error) == openai.body

    ws = websocket_reply(error)
    assert ws.close_code == ws_close
    expected_ws: dict[str, Any] = {
        "type": "error", "code": status, "error_code": code, "message": message,
    }  # fmt: skip
    if want.field is not None:
        expected_ws["field"] = want.field
    if want.retry_after_s is not None:
        expected_ws["retry_after_s"] = want.retry_after_s
    assert ws.message == expected_ws


def test_a_bug_is_logged_with_its_traceback_and_never_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "the user's text was 'hello'"
    try:
        raise RuntimeError(secret)
    except RuntimeError as error:
        bug = error
    with caplog.at_level(logging.ERROR, logger="voicelane.api.failures"):
        reply = http_reply(bug, where="POST /v1/jobs")
    assert secret not in str(reply.body)
    (record,) = caplog.records
    assert record.getMessage() == "POST /v1/jobs failed"
    assert record.exc_info is not None and record.exc_info[1] is bug


def test_a_typed_error_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    error = InvalidInputError("speed 9 is out of range", field="speed")
    with caplog.at_level(logging.DEBUG, logger="voicelane.api.failures"):
        assert client_error(error) is error
    assert not caplog.records


def test_a_missing_key_asks_for_a_bearer_token() -> None:
    reply = http_reply(AuthError("missing API key"))
    assert reply.status_code == 401 and reply.headers == {"WWW-Authenticate": "Bearer"}


def test_retry_after_is_whole_seconds_at_least_one() -> None:
    assert http_reply(QuotaExceededError("x", retry_after_s=0.2)).headers["Retry-After"] == "1"
    assert http_reply(QuotaExceededError("x", retry_after_s=1.01)).headers["Retry-After"] == "2"
    assert (
        dict(grpc_reply(QuotaExceededError("x", retry_after_s=0.2)).trailers)["retry-after-ms"]
        == "200"
    )


def test_a_status_grpc_does_not_have_is_internal() -> None:
    class OddError(VoicelaneError):
        grpc_status = "OK"

    assert status_code(grpc_reply(OddError("x"))).name == "INTERNAL"


# ---- the field rule ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "data", "field", "message_start"),
    [
        (JobRequest, {"text": "Hi.", "speed": "fast"}, "speed", "speed: "),
        (JobRequest, {"speed": 1.0}, "text", "text: Field required"),
        (JobRequest, {"text": "Hi.", "colour": "red"}, "colour", "colour: Extra inputs"),
        (
            WebSocketRequest,
            {"text": "Hi.", "messages": [{"role": "user"}]},
            "messages",
            "messages.0.content: Field required",
        ),
        (JobRequest, "not an object", None, "body: "),
    ],
    ids=["wrong type", "missing", "unknown field", "nested", "not an object"],
)
def test_the_field_is_the_top_level_one_and_the_message_starts_with_it(
    model: type[BaseModel], data: Any, field: str | None, message_start: str
) -> None:
    error = client_error(validation_error(data, model))
    assert type(error) is InvalidInputError
    assert error.field == field
    assert error.message.startswith(message_start), error.message


def test_up_to_three_errors_are_listed() -> None:
    error = client_error(validation_error({"speed": "x", "a": 1, "b": 2}))  # and no text
    assert error.field == "text" and error.message.startswith("text: Field required; ")
    assert error.message.count("; ") == 2 and "b:" not in error.message


def test_a_fastapi_location_is_not_a_field() -> None:
    """FastAPI puts the part of the request first (``query``, ``body``...)."""
    located = [
        {
            "type": "finite_number",
            "loc": ("query", "cursor"),
            "msg": "Input should be a finite number",
        }
    ]
    error = invalid_input(located, located=True)
    assert (error.field, error.message) == ("cursor", "cursor: Input should be a finite number")
    missing_body = invalid_input(
        [{"type": "missing", "loc": ("body",), "msg": "Field required"}], located=True
    )
    assert (missing_body.field, missing_body.message) == (None, "body: Field required")
    # Outside FastAPI a field may be called "body" like any other.
    named_body = invalid_input([{"type": "missing", "loc": ("body",), "msg": "Field required"}])
    assert named_body.field == "body"


def test_json_that_does_not_parse_says_where() -> None:
    error = client_error(unparsable_json())
    assert isinstance(error, MalformedRequestError)
    assert error.message.startswith("malformed JSON: ") and "EOF" in error.message
    assert error.field is None


def test_service_failures_keep_no_redis_detail_in_the_message() -> None:
    for failure in (
        redis.ConnectionError("Error 111 connecting to 10.0.0.7:6379."),
        redis.exceptions.OutOfMemoryError("command not allowed"),
    ):
        error = client_error(failure)
        assert isinstance(error, UnavailableError | StoreFullError)
        assert "10.0.0.7" not in error.message and "command not allowed" not in error.message


@pytest.mark.parametrize(
    ("error", "status", "error_type"),
    [
        (AuthError("missing API key"), 401, "authentication_error"),
        (NoCapacityError("the lane is full", retry_after_s=1.0), 429, "rate_limit_error"),
        (
            TextTooLargeError("input is over 20000 characters", field="input"),
            400,
            "invalid_request_error",
        ),
        (TextTooLargeError("request body is over 1048576 bytes"), 413, "invalid_request_error"),
        (UnsupportedMediaTypeError("send JSON"), 415, "invalid_request_error"),
        (JobNotFoundError("no such job"), 404, "not_found_error"),
    ],
    ids=["auth", "capacity", "input too long", "body too large", "media type", "not found"],
)
def test_the_openai_flavour_answers_with_openais_statuses(
    error: VoicelaneError, status: int, error_type: str
) -> None:
    """OpenAI's clients pick their error class by status: 401 AuthenticationError, 429
    RateLimitError (retried after Retry-After), 400 BadRequestError for any bad input."""
    reply = openai_reply(error)
    assert reply.status_code == status
    assert reply.body["error"]["type"] == error_type
    assert reply.body["error"]["code"] == error.code
    assert reply.body["error"]["param"] == error.field
    if isinstance(error, AuthError):
        assert reply.headers == {"WWW-Authenticate": "Bearer"}
    if isinstance(error, NoCapacityError):
        assert reply.headers == {"Retry-After": "1"}
