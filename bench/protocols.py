"""Benchmark: the three real-time fronts under closed-loop load, file-style speech, profiles.

Real processes, one run: redis-server, ``--workers`` GPU workers (espeak; default one per
CPU core), one ``voicelane grpc`` front and one ``voicelane api`` front (WebSocket twin and
OpenAI-compatible speech), started through :class:`tests.support.stack.Stack`. Tenant quotas
(request rate and burst, open streams, queued characters) and the API's WebSocket limits
are raised so that only the workers' capacity can refuse a stream; ``--slots`` sets
``VOICELANE_REALTIME__SLOTS_PER_WORKER`` (else the server's default).

**Table 1 — live streams.** For each level of ``--levels`` and each front of ``--fronts``,
that many clients run in a closed loop for ``--duration-s`` (their first streams spread over
``--ramp-s``, 3.5 s, about one stream: clients that all start in the same instant restart in
the same instant too, a burst of the whole level every few seconds): open a live stream of one
sentence (:data:`SENTENCE`, about 3.5 s of audio), read it to its end, open the next at
once; streams started before the end are finished and counted. A client whose stream
failed waits the server's retry hint (capped at 1 s; 0.1 s without one) before the next, or
exactly ``--retry-ms`` (the retry storm of issue 27: 50).

* goodput — streams per second that played to their end without an underrun; refusals — how
  many streams were refused (each retried); the front's CPU per refusal is fitted over the
  rows of each front (its CPU less its idle CPU = a x streams + b x refusals, least squares;
  the line after the table), since one row mixes both.

* gRPC ``Synthesize`` (paced is the default); WebSocket ``/v1/stream`` (``{"text"}``);
  OpenAI ``POST /v1/audio/speech`` with ``response_format: pcm`` and ``"pace": true``
  (``--no-pace-field`` leaves the field out, for a server that refuses it).
* TTFA — request sent (for the WebSocket: before connecting, since every stream is its own
  socket) to the first audio bytes.
* underruns — a 150 ms playback buffer started at t0, the arrival of the first audio: audio
  with presentation time ``pts`` arriving at t is late when ``t > t0 + pts + 150 ms``; a
  stream "underran" when any of it was late; "worst late" is the largest ``t - (t0 + pts)``.
  ``pts`` is the chunk's ``pts_ms`` over gRPC, the header's ``pts_ms`` + 20 ms per packet
  over the WebSocket, and byte offset / 48 for 24 kHz 16-bit PCM.
* failures by status — gRPC status names, the WebSocket error's ``code``, ``HTTP_<status>``
  (``:code`` of the JSON error) for REST. A refusal is RESOURCE_EXHAUSTED (gRPC, WebSocket)
  or HTTP 429, or 503 ``no_capacity``; "refused at once" is within 250 ms of the request.
* CPU per completed stream (ms), from /proc utime+stime (+ children's) deltas over the
  measured window, by process tree: the front (``grpc`` or ``api``), all workers, the
  redis-server, and the load generator — each (front, level) runs its clients in a child
  process (multiprocessing, spawn; one asyncio loop; grpc.aio channels shared by 8 streams;
  ``websockets`` without permessage-deflate unless ``--ws-compression``; one httpx
  AsyncClient with a connection per client), which measures its own CPU time. A line
  before the table gives each process's CPU with the stack idle: that baseline is inside
  every CPU-per-stream figure, and dominates it at low levels.

Targets (PASS/FAIL lines): 200 concurrent gRPC streams with TTFA p99 <= 200 ms, no underrun
and no failure; the WebSocket at 200 within 10% of gRPC (TTFA p99 and streams/s); at 400,
on every front, each stream either played without underrun or was refused at once with
RESOURCE_EXHAUSTED.

**Table 2 — file-style speech.** OpenAI ``/v1/audio/speech`` of a ~1,500-character English
text, ``response_format: opus`` (an Ogg file), no ``pace`` field, at each of
``--file-levels`` (1 and 16) concurrent clients in a closed loop for ``--file-duration-s``
(and at least ``--file-min-requests`` per client): audio seconds delivered per wall second,
the audio seconds decoded from each whole Ogg file (:func:`voicelane.common.audio.probe`, after the
measured window). Against ``voicelane render`` of the same text to an .ogg in a new
process (start-up included), median of 3, measured in the same run with the stack up and
idle. Target: >= 0.8x of embedded at 1 concurrent.

**Profiles** (``--profile SECONDS``): gRPC load at ``--profile-level`` while ``py-spy record
--format raw --rate 100 --nonblocking`` samples every worker and the gRPC front; per
process, the top 15 functions by self samples (the leaf frame) and the top 10 by inclusive
samples.

Run: ``.venv/bin/python -m bench.protocols [--workers N] [--slots N] [--fronts
grpc,websocket,openai] [--levels 1,10,100,200,400] [--duration-s 60] [--file-levels 1,16]
[--file-duration-s 30] [--file-min-requests 3] [--file-chars 1500] [--profile SECONDS
--profile-level 200] [--no-pace-field] [--ws-compression] [--env VOICELANE_X=VALUE ...]``
(``--file-levels ''`` skips table 2; ``--levels ''`` skips table 1). Defaults run about 20
minutes; a quick look: ``--duration-s 10 --levels 1,10 --file-duration-s 10``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
import httpx
import websockets
import websockets.exceptions

from bench.tables import percentile
from tests.support.stack import ACME_KEY
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from voicelane.common.wire.speech_pb2_grpc import SpeechAsyncStub

ROOT = Path(__file__).resolve().parents[1]
SENTENCE = "The weather is nice today, so we will walk along the river."
FILE_SENTENCES = (
    "The harbor was quiet in the early morning, and only the gulls were awake.",
    "Margaret unlocked the bakery at half past five, as she had done for thirty-one years.",
    "Did anyone remember to water the tomatoes before the heat wave arrived?",
    "In 1887, the railway reached the valley, and the town doubled in size within a decade.",
    "Please keep your ticket until the end of the journey; inspectors may ask to see it.",
    "The committee will meet again on Thursday to review the budget for the new library.",
    "Quietly, almost apologetically, the old clock in the hall struck eleven.",
    "Researchers measured the river's temperature every hour for three consecutive summers.",
    "What a wonderful surprise it was to find the garden full of butterflies!",
    "He folded the map, put it in his coat pocket, and walked toward the station.",
    "Fresh bread, strong coffee and a view of the mountains: nothing more was needed.",
    "The storm passed overnight, leaving branches on the road and puddles in the square.",
)
AUTH = f"Bearer {ACME_KEY}"
GRPC_METADATA = (("authorization", AUTH),)
FRONTS = ("grpc", "websocket", "openai")
FRONT_NAMES = {"grpc": "gRPC", "websocket": "WebSocket", "openai": "OpenAI pcm"}
FRONT_PROCESS = {"grpc": "grpc", "websocket": "api", "openai": "api"}
"""The server process that serves each front."""
BUFFER_S = 0.150
"""The playback buffer: audio later than this after its presentation time underruns."""
AT_ONCE_S = 0.250
"""A refusal within this of the request is "at once"."""
PCM_BYTES_PER_MS = 48.0
"""24 kHz, 16-bit mono: OpenAI's pcm."""
STREAMS_PER_CHANNEL = 8
TARGET_LEVEL = 200
OVERLOAD_LEVEL = 400
RATE_HZ = 100
"""py-spy's sampling rate."""
QUOTA_OVERRIDES = {
    "VOICELANE_TENANT_REQUESTS_PER_S": "100000",
    "VOICELANE_TENANT_REQUEST_BURST": "100000",
    "VOICELANE_TENANT_MAX_STREAMS": "100000",
    "VOICELANE_TENANT_MAX_QUEUED_CHARS": "1000000000",
    # The gRPC front's calls per tenant (issue 26; default 100): left in place, 200 clients of
    # one tenant had 100 calls refused by this quota, not by the lane's capacity.
    "VOICELANE_TENANT_MAX_RPCS": "100000",
    "VOICELANE_WEBSOCKET_MAX_PER_ADDRESS": "100000",  # every client is 127.0.0.1
    "VOICELANE_WEBSOCKET_MAX_CONNECTIONS": "100000",
}


