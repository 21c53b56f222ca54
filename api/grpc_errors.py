"""Ending a gRPC call with the error its client sees: the status, details and trailing metadata
of :func:`voicelane.api.failures.grpc_reply` (the service's RPCs and the auth interceptor's
refusals alike)."""

from __future__ import annotations

from typing import Any, Never, TypeAlias

import grpc
import grpc.aio

from voicelane.api.failures import GrpcReply

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"  # generic only in the stubs


def status_code(reply: GrpcReply) -> grpc.StatusCode:
    """The reply's status (INTERNAL for a name gRPC does not have, or OK)."""
    code = grpc.StatusCode.__members__.get(reply.status, grpc.StatusCode.INTERNAL)
    return grpc.StatusCode.INTERNAL if code is grpc.StatusCode.OK else code


async def abort(context: Context, reply: GrpcReply) -> Never:
    await context.abort(status_code(reply), reply.details, trailing_metadata=reply.trailers)
