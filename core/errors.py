"""The one error hierarchy of voicelane.

Every error the service raises on purpose derives from :class:`VoicelaneError`. Each class
says, in one place, whether it is permanent (bad input: never retried) or transient (retried),
and which HTTP status, gRPC status code name and CLI exit status it maps to. The fronts
translate with :func:`http_status`, :func:`grpc_status_name` and :func:`exit_status` and never
decide this themselves.

gRPC codes are given by name (``"INVALID_ARGUMENT"``) so that ``core`` stays import-light;
the gRPC front resolves them with ``grpc.StatusCode[name]``.
"""

from __future__ import annotations

from typing import ClassVar


class VoicelaneError(Exception):
    """Base of every deliberate voicelane error. The message is one line, safe to show."""

    code: ClassVar[str] = "internal"
    permanent: ClassVar[bool] = False
    http_status: ClassVar[int] = 500
    grpc_status: ClassVar[str] = "INTERNAL"
    exit_status: ClassVar[int] = 1

    def __init__(self, message: str) -> None:
        # One line, always: messages end up in JSON bodies, gRPC details and stderr.
        super().__init__(" ".join(message.split()))

    @property
    def message(self) -> str:
        return str(self)


# ---- permanent: the request is wrong; retrying cannot help -------------------------------


class InvalidInputError(VoicelaneError):
    """The caller's input is wrong (empty text, bad encoding, unknown format...)."""

    code = "invalid_input"
    permanent = True
    http_status = 422
    grpc_status = "INVALID_ARGUMENT"
    exit_status = 2


class UnknownVoiceError(InvalidInputError):
    code = "unknown_voice"


class TextTooLargeError(InvalidInputError):
    code = "text_too_large"
    http_status = 413


class UnsupportedFormatError(InvalidInputError):
    code = "unsupported_format"


class OutputError(VoicelaneError):
    """The output cannot be written where the caller asked (CLI only)."""

    code = "output_unwritable"
    permanent = True
    http_status = 500
    grpc_status = "INTERNAL"
    exit_status = 2


# ---- lifecycle of one request ------------------------------------------------------------


class CancelledError(VoicelaneError):
    """The caller cancelled the request before it ran."""

    code = "cancelled"
    permanent = True
    http_status = 409
    grpc_status = "CANCELLED"


class DeadlineExceededError(VoicelaneError):
    """The request's deadline passed before it could run."""

    code = "deadline_exceeded"
    permanent = True
    http_status = 504
    grpc_status = "DEADLINE_EXCEEDED"


class ShuttingDownError(VoicelaneError):
    """The component is stopping; the work may be retried elsewhere."""

    code = "shutting_down"
    http_status = 503
    grpc_status = "UNAVAILABLE"


# ---- transient / engine side -------------------------------------------------------------


class EngineError(VoicelaneError):
    """The engine failed on a batch; transient unless a subclass says otherwise."""

    code = "engine_error"
    http_status = 500
    grpc_status = "INTERNAL"


class EngineOutOfMemoryError(EngineError):
    """The device ran out of memory on a batch. The batcher splits and retries."""

    code = "engine_out_of_memory"
    http_status = 503
    grpc_status = "RESOURCE_EXHAUSTED"


class EngineOutputMismatchError(EngineError):
    """The engine returned a different number of outputs than it was given inputs."""

    code = "engine_output_mismatch"


def http_status(error: BaseException) -> int:
    return error.http_status if isinstance(error, VoicelaneError) else 500


def grpc_status_name(error: BaseException) -> str:
    return error.grpc_status if isinstance(error, VoicelaneError) else "INTERNAL"


def exit_status(error: BaseException) -> int:
    return error.exit_status if isinstance(error, VoicelaneError) else 1


def is_permanent(error: BaseException) -> bool:
    return isinstance(error, VoicelaneError) and error.permanent