def file_text(chars: int) -> str:
    """Varied English sentences, whole, until the text has about ``chars`` characters."""
    parts: list[str] = []
    size = 0
    index = 0
    while size < chars:
        sentence = FILE_SENTENCES[index % len(FILE_SENTENCES)]
        parts.append(sentence)
        size += len(sentence) + 1
        index += 1
    return " ".join(parts)


# ---- the load generator (runs in a child process) ------------------------------------------


@dataclass(frozen=True)
class LoadSpec:
    """What one child process does: ``clients`` closed-loop clients of one front."""

    front: str
    clients: int
    duration_s: float
    grpc_target: str
    api_url: str
    pace_field: bool = True
    ws_compression: bool = False
    file_text: str | None = None
    """Set: file-style OpenAI requests of this text (Ogg Opus), not live streams."""
    min_requests: int = 0
    """Each client makes at least this many requests, even past ``duration_s``."""
    timeout_s: float = 120.0
    ramp_s: float = 0.0
    """Client i starts ``i * ramp_s / clients`` after the others' start (a ramp-up)."""
    retry_s: float | None = None
    """Set: after a failed stream wait exactly this, whatever the server's hint (``--retry-ms``:
    the retry storm of refused clients); None: the hint, capped at 1 s (0.1 s without one)."""


@dataclass
class StreamRecord:
    ok: bool
    status: str
    """``OK`` or the failure: a gRPC status name, a WebSocket error code, ``HTTP_<status>``."""
    elapsed_s: float
    """Request sent → end of the stream (or the failure)."""
    ttfa_s: float | None = None
    worst_late_s: float = 0.0
    audio_ms: float = 0.0
    """Audio received: end of the last packet's presentation time (live streams)."""
    refusal: bool = False
    retry_after_s: float | None = None
    audio_s: float = 0.0
    """File-style: the decoded duration of the whole file."""
    detail: str = ""
    """A failure's message (the first 160 characters)."""

    @property
    def underran(self) -> bool:
        return self.worst_late_s > BUFFER_S

    @property
    def refused_at_once(self) -> bool:
        return self.refusal and self.elapsed_s <= AT_ONCE_S


@dataclass
class LoadResult:
    records: list[StreamRecord]
    wall_s: float
    cpu_s: float
    """The load generator's own CPU time (all its threads) over the measured window."""


@dataclass
class Playback:
    """Arrival times of one stream's audio against a player started at its first packet."""

    started: float
    t0: float | None = None
    worst_late_s: float = 0.0
    audio_ms: float = 0.0

    def audio(self, pts_ms: float, now: float, duration_ms: float = 20.0) -> None:
        if self.t0 is None:
            self.t0 = now
        late = now - (self.t0 + pts_ms / 1000)
        self.worst_late_s = max(self.worst_late_s, late)
        self.audio_ms = max(self.audio_ms, pts_ms + duration_ms)

    def done(self) -> StreamRecord:
        now = time.perf_counter()
        if self.t0 is None:
            return self.failed("NO_AUDIO")
        return StreamRecord(
            ok=True,
            status="OK",
            elapsed_s=now - self.started,
            ttfa_s=self.t0 - self.started,
            worst_late_s=self.worst_late_s,
            audio_ms=self.audio_ms,
        )

    def failed(
        self,
        status: str,
        *,
        refusal: bool = False,
        retry_after_s: float | None = None,
        detail: str = "",
    ) -> StreamRecord:
        return StreamRecord(
            detail=detail[:160],
            ok=False,
            status=status,
            elapsed_s=time.perf_counter() - self.started,
            ttfa_s=None if self.t0 is None else self.t0 - self.started,
            worst_late_s=self.worst_late_s,
            audio_ms=self.audio_ms,
            refusal=refusal,
            retry_after_s=retry_after_s,
        )


