"""Requests protobuf cannot decode end with ``INVALID_ARGUMENT``, as any other bad input does.

grpcio decodes a request before its handler runs, and answers a decoder's exception (a string
field holding invalid UTF-8, a truncated message: ``google.protobuf.message.DecodeError``)
with ``UNKNOWN``; a streamed request fails inside the handler instead, as an unexpected error
(``INTERNAL``). :class:`DecodeInterceptor` gives every method a deserializer that never
raises: what it cannot decode arrives as :class:`Undecodable`, which the method's behavior
(wrapped here) turns into :class:`~voicelane.common.errors.InvalidInputError` through the one
mapping (:mod:`voicelane.api.failures`) — a unary request ends the call before the handler
runs; a streamed one raises the error where the handler reads it, whose own error path
answers it.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import DecodeError

from voicelane.api.failures import grpc_reply
from voicelane.api.grpc_auth import Continuation, Handler, handler_behavior, replace_behavior
from voicelane.api.grpc_errors import abort
from voicelane.common.errors import InvalidInputError

Context = grpc.aio.ServicerContext[Any, Any]


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A request message protobuf refused, and why (its text names the message type)."""

    reason: str

    def error(self) -> InvalidInputError:
        return InvalidInputError(f"the request is not a valid message: {self.reason}")


def tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """``deserializer``, answering :class:`Undecodable` where it would raise."""
    if deserializer is None:
        return None
    decode = deserializer

    def deserialize(data: bytes) -> Any:
        try:
            return decode(data)
        except DecodeError as error:
            return Undecodable(" ".join(str(error).split())[:200])

    return deserialize


class DecodeInterceptor(grpc.aio.ServerInterceptor):
    """Every method of the front: undecodable requests are ``INVALID_ARGUMENT``."""

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        behavior = _checked(handler_behavior(handler), streamed=handler.request_streaming)
        return replace_behavior(handler, behavior, tolerant(handler.request_deserializer))


def _checked(behavior: Callable[..., Any], *, streamed: bool) -> Callable[..., Any]:
    """``behavior`` refusing an :class:`Undecodable` request (of any of the four kinds)."""

    def checked(request: Any) -> Any:
        if streamed:
            return _checked_stream(request)
        if isinstance(request, Undecodable):
            raise request.error()
        return request

    async def unary(request: Any, context: Context) -> Any:
        try:
            request = checked(request)
        except InvalidInputError as error:
            await abort(context, grpc_reply(error))
        return await behavior(request, context)

    async def streaming(request: Any, context: Context) -> AsyncIterator[Any]:
        try:
            request = checked(request)
        except InvalidInputError as error:
            await abort(context, grpc_reply(error))
        async with contextlib.aclosing(behavior(request, context)) as responses:
            async for response in responses:
                yield response

    return streaming if inspect.isasyncgenfunction(behavior) else unary


async def _checked_stream(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        if isinstance(request, Undecodable):
            raise request.error()
        yield request
