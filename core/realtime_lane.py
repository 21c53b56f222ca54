"""The real-time lane over Redis Streams: the contract between the fronts and the workers.

Keys (prefix ``vl:rt:``) — this module is the only code that builds them:

* ``requests`` — stream of stream requests; consumer group ``workers`` (GPU workers);
* ``in:{id}`` — the request's text, in pieces: ``text`` deltas, ``flush``, ``end``;
* ``out:{id}`` — what goes back: ``audio`` (20 ms Opus packets with ``seq`` and ``pts_ms``,
  or pieces of a byte stream for the other encodings), ``caption`` (a sentence's text span
  and its ``pts_ms``), ``end``, ``error``; capped with MAXLEN and expiring ``output_ttl_s``
  after the last write;
* ``cancel:{id}`` — the cancel mark, set by a front when its client leaves;
* ``hb:{id}`` — the session heartbeat: the worker serving the request refreshes it; a front
  that sees it lapse (and nobody take over) ends the stream with UNAVAILABLE;
* ``owner:{id}`` — the worker serving the request (only it may append output);
* ``tenant:{id}`` — the tenant a stream id belongs to: reserved at submission, checked on
  resume. Stream ids in the lane are the tenant's own ids in the tenant's namespace
  (:func:`lane_request_id`): two tenants may use the same id, and neither can tell;
* ``tenant-streams:{tenant}`` — the tenant's open streams (sorted set, scored by deadline),
  for its concurrent-streams quota;
* ``workers`` — hash: worker → ``{"free": slots, "ts": unix seconds}``, for admission control;
* ``wake:{reader}`` — a front's output reader's wake stream (one entry, short TTL): a front
  appends to it to end the reader's pending blocking XREAD early (a stream was added);
* ``vl:engine:{engine}`` — the engine's capabilities (voices, speed range) as its workers
  publish them, for the fronts' request rules (:mod:`voicelane.core.rules`).

Delivery: a worker reads new requests with XREADGROUP, keeps their entries pending while it
serves them, and refreshes their idle time (XCLAIM JUSTID) as a heartbeat. Another worker
takes over entries idle longer than ``reclaim_idle_s`` (XAUTOCLAIM) — the first one died — and
continues after the last sentence that was completely sent: the client may see a gap, never
a duplicate or reordered ``seq``. The request stream is trimmed by MINID below the oldest
pending entry, never by MAXLEN, so trimming cannot drop work in progress.

The fronts use :class:`RealtimeClient` (asyncio); the workers use
:class:`RealtimeWorkerClient` (threads). Timings come from
:class:`~voicelane.core.settings.RealtimeSettings`, the one source of them.
"""

from __future__ import annotations

import enum
import json
import struct
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import redis
import redis.asyncio as aredis

from voicelane.common.audio.stream import StreamEncoding
from voicelane.core.redis_clients import async_client, sync_client
from voicelane.core.rules import EngineCapabilities
from voicelane.core.settings import RealtimeSettings

PREFIX = "vl:rt:"
REQUESTS = f"{PREFIX}requests"
GROUP = "workers"
WORKERS = f"{PREFIX}workers"
CAPABILITIES_KEY = "vl:engine:{engine}"
"""Where workers publish their engine's capabilities (JSON) for the fronts' request rules."""

OUTPUT_MAXLEN = 100_000
"""Output entries kept per request (an entry holds up to a few hundred ms of audio)."""
WAKE_TTL_S = 30
"""A reader's wake stream expires this long after its last wake (its front may be gone)."""


def input_key(request_id: str) -> str:
    return f"{PREFIX}in:{request_id}"


def output_key(request_id: str) -> str:
    return f"{PREFIX}out:{request_id}"


def cancel_key(request_id: str) -> str:
    return f"{PREFIX}cancel:{request_id}"


def heartbeat_key(request_id: str) -> str:
    return f"{PREFIX}hb:{request_id}"


def owner_key(request_id: str) -> str:
    return f"{PREFIX}owner:{request_id}"


def tenant_key(request_id: str) -> str:
    return f"{PREFIX}tenant:{request_id}"


def tenant_streams_key(tenant: str) -> str:
    return f"{PREFIX}tenant-streams:{tenant}"


def wake_key(reader_id: str) -> str:
    return f"{PREFIX}wake:{reader_id}"


def lane_request_id(tenant: str, request_id: str) -> str:
    """The id of a tenant's stream in the lane: its own id in the tenant's namespace (both are
    letters, digits, ``_`` and ``-``, so the ``.`` between them is unambiguous)."""
    return f"{tenant}.{request_id}"


