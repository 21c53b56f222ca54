"""Every public error of voicelane, in one module.

Every error the service raises on purpose derives from :class:`VoicelaneError`. Each class
says, in one place, whether it is permanent (bad input: never retried) or transient (retried),
and which HTTP status, gRPC status code name and CLI exit status it maps to. The fronts
translate with :func:`http_status`, :func:`grpc_status_name` and :func:`exit_status` and never
decide this themselves.

An error crosses a process boundary whole (a worker's error through the real-time lane, a
server's error to the SDK): :meth:`VoicelaneError.to_wire` gives its :class:`WireError` (code,
message, field, retry hint and status) and :func:`error_from_wire` rebuilds the same class
from it, by its ``code`` (every class with a code of its own is registered under it; an error
known only by its status — an older peer's — comes back as the class of that status).

gRPC codes are given by name (``"INVALID_ARGUMENT"``) so that ``core`` stays import-light;
the gRPC front resolves them with ``grpc.StatusCode[name]``.

Messages are one line, safe to show to the caller: they end up in JSON bodies, gRPC details
and on stderr. Errors about one field of a request name it in :attr:`VoicelaneError.field`
(and the message starts with it), so a client can tell which field to fix.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

_BY_CODE: dict[str, type[VoicelaneError]] = {}
"""Error code → the class that first declared it (:func:`error_from_wire`)."""


@dataclass(frozen=True, slots=True)
class WireError:
    """An error as it crosses a process boundary: everything a client may act on."""

    code: str
    """:attr:`VoicelaneError.code` (``unknown_voice``, ``quota_exceeded``...); ``""`` when the
    sender gave none (a peer older than error codes on its wire)."""
    message: str
    status: str
    """The gRPC status name it maps to; what a receiver falls back on for an unknown code."""
    field: str | None = None
    retry_after_s: float | None = None


class VoicelaneError(Exception):
    """Base of every deliberate voicelane error. The message is one line, safe to show."""

    code: ClassVar[str] = "internal"
    permanent: ClassVar[bool] = False
    http_status: ClassVar[int] = 500
    grpc_status: ClassVar[str] = "INTERNAL"
    exit_status: ClassVar[int] = 1

    def __init__(
        self, message: str, *, field: str | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(" ".join(message.split()))
        self.field = field
        """The request field the error is about, when there is one (``speed``, ``voice``)."""
        self.retry_after_s = retry_after_s
        """When retrying may succeed, in seconds (``Retry-After``; gRPC ``retry-after-ms``)."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "code" in cls.__dict__:
            _BY_CODE.setdefault(cls.code, cls)

    @property
    def message(self) -> str:
        return str(self)

    def to_wire(self) -> WireError:
        return WireError(
            code=self.code,
            message=self.message,
            status=self.grpc_status,
            field=self.field,
            retry_after_s=self.retry_after_s,
        )


_BY_CODE[VoicelaneError.code] = VoicelaneError


# ---- the caller's input is wrong: permanent -----------------------------------------------


class InvalidInputError(VoicelaneError):
    """Raised when the caller's input is wrong: empty or binary text, a value out of range,
    an unknown option. Never retried."""

    code = "invalid_input"
    permanent = True
    http_status = 422
    grpc_status = "INVALID_ARGUMENT"
    exit_status = 2


class UnknownVoiceError(InvalidInputError):
    """Raised when a request names a voice the engine does not have."""

    code = "unknown_voice"


class TextTooLargeError(InvalidInputError):
    """Raised when a text (or a request body) is over its configured limit."""

    code = "text_too_large"
    http_status = 413


class UnsupportedFormatError(InvalidInputError):
    """Raised for an audio format, or a format/sample-rate pair, that cannot be produced."""

    code = "unsupported_format"


class MalformedRequestError(InvalidInputError):
    """Raised when a request body cannot be parsed at all (bad JSON, not an object)."""

    code = "malformed_request"
    http_status = 400


class InvalidDocumentError(InvalidInputError):
    """Raised for an uploaded document (EPUB, HTML, Markdown...) that cannot or may not be
    read: malformed, hostile (a zip bomb, a path outside the archive, a DTD) or without
    readable text. The message names what is wrong."""

    code = "invalid_document"
    http_status = 400


