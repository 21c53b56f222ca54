"""API-key authentication of the gRPC front: a server interceptor and the caller's tenant.

Every call of ``voicelane.v1.Speech`` needs ``authorization: Bearer KEY`` metadata with one
of the REST API's keys (:class:`voicelane.api.auth.ApiKeys`: SHA-256 digests compared with
:func:`hmac.compare_digest`). A call without a valid key ends with ``UNAUTHENTICATED`` before
its handler runs. Health checks and server reflection need no key.

The interceptor wraps the method's handler so that the tenant is set in a context variable
inside the handler's own task; handlers read it with :func:`current_tenant`.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import Any, TypeAlias

import grpc
import grpc.aio

from voicelane.api.auth import ApiKeys
from voicelane.api.failures import grpc_reply
from voicelane.api.grpc_errors import abort
from voicelane.common.errors import AuthError

log = logging.getLogger(__name__)

PUBLIC_METHOD_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
"""Methods that need no key: health checks and server reflection."""

_tenant: ContextVar[str | None] = ContextVar("voicelane_grpc_tenant", default=None)

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"  # generic only in the stubs
Continuation: TypeAlias = "Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]]"


def current_tenant() -> str:
    """The tenant of the call being handled (set by :class:`AuthInterceptor`)."""
    tenant = _tenant.get()
    if tenant is None:
        raise AuthError("the call was not authenticated")
    return tenant


def authorization_value(metadata: Any) -> str | None:
    """The first ``authorization`` entry of the call's metadata, as text."""
    for key, value in metadata or ():
        if key.lower() == "authorization":
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return None


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Checks the bearer key of every non-public call; refuses with UNAUTHENTICATED."""

    def __init__(self, keys: ApiKeys) -> None:
        self._keys = keys

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(PUBLIC_METHOD_PREFIXES):
            return handler
        header = authorization_value(handler_call_details.invocation_metadata)
        try:
            tenant = self._keys.tenant_for_header(header)
        except AuthError as error:
            log.info("refused %s: %s", method, error.message)
            return replace_behavior(handler, _refusal(error))
        return replace_behavior(handler, _with_tenant(handler_behavior(handler), tenant))


def handler_behavior(handler: Handler) -> Callable[..., Any]:
    behavior = handler.unary_unary or handler.unary_stream
    behavior = behavior or handler.stream_unary or handler.stream_stream
    if behavior is None:
        raise RuntimeError("a method handler without a behavior")
    return behavior


def _refusal(
    error: AuthError,
) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]:
    """A behavior of any kind that ends the call with ``error`` (UNAUTHENTICATED)."""

    async def refuse(_request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await abort(context, grpc_reply(error))

    return refuse


def _with_tenant(behavior: Callable[..., Any], tenant: str) -> Callable[..., Any]:
    """``behavior`` with the tenant set in its task's context (streaming or not)."""

    async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        _tenant.set(tenant)
        return await behavior(request, context)

    async def streaming(
        request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        _tenant.set(tenant)  # each call runs in its own task: nothing to reset
        async with contextlib.aclosing(behavior(request, context)) as responses:
            async for response in responses:  # closed with us: its cleanup runs now
                yield response

    return streaming if inspect.isasyncgenfunction(behavior) else unary


def replace_behavior(
    handler: Handler,
    behavior: Callable[..., Any],
    request_deserializer: Callable[[bytes], Any] | None = None,
) -> Handler:
    """A handler of the same kind and (de)serializers as ``handler`` running ``behavior``
    (and decoding requests with ``request_deserializer`` when given)."""
    if handler.request_streaming and handler.response_streaming:
        make = grpc.stream_stream_rpc_method_handler
    elif handler.request_streaming:
        make = grpc.stream_unary_rpc_method_handler
    elif handler.response_streaming:
        make = grpc.unary_stream_rpc_method_handler
    else:
        make = grpc.unary_unary_rpc_method_handler
    return make(
        behavior,
        request_deserializer=request_deserializer or handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
