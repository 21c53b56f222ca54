"""The fronts' side of the real-time lane (asyncio): :class:`RealtimeClient`.

A front submits a stream request with its text (or feeds a conversation's text piece by
piece), reads the request's output stream, sets the cancel mark when its client leaves, and
decides admission from the workers' capacity reports and the tenant's open streams. Keys are
:mod:`voicelane.core.lane.keys`; what the entries hold, :mod:`voicelane.core.lane.messages`.
Timings come from :class:`~voicelane.core.settings.RealtimeSettings`, the one source of them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast

import redis
import redis.asyncio as aredis

from voicelane.core.lane.keys import (
    GROUP,
    HOLD_TENANT_SLOT,
    WAKE_TTL_S,
    cancel_key,
    capabilities_key,
    heartbeat_key,
    input_key,
    output_key,
    owner_key,
    read_key,
    requests_key,
    tenant_key,
    tenant_streams_key,
    wake_key,
    workers_key,
)
from voicelane.core.lane.messages import (
    CapacityReport,
    InputKind,
    InputPiece,
    OutputEvent,
    StreamRequest,
    now_ms,
)
from voicelane.core.redis_clients import async_client
from voicelane.core.redis_target import RedisTarget
from voicelane.core.rules import EngineCapabilities
from voicelane.core.settings import RealtimeSettings

FULL_MARGIN_RATIO = 0.02
"""Redis counts as full (readiness: ``store_full``) within this share of its ``maxmemory``..."""
FULL_MARGIN_MIN_BYTES = 1024 * 1024
"""...and at least this many bytes of it."""


class RealtimeClient:
    """What a front does with the lane: submit, feed text, read output, cancel, admit."""

    def __init__(self, client: aredis.Redis, settings: RealtimeSettings | None = None) -> None:
        self.redis = client
        self.settings = settings or RealtimeSettings()
        self._hold_tenant_slot = client.register_script(HOLD_TENANT_SLOT)
        self._url: str | RedisTarget | None = None
        self._socket_timeout_s = 3.0

    @classmethod
    def from_url(
        cls,
        url: str | RedisTarget,
        settings: RealtimeSettings | None = None,
        *,
        socket_timeout_s: float = 3.0,
    ) -> RealtimeClient:
        """A client on its own pool. The socket timeout bounds how long a front waits on a
        Redis that stopped answering (its blocking reads wait far less: ``block_ms``)."""
        lane = cls(async_client(url, socket_timeout_s=socket_timeout_s), settings)
        lane._url = url
        lane._socket_timeout_s = socket_timeout_s
        return lane

    def twin(self) -> RealtimeClient:
        """Another client of the same Redis with the same timeouts, on its own pool: for a
        long blocking read that must not hold a connection the rest of the front needs.
        (A client built around a given Redis client, not a URL, shares that client.)"""
        if self._url is None:
            return RealtimeClient(self.redis, self.settings)
        return RealtimeClient.from_url(
            self._url, self.settings, socket_timeout_s=self._socket_timeout_s
        )

    async def close(self) -> None:
        await self.redis.aclose()

    async def hold_tenant_slot(
        self, tenant: str, request_id: str, *, until_ms: int, limit: int
    ) -> bool:
        """Count one more open stream for ``tenant`` until ``until_ms`` (its deadline) or
        :meth:`release_tenant_slot`; False when the tenant already holds ``limit``."""
        held = await self._hold_tenant_slot(
            keys=[tenant_streams_key(tenant)], args=[request_id, until_ms, now_ms(), limit]
        )
        return bool(held)

    async def release_tenant_slot(self, tenant: str, request_id: str) -> None:
        await self.redis.zrem(tenant_streams_key(tenant), request_id)

    async def reserve(self, request_id: str, tenant: str, ttl_s: int) -> bool:
        """Reserve ``request_id`` for ``tenant`` (False: the id is taken)."""
        return bool(await self.redis.set(tenant_key(request_id), tenant, nx=True, ex=ttl_s))

    async def exists(self, request_id: str) -> bool:
        """Whether any trace of the stream is left (reserved, served, output or input)."""
        keys = (
            tenant_key(request_id),
            owner_key(request_id),
            output_key(request_id),
            input_key(request_id),
        )
        return bool(await self.redis.exists(*keys))

    async def resumable(self, request_id: str, tenant: str) -> tuple[bool, bool]:
        """For a resume: (the stream is ``tenant``'s and still there, a worker wrote output)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.get(tenant_key(request_id))
        pipe.exists(output_key(request_id))
        pipe.exists(input_key(request_id))
        owner, has_output, queued = await pipe.execute()
        mine = owner is not None and owner.decode() == tenant
        return mine and bool(has_output or queued), bool(has_output)

    async def submit(
        self, request: StreamRequest, text: str | None = None, *, backpressure: bool = False
    ) -> None:
        """Queue the request on its engine's stream; with ``text`` (Synthesize) its whole
        input goes in at once. With ``backpressure`` (every stream of the gateway), its read
        mark starts at 0: the worker renders at most ``max_unread_output_s`` of audio beyond
        what :meth:`mark_read` says the client took (without it, a caller that reads the
        output stream itself, such as a test, gets it all at once)."""
        pipe = self.redis.pipeline(transaction=True)
        key = input_key(request.request_id)
        if text is not None:
            pipe.xadd(key, cast(Any, InputPiece(InputKind.TEXT, text).to_fields()))
            pipe.xadd(key, cast(Any, InputPiece(InputKind.END).to_fields()))
        pipe.expire(key, int(self.settings.output_ttl_s) + 60)
        if backpressure:  # the client took nothing yet
            ttl_s = self.read_mark_ttl_s(request.deadline_ms)
            pipe.set(read_key(request.request_id), 0, ex=ttl_s)
        pipe.xadd(requests_key(request.engine), cast(Any, request.to_fields()))
        await pipe.execute()

    def read_mark_ttl_s(self, deadline_ms: int) -> int:
        """How long a stream's read mark is kept: past its deadline and the resume window."""
        remaining_s = max(0, deadline_ms - now_ms()) // 1000
        return remaining_s + int(self.settings.output_ttl_s) + 60

    async def mark_read(self, request_id: str, read_ms: int, deadline_ms: int) -> None:
        """The stream's client has taken its output up to ``read_ms`` (the stream's clock):
        the worker may render ``max_unread_output_s`` beyond it."""
        await self.redis.set(read_key(request_id), read_ms, ex=self.read_mark_ttl_s(deadline_ms))

    async def send_input(self, request_id: str, piece: InputPiece) -> None:
        await self.redis.xadd(input_key(request_id), cast(Any, piece.to_fields()))

    async def read_outputs(
        self,
        after_ids: Mapping[str, str],
        block_ms: int | None,
        *,
        wake: tuple[str, str] | None = None,
        count: int = 64,
    ) -> tuple[dict[str, list[tuple[str, OutputEvent]]], str | None]:
        """Many requests' output in one XREAD: up to ``count`` entries per request after its
        entry id in ``after_ids`` (request id → entry id), waiting up to ``block_ms`` for the
        first (None: not at all). With ``wake`` (reader id, last wake entry id seen), the
        reader's wake stream is read too, so that :meth:`wake` ends the wait early.

        Returns the entries per request id (requests with none are left out) and the wake
        cursor to pass next time (None without ``wake``)."""
        keys = {output_key(request_id): request_id for request_id in after_ids}
        streams: dict[str, str] = {key: after_ids[rid] for key, rid in keys.items()}
        wake_stream = None
        if wake is not None:
            wake_stream = wake_key(wake[0])
            streams[wake_stream] = wake[1]
        if not streams:
            return {}, None
        reply: Any = await self.redis.xread(cast(Any, streams), count=count, block=block_ms)
        items = reply.items() if isinstance(reply, dict) else (reply or [])
        events: dict[str, list[tuple[str, OutputEvent]]] = {}
        cursor = wake[1] if wake is not None else None
        for raw_key, entries in items:
            key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
            if key == wake_stream:
                if entries:
                    cursor = entries[-1][0].decode()
                continue
            parsed = [
                (entry_id.decode(), OutputEvent.from_fields(fields))
                for entry_id, fields in entries
                if fields is not None
            ]
            if parsed:
                events[keys[key]] = parsed
        return events, cursor

    async def wake(self, reader_id: str) -> None:
        """End the reader's pending :meth:`read_outputs` early: one entry in its wake stream
        (exactly one kept; it expires ``WAKE_TTL_S`` after the last wake)."""
        key = wake_key(reader_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.xadd(key, {"w": "1"}, maxlen=1, approximate=False)
        pipe.expire(key, WAKE_TTL_S)
        await pipe.execute()

    async def cancel(self, request_id: str) -> None:
        await self.redis.set(cancel_key(request_id), "1", ex=int(self.settings.cancel_ttl_s))

    async def heartbeat_alive(self, request_id: str) -> bool:
        return bool(await self.redis.exists(heartbeat_key(request_id)))

    async def capacity(self, engine: str) -> int:
        """Free real-time slots of ``engine``'s live workers minus its requests not yet
        picked up.

        Only facts that survive a Redis restart count: the workers' fresh capacity reports
        and the entries past the group's last delivered id. (The group's ``lag`` does not:
        after Redis replays its append-only file, ``entries-read`` comes back as of the last
        AOF rewrite, and the lag stays high on an empty stream — it would refuse every
        stream forever.)
        """
        raw = cast(dict[bytes, bytes], await self.redis.hgetall(workers_key(engine)))
        fresh_after = time.time() - self.settings.worker_ttl_s
        free = 0
        for value in raw.values():
            report = CapacityReport.from_json(value)
            if report.ts >= fresh_after:
                free += report.free
        if free <= 0:
            return free
        return free - await self._backlog(engine, limit=free)

    async def capabilities(self, engine: str) -> EngineCapabilities | None:
        """What the workers of ``engine`` published; None if none did yet. Raises ValueError
        if what is stored is unreadable."""
        raw = cast(bytes | None, await self.redis.get(capabilities_key(engine)))
        return None if raw is None else EngineCapabilities.from_json(raw)

    async def ping(self) -> None:
        await self.redis.ping()

    async def refuses_writes(self) -> bool:
        """Whether Redis is at its ``maxmemory`` (``noeviction``) and refuses writes: Redis's
        own measure — used memory, less what it does not count against the limit (AOF and
        replica buffers) — within :data:`FULL_MARGIN_RATIO` of ``maxmemory`` (at least
        :data:`FULL_MARGIN_MIN_BYTES`). A full Redis hovers at its limit (a refused write's
        buffer is freed, the next small one fits), so the margin keeps the answer steady
        while it refuses most writes. One ``INFO memory``: no key, no write, so readiness can
        ask it every few seconds for nothing (well under a millisecond)."""
        memory = await self.redis.info("memory")
        limit_bytes = int(memory.get("maxmemory", 0))
        counted_bytes = int(memory.get("used_memory", 0)) - int(
            memory.get("mem_not_counted_for_evict", 0)
        )
        margin_bytes = max(FULL_MARGIN_MIN_BYTES, int(limit_bytes * FULL_MARGIN_RATIO))
        return limit_bytes > 0 and counted_bytes >= limit_bytes - margin_bytes

    async def _backlog(self, engine: str, *, limit: int) -> int:
        """Requests queued but not yet delivered to a worker, counted up to ``limit``."""
        requests = requests_key(engine)
        try:
            groups = await self.redis.xinfo_groups(requests)
        except redis.ResponseError:
            return 0
        for group in groups:
            if group.get("name") in (GROUP, GROUP.encode()):
                last = group.get("last-delivered-id", b"0-0")
                last_id = last.decode() if isinstance(last, bytes) else str(last)
                waiting = await self.redis.xrange(requests, min=f"({last_id}", count=limit)
                return len(waiting or [])
        return 0  # no group: no worker ever started (and none reports capacity)
