"""voicelane.common.errors: one hierarchy, one mapping each way between errors and statuses."""

from __future__ import annotations

import inspect

import pytest

from voicelane.common import errors
from voicelane.common.errors import (
    InvalidInputError,
    RemoteError,
    UnknownVoiceError,
    VoicelaneError,
    WireError,
    error_from_wire,
    exit_status,
    grpc_status_name,
    http_status,
    is_permanent,
    status_for_http,
)

PUBLIC = [
    cls
    for _, cls in inspect.getmembers(errors, inspect.isclass)
    if issubclass(cls, VoicelaneError) and cls.__module__ == "voicelane.common.errors"
]


def test_every_public_error_says_when_it_is_raised() -> None:
    for cls in PUBLIC:
        if cls is VoicelaneError:
            continue
        assert (cls.__doc__ or "").startswith("Raised "), cls.__name__


def test_messages_are_one_line_and_fields_are_named() -> None:
    error = InvalidInputError("speed 9 is\nout of   range", field="speed")
    assert error.message == "speed 9 is out of range" and error.field == "speed"
    assert VoicelaneError("x").field is None


def test_mappings_of_an_error() -> None:
    error = InvalidInputError("bad")
    assert (http_status(error), grpc_status_name(error), exit_status(error)) == (
        422,
        "INVALID_ARGUMENT",
        2,
    )
    assert is_permanent(error)
    other = RuntimeError("boom")
    assert (http_status(other), grpc_status_name(other), exit_status(other)) == (
        500,
        "INTERNAL",
        1,
    )
    assert not is_permanent(other)


@pytest.mark.parametrize(
    "status",
    ["INVALID_ARGUMENT", "UNAUTHENTICATED", "NOT_FOUND", "ALREADY_EXISTS",
     "FAILED_PRECONDITION", "PERMISSION_DENIED", "CANCELLED", "DEADLINE_EXCEEDED",
     "UNAVAILABLE", "RESOURCE_EXHAUSTED"],
)  # fmt: skip
def test_a_status_sent_over_the_wire_comes_back_as_the_class_that_carries_it(status: str) -> None:
    error = error_from_wire(WireError(code="", message="why", status=status))
    assert grpc_status_name(error) == status and error.message == "why"


def test_an_unknown_status_is_internal_and_an_empty_message_names_the_status() -> None:
    assert grpc_status_name(error_from_wire(WireError("", "x", "DATA_LOSS"))) == "INTERNAL"
    assert error_from_wire(WireError("", "", "UNAVAILABLE")).message == "unavailable"


def test_http_statuses_map_to_grpc_status_names() -> None:
    assert status_for_http(422) == status_for_http(413) == "INVALID_ARGUMENT"
    assert status_for_http(404) == "NOT_FOUND" and status_for_http(503) == "UNAVAILABLE"
    assert status_for_http(500) == status_for_http(418) == "INTERNAL"


def test_remote_error_carries_the_status_name() -> None:
    error = RemoteError("UNAVAILABLE", "no  worker\npicked it up")
    assert error.status == error.grpc_status == "UNAVAILABLE"
    assert error.message == "no worker picked it up"
    assert str(error) == "UNAVAILABLE: no worker picked it up"
    assert not error.permanent
    assert RemoteError("INVALID_ARGUMENT", "").permanent
    assert RemoteError("DEADLINE_EXCEEDED", "").permanent


WIRED = [c for c in PUBLIC if c is not RemoteError]


@pytest.mark.parametrize("cls", WIRED, ids=lambda c: c.__name__)
def test_an_error_crosses_the_wire_whole(cls: type[VoicelaneError]) -> None:
    """Code, message, field and retry hint survive; the class is the one its code names (two
    classes share ``not_found``: both are 404 / NOT_FOUND)."""
    sent = cls("why not", field="voice", retry_after_s=1.5)
    received = error_from_wire(sent.to_wire())
    assert received.code == sent.code
    assert (received.message, received.field, received.retry_after_s) == ("why not", "voice", 1.5)
    assert (received.http_status, received.grpc_status) == (sent.http_status, sent.grpc_status)
    assert received.permanent == sent.permanent
    if cls.__dict__.get("code") and cls.code != "not_found":
        assert type(received) is cls


def test_an_unknown_voice_keeps_its_field_and_class() -> None:
    received = error_from_wire(UnknownVoiceError("voice 'x' is unknown", field="voice").to_wire())
    assert isinstance(received, UnknownVoiceError) and received.field == "voice"


def test_an_unknown_code_falls_back_on_its_status() -> None:
    wire = WireError(code="from_a_newer_peer", message="", status="RESOURCE_EXHAUSTED")
    received = error_from_wire(wire)
    assert received.grpc_status == "RESOURCE_EXHAUSTED" and received.message == "resource exhausted"