class UnsupportedMediaTypeError(InvalidInputError):
    """Raised when a request body comes in a content type the route does not take."""

    code = "unsupported_media_type"
    http_status = 415


class InvalidKeyError(InvalidInputError):
    """Raised for a storage key or prefix outside the allowed form
    (:func:`voicelane.core.storage.validate_key`)."""

    code = "invalid_key"


class OutputError(VoicelaneError):
    """Raised when the output cannot be written where the caller asked (CLI only)."""

    code = "output_unwritable"
    permanent = True
    exit_status = 2


class ConfigError(VoicelaneError):
    """Raised when the operator's settings are unusable (missing keys or secrets, a bad
    combination). The process cannot start; ``voicelane`` exits with status 2."""

    code = "bad_config"
    permanent = True
    exit_status = 2


# ---- who may do what ------------------------------------------------------------------------


class AuthError(VoicelaneError):
    """Raised when a request carries no valid API key."""

    code = "unauthenticated"
    permanent = True
    http_status = 401
    grpc_status = "UNAUTHENTICATED"
    exit_status = 2


class NotFoundError(VoicelaneError):
    """Raised when the thing a request names does not exist (or belongs to another tenant:
    the two are indistinguishable on purpose)."""

    code = "not_found"
    permanent = True
    http_status = 404
    grpc_status = "NOT_FOUND"
    exit_status = 2


class JobNotFoundError(NotFoundError):
    """Raised when no job with that id exists for the caller's tenant."""

    code = "job_not_found"


class StreamNotFoundError(NotFoundError):
    """Raised when a stream to resume is unknown, expired or another tenant's."""

    code = "stream_not_found"


class JobStateError(VoicelaneError):
    """Raised when a job is not in a state that allows the operation (download before done,
    cancel after failed)."""

    code = "job_state"
    permanent = True
    http_status = 409
    grpc_status = "FAILED_PRECONDITION"
    exit_status = 2


class StreamExistsError(VoicelaneError):
    """Raised when a new stream asks for a request id that is already taken."""

    code = "stream_exists"
    permanent = True
    http_status = 409
    grpc_status = "ALREADY_EXISTS"


class VoiceExistsError(VoicelaneError):
    """Raised when a tenant creates a voice under a name it already has."""

    code = "voice_exists"
    permanent = True
    http_status = 409
    grpc_status = "ALREADY_EXISTS"
    exit_status = 2


class LinkError(VoicelaneError):
    """Raised when a local download link must not be served."""

    code = "link_invalid"
    permanent = True
    http_status = 403
    grpc_status = "PERMISSION_DENIED"


class LinkInvalidError(LinkError):
    """Raised for a bad signature, malformed parameters, or parameters changed after
    signing."""


class LinkExpiredError(LinkError):
    """Raised when a signed link is past its expiry."""

    code = "link_expired"


# ---- the lifecycle of one request -------------------------------------------------------------


class CancelledError(VoicelaneError):
    """Raised when the caller cancelled the request before it finished."""

    code = "cancelled"
    permanent = True
    http_status = 409
    grpc_status = "CANCELLED"


class DeadlineExceededError(VoicelaneError):
    """Raised when the request's deadline passed before it could finish."""

    code = "deadline_exceeded"
    permanent = True
    http_status = 504
    grpc_status = "DEADLINE_EXCEEDED"


# ---- the service cannot take it now: transient ------------------------------------------------


class UnavailableError(VoicelaneError):
    """Raised when something the request needs is unreachable or not ready (Redis, the job
    queue, a worker that stopped, an engine whose voices are not registered yet). Retry."""

    code = "unavailable"
    http_status = 503
    grpc_status = "UNAVAILABLE"


class ShuttingDownError(UnavailableError):
    """Raised when the component is stopping; the work may be retried elsewhere."""

    code = "shutting_down"