# A tenant's open streams: refuse one more when it holds ``limit`` unexpired ones.
# KEYS: tenant streams ; ARGV: request id, until (unix ms), now (unix ms), limit
_HOLD_TENANT_SLOT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return 1
"""


# Append to a request's output only while this worker owns the request: a worker that was
# presumed dead and taken over (a long pause, not a crash) can never interleave its output
# with its successor's.
# ARGV: owner, maxlen, ttl, then per event: the number of field/value items, the items.
_APPEND_IF_OWNER = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local i = 4
while i <= #ARGV do
  local count = tonumber(ARGV[i])
  local fields = {}
  for j = i + 1, i + count do fields[#fields + 1] = ARGV[j] end
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', unpack(fields))
  i = i + count + 1
end
redis.call('EXPIRE', KEYS[2], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[3] * 1000)
return 1
"""


def now_ms() -> int:
    return int(time.time() * 1000)


def new_request_id() -> str:
    return uuid.uuid4().hex


class Mode(enum.StrEnum):
    SYNTHESIZE = "synthesize"
    CONVERSE = "converse"


class InputKind(enum.StrEnum):
    TEXT = "text"
    FLUSH = "flush"
    END = "end"


class EventKind(enum.StrEnum):
    AUDIO = "audio"
    CAPTION = "caption"
    END = "end"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class StreamRequest:
    request_id: str
    tenant: str
    voice: str
    sample_rate_hz: int
    deadline_ms: int
    """Absolute (unix ms): workers drop the request once it has passed."""
    mode: Mode = Mode.SYNTHESIZE
    speed: float = 1.0
    client_ts_ms: int = 0
    encoding: StreamEncoding = StreamEncoding.OPUS
    """What the front needs: Opus packets, or the bytes of a file / raw PCM."""
    paced: bool = True
    """Live (True): synthesised just ahead of playback. File-style (False): as fast as the
    worker can, for a client that stores the audio rather than plays it as it comes."""
    submitted_ms: int = field(default_factory=now_ms)

    def to_fields(self) -> dict[str, str]:
        return {
            "request_id": self.request_id,
            "tenant": self.tenant,
            "voice": self.voice,
            "sample_rate_hz": str(self.sample_rate_hz),
            "deadline_ms": str(self.deadline_ms),
            "mode": self.mode.value,
            "speed": repr(self.speed),
            "client_ts_ms": str(self.client_ts_ms),
            "encoding": self.encoding.value,
            "paced": "1" if self.paced else "0",
            "submitted_ms": str(self.submitted_ms),
        }

    @classmethod
    def from_fields(cls, raw: Mapping[bytes, bytes]) -> StreamRequest:
        f = {k.decode(): v.decode() for k, v in raw.items()}
        return cls(
            request_id=f["request_id"],
            tenant=f["tenant"],
            voice=f["voice"],
            sample_rate_hz=int(f["sample_rate_hz"]),
            deadline_ms=int(f["deadline_ms"]),
            mode=Mode(f.get("mode", Mode.SYNTHESIZE.value)),
            speed=float(f.get("speed", "1.0")),
            client_ts_ms=int(f.get("client_ts_ms", "0")),
            encoding=StreamEncoding(f.get("encoding", StreamEncoding.OPUS.value)),
            paced=f.get("paced", "1") != "0",
            submitted_ms=int(f.get("submitted_ms", "0")),
        )

    @property
    def expired(self) -> bool:
        return now_ms() >= self.deadline_ms


@dataclass(frozen=True, slots=True)
class InputPiece:
    kind: InputKind
    text: str = ""


