"""Benchmark: the client's clock-offset estimate (``voicelane.client.clock``) against the front's
real ``Clock`` handler on loopback.

The server is ``voicelane.api.grpc_service.SpeechService`` (no gateway: ``Clock`` touches none; no
API-key interceptor) on ``grpc.aio.server()`` in its own process, as a front would be. On one
host both ends read the same clock, so the true offset is 0: ``|offset|`` is the estimate's
error and ``bound held`` counts the runs where ``|offset| <= error bound``.

Rows: ``measure_clock`` (grpc.aio) and ``measure_clock_sync`` (blocking channel), with 1, 4, 8
and 32 back-to-back ``Clock`` calls per estimate (a fresh :class:`~voicelane.client.clock.ClockSync`
each, on a warm channel), many estimates each; then the baseline, the offset from a stream's
first ``AudioChunk`` echo alone. That echo is **simulated**: the client stamps the request
(``client_ts_ms``, truncated to ms), waits a first-chunk delay standing for the synthesis
(10 ms: espeak at 1 stream; 50 ms: 10 streams; 300 ms: a neural engine's first audio — see
docs/benchmarks.md), then one ``Clock`` call is the chunk's production (its server time
truncated to ms, like ``server_ts_ms``) and its arrival. The echo's production sits at the end
of its round trip, not the middle, so its error is about half the delay, inside a bound of
about half the delay.

Loopback shows the method's floor (round trips of a few hundred µs, no asymmetry beyond the
two processes' scheduling); across a WAN the bound is half the shortest round trip seen,
typically 5-50 ms, and the error is the path's asymmetry, at most that bound.

Run: ``.venv/bin/python -m bench.clock [--reps 400]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import grpc
import grpc.aio

from bench.tables import percentile
from voicelane.api.grpc_service import SpeechService
from voicelane.api.streams import StreamGateway
from voicelane.client.clock import (
    WIRE_MS_RESOLUTION_MS,
    ClockEstimate,
    ClockSample,
    ClockSync,
    measure_clock,
    measure_clock_sync,
    wall_ms,
)
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc

SAMPLE_COUNTS = (1, 4, 8, 32)
ECHO_DELAYS_MS = (10.0, 50.0, 300.0)
WARMUP_CALLS = 200
REFERENCE_BOUND_MS = 2.0
"""The reference design: the offset known to < 2 ms."""


# ---- the server (its own process) ------------------------------------------------------------


async def serve() -> None:
    """Serve Clock on a free loopback port, print it, run until stdin closes."""
    server = grpc.aio.server()
    pb_grpc.add_SpeechServicer_to_server(SpeechService(cast(StreamGateway, object())), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await asyncio.to_thread(sys.stdin.read)
    await server.stop(grace=None)


@contextlib.contextmanager
def server_process() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.clock", "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.strip():
            raise RuntimeError("the Clock server did not start")
        yield f"127.0.0.1:{int(line)}"
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# ---- measuring -------------------------------------------------------------------------------


@dataclass
class Row:
    method: str
    client: str
    samples: str
    estimates: list[ClockEstimate]


async def measure_async(target: str, reps: int) -> list[Row]:
    rows = []
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.SpeechStub(channel)
        await measure_clock(stub, WARMUP_CALLS)
        for n in SAMPLE_COUNTS:
            estimates = [await measure_clock(stub, n) for _ in range(reps)]
            rows.append(Row("Clock RPC", "grpc.aio", str(n), estimates))
        for delay_ms in ECHO_DELAYS_MS:
            echo_reps = max(10, min(reps, round(6000 / delay_ms)))
            estimates = [await simulated_echo(stub, delay_ms) for _ in range(echo_reps)]
            rows.append(
                Row(f"first-chunk echo, {delay_ms:.0f} ms delay (simulated)", "grpc.aio", "1",
                    estimates)
            )  # fmt: skip
    return rows


def measure_blocking(target: str, reps: int) -> list[Row]:
    rows = []
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.SpeechStub(channel)
        measure_clock_sync(stub, WARMUP_CALLS)
        for n in SAMPLE_COUNTS:
            estimates = [measure_clock_sync(stub, n) for _ in range(reps)]
            rows.append(Row("Clock RPC", "blocking", str(n), estimates))
    return rows


async def simulated_echo(stub: pb_grpc.SpeechAsyncStub, delay_ms: float) -> ClockEstimate:
    """A first chunk's echo: request stamped (ms), synthesis, production (server, ms), arrival."""
    sent_ms = float(int(wall_ms()))  # client_ts_ms on the wire
    await asyncio.sleep(delay_ms / 1000)
    response = await stub.Clock(pb.ClockRequest(client_ts_ms=int(sent_ms)))
    received_ms = wall_ms()
    server_ms = float(response.server_ts_us // 1000)  # server_ts_ms on the wire
    sample = ClockSample(sent_ms, server_ms, received_ms, WIRE_MS_RESOLUTION_MS, "echo")
    clock = ClockSync(1)
    clock.add(sample)
    estimate = clock.estimate
    assert estimate is not None
    return estimate


# ---- report ----------------------------------------------------------------------------------


def fmt(ms: float) -> str:
    return f"{ms * 1000:.0f} µs" if ms < 1 else f"{ms:.2f} ms"


def table(rows: list[Row]) -> str:
    lines = [
        "| method | client | samples | estimates | \\|offset\\| p50 | \\|offset\\| p99 | "
        "\\|offset\\| max | bound p50 | bound p99 | bound max | round trip p50 | bound held |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        errors = [abs(e.offset_ms) for e in row.estimates]
        bounds = [e.error_bound_ms for e in row.estimates]
        trips = [e.round_trip_ms for e in row.estimates]
        held = sum(1 for e in row.estimates if abs(e.offset_ms) <= e.error_bound_ms)
        lines.append(
            f"| {row.method} | {row.client} | {row.samples} | {len(row.estimates)} "
            f"| {fmt(percentile(errors, 0.5))} | {fmt(percentile(errors, 0.99))} "
            f"| {fmt(max(errors))} | {fmt(percentile(bounds, 0.5))} "
            f"| {fmt(percentile(bounds, 0.99))} | {fmt(max(bounds))} "
            f"| {fmt(statistics.median(trips))} | {held}/{len(row.estimates)} |"
        )
    return "\n".join(lines)


def verdict(rows: list[Row]) -> str:
    lines = []
    for row in rows:
        if row.method != "Clock RPC" or row.samples != "8":
            continue
        p99 = percentile([e.error_bound_ms for e in row.estimates], 0.99)
        met = "met" if p99 < REFERENCE_BOUND_MS else "NOT met"
        lines.append(
            f"- {row.client}, 8 samples: bound p99 {fmt(p99)} vs the reference's "
            f"< {REFERENCE_BOUND_MS:.0f} ms: {met} (on loopback)"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=400, help="estimates per Clock row")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve())
        return
    started = time.monotonic()
    with server_process() as target:
        rows = asyncio.run(measure_async(target, args.reps))
        rows += measure_blocking(target, args.reps)
    rows.sort(key=lambda r: (r.method != "Clock RPC", r.client != "grpc.aio"))
    print(f"Clock offset on loopback (true offset 0), {args.reps} estimates per Clock row\n")
    print(table(rows))
    print()
    print(verdict(rows))
    print(f"\n({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