One = Callable[[], Awaitable[StreamRecord]]


def _float_or_none(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class GrpcClients:
    """Live streams over gRPC ``Synthesize``; one channel (connection) per 8 clients."""

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        options = [("grpc.use_local_subchannel_pool", 1)]
        count = max(1, math.ceil(spec.clients / STREAMS_PER_CHANNEL))
        self.channels = [
            grpc.aio.insecure_channel(spec.grpc_target, options=options) for _ in range(count)
        ]
        self.stubs: list[SpeechAsyncStub] = [pb_grpc.SpeechStub(c) for c in self.channels]

    async def start(self) -> None:
        await asyncio.gather(*(c.channel_ready() for c in self.channels))

    async def warm(self) -> StreamRecord:
        return await self._stream(self.stubs[0])

    def one(self, client: int) -> One:
        stub = self.stubs[client % len(self.stubs)]
        return lambda: self._stream(stub)

    async def _stream(self, stub: SpeechAsyncStub) -> StreamRecord:
        play = Playback(time.perf_counter())
        request = pb.SynthesizeRequest(text=SENTENCE)
        try:
            call = stub.Synthesize(request, metadata=GRPC_METADATA, timeout=self.spec.timeout_s)
            async for chunk in call:
                if chunk.opus_packets:
                    play.audio(chunk.pts_ms, time.perf_counter(), 20.0 * len(chunk.opus_packets))
        except grpc.aio.AioRpcError as error:
            code = error.code().name
            hint: float | None = None
            for key, value in error.trailing_metadata() or ():
                if key == "retry-after-ms":
                    hint = _float_or_none(value)
                    hint = None if hint is None else hint / 1000
            return play.failed(
                code,
                refusal=code == "RESOURCE_EXHAUSTED",
                retry_after_s=hint,
                detail=error.details() or "",
            )
        except Exception as error:
            return play.failed(type(error).__name__)
        return play.done()

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.channels))


class WebSocketClients:
    """Live streams over ``/v1/stream``: a socket per stream, as the protocol has it."""

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self.url = spec.api_url.replace("http://", "ws://", 1) + "/v1/stream"

    async def start(self) -> None:
        return None

    async def warm(self) -> StreamRecord:
        return await self._stream()

    def one(self, client: int) -> One:
        return self._stream

    async def _stream(self, text: str = SENTENCE) -> StreamRecord:
        play = Playback(time.perf_counter())
        ended = False
        try:
            async with asyncio.timeout(self.spec.timeout_s):
                async with websockets.connect(
                    self.url,
                    additional_headers={"Authorization": AUTH},
                    compression="deflate" if self.spec.ws_compression else None,
                    max_size=1 << 20,
                ) as socket:
                    await socket.send(json.dumps({"text": text}))
                    pts_ms = 0.0
                    index = 0
                    async for message in socket:
                        now = time.perf_counter()
                        if isinstance(message, bytes):
                            play.audio(pts_ms + 20.0 * index, now)
                            index += 1
                            continue
                        body = json.loads(message)
                        kind = body.get("type")
                        if kind == "audio":
                            pts_ms = float(body.get("pts_ms", 0))
                            index = 0
                        elif kind == "end":
                            ended = True
                        elif kind == "error":
                            code = str(body.get("code", "ERROR"))
                            return play.failed(
                                code,
                                refusal=code == "RESOURCE_EXHAUSTED",
                                retry_after_s=_float_or_none(body.get("retry_after_s")),
                            )
        except websockets.exceptions.InvalidStatus as error:
            status = error.response.status_code
            return play.failed(f"HTTP_{status}", refusal=status == 429)
        except TimeoutError:
            return play.failed("CLIENT_TIMEOUT")
        except Exception as error:
            return play.failed(type(error).__name__)
        if not ended:
            return play.failed("CLOSED_WITHOUT_END")
        return play.done()

    async def close(self) -> None:
        return None