@dataclass(frozen=True, slots=True)
class OutputEvent:
    """One entry of a request's output stream."""

    kind: EventKind
    seq: int = 0
    """Audio: contiguous from 0 per request. Other kinds: the seq of the next audio entry."""
    data: tuple[bytes, ...] = ()
    """Audio: 20 ms Opus packets, or (byte-stream encodings) consecutive pieces of the file."""
    pts_ms: int = 0
    sample_rate_hz: int = 0
    server_ts_ms: int = 0
    client_ts_ms: int = 0
    sentence: int = -1
    """Which sentence (0-based) this belongs to; -1 when none."""
    text: str = ""
    """Caption text, or the error message."""
    start: int = 0
    end: int = 0
    """Caption: the sentence's character span in the request's text."""
    code: str = ""
    """Error: the gRPC status name (``UNAVAILABLE``, ``INVALID_ARGUMENT``...)."""

    def to_fields(self) -> dict[str, bytes | str]:
        fields: dict[str, bytes | str] = {"kind": self.kind.value, "seq": str(self.seq)}
        if self.kind is EventKind.AUDIO:
            fields.update(
                data=pack_packets(self.data),
                pts_ms=str(self.pts_ms),
                sample_rate_hz=str(self.sample_rate_hz),
                server_ts_ms=str(self.server_ts_ms),
                client_ts_ms=str(self.client_ts_ms),
                sentence=str(self.sentence),
            )
        elif self.kind is EventKind.CAPTION:
            fields.update(
                text=self.text,
                start=str(self.start),
                end=str(self.end),
                pts_ms=str(self.pts_ms),
                sentence=str(self.sentence),
            )
        elif self.kind is EventKind.END:
            fields.update(pts_ms=str(self.pts_ms), sentence=str(self.sentence))
        else:
            fields.update(code=self.code, text=self.text)
        return fields

    @classmethod
    def from_fields(cls, raw: Mapping[bytes, bytes]) -> OutputEvent:
        def num(name: str, default: int = 0) -> int:
            value = raw.get(name.encode())
            return int(value) if value is not None else default

        def text(name: str) -> str:
            value = raw.get(name.encode())
            return value.decode() if value is not None else ""

        kind = EventKind(text("kind"))
        data = raw.get(b"data")
        return cls(
            kind=kind,
            seq=num("seq"),
            data=unpack_packets(data) if data else (),
            pts_ms=num("pts_ms"),
            sample_rate_hz=num("sample_rate_hz"),
            server_ts_ms=num("server_ts_ms"),
            client_ts_ms=num("client_ts_ms"),
            sentence=num("sentence", -1),
            text=text("text"),
            start=num("start"),
            end=num("end"),
            code=text("code"),
        )


def pack_packets(packets: Sequence[bytes]) -> bytes:
    """Pieces of audio, each behind a 4-byte big-endian length."""
    return b"".join(struct.pack(">I", len(p)) + p for p in packets)


def unpack_packets(data: bytes) -> tuple[bytes, ...]:
    packets: list[bytes] = []
    offset = 0
    while offset < len(data):
        (length,) = struct.unpack_from(">I", data, offset)
        offset += 4
        packets.append(data[offset : offset + length])
        offset += length
    return tuple(packets)


def _piece(fields: Mapping[bytes, bytes]) -> InputPiece:
    return InputPiece(InputKind(fields[b"kind"].decode()), fields.get(b"text", b"").decode())


def _parse_stream_reply(reply: Any) -> list[tuple[str, dict[bytes, bytes]]]:
    """XREAD/XREADGROUP reply of one stream → [(entry id, fields)]."""
    if not reply:
        return []
    _, entries = reply[0]
    return [(entry_id.decode(), fields) for entry_id, fields in entries if fields is not None]


# ------------------------------------------------------------------------ fronts (asyncio)


