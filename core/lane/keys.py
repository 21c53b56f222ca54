"""Every Redis key of the real-time lane, in one table, and the lane's Lua scripts.

This module is the only code that builds the lane's keys (the fronts' side,
:mod:`voicelane.core.lane.front`, and the workers' side, :mod:`voicelane.core.lane.worker`,
call the builders below). What each key holds is in :data:`KEYS`; what the entries of its
streams hold is :mod:`voicelane.core.lane.messages`.

The table is :data:`KEYS` (each family's type, contents, lifetime and writer), drawn in
``docs/realtime-lane.md`` ("Keys"); ``tests/unit/core/test_lane_keys.py`` checks that the page
and this module agree, and ``tests/integration/test_lane_errors.py`` that a stream leaves no
key the table does not describe.

Stream ids in the lane are the tenant's own ids in the tenant's namespace
(:func:`voicelane.core.lane.messages.lane_request_id`): two tenants may use the same id, and
neither can tell.

The Lua scripts live next to this module (``*.lua``, package data) and are read once, at
import, without their comment lines: :data:`APPEND_IF_OWNER` goes out as EVAL text with
every append of a round (see :meth:`voicelane.core.lane.worker.WorkerBatch.append_output`),
so its comments would only cost bytes on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from voicelane.core.lua import read_script

PREFIX = "vl:rt:"
GROUP = "workers"
"""The consumer group of an engine's workers on its request stream (:data:`REQUESTS_KEY`)."""
OUTPUT_MAXLEN = 100_000
"""Output entries kept per request (an entry holds up to a few hundred ms of audio)."""
WAKE_TTL_S = 30
"""A reader's wake stream expires this long after its last wake (its front may be gone)."""