class OpenAIClients:
    """``POST /v1/audio/speech`` through one httpx client with a connection per client:
    live (pcm, ``"pace": true``) or file-style (Ogg Opus of ``spec.file_text``, no pace)."""

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        connections = spec.clients + 4
        self.client = httpx.AsyncClient(
            base_url=spec.api_url,
            headers={"Authorization": AUTH},
            timeout=httpx.Timeout(spec.timeout_s, connect=10),
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        )
        self.files: list[tuple[StreamRecord, bytes]] = []

    async def start(self) -> None:
        return None

    async def warm(self) -> StreamRecord:
        """A short request: file-style requests of the long text could take minutes."""
        if self.spec.file_text is not None:
            return await self._file(SENTENCE)
        return await self._live()

    def one(self, client: int) -> One:
        if self.spec.file_text is not None:
            text = self.spec.file_text
            return lambda: self._file(text)
        return self._live

    async def _live(self) -> StreamRecord:
        body: dict[str, Any] = {"input": SENTENCE, "voice": "alloy", "response_format": "pcm"}
        if self.spec.pace_field:
            body["pace"] = True
        play = Playback(time.perf_counter())
        try:
            async with self.client.stream("POST", "/v1/audio/speech", json=body) as response:
                if response.status_code != 200:
                    return await self._refused(play, response)
                offset = 0
                async for data in response.aiter_raw():
                    if data:
                        play.audio(offset / PCM_BYTES_PER_MS, time.perf_counter(), 0.0)
                        offset += len(data)
                play.audio_ms = offset / PCM_BYTES_PER_MS
        except httpx.TimeoutException:
            return play.failed("CLIENT_TIMEOUT")
        except Exception as error:
            return play.failed(type(error).__name__)
        return play.done()

    async def _file(self, text: str, format_: str = "opus") -> StreamRecord:
        body = {"input": text, "voice": "alloy", "response_format": format_}
        play = Playback(time.perf_counter())
        parts: list[bytes] = []
        try:
            async with self.client.stream("POST", "/v1/audio/speech", json=body) as response:
                if response.status_code != 200:
                    return await self._refused(play, response)
                async for data in response.aiter_raw():
                    if data:
                        if play.t0 is None:
                            play.t0 = time.perf_counter()
                        parts.append(data)
        except httpx.TimeoutException:
            return play.failed("CLIENT_TIMEOUT")
        except Exception as error:
            return play.failed(type(error).__name__)
        record = play.done()
        if record.ok:
            self.files.append((record, b"".join(parts)))
        return record

    async def _refused(self, play: Playback, response: httpx.Response) -> StreamRecord:
        raw = await response.aread()
        code = ""
        try:
            error = json.loads(raw).get("error", {})
            code = str(error.get("code", "")) if isinstance(error, dict) else ""
        except (ValueError, AttributeError):
            pass
        status = response.status_code
        label = f"HTTP_{status}" + (f":{code}" if code else "")
        refusal = status == 429 or (status == 503 and code == "no_capacity")
        hint = _float_or_none(response.headers.get("retry-after"))
        return play.failed(label, refusal=refusal, retry_after_s=hint)

    def decode_files(self) -> None:
        """The duration of each whole Ogg file, decoded (after the measured window)."""
        from voicelane.common.audio import probe

        for record, data in self.files:
            try:
                record.audio_s = probe(data).duration_s
            except Exception as error:
                record.ok = False
                record.status = f"UNDECODABLE:{type(error).__name__}"
        self.files.clear()

    async def close(self) -> None:
        await self.client.aclose()


Clients = GrpcClients | WebSocketClients | OpenAIClients


def make_clients(spec: LoadSpec) -> Clients:
    if spec.front == "grpc":
        return GrpcClients(spec)
    if spec.front == "websocket":
        return WebSocketClients(spec)
    if spec.front == "openai":
        return OpenAIClients(spec)
    raise ValueError(f"unknown front {spec.front!r}")


async def closed_loop(
    one: One,
    end: float,
    min_requests: int,
    start_delay_s: float = 0.0,
    retry_s: float | None = None,
) -> list[StreamRecord]:
    """One client: stream after stream until ``end``; after a failure, wait ``retry_s``, or
    (None) the retry hint (capped at 1 s; 0.1 s without one), rather than spin."""
    records: list[StreamRecord] = []
    await asyncio.sleep(start_delay_s)
    while time.perf_counter() < end or len(records) < min_requests:
        record = await one()
        records.append(record)
        if not record.ok:
            if retry_s is not None:
                await asyncio.sleep(retry_s)
            else:
                await asyncio.sleep(min(record.retry_after_s or 0.1, 1.0))
    return records


async def generate(conn: Connection, spec: LoadSpec) -> LoadResult:
    clients = make_clients(spec)
    try:
        await clients.start()
        warm = await clients.warm()  # connections up, code paths hot
        if not warm.ok:
            hint = ""
            if warm.status.startswith("HTTP_422") and spec.pace_field and not spec.file_text:
                hint = ' (a server that refuses "pace": run with --no-pace-field)'
            raise RuntimeError(f"warm-up stream failed: {warm.status}{hint}")
        if isinstance(clients, OpenAIClients):
            clients.files.clear()
        conn.send("ready")
        if conn.recv() != "go":
            raise RuntimeError("the benchmark did not say go")
        cpu_before = time.process_time()
        started = time.perf_counter()
        end = started + spec.duration_s
        per_client = await asyncio.gather(
            *(
                closed_loop(
                    clients.one(i),
                    end,
                    spec.min_requests,
                    i * spec.ramp_s / spec.clients,
                    spec.retry_s,
                )
                for i in range(spec.clients)
            )
        )
        wall_s = time.perf_counter() - started
        cpu_s = time.process_time() - cpu_before
        if isinstance(clients, OpenAIClients):
            clients.decode_files()
        return LoadResult([r for records in per_client for r in records], wall_s, cpu_s)
    finally:
        await clients.close()


def child_main(conn: Connection, spec: LoadSpec) -> None:
    """The entry point of a load-generator process: ``ready``, wait for ``go``, then the
    :class:`LoadResult` (or a string: what went wrong)."""
    try:
        result: LoadResult | str = asyncio.run(generate(conn, spec))
    except BaseException as error:
        result = f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=3)}"
    conn.send(result)
    conn.close()


# ---- CPU accounting --------------------------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds: utime + stime + waited-for children's)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    ticks = int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    return int(fields[1]), ticks / CLOCK_TICKS