class NoCapacityError(VoicelaneError):
    """Raised when the real-time lane has no free slot for one more stream. Retry shortly."""

    code = "no_capacity"
    http_status = 503
    grpc_status = "RESOURCE_EXHAUSTED"


class QuotaExceededError(VoicelaneError):
    """Raised when a tenant is over one of its quotas: requests per second, characters of
    queued jobs, concurrent streams. ``retry_after_s`` says when to try again."""

    code = "quota_exceeded"
    http_status = 429
    grpc_status = "RESOURCE_EXHAUSTED"


class StoreFullError(VoicelaneError):
    """Raised when Redis is at its memory limit: new work is refused (nothing is evicted, no
    job state is lost) until running work finishes and frees memory."""

    code = "store_full"
    http_status = 503
    grpc_status = "RESOURCE_EXHAUSTED"


# ---- the engine -------------------------------------------------------------------------------


class EngineError(VoicelaneError):
    """Raised when the engine failed on a batch; transient unless a subclass says otherwise."""

    code = "engine_error"


class EngineOutOfMemoryError(EngineError):
    """Raised when the device ran out of memory on a batch. The batcher splits and retries."""

    code = "engine_out_of_memory"
    http_status = 503
    grpc_status = "RESOURCE_EXHAUSTED"


class EngineOutputMismatchError(EngineError):
    """Raised when the engine returned a different number of outputs than it was given."""

    code = "engine_output_mismatch"


class ModelLoadError(EngineError):
    """Raised when the checkpoint or the engine's configuration cannot be loaded.

    The operator's configuration error (a missing or corrupted file, a wrong directory, a bad
    setting): retrying cannot help, so it is permanent, and ``voicelane`` exits with status 2
    as for other bad input. The message is one line and names the offending file.
    """

    code = "model_load_failed"
    permanent = True
    http_status = 503
    grpc_status = "UNAVAILABLE"
    exit_status = 2


class EngineNotInstalledError(ModelLoadError):
    """Raised when an engine's optional dependencies (the ``chattts`` extra) are missing."""

    code = "engine_not_installed"


# ---- storage ----------------------------------------------------------------------------------


class StorageError(VoicelaneError):
    """Raised when the object store failed or refused. Transient unless a subclass says
    otherwise."""

    code = "storage_error"


class StorageUnavailableError(StorageError):
    """Raised when the store cannot be reached or answers 5xx / throttles: retry later."""

    code = "storage_unavailable"
    http_status = 503
    grpc_status = "UNAVAILABLE"


class StorageFullError(StorageUnavailableError):
    """Raised when the store has no room: the local file system is full (``ENOSPC``,
    ``EDQUOT``) or under ``min_free_bytes``, or an S3-compatible store answers that it is full
    (MinIO's ``XMinioStorageFull``, HTTP 507). Transient: the batch lane retries with a long
    backoff (docs/operations.md, "Full storage"); the fronts answer 503 ``storage_full``."""

    code = "storage_full"
    grpc_status = "RESOURCE_EXHAUSTED"


class StorageNotFoundError(StorageError):
    """Raised when no object is stored under that key."""

    code = "not_found"
    permanent = True
    http_status = 404
    grpc_status = "NOT_FOUND"


class StorageIntegrityError(StorageError):
    """Raised when what the store holds is not what was written (size or SHA-256 differ).
    Retrying the upload may help, so it is transient."""

    code = "storage_integrity"
    grpc_status = "DATA_LOSS"


class StorageConfigError(StorageError):
    """Raised when the storage settings are unusable (missing secret, no credentials...)."""

    code = "storage_misconfigured"
    permanent = True
    exit_status = 2


# ---- outside parties -------------------------------------------------------------------------


class CallbackError(VoicelaneError):
    """Raised when a job's callback URL could not be reached or answered 5xx/429 (retried)."""

    code = "callback_failed"


class RedisServerError(VoicelaneError):
    """Raised when a local ``redis-server`` could not be started or stopped."""

    code = "redis_server"