@dataclass(frozen=True, slots=True)
class LaneKey:
    """One family of keys: its pattern (at most one ``{part}``) and what the table says."""

    pattern: str
    type: str
    """The Redis type: ``stream``, ``string``, ``hash``, ``zset``."""
    contents: str
    lifetime: str
    writer: str
    """Who writes it: the fronts or the workers."""
    prefix: str = field(init=False, repr=False, compare=False)
    """The pattern up to its ``{part}`` (the whole key for a single key); computed once, as
    keys are built on the lane's hot paths (every append, every read)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefix", self.pattern.partition("{")[0])

    @property
    def single(self) -> bool:
        return "{" not in self.pattern

    def key(self, part: str = "") -> str:
        return self.prefix + part

    def describes(self, key: str) -> bool:
        """Whether ``key`` is one of this family."""
        if self.single:
            return key == self.pattern
        return key.startswith(self.prefix) and len(key) > len(self.prefix)


REQUESTS_KEY = LaneKey(
    f"{PREFIX}requests:{{engine}}",
    "stream",
    "one StreamRequest per entry for one engine; consumer group `workers` (that engine's workers)",
    "trimmed by MINID below the oldest pending entry, never by MAXLEN",
    "front",
)
INPUT_KEY = LaneKey(
    f"{PREFIX}in:{{request_id}}",
    "stream",
    "the request's text as InputPiece entries: `text` deltas, `flush`, `end`",
    "`output_ttl_s` + 60 s from submission; deleted when the request is served",
    "front",
)
OUTPUT_KEY = LaneKey(
    f"{PREFIX}out:{{request_id}}",
    "stream",
    "OutputEvent entries: `audio`, `caption`, `end`, `error`",
    "MAXLEN ~100 000; expires `output_ttl_s` after the last write (the resume window)",
    "worker (the owner only)",
)
CANCEL_KEY = LaneKey(
    f"{PREFIX}cancel:{{request_id}}",
    "string",
    "`1`: the client left; the worker drops the request before its next batch",
    "`cancel_ttl_s`",
    "front",
)
HEARTBEAT_KEY = LaneKey(
    f"{PREFIX}hb:{{request_id}}",
    "string",
    "the serving worker; when it lapses and nobody takes over, the front ends the stream",
    "`heartbeat_ttl_s`, refreshed at each beat; deleted when the request is served",
    "worker",
)
OWNER_KEY = LaneKey(
    f"{PREFIX}owner:{{request_id}}",
    "string",
    "the worker that may append output (checked in the append's Lua)",
    "`output_ttl_s`, refreshed by each append",
    "worker",
)
READ_KEY = LaneKey(
    f"{PREFIX}read:{{request_id}}",
    "string",
    "how far the stream's client has taken its output (ms on the stream's clock, the pts of "
    "the last audio handed to it): the worker renders at most `max_unread_output_s` beyond it",
    "the deadline + `output_ttl_s` + 60 s: set at submission, refreshed by each update",
    "front",
)
TENANT_KEY = LaneKey(
    f"{PREFIX}tenant:{{request_id}}",
    "string",
    "the tenant the stream id is reserved for (checked on resume)",
    "the deadline + `output_ttl_s` + 60 s",
    "front",
)
TENANT_STREAMS_KEY = LaneKey(
    f"{PREFIX}tenant-streams:{{tenant}}",
    "zset",
    "the tenant's open streams scored by deadline (unix ms): its streams quota (a resume's "
    "member is `{request_id}~resume-{random}`)",
    "expires at the latest deadline; members past theirs are dropped",
    "front",
)
WORKERS_KEY = LaneKey(
    f"{PREFIX}workers:{{engine}}",
    "hash",
    "worker -> CapacityReport JSON (free slots, unix time) of one engine's workers: "
    "admission control",
    "none; a report older than `worker_ttl_s` counts as none; removed when the worker stops",
    "worker",
)
WAKE_KEY = LaneKey(
    f"{PREFIX}wake:{{reader_id}}",
    "stream",
    "one entry: ends a front output reader's pending blocking XREAD early",
    "`WAKE_TTL_S` (30 s) after the last wake",
    "front",
)
CAPABILITIES_KEY = LaneKey(
    "vl:engine:{engine}",
    "string",
    "the engine's EngineCapabilities JSON (voices, speed range), for the request rules",
    "none; rewritten by every worker at start",
    "worker",
)

KEYS: tuple[LaneKey, ...] = (
    REQUESTS_KEY,
    INPUT_KEY,
    OUTPUT_KEY,
    CANCEL_KEY,
    HEARTBEAT_KEY,
    OWNER_KEY,
    READ_KEY,
    TENANT_KEY,
    TENANT_STREAMS_KEY,
    WORKERS_KEY,
    WAKE_KEY,
    CAPABILITIES_KEY,
)
"""Every key family of the lane (the table of the module docstring)."""


def family(key: str) -> LaneKey | None:
    """The family ``key`` belongs to, or None if the lane builds no such key."""
    return next((k for k in KEYS if k.describes(key)), None)


# The builders: a family's key for one request (tenant, reader, engine).
requests_key = REQUESTS_KEY.key
workers_key = WORKERS_KEY.key
input_key = INPUT_KEY.key
output_key = OUTPUT_KEY.key
cancel_key = CANCEL_KEY.key
heartbeat_key = HEARTBEAT_KEY.key
owner_key = OWNER_KEY.key
read_key = READ_KEY.key
tenant_key = TENANT_KEY.key
tenant_streams_key = TENANT_STREAMS_KEY.key
wake_key = WAKE_KEY.key
capabilities_key = CAPABILITIES_KEY.key


# ---- Lua --------------------------------------------------------------------------------------


HOLD_TENANT_SLOT = read_script(__package__, "hold_tenant_slot.lua")
"""Count one more open stream for a tenant unless it holds its limit (the front's)."""
APPEND_IF_OWNER = read_script(__package__, "append_if_owner.lua")
"""Append output events while the caller owns the request (the worker's)."""
TAKE_REQUEST = read_script(__package__, "take_request.lua")
"""Own a request and beat once, unless its output has ended (the worker's)."""