def tree_cpu_s(roots: Sequence[int]) -> float:
    """CPU seconds of the processes ``roots`` and all their live descendants."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = stat
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total = 0.0
    seen: set[int] = set()
    todo = [pid for pid in roots if pid in stats]
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += stats[pid][1]
        todo += children.get(pid, [])
    return total


@dataclass(frozen=True)
class Pids:
    grpc: int
    api: int
    workers: tuple[int, ...]
    redis: int

    def front(self, front: str) -> int:
        return self.grpc if front == "grpc" else self.api

    def snapshot(self, front: str) -> tuple[float, float, float]:
        return (
            tree_cpu_s([self.front(front)]),
            tree_cpu_s(self.workers),
            tree_cpu_s([self.redis]),
        )


def idle_cpu(pids: Pids, seconds: float = 3.0) -> dict[str, float]:
    """CPU seconds per second of each server process (tree) with the stack up and no load:
    the baseline inside every CPU-per-stream figure (it matters at low levels)."""
    roots = {"grpc": [pids.grpc], "api": [pids.api], "workers": list(pids.workers)}
    roots["redis"] = [pids.redis]
    before = {name: tree_cpu_s(r) for name, r in roots.items()}
    time.sleep(seconds)
    return {name: (tree_cpu_s(r) - before[name]) / seconds for name, r in roots.items()}


def idle_line(idle: dict[str, float], seconds: float = 3.0) -> str:
    shares = [f"{name} {share * 100:.0f}%" for name, share in idle.items()]
    return f"idle CPU, {seconds:g} s, % of one core: {', '.join(shares)}\n"


@dataclass
class Row:
    front: str
    level: int
    result: LoadResult | None = None
    error: str | None = None
    cpu_front_s: float = 0.0
    cpu_workers_s: float = 0.0
    cpu_redis_s: float = 0.0

    @property
    def records(self) -> list[StreamRecord]:
        return self.result.records if self.result else []

    @property
    def ok(self) -> list[StreamRecord]:
        return [r for r in self.records if r.ok]

    @property
    def streams_per_s(self) -> float:
        return len(self.ok) / self.result.wall_s if self.result else math.nan

    def ttfa_ms(self, q: float) -> float:
        return percentile([r.ttfa_s for r in self.ok if r.ttfa_s is not None], q) * 1000

    @property
    def underran(self) -> int:
        return sum(1 for r in self.ok if r.underran)

    @property
    def failures(self) -> Counter[str]:
        return Counter(r.status for r in self.records if not r.ok)

    @property
    def slow_refusals(self) -> int:
        return sum(1 for r in self.records if r.refusal and not r.refused_at_once)

    @property
    def refusals(self) -> int:
        return sum(1 for r in self.records if r.refusal)

    @property
    def goodput(self) -> float:
        """Streams per second that played to their end without an underrun."""
        if not self.result:
            return math.nan
        return sum(1 for r in self.ok if not r.underran) / self.result.wall_s


def run_load(
    spec: LoadSpec,
    pids: Pids,
    during: Callable[[], None] | None = None,
) -> Row:
    """One child process of clients; CPU of every process over its measured window."""
    row = Row(spec.front, spec.clients)
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    child = context.Process(target=child_main, args=(theirs, spec), daemon=True)
    child.start()
    theirs.close()
    try:
        limit_s = spec.duration_s + spec.timeout_s * max(1, spec.min_requests) + 120
        if not ours.poll(120):
            row.error = "the load generator did not start within 120 s"
            return row
        message = ours.recv()
        if message != "ready":
            row.error = str(message)
            return row
        before = pids.snapshot(spec.front)
        ours.send("go")
        if during is not None:
            during()
        if not ours.poll(limit_s):
            row.error = f"no result within {limit_s:.0f} s"
            return row
        result = ours.recv()
        after = pids.snapshot(spec.front)
        if isinstance(result, str):
            row.error = result
            return row
        row.result = result
        row.cpu_front_s, row.cpu_workers_s, row.cpu_redis_s = (
            b - a for a, b in zip(before, after, strict=True)
        )
        return row
    except (EOFError, OSError) as error:
        row.error = f"the load generator died: {error!r}"
        return row
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
            child.join()
        ours.close()


# ---- tables ----------------------------------------------------------------------------------


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0f} ms"


def _cpu_ms(cpu_s: float, count: int) -> str:
    return f"{cpu_s / count * 1000:.1f}" if count else "-"


def print_live_table(rows: list[Row], duration_s: float) -> None:
    print(f"\n### Live streams: closed loop, {duration_s:g} s per row, one sentence per stream\n")
    print(
        "| front | clients | streams | streams/s | goodput/s | TTFA p50 | TTFA p99 | underran "
        "| worst late | failures | refusals | refusals > 250 ms "
        "| CPU ms/stream: front | workers | redis | load gen |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        name = FRONT_NAMES[row.front]
        if row.result is None:
            print(f"| {name} | {row.level} | error: {(row.error or '?').splitlines()[0][:120]} |")
            continue
        ok = row.ok
        worst = max((r.worst_late_s for r in ok), default=0.0)
        failures = " ".join(f"{k}:{v}" for k, v in sorted(row.failures.items())) or "0"
        print(
            f"| {name} | {row.level} | {len(ok)} | {row.streams_per_s:.1f} "
            f"| {row.goodput:.1f} "
            f"| {_ms(row.ttfa_ms(0.5))} | {_ms(row.ttfa_ms(0.99))} | {row.underran} "
            f"| {worst * 1000:.0f} ms | {failures} | {row.refusals} | {row.slow_refusals} "
            f"| {_cpu_ms(row.cpu_front_s, len(ok))} | {_cpu_ms(row.cpu_workers_s, len(ok))} "
            f"| {_cpu_ms(row.cpu_redis_s, len(ok))} | {_cpu_ms(row.result.cpu_s, len(ok))} |"
        )
    errors = [row for row in rows if row.error]
    for row in errors:
        print(f"\n{FRONT_NAMES[row.front]} at {row.level}: {row.error}")
    for row in rows:
        if row.result is None:
            continue
        seen = Counter((r.status, r.detail) for r in row.records if not r.ok and not r.refusal)
        for (status, detail), count in seen.most_common(3):
            print(f"- {FRONT_NAMES[row.front]} at {row.level}: {count} x {status}: {detail}")


def print_refusal_cost(rows: list[Row], idle_cpu_per_s: dict[str, float]) -> None:
    """CPU of one refusal to each front, from the rows themselves: over the rows of a front,
    the least-squares fit of its CPU (less its idle CPU over the window) against streams
    played and refusals, ``cpu = a * streams + b * refusals``; ``b`` is a refusal's cost. Needs
    rows with different mixes of the two (e.g. 100-400 clients with ``--retry-ms 50``)."""
    import numpy as np

    for front in FRONTS:
        mine = [row for row in rows if row.front == front and row.result is not None]
        if len(mine) < 2 or not any(row.refusals for row in mine):
            continue
        x = np.array([[len(row.ok), row.refusals] for row in mine], dtype=np.float64)
        y = np.array(
            [
                row.cpu_front_s - idle_cpu_per_s.get(FRONT_PROCESS[front], 0.0) * row.result.wall_s
                for row in mine
                if row.result is not None
            ]
        )
        (per_stream, per_refusal), *_ = np.linalg.lstsq(x, y, rcond=None)
        print(
            f"\n{FRONT_NAMES[front]} front CPU, fitted over {len(mine)} rows: "
            f"{per_stream * 1000:.2f} ms per stream played, "
            f"{per_refusal * 1000:.3f} ms per refusal (target: well under 1 ms)"
        )


def print_goodput_target(rows: list[Row]) -> None:
    found = {(row.front, row.level): row for row in rows if row.result is not None}
    at_target, at_overload = found.get(("grpc", TARGET_LEVEL)), found.get(("grpc", OVERLOAD_LEVEL))
    if at_target is None or at_overload is None:
        print(f"SKIP gRPC goodput at {OVERLOAD_LEVEL} vs {TARGET_LEVEL}: not both run")
        return
    ratio = at_overload.goodput / at_target.goodput if at_target.goodput else math.nan
    print(
        f"{_verdict(ratio >= 0.9)} gRPC goodput at {OVERLOAD_LEVEL} within 10% of {TARGET_LEVEL}: "
        f"{at_overload.goodput:.1f} vs {at_target.goodput:.1f} streams/s ({ratio:.2f}x)"
    )


def _verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def print_live_targets(rows: list[Row]) -> None:
    found = {(row.front, row.level): row for row in rows if row.result is not None}
    print()
    grpc_row = found.get(("grpc", TARGET_LEVEL))
    if grpc_row is None:
        print(f"SKIP gRPC at {TARGET_LEVEL}: not run")
    else:
        p99 = grpc_row.ttfa_ms(0.99)
        failures = sum(grpc_row.failures.values())
        passed = p99 <= 200 and grpc_row.underran == 0 and failures == 0 and bool(grpc_row.ok)
        print(
            f"{_verdict(passed)} gRPC at {TARGET_LEVEL}: TTFA p99 {p99:.0f} ms (<= 200), "
            f"{grpc_row.underran} underran (0), {failures} failures (0)"
        )
    ws_row = found.get(("websocket", TARGET_LEVEL))
    if grpc_row is None or ws_row is None:
        print(f"SKIP WebSocket vs gRPC at {TARGET_LEVEL}: not both run")
    else:
        g99, w99 = grpc_row.ttfa_ms(0.99), ws_row.ttfa_ms(0.99)
        g_rate, w_rate = grpc_row.streams_per_s, ws_row.streams_per_s
        passed = w99 <= 1.1 * g99 and w_rate >= 0.9 * g_rate
        print(
            f"{_verdict(passed)} WebSocket at {TARGET_LEVEL} within 10% of gRPC: TTFA p99 "
            f"{w99:.0f} ms vs {g99:.0f} ms (<= {1.1 * g99:.0f}), {w_rate:.1f} streams/s vs "
            f"{g_rate:.1f} (>= {0.9 * g_rate:.1f})"
        )
    for front in FRONTS:
        row = found.get((front, OVERLOAD_LEVEL))
        name = FRONT_NAMES[front]
        if row is None:
            print(f"SKIP {name} at {OVERLOAD_LEVEL}: not run")
            continue
        played = sum(1 for r in row.ok if not r.underran)
        at_once = sum(1 for r in row.records if not r.ok and r.refused_at_once)
        others = len(row.records) - played - at_once
        print(
            f"{_verdict(others == 0)} {name} at {OVERLOAD_LEVEL}: every stream played without "
            f"underrun ({played}) or was refused at once ({at_once}); {others} others "
            f"({row.underran} underran, {row.slow_refusals} slow refusals, "
            f"{sum(1 for r in row.records if not r.ok and not r.refusal)} failures)"
        )


@dataclass
class Embedded:
    audio_s: float
    wall_s: list[float]
    error: str | None = None

    @property
    def rate(self) -> float:
        return self.audio_s / statistics.median(self.wall_s) if self.wall_s else math.nan


def embedded_render(text: str, directory: Path, repeats: int = 3) -> Embedded:
    """``voicelane render`` of ``text`` to Ogg, a new process each time (start-up included)."""
    from voicelane.common.audio import probe

    source = directory / "file-text.txt"
    source.write_text(text, encoding="utf-8")
    output = directory / "embedded.ogg"
    voicelane = Path(sys.executable).parent / "voicelane"
    walls: list[float] = []
    for _ in range(repeats):
        output.unlink(missing_ok=True)
        started = time.perf_counter()
        done = subprocess.run(
            [str(voicelane), "render", str(source), "-o", str(output)],
            cwd=ROOT,
            capture_output=True,
            check=False,
        )
        walls.append(time.perf_counter() - started)
        if done.returncode != 0:
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
            return Embedded(0.0, [], f"voicelane render exited {done.returncode}: {tail}")
    return Embedded(probe(output).duration_s, walls)


def print_file_table(rows: list[Row], embedded: Embedded, text: str, duration_s: float) -> None:
    print(
        f"\n### File-style speech: OpenAI /v1/audio/speech, opus (Ogg), no pace field, "
        f"{len(text)} characters; closed loop, {duration_s:g} s per row\n"
    )
    print(
        "Audio seconds: each whole Ogg file decoded (voicelane.common.audio.probe). Embedded: "
        "`voicelane render text.txt -o out.ogg`, a new process each time (start-up "
        "included), median wall time of 3, with the stack up and idle.\n"
    )
    print(
        "| client | concurrent | requests | failures | audio s | wall s | audio s / wall s "
        "| vs embedded | first byte p50 | request p50 | CPU ms per audio s: api | workers |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    if embedded.error:
        print(f"| embedded render | 1 | error: {embedded.error} |")
    else:
        wall = statistics.median(embedded.wall_s)
        print(
            f"| embedded `voicelane render` | 1 | {len(embedded.wall_s)} | 0 "
            f"| {embedded.audio_s:.1f} | {wall:.2f} (median) | {embedded.rate:.1f} | 1.00x "
            f"| - | {wall * 1000:.0f} ms | - | - |"
        )
    for row in rows:
        if row.result is None:
            print(f"| OpenAI opus | {row.level} | error: {(row.error or '?').splitlines()[0]} |")
            continue
        ok = row.ok
        audio_s = sum(r.audio_s for r in ok)
        rate = audio_s / row.result.wall_s
        failures = " ".join(f"{k}:{v}" for k, v in sorted(row.failures.items())) or "0"
        first = percentile([r.ttfa_s for r in ok if r.ttfa_s is not None], 0.5) * 1000
        request = percentile([r.elapsed_s for r in ok], 0.5) * 1000
        print(
            f"| OpenAI opus | {row.level} | {len(ok)} | {failures} | {audio_s:.1f} "
            f"| {row.result.wall_s:.1f} | {rate:.1f} | {rate / embedded.rate:.2f}x "
            f"| {_ms(first)} | {_ms(request)} "
            f"| {row.cpu_front_s / audio_s * 1000 if audio_s else math.nan:.1f} "
            f"| {row.cpu_workers_s / audio_s * 1000 if audio_s else math.nan:.1f} |"
        )
    one = next((row for row in rows if row.level == 1 and row.result is not None), None)
    print()
    if one is None or embedded.error:
        print("SKIP file-style at 1 concurrent >= 0.8x embedded: not measured")
    else:
        rate = sum(r.audio_s for r in one.ok) / one.result.wall_s if one.result else 0.0
        ratio = rate / embedded.rate
        print(
            f"{_verdict(ratio >= 0.8)} file-style at 1 concurrent: {rate:.1f} audio s per wall s "
            f"= {ratio:.2f}x of embedded {embedded.rate:.1f} (>= 0.8x)"
        )


# ---- profiles --------------------------------------------------------------------------------

_FRAME = re.compile(r"^(?P<name>.*) \((?P<file>.*?)(?::\d+)?\)$")


def _frame_key(frame: str) -> str:
    """``function (file)`` without the line number; paths shortened."""
    match = _FRAME.match(frame)
    if match is None:
        return frame
    path = match["file"]
    for marker in ("site-packages/", f"{ROOT}/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{match['name']} ({path})"


def collapse(raw: str) -> tuple[Counter[str], Counter[str], int]:
    """Self samples (leaf frame) and inclusive samples (each function once per stack) of
    py-spy's raw (collapsed) output, and the total."""
    self_samples: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_key(f) for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        self_samples[frames[-1]] += count
        for key in set(frames):
            inclusive[key] += count
    return self_samples, inclusive, total


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def profile(pids: Pids, seconds: float, level: int, directory: Path, base: LoadSpec) -> None:
    """gRPC load at ``level`` while py-spy samples each worker and the gRPC front."""
    print(f"\n### Profiles: gRPC at {level} concurrent, py-spy {RATE_HZ} Hz for {seconds:g} s\n")
    binary = py_spy()
    if binary is None:
        print("py-spy not found: `.venv/bin/pip install py-spy` (it is in the dev extra)")
        return
    targets = [(f"worker gpu{i}", pid) for i, pid in enumerate(pids.workers)]
    targets.append(("grpc front", pids.grpc))
    running: list[tuple[str, int, Path, subprocess.Popen[bytes]]] = []

    def start() -> None:
        time.sleep(1.0)  # past the start of the load
        for name, pid in targets:
            out = directory / f"profile-{pid}.txt"
            command = [binary, "record", "--format", "raw", "--rate", str(RATE_HZ)]
            command += ["-d", str(max(1, round(seconds))), "-p", str(pid), "--nonblocking"]
            command += ["-o", str(out)]
            process = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=directory
            )
            running.append((name, pid, out, process))

    spec = replace(base, front="grpc", clients=level, duration_s=seconds + 2.0)
    row = run_load(spec, pids, during=start)
    for name, pid, out, process in running:
        try:
            _, stderr = process.communicate(timeout=seconds + 60)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
        print(f"#### {name} (pid {pid})\n")
        if process.returncode != 0 or not out.exists():
            why = stderr.decode(errors="replace").split("Stack backtrace")[0].strip()[:800]
            print(f"py-spy could not profile it (exit {process.returncode}): {why}\n")
            continue
        self_samples, inclusive, total = collapse(out.read_text(errors="replace"))
        if not total:
            print("no samples (the process was idle)\n")
            continue
        busy = total / (RATE_HZ * seconds)
        print(f"{total} samples of busy threads (~{busy:.2f} threads busy on average)\n")
        print("| self | % | function |")
        print("|---:|---:|---|")
        for key, count in self_samples.most_common(15):
            print(f"| {count} | {count / total * 100:.1f} | `{key}` |")
        print("\n| inclusive | % | function |")
        print("|---:|---:|---|")
        for key, count in inclusive.most_common(10):
            print(f"| {count} | {count / total * 100:.1f} | `{key}` |")
        print()
    if row.result is not None:
        print(
            f"load while profiling: {len(row.ok)} streams, {row.streams_per_s:.1f} streams/s, "
            f"TTFA p99 {_ms(row.ttfa_ms(0.99))}, {row.underran} underran, "
            f"failures {dict(row.failures) or 0}"
        )
    else:
        print(f"load while profiling failed: {row.error}")