class RemoteError(VoicelaneError):
    """Raised by the clients when a voicelane server answered with an error.

    ``status`` is the gRPC status name the server sent (the REST client maps HTTP statuses
    to the same names); permanence follows it, so retry loops can ask :attr:`permanent`.
    ``str(error)`` is ``"STATUS: message"``; :attr:`message` is the message alone. What the
    server said besides (:mod:`voicelane.common.error_wire`) comes along: :attr:`code` (the
    error's own code, ``unknown_voice``; ``remote_error`` when the server sent none),
    :attr:`field` and :attr:`retry_after_s`; the exit status is the one that code has here.
    """

    code = "remote_error"

    def __init__(
        self,
        status: str,
        message: str,
        *,
        code: str | None = None,
        field: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(
            message or _status_words(status), field=field, retry_after_s=retry_after_s
        )
        # VoicelaneError declares these per class; a RemoteError carries the server's, per call.
        self.status = status
        self.grpc_status = status  # type: ignore[misc]
        self.permanent = status in PERMANENT_STATUSES  # type: ignore[misc]
        if code:
            self.code = code  # type: ignore[misc]
            named = _BY_CODE.get(code)
            if named is not None and named is not RemoteError:
                self.exit_status = named.exit_status  # type: ignore[misc]

    @classmethod
    def from_wire(cls, wire: WireError) -> RemoteError:
        """The error a server sent, as the client raises it."""
        return cls(
            wire.status,
            wire.message,
            code=wire.code,
            field=wire.field,
            retry_after_s=wire.retry_after_s,
        )

    def with_message(self, message: str) -> RemoteError:
        """The same error (status, code, field, retry hint) with another message."""
        return RemoteError.from_wire(replace(self.to_wire(), message=message))

    @property
    def message(self) -> str:
        return str(self.args[0])

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"


PERMANENT_STATUSES = frozenset(
    {"INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED",
     "UNAUTHENTICATED", "FAILED_PRECONDITION", "OUT_OF_RANGE", "UNIMPLEMENTED", "CANCELLED",
     "DEADLINE_EXCEEDED"}
)  # fmt: skip
"""gRPC statuses that retrying the same request cannot change."""


# ---- mappings ---------------------------------------------------------------------------------

_BY_STATUS: dict[str, type[VoicelaneError]] = {
    "INVALID_ARGUMENT": InvalidInputError,
    "UNAUTHENTICATED": AuthError,
    "NOT_FOUND": NotFoundError,
    "ALREADY_EXISTS": StreamExistsError,
    "FAILED_PRECONDITION": JobStateError,
    "PERMISSION_DENIED": LinkError,
    "CANCELLED": CancelledError,
    "DEADLINE_EXCEEDED": DeadlineExceededError,
    "UNAVAILABLE": UnavailableError,
    "RESOURCE_EXHAUSTED": NoCapacityError,
}


def error_from_wire(wire: WireError) -> VoicelaneError:
    """The error ``wire`` describes, as the class its code names, with its field and retry hint
    (an unknown code — a newer peer's — falls back on the class of its status)."""
    cls = _BY_CODE.get(wire.code)
    if cls is None or cls is RemoteError:
        cls = _BY_STATUS.get(wire.status, VoicelaneError)
    message = wire.message or _status_words(wire.status)
    return cls(message, field=wire.field, retry_after_s=wire.retry_after_s)


def _status_words(status: str) -> str:
    """The message of an error that came with none: its status in words (``unavailable``)."""
    return status.lower().replace("_", " ")


_HTTP_TO_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "FAILED_PRECONDITION",
    413: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT",
    422: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def status_for_http(http: int) -> str:
    """The gRPC status name an HTTP error status of a voicelane server stands for."""
    return _HTTP_TO_STATUS.get(http, "INTERNAL")


def http_status(error: BaseException) -> int:
    return error.http_status if isinstance(error, VoicelaneError) else 500


def grpc_status_name(error: BaseException) -> str:
    return error.grpc_status if isinstance(error, VoicelaneError) else "INTERNAL"


def exit_status(error: BaseException) -> int:
    return error.exit_status if isinstance(error, VoicelaneError) else 1


def is_permanent(error: BaseException) -> bool:
    return isinstance(error, VoicelaneError) and error.permanent
