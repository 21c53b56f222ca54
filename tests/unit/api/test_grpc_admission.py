"""The gRPC front's count of calls open at once (issue 26 item 3)."""

from __future__ import annotations

import pytest

from voicelane.api.grpc_admission import CallLimits
from voicelane.common.errors import NoCapacityError, QuotaExceededError


def limits(max_calls: int = 5, tenant_max_calls: int = 3, max_public_calls: int = 2) -> CallLimits:
    return CallLimits(max_calls, tenant_max_calls, max_public_calls)


def test_a_tenant_over_its_calls_is_refused_with_a_retry_hint_and_others_are_not() -> None:
    calls = limits()
    for _ in range(3):
        calls.admit("acme")
    with pytest.raises(QuotaExceededError) as info:
        calls.admit("acme")
    assert info.value.retry_after_s and info.value.retry_after_s > 0
    calls.admit("other")
    assert calls.tenants == {"acme": 3, "other": 1}


def test_all_tenants_together_are_capped() -> None:
    calls = limits(max_calls=4)
    for tenant in ("a", "a", "b", "c"):
        calls.admit(tenant)
    with pytest.raises(NoCapacityError):
        calls.admit("d")


def test_keyless_calls_have_their_own_count() -> None:
    calls = limits(max_calls=1)
    calls.admit(None)
    calls.admit(None)
    with pytest.raises(NoCapacityError):
        calls.admit(None)
    calls.admit("acme")  # the tenants' limit is untouched by keyless calls
    assert (calls.public, calls.calls) == (2, 1)


def test_a_released_call_gives_its_place_back() -> None:
    calls = limits(tenant_max_calls=1)
    calls.admit("acme")
    calls.release("acme")
    calls.admit("acme")
    calls.release("acme")
    calls.admit(None)
    calls.release(None)
    assert (calls.tenants, calls.public, calls.calls) == ({}, 0, 0)
