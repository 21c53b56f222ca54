"""The workers' side of the real-time lane (threads): claims, batched session calls, upkeep.

A GPU worker claims stream requests (:meth:`RealtimeWorkerClient.claim_new`, and the
requests of a worker that died: :meth:`~RealtimeWorkerClient.claim_abandoned`), makes every
call on its sessions' behalf through a :class:`WorkerBatch` — one pipeline per round for all
of them (:class:`voicelane.workers.realtime_io.LaneIO` runs the rounds) — trims the request
stream, reports its free slots and publishes its engine's capabilities.

Delivery: a worker reads new requests with XREADGROUP, keeps their entries pending while it
serves them, and refreshes their idle time (XCLAIM JUSTID) as a heartbeat. Another worker
takes over entries idle longer than ``reclaim_idle_s`` (XAUTOCLAIM) — the first one died — and
continues after the last sentence that was completely sent: the client may see a gap, never
a duplicate or reordered ``seq``. The request stream is trimmed by MINID below the oldest
pending entry, never by MAXLEN, so trimming cannot drop work in progress.

Keys are :mod:`voicelane.core.lane.keys`; what the entries hold,
:mod:`voicelane.core.lane.messages`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import redis

from voicelane.core.lane.keys import (
    APPEND_IF_OWNER,
    GROUP,
    OUTPUT_MAXLEN,
    TAKE_REQUEST,
    cancel_key,
    capabilities_key,
    heartbeat_key,
    input_key,
    output_key,
    owner_key,
    read_key,
    requests_key,
    workers_key,
)
from voicelane.core.lane.messages import (
    CapacityReport,
    InputPiece,
    OutputEvent,
    StreamRequest,
    stream_entries,
)
from voicelane.core.redis_clients import sync_client
from voicelane.core.redis_target import RedisTarget
from voicelane.core.rules import EngineCapabilities
from voicelane.core.settings import RealtimeSettings

_Parse = Callable[[list[Any]], Any]


class WorkerBatch:
    """Many sessions' lane calls in one round trip (a pipeline, not a transaction).

    Queue calls, then :meth:`execute`: it answers, in order, each call's value — or the
    exception that call raised, so one session's failure does not fail the others. A worker
    serving hundreds of streams makes one round trip per round instead of one per call.
    """

    def __init__(self, lane: RealtimeWorkerClient) -> None:
        self._lane = lane
        self._pipe = lane.redis.pipeline(transaction=False)
        self._calls: list[tuple[int, _Parse]] = []
        """Per call: how many pipeline commands it queued, and how to read their replies."""

    def __len__(self) -> int:
        return len(self._calls)

    def _add(self, commands: int, parse: _Parse) -> None:
        self._calls.append((commands, parse))

    def begin_session(self, request_id: str) -> None:
        """Take ownership (from now on only this worker may write the request's output), beat
        once and read the input so far. Value: the input pieces ``[(entry id, piece)]``, or
        None when the request's output had already ended (a takeover that came after its
        previous owner's last event: nothing is taken; acknowledge it and move on)."""
        settings = self._lane.settings
        self._pipe.eval(
            TAKE_REQUEST,
            3,
            owner_key(request_id),
            heartbeat_key(request_id),
            output_key(request_id),
            self._lane.consumer,
            int(settings.output_ttl_s),
            int(settings.heartbeat_ttl_s * 1000),
        )
        self._pipe.xrange(input_key(request_id))
        self._add(
            2,
            lambda r: (
                [(entry_id.decode(), InputPiece.from_fields(f)) for entry_id, f in r[1]]
                if r[0]
                else None
            ),
        )

    def append_output(self, request_id: str, *events: OutputEvent) -> None:
        """Append events while this worker owns the request. Value: False if another worker
        owns it now (nothing was written)."""
        flat: list[bytes | str | int] = []
        for event in events:
            fields = event.to_fields()
            flat.append(2 * len(fields))
            for name, value in fields.items():
                flat += [name, value]
        # EVAL, not a registered script's EVALSHA: in a pipeline redis-py checks registered
        # scripts with SCRIPT EXISTS before every execute, a second round trip per round.
        # Redis caches the compiled script by its hash either way.
        self._pipe.eval(
            APPEND_IF_OWNER,
            2,
            owner_key(request_id),
            output_key(request_id),
            self._lane.consumer,
            OUTPUT_MAXLEN,
            int(self._lane.settings.output_ttl_s),
            *flat,
        )
        self._add(1, lambda r: bool(r[0]))

    def cancelled(self, request_ids: Sequence[str]) -> None:
        """Value: the set of those requests whose client cancelled them."""
        ids = list(request_ids)
        if not ids:
            self._add(0, lambda _: set[str]())
            return
        self._pipe.mget([cancel_key(i) for i in ids])
        self._add(1, lambda r: {i for i, mark in zip(ids, r[0], strict=True) if mark})

    def read_marks(self, request_ids: Sequence[str]) -> None:
        """Value: ``{request id: ms}``, how far each request's client has taken its output
        (the front's read mark); None for a request without one (a front of the previous
        release, which writes none: no backpressure)."""
        ids = list(request_ids)
        if not ids:
            self._add(0, lambda _: {})
            return
        self._pipe.mget([read_key(i) for i in ids])
        self._add(
            1,
            lambda r: {
                i: None if mark is None else int(mark) for i, mark in zip(ids, r[0], strict=True)
            },
        )

    def read_inputs(self, after_ids: Mapping[str, str], *, count: int = 256) -> None:
        """One non-blocking XREAD over many requests' input. Value: ``{request id: [(entry
        id, piece)]}`` for those with new input."""
        if not after_ids:
            self._add(0, lambda _: {})
            return
        by_key = {input_key(rid): rid for rid in after_ids}
        streams = {input_key(rid): after for rid, after in after_ids.items()}
        self._pipe.xread(cast(Any, streams), count=count)

        def parse(replies: list[Any]) -> dict[str, list[tuple[str, InputPiece]]]:
            out: dict[str, list[tuple[str, InputPiece]]] = {}
            for key, entries in replies[0] or []:
                rid = by_key[key.decode() if isinstance(key, bytes) else key]
                out[rid] = [
                    (i.decode(), InputPiece.from_fields(f)) for i, f in entries if f is not None
                ]
            return out

        self._add(1, parse)

    def heartbeat(self, sessions: Sequence[tuple[str, str]], free_slots: int) -> None:
        """Reset the idle time of the requests served (``(entry id, request id)`` pairs),
        refresh their session heartbeats and report the free slots."""
        settings = self._lane.settings
        consumer = self._lane.consumer
        ttl_ms = int(settings.heartbeat_ttl_s * 1000)
        commands = 1
        if sessions:
            entry_ids: list[Any] = [entry_id for entry_id, _ in sessions]
            self._pipe.xclaim(self._lane.requests, GROUP, consumer, 0, entry_ids, justid=True)
            commands += 1
        for _, request_id in sessions:
            self._pipe.set(heartbeat_key(request_id), consumer, px=ttl_ms)
        commands += len(sessions)
        self._pipe.hset(self._lane.workers, consumer, CapacityReport(free_slots).to_json())
        self._add(commands, lambda _: None)

    def report_capacity(self, free_slots: int) -> None:
        self._pipe.hset(
            self._lane.workers, self._lane.consumer, CapacityReport(free_slots).to_json()
        )
        self._add(1, lambda _: None)

    def finish(self, entry_id: str, request_id: str) -> None:
        """Ack the request and drop its session keys (the request stream is trimmed apart:
        :meth:`RealtimeWorkerClient.trim`)."""
        self._pipe.xack(self._lane.requests, GROUP, entry_id)
        self._pipe.delete(heartbeat_key(request_id), input_key(request_id))
        self._add(2, lambda _: None)

    def output_events(self, request_id: str) -> None:
        """Value: what the request's output stream holds (a takeover continues after it)."""
        self._pipe.xrange(output_key(request_id))
        self._add(1, lambda r: [OutputEvent.from_fields(fields) for _, fields in r[0]])

    def execute(self) -> list[Any]:
        """Run the queued calls; per call its value or the exception it raised. A connection
        error (Redis away) raises for the whole batch."""
        if not self._calls:
            return []
        replies = self._pipe.execute(raise_on_error=False) if len(self._pipe) else []
        results: list[Any] = []
        position = 0
        for commands, parse in self._calls:
            mine = replies[position : position + commands]
            position += commands
            error = next((r for r in mine if isinstance(r, Exception)), None)
            if error is not None:
                results.append(error)
                continue
            try:
                results.append(parse(mine))
            except Exception as parse_error:
                results.append(parse_error)
        self._calls = []
        return results

    def execute_or_raise(self) -> list[Any]:
        """:meth:`execute`, raising the first failed call's exception."""
        results = self.execute()
        for result in results:
            if isinstance(result, Exception):
                raise result
        return results


class RealtimeWorkerClient:
    """What a GPU worker does with the lane: claim requests, batch its sessions' calls
    (:meth:`batch`), trim, report capacity, publish its engine's capabilities."""

    def __init__(
        self,
        client: redis.Redis,
        consumer: str,
        settings: RealtimeSettings | None = None,
        *,
        engine: str = "espeak",
    ) -> None:
        self.redis = client
        self.consumer = consumer
        self.settings = settings or RealtimeSettings()
        self.engine = engine
        """The engine this worker runs: it serves that engine's stream only."""
        self.requests = requests_key(engine)
        self.workers = workers_key(engine)

    @classmethod
    def from_url(
        cls,
        url: str | RedisTarget,
        consumer: str,
        settings: RealtimeSettings | None = None,
        *,
        engine: str = "espeak",
    ) -> RealtimeWorkerClient:
        return cls(sync_client(url, socket_timeout_s=10.0), consumer, settings, engine=engine)

    def batch(self) -> WorkerBatch:
        """An empty batch of session calls: the one way a worker reads and writes sessions."""
        return WorkerBatch(self)

    def ensure_group(self) -> None:
        try:
            self.redis.xgroup_create(self.requests, GROUP, id="0", mkstream=True)
        except redis.ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise

    def claim_new(self, count: int, block_ms: int) -> list[tuple[str, StreamRequest]]:
        reply = self.redis.xreadgroup(
            GROUP, self.consumer, {self.requests: ">"}, count=count, block=block_ms
        )
        return [(i, StreamRequest.from_fields(f)) for i, f in stream_entries(reply)]

    def claim_abandoned(self, count: int) -> list[tuple[str, StreamRequest]]:
        """Requests whose worker stopped refreshing them (died): take them over."""
        min_idle_ms = int(self.settings.reclaim_idle_s * 1000)
        reply = self.redis.xautoclaim(
            self.requests, GROUP, self.consumer, min_idle_ms, start_id="0-0", count=count
        )
        entries = reply[1] if len(reply) > 1 else []
        claimed = []
        for entry_id, fields in entries:
            if fields is None:  # deleted meanwhile
                self.redis.xack(self.requests, GROUP, entry_id)
                continue
            claimed.append((entry_id.decode(), StreamRequest.from_fields(fields)))
        return claimed

    def trim(self) -> None:
        """Trim the request stream below the oldest pending entry (never pending work)."""
        summary = self.redis.xpending(self.requests, GROUP)
        oldest = summary.get("min")
        if oldest is None:
            info = self.redis.xinfo_groups(self.requests)
            last = next(
                (
                    g.get("last-delivered-id")
                    for g in info
                    if g.get("name") in (GROUP, GROUP.encode())
                ),
                None,
            )
            if last is None:
                return
            # Nothing pending: everything up to the last delivered entry is done.
            oldest = _next_id(last.decode() if isinstance(last, bytes) else str(last))
        else:
            oldest = oldest.decode() if isinstance(oldest, bytes) else str(oldest)
        self.redis.xtrim(self.requests, minid=oldest, approximate=False)

    def report_capacity(self, free_slots: int) -> None:
        """Report the free slots now (a worker starting; later reports go in its rounds)."""
        self.redis.hset(self.workers, self.consumer, CapacityReport(free_slots).to_json())

    def withdraw(self) -> None:
        self.redis.hdel(self.workers, self.consumer)

    def publish_capabilities(self, capabilities: EngineCapabilities) -> None:
        """What this worker's engine accepts, for the fronts' request rules."""
        self.redis.set(capabilities_key(capabilities.engine), capabilities.to_json())


def reporting_workers(client: redis.Redis, engine: str | None = None) -> int:
    """How many workers of ``engine`` (None: of every engine) report real-time capacity
    (fresh or not): for readiness waits."""
    if engine is not None:
        return int(client.hlen(workers_key(engine)))
    return sum(int(client.hlen(key)) for key in client.scan_iter(match=workers_key("*")))


def _next_id(entry_id: str) -> str:
    ms, _, seq = entry_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"