class RealtimeClient:
    """What a front does with the lane: submit, feed text, read output, cancel, admit."""

    def __init__(self, client: aredis.Redis, settings: RealtimeSettings | None = None) -> None:
        self.redis = client
        self.settings = settings or RealtimeSettings()
        self._hold_tenant_slot = client.register_script(_HOLD_TENANT_SLOT)
        self._url: str | None = None
        self._socket_timeout_s = 3.0

    @classmethod
    def from_url(
        cls, url: str, settings: RealtimeSettings | None = None, *, socket_timeout_s: float = 3.0
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

    async def tenant_streams(self, tenant: str) -> int:
        """The tenant's open streams (unexpired)."""
        key = tenant_streams_key(tenant)
        return int(await self.redis.zcount(key, now_ms(), "+inf"))

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

    async def submit(self, request: StreamRequest, text: str | None = None) -> None:
        """Queue the request; with ``text`` (Synthesize) its whole input goes in at once."""
        pipe = self.redis.pipeline(transaction=True)
        key = input_key(request.request_id)
        if text is not None:
            pipe.xadd(key, {"kind": InputKind.TEXT.value, "text": text})
            pipe.xadd(key, {"kind": InputKind.END.value})
        pipe.expire(key, int(self.settings.output_ttl_s) + 60)
        pipe.xadd(REQUESTS, cast(Any, request.to_fields()))
        await pipe.execute()

    async def send_input(self, request_id: str, piece: InputPiece) -> None:
        fields: dict[str, str] = {"kind": piece.kind.value}
        if piece.text:
            fields["text"] = piece.text
        await self.redis.xadd(input_key(request_id), cast(Any, fields))

    async def read_output(
        self, request_id: str, after_id: str, block_ms: int
    ) -> list[tuple[str, OutputEvent]]:
        reply = await self.redis.xread({output_key(request_id): after_id}, count=64, block=block_ms)
        return [(i, OutputEvent.from_fields(f)) for i, f in _parse_stream_reply(reply)]

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

    async def capacity(self) -> int:
        """Free real-time slots of live workers minus requests not yet picked up.

        Only facts that survive a Redis restart count: the workers' fresh capacity reports
        and the entries past the group's last delivered id. (The group's ``lag`` does not:
        after Redis replays its append-only file, ``entries-read`` comes back as of the last
        AOF rewrite, and the lag stays high on an empty stream — it would refuse every
        stream forever.)
        """
        raw = cast(dict[bytes, bytes], await self.redis.hgetall(WORKERS))
        fresh_after = time.time() - self.settings.worker_ttl_s
        free = 0
        for value in raw.values():
            report = json.loads(value)
            if report["ts"] >= fresh_after:
                free += int(report["free"])
        if free <= 0:
            return free
        return free - await self._backlog(limit=free)

    async def capabilities(self, engine: str) -> EngineCapabilities | None:
        """What the workers of ``engine`` published; None if none did yet. Raises ValueError
        if what is stored is unreadable."""
        raw = cast(bytes | None, await self.redis.get(CAPABILITIES_KEY.format(engine=engine)))
        return None if raw is None else EngineCapabilities.from_json(raw)

    async def ping(self) -> None:
        await self.redis.ping()

    async def _backlog(self, *, limit: int) -> int:
        """Requests queued but not yet delivered to a worker, counted up to ``limit``."""
        try:
            groups = await self.redis.xinfo_groups(REQUESTS)
        except redis.ResponseError:
            return 0
        for group in groups:
            if group.get("name") in (GROUP, GROUP.encode()):
                last = group.get("last-delivered-id", b"0-0")
                last_id = last.decode() if isinstance(last, bytes) else str(last)
                waiting = await self.redis.xrange(REQUESTS, min=f"({last_id}", count=limit)
                return len(waiting or [])
        return 0  # no group: no worker ever started (and none reports capacity)


# ------------------------------------------------------------------------ workers (threads)


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
        """Take ownership, beat once and read the input so far. Value: the input pieces."""
        settings = self._lane.settings
        consumer = self._lane.consumer
        self._pipe.set(owner_key(request_id), consumer, ex=int(settings.output_ttl_s))
        self._pipe.set(heartbeat_key(request_id), consumer, px=int(settings.heartbeat_ttl_s * 1000))
        self._pipe.xrange(input_key(request_id))
        self._add(3, lambda r: [(entry_id.decode(), _piece(fields)) for entry_id, fields in r[2]])

    def append_output(self, request_id: str, *events: OutputEvent) -> None:
        """Append events while this worker owns the request. Value: False if another worker
        owns it now."""
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
            _APPEND_IF_OWNER,
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
                out[rid] = [(i.decode(), _piece(f)) for i, f in entries if f is not None]
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
            self._pipe.xclaim(REQUESTS, GROUP, consumer, 0, entry_ids, justid=True)
            commands += 1
        for _, request_id in sessions:
            self._pipe.set(heartbeat_key(request_id), consumer, px=ttl_ms)
        commands += len(sessions)
        self._pipe.hset(WORKERS, consumer, _capacity_report(free_slots))
        self._add(commands, lambda _: None)

    def report_capacity(self, free_slots: int) -> None:
        self._pipe.hset(WORKERS, self._lane.consumer, _capacity_report(free_slots))
        self._add(1, lambda _: None)

    def finish(self, entry_id: str, request_id: str) -> None:
        """Ack the request and drop its session keys."""
        self._pipe.xack(REQUESTS, GROUP, entry_id)
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


def _capacity_report(free_slots: int) -> str:
    return json.dumps({"free": free_slots, "ts": time.time()})


class RealtimeWorkerClient:
    """What a GPU worker does with the lane: claim, heartbeat, read input, write output.

    Calls on many sessions' behalf go together through :meth:`batch` (one round trip);
    ``append_output`` and ``finish`` are the same calls in a batch of one.
    """

    def __init__(
        self, client: redis.Redis, consumer: str, settings: RealtimeSettings | None = None
    ) -> None:
        self.redis = client
        self.consumer = consumer
        self.settings = settings or RealtimeSettings()

    @classmethod
    def from_url(
        cls, url: str, consumer: str, settings: RealtimeSettings | None = None
    ) -> RealtimeWorkerClient:
        return cls(sync_client(url, socket_timeout_s=10.0), consumer, settings)

    def batch(self) -> WorkerBatch:
        return WorkerBatch(self)

    def ensure_group(self) -> None:
        try:
            self.redis.xgroup_create(REQUESTS, GROUP, id="0", mkstream=True)
        except redis.ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise

    def claim_new(self, count: int, block_ms: int) -> list[tuple[str, StreamRequest]]:
        reply = self.redis.xreadgroup(
            GROUP, self.consumer, {REQUESTS: ">"}, count=count, block=block_ms
        )
        return [(i, StreamRequest.from_fields(f)) for i, f in _parse_stream_reply(reply)]

    def claim_abandoned(self, count: int) -> list[tuple[str, StreamRequest]]:
        """Requests whose worker stopped refreshing them (died): take them over."""
        min_idle_ms = int(self.settings.reclaim_idle_s * 1000)
        reply = self.redis.xautoclaim(
            REQUESTS, GROUP, self.consumer, min_idle_ms, start_id="0-0", count=count
        )
        entries = reply[1] if len(reply) > 1 else []
        claimed = []
        for entry_id, fields in entries:
            if fields is None:  # deleted meanwhile
                self.redis.xack(REQUESTS, GROUP, entry_id)
                continue
            claimed.append((entry_id.decode(), StreamRequest.from_fields(fields)))
        return claimed

    def refresh(self, entry_ids: Sequence[str]) -> None:
        """Reset the idle time of the requests this worker is serving."""
        if entry_ids:
            self.redis.xclaim(REQUESTS, GROUP, self.consumer, 0, list(entry_ids), justid=True)

    def session_heartbeat(self, request_id: str) -> None:
        ttl_ms = int(self.settings.heartbeat_ttl_s * 1000)
        self.redis.set(heartbeat_key(request_id), self.consumer, px=ttl_ms)

    def read_input(
        self, request_id: str, after_id: str, block_ms: int
    ) -> list[tuple[str, InputPiece]]:
        reply = self.redis.xread({input_key(request_id): after_id}, count=256, block=block_ms)
        return [(entry_id, _piece(fields)) for entry_id, fields in _parse_stream_reply(reply)]

    def take_ownership(self, request_id: str) -> None:
        """From now on only this worker may write the request's output."""
        self.redis.set(owner_key(request_id), self.consumer, ex=int(self.settings.output_ttl_s))

    def append_output(self, request_id: str, *events: OutputEvent) -> bool:
        """Append events (one round trip); False if another worker owns the request now."""
        batch = self.batch()
        batch.append_output(request_id, *events)
        (appended,) = batch.execute_or_raise()
        return bool(appended)

    def cancelled(self, request_id: str) -> bool:
        return bool(self.redis.exists(cancel_key(request_id)))

    def finish(self, entry_id: str, request_id: str) -> None:
        """Ack the request, drop its session keys, and trim what no one needs any more."""
        batch = self.batch()
        batch.finish(entry_id, request_id)
        batch.execute_or_raise()
        self.trim()

    def trim(self) -> None:
        """Trim the request stream below the oldest pending entry (never pending work)."""
        summary = self.redis.xpending(REQUESTS, GROUP)
        oldest = summary.get("min")
        if oldest is None:
            info = self.redis.xinfo_groups(REQUESTS)
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
        self.redis.xtrim(REQUESTS, minid=oldest, approximate=False)

    def report_capacity(self, free_slots: int) -> None:
        self.redis.hset(WORKERS, self.consumer, _capacity_report(free_slots))

    def withdraw(self) -> None:
        self.redis.hdel(WORKERS, self.consumer)

    def publish_capabilities(self, capabilities: EngineCapabilities) -> None:
        """What this worker's engine accepts, for the fronts' request rules."""
        key = CAPABILITIES_KEY.format(engine=capabilities.engine)
        self.redis.set(key, capabilities.to_json())


def reporting_workers(client: redis.Redis) -> int:
    """How many workers report real-time capacity (fresh or not): for readiness waits."""
    return int(client.hlen(WORKERS))


def _next_id(entry_id: str) -> str:
    ms, _, seq = entry_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"
