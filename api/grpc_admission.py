"""How many calls the gRPC front holds at once, counted per tenant, after the key is checked.

grpcio's own ``maximum_concurrent_rpcs`` counts every call of the server before anything looks
at it: 1,000 ``Converse`` calls of one tenant that never sent ``start`` (even on one HTTP/2
connection) left other tenants, and the health check, with RESOURCE_EXHAUSTED (issue 26 item 3).
The front does not set it; :class:`AdmissionInterceptor` counts instead, once the API-key
interceptor has named the caller's tenant (a call without a valid key ends at once, uncounted):

- a tenant holds at most ``tenant_max_rpcs`` calls of this process (``quota_exceeded``, with
  a retry hint), so its idle calls count against itself only;
- all tenants together at most ``max_concurrent_rpcs`` (``no_capacity``);
- keyless calls that can stay open (health ``Watch``, server reflection) at most
  ``max_public_rpcs``, apart from the tenants';
- health ``Check`` (one short unary answer) is never counted: it stays reachable.

A call is refused before its handler runs (before a ``Converse`` waits for its ``start``) and
gives its place back when it ends, however it ends.
"""

from __future__ import annotations

import contextlib
import inspect
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio

from voicelane.api.failures import grpc_reply
from voicelane.api.grpc_auth import (
    PUBLIC_METHOD_PREFIXES,
    Continuation,
    Handler,
    current_tenant,
    handler_behavior,
    replace_behavior,
)
from voicelane.api.grpc_errors import Context, abort
from voicelane.common.errors import NoCapacityError, QuotaExceededError, VoicelaneError

UNCOUNTED_METHODS = frozenset({"/grpc.health.v1.Health/Check"})
"""Never refused for being too many: a health check answers at once and must stay reachable."""
RETRY_AFTER_S = 1.0
"""The retry hint of a refusal: calls end all the time, none can say when."""


@dataclass
class CallLimits:
    """The calls open now (per tenant, all tenants, keyless) and their limits."""

    max_calls: int
    tenant_max_calls: int
    max_public_calls: int
    tenants: Counter[str] = field(default_factory=Counter)
    public: int = 0

    @property
    def calls(self) -> int:
        """Calls with a key open now, all tenants together."""
        return sum(self.tenants.values())

    def admit(self, tenant: str | None) -> None:
        """Count one more call of ``tenant`` (None: a keyless one), or raise why not."""
        if tenant is None:
            if self.public >= self.max_public_calls:
                raise NoCapacityError(
                    f"over {self.max_public_calls} concurrent keyless calls; retry shortly",
                    retry_after_s=RETRY_AFTER_S,
                )
            self.public += 1
            return
        if self.tenants[tenant] >= self.tenant_max_calls:
            raise QuotaExceededError(
                f"the tenant has {self.tenant_max_calls} concurrent calls open on this server;"
                " end one first",
                retry_after_s=RETRY_AFTER_S,
            )
        if self.calls >= self.max_calls:
            raise NoCapacityError(
                f"the server holds {self.max_calls} concurrent calls; retry shortly",
                retry_after_s=RETRY_AFTER_S,
            )
        self.tenants[tenant] += 1

    def release(self, tenant: str | None) -> None:
        """A call :meth:`admit` counted has ended."""
        if tenant is None:
            self.public -= 1
            return
        self.tenants[tenant] -= 1
        if self.tenants[tenant] <= 0:
            del self.tenants[tenant]


class AdmissionInterceptor(grpc.aio.ServerInterceptor):
    """Counts each call in :class:`CallLimits`; refuses what is over them. Runs inside the
    API-key interceptor (after it in the server's list), where the tenant is known."""

    def __init__(self, limits: CallLimits) -> None:
        self.limits = limits

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method in UNCOUNTED_METHODS:
            return handler
        public = method.startswith(PUBLIC_METHOD_PREFIXES)
        return replace_behavior(handler, _admitted(handler_behavior(handler), self.limits, public))


def _admitted(behavior: Callable[..., Any], limits: CallLimits, public: bool) -> Callable[..., Any]:
    """``behavior`` counted in ``limits`` while it runs (refused when over them)."""

    async def admit(context: Context) -> str | None:
        tenant = None if public else current_tenant()
        try:
            limits.admit(tenant)
        except VoicelaneError as error:
            await abort(context, grpc_reply(error))
        return tenant

    async def unary(request: Any, context: Context) -> Any:
        tenant = await admit(context)
        try:
            return await behavior(request, context)
        finally:
            limits.release(tenant)

    async def streaming(request: Any, context: Context) -> AsyncIterator[Any]:
        tenant = await admit(context)
        try:
            async with contextlib.aclosing(behavior(request, context)) as responses:
                async for response in responses:
                    yield response
        finally:
            limits.release(tenant)

    return streaming if inspect.isasyncgenfunction(behavior) else unary
