"""Per-tenant request rate: one token bucket per tenant in Redis, shared by every front.

Every submission — a job over REST, a stream over gRPC, the WebSocket or OpenAI's route —
takes one token from its tenant's bucket (:meth:`RequestRate.take`). The bucket refills at
``tenant_requests_per_s`` up to ``tenant_request_burst``; an empty bucket refuses with
:class:`~voicelane.common.errors.QuotaExceededError` (429 / RESOURCE_EXHAUSTED) and says when the
next token is due. The bucket lives in Redis, so every front process and replica draws from
the same one, and the clock is Redis's (``TIME``), so the fronts' clocks do not matter.

Its key is this module's only one, :data:`voicelane.core.ledger.keys.RATE_BUCKET`: the bucket
bounds both lanes' submissions and runs on the fronts' asyncio clients, so it is not the
(batch-lane, synchronous) ledger's to take — but every ``vl:`` key outside the real-time lane
is built from that one table, which its test checks against Redis.

The tenant's other limits live beside the state they bound: queued characters in the job
ledger (:mod:`voicelane.core.ledger.queued_chars`, taken by ``Ledger.jobs.create``),
concurrent streams in the real-time lane
(:meth:`voicelane.core.lane.front.RealtimeClient.hold_tenant_slot`).
"""

from __future__ import annotations

import redis.asyncio as aredis

from voicelane.common.errors import QuotaExceededError
from voicelane.core.ledger.keys import RATE_BUCKET

# KEYS: bucket ; ARGV: rate per second, burst. Returns 0 (taken) or ms until a token is due.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or burst
local ts = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate / 1000)
local wait_ms = 0
if tokens >= 1 then
  tokens = tokens - 1
else
  wait_ms = math.ceil((1 - tokens) * 1000 / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return wait_ms
"""


class RequestRate:
    """The tenants' token buckets (asyncio: the fronts)."""

    def __init__(self, client: aredis.Redis, *, per_s: float, burst: int) -> None:
        self._per_s = per_s
        self._burst = burst
        self._take = client.register_script(_TAKE)

    async def take(self, tenant: str) -> None:
        """One submission for ``tenant``; QuotaExceededError when its bucket is empty."""
        wait_ms = int(
            await self._take(keys=[RATE_BUCKET.key(tenant)], args=[self._per_s, self._burst])
        )
        if wait_ms:
            raise QuotaExceededError(
                f"tenant {tenant!r} is over its rate of {self._per_s:g} requests per second "
                f"(bursts of {self._burst}); retry in {wait_ms} ms",
                retry_after_s=wait_ms / 1000,
            )
