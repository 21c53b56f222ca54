"""core/errors.py: one hierarchy, one mapping each way between errors and statuses."""

from __future__ import annotations

import inspect

import pytest

from core import errors
from core.errors import (
    InvalidInputError,
    RemoteError,
    VoicelaneError,
    error_for_status,
    exit_status,
    grpc_status_name,
    http_status,
    is_permanent,
    status_for_http,
)

PUBLIC = [
    cls
    for _, cls in inspect.getmembers(errors, inspect.isclass)
    if issubclass(cls, VoicelaneError) and cls.__module__ == "core.errors"
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
    error = error_for_status(status, "why")
    assert grpc_status_name(error) == status and error.message == "why"


def test_an_unknown_status_is_internal_and_an_empty_message_names_the_status() -> None:
    assert grpc_status_name(error_for_status("DATA_LOSS", "x")) == "INTERNAL"
    assert error_for_status("UNAVAILABLE", "").message == "unavailable"


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
