"""voicelane.common.error_wire: what a front writes, the SDK reads back whole (gRPC trailers,
the HTTP body and ``Retry-After``), and the RemoteError it becomes."""

from __future__ import annotations

import pytest

from voicelane.common.error_wire import (
    CODE_KEY,
    FIELD_KEY,
    RETRY_AFTER_MS_KEY,
    from_grpc,
    from_http,
    grpc_trailers,
    http_body,
    retry_after_header,
)
from voicelane.common.errors import (
    QuotaExceededError,
    RemoteError,
    UnknownVoiceError,
    WireError,
    exit_status,
)

SENT = UnknownVoiceError("voice 'x' is unknown", field="voice", retry_after_s=1.5).to_wire()


def test_grpc_trailers_carry_code_field_and_retry_hint() -> None:
    assert grpc_trailers(SENT) == (
        (CODE_KEY, "unknown_voice"),
        (FIELD_KEY, "voice"),
        (RETRY_AFTER_MS_KEY, "1500"),
    )
    assert grpc_trailers(WireError("internal", "internal error", "INTERNAL")) == (
        (CODE_KEY, "internal"),
    )


def test_grpc_round_trip() -> None:
    assert from_grpc(SENT.status, SENT.message, grpc_trailers(SENT)) == SENT


def test_grpc_reading_takes_bytes_and_ignores_what_it_does_not_know() -> None:
    trailers: list[tuple[str, str | bytes]] = [
        (CODE_KEY, b"quota_exceeded"),
        ("x-other", "1"),
        (RETRY_AFTER_MS_KEY, "soon"),
    ]
    wire = from_grpc("RESOURCE_EXHAUSTED", "over quota", trailers)
    assert wire == WireError("quota_exceeded", "over quota", "RESOURCE_EXHAUSTED")
    # A peer that sends none (an older server, gRPC's own failures): no code, no field.
    assert from_grpc("UNAVAILABLE", "Socket closed", None) == WireError(
        "", "Socket closed", "UNAVAILABLE"
    )
    assert from_grpc("X", "", [(RETRY_AFTER_MS_KEY, "-5")]).retry_after_s is None


def test_http_round_trip() -> None:
    body = http_body(SENT)
    assert body == {"error": {"code": "unknown_voice", "message": SENT.message, "field": "voice"}}
    header = retry_after_header(SENT)
    assert header == "2"  # whole seconds, rounded up
    received = from_http(422, body, header)
    assert received == WireError("unknown_voice", SENT.message, "INVALID_ARGUMENT", "voice", 2.0)


@pytest.mark.parametrize(
    "body", [None, "oops", {"error": "text"}, {"detail": "x"}, {"error": {"code": 7}}]
)
def test_a_body_that_is_not_voicelanes_gives_status_only(body: object) -> None:
    assert from_http(503, body, None) == WireError("", "", "UNAVAILABLE")


def test_retry_after_as_an_http_date_is_no_hint() -> None:
    assert from_http(429, {}, "Wed, 21 Oct 2026 07:28:00 GMT").retry_after_s is None
    assert retry_after_header(WireError("x", "", "INTERNAL", retry_after_s=0.1)) == "1"
    assert retry_after_header(WireError("x", "", "INTERNAL")) is None


# ---- RemoteError ---------------------------------------------------------------------------


def test_a_remote_error_keeps_what_the_server_said() -> None:
    error = RemoteError.from_wire(SENT)
    assert (error.status, error.code, error.field, error.retry_after_s) == (
        "INVALID_ARGUMENT",
        "unknown_voice",
        "voice",
        1.5,
    )
    assert str(error) == f"INVALID_ARGUMENT: {SENT.message}" and error.message == SENT.message
    assert error.permanent
    assert exit_status(error) == exit_status(UnknownVoiceError("x")) == 2  # as a local one
    assert error.to_wire() == SENT  # and it can be passed on whole


def test_with_message_keeps_the_rest() -> None:
    sent = QuotaExceededError("over quota", retry_after_s=3.0).to_wire()
    error = RemoteError.from_wire(sent).with_message("over quota (gave up after 5 attempts)")
    assert isinstance(error, RemoteError)
    assert (error.status, error.code, error.retry_after_s) == ("RESOURCE_EXHAUSTED", sent.code, 3.0)
    assert error.message == "over quota (gave up after 5 attempts)"
    assert not error.permanent and exit_status(error) == 1


def test_without_a_code_from_the_server() -> None:
    for error in (
        RemoteError("UNAVAILABLE", "x"),
        RemoteError.from_wire(from_grpc("UNAVAILABLE", "x", ())),
    ):
        assert (error.code, error.field, error.retry_after_s) == ("remote_error", None, None)
        assert exit_status(error) == 1
    unknown = RemoteError("INVALID_ARGUMENT", "x", code="from_a_newer_server")
    assert unknown.code == "from_a_newer_server" and exit_status(unknown) == 1
    assert RemoteError.code == "remote_error"  # the class keeps its own
