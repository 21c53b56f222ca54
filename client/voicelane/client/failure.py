"""A failed gRPC call as the :class:`~voicelane.common.errors.RemoteError` the SDK raises: the
status and details, with what the server's trailing metadata adds — its error code, the field
at fault and the retry hint (:mod:`voicelane.common.error_wire`)."""

from __future__ import annotations

import grpc.aio

from voicelane.common.error_wire import from_grpc
from voicelane.common.errors import RemoteError


def remote_error(error: grpc.aio.AioRpcError) -> RemoteError:
    wire = from_grpc(error.code().name, error.details() or "", error.trailing_metadata())
    return RemoteError.from_wire(wire)