# ---- main ------------------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _fronts(text: str) -> list[str]:
    fronts = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(fronts) - set(FRONTS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown fronts {unknown}; choose from {FRONTS}")
    return fronts


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.protocols", description=__doc__.split("\n\n")[0] if __doc__ else ""
    )
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--slots", type=int, help="VOICELANE_REALTIME__SLOTS_PER_WORKER")
    parser.add_argument("--fronts", type=_fronts, default=list(FRONTS))
    parser.add_argument("--levels", type=_ints, default=[1, 10, 100, 200, 400])
    parser.add_argument("--duration-s", type=float, default=60.0)
    parser.add_argument(
        "--ramp-s",
        type=float,
        default=3.5,
        help="live clients start spread over this (about one stream): without it every "
        "client starts, and so restarts, in the same instant, for the whole run",
    )
    parser.add_argument("--file-levels", type=_ints, default=[1, 16], help="'' to skip")
    parser.add_argument("--file-duration-s", type=float, default=30.0)
    parser.add_argument("--file-min-requests", type=int, default=3, help="per client")
    parser.add_argument("--file-chars", type=int, default=1500)
    parser.add_argument("--profile", type=float, metavar="SECONDS", default=0.0)
    parser.add_argument("--profile-level", type=int, default=TARGET_LEVEL)
    parser.add_argument(
        "--no-pace-field",
        action="store_true",
        help='leave "pace": true out of live OpenAI requests (for a server that refuses it)',
    )
    parser.add_argument(
        "--ws-compression",
        action="store_true",
        help="offer permessage-deflate on the WebSocket (off: Opus does not compress)",
    )
    parser.add_argument("--timeout-s", type=float, default=120.0, help="per live stream")
    parser.add_argument(
        "--retry-ms",
        type=float,
        help="after a failed stream wait exactly this (e.g. 50: the retry storm), not the hint",
    )
    parser.add_argument("--settle-s", type=float, default=1.0, help="pause between rows")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="VOICELANE_X=VALUE",
        help="a server setting for every process of the stack (repeatable)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    import redis

    from tests.support.stack import Stack
    from voicelane.core.redis_server import RedisServer

    overrides = dict(QUOTA_OVERRIDES)
    if args.slots:
        overrides["VOICELANE_REALTIME__SLOTS_PER_WORKER"] = str(args.slots)
    for setting in args.env:
        key, sep, value = setting.partition("=")
        if not sep or not key.startswith("VOICELANE_"):
            raise SystemExit(f"--env {setting!r}: expected VOICELANE_NAME=VALUE")
        overrides[key] = value
    text = file_text(args.file_chars)
    with tempfile.TemporaryDirectory(prefix="bench-protocols-") as tmp:
        directory = Path(tmp)
        redis_server = RedisServer(directory / "redis").start()
        lane = Stack(directory / "lane", redis_server.url, env_overrides=overrides)
        try:
            workers = [lane.gpu_worker(name=f"gpu{i}") for i in range(args.workers)]
            grpc_proc = lane.grpc()
            api_proc = lane.api()
            lane.wait_realtime_workers(count=args.workers)
            client = redis.Redis.from_url(redis_server.url)
            redis_pid = int(client.info("server")["process_id"])
            client.close()
            pids = Pids(
                grpc=grpc_proc.process.pid,
                api=api_proc.process.pid,
                workers=tuple(w.process.pid for w in workers),
                redis=redis_pid,
            )
            print(
                f"## bench.protocols: {args.workers} GPU workers (espeak), "
                f"slots per worker {args.slots or 'server default'}, {os.cpu_count()} CPU "
                f"cores; sentence {SENTENCE!r}\n",
                flush=True,
            )
            if args.env:
                print(f"server settings: {' '.join(args.env)}\n")
            idle = idle_cpu(pids)
            print(idle_line(idle), flush=True)
            base = LoadSpec(
                front="grpc",
                clients=1,
                duration_s=args.duration_s,
                grpc_target=lane.grpc_target,
                api_url=lane.api_url,
                pace_field=not args.no_pace_field,
                ws_compression=args.ws_compression,
                timeout_s=args.timeout_s,
            )
            rows: list[Row] = []
            retry_s = None if args.retry_ms is None else args.retry_ms / 1000
            for level in args.levels:
                for front in args.fronts:
                    spec = replace(
                        base,
                        front=front,
                        clients=level,
                        ramp_s=args.ramp_s,
                        retry_s=retry_s,
                    )
                    print(f"... {FRONT_NAMES[front]} at {level}", file=sys.stderr, flush=True)
                    rows.append(run_load(spec, pids))
                    time.sleep(args.settle_s)
            if rows:
                audio = [r.audio_ms for row in rows for r in row.ok]
                if audio:
                    print(f"audio per stream: {statistics.median(audio) / 1000:.2f} s (median)")
                print_live_table(rows, args.duration_s)
                print_refusal_cost(rows, idle)
                print_live_targets(rows)
                print_goodput_target(rows)
                sys.stdout.flush()
            if args.file_levels:
                print("... embedded render", file=sys.stderr, flush=True)
                embedded = embedded_render(text, directory)
                file_rows: list[Row] = []
                for level in args.file_levels:
                    spec = replace(
                        base,
                        front="openai",
                        clients=level,
                        duration_s=args.file_duration_s,
                        file_text=text,
                        min_requests=args.file_min_requests,
                        timeout_s=max(args.timeout_s, 600.0),
                    )
                    print(f"... file-style at {level}", file=sys.stderr, flush=True)
                    file_rows.append(run_load(spec, pids))
                    time.sleep(args.settle_s)
                print_file_table(file_rows, embedded, text, args.file_duration_s)
                sys.stdout.flush()
            if args.profile > 0:
                print("... profiling", file=sys.stderr, flush=True)
                profile(pids, args.profile, args.profile_level, directory, base)
        except Exception:
            print(lane.logs(), file=sys.stderr)
            raise
        finally:
            lane.stop()
            redis_server.stop()


if __name__ == "__main__":
    main()
