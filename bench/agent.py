"""Benchmark: the agent streaming protocol (``GET /v1/agent``) under load, against the same
contexts one per connection.

Real processes: redis-server, ``--workers`` GPU workers (espeak) serving the real-time lane and
one ``voicelane api``, started through :class:`tests.support.stack.Stack`; the tenant's quotas
and the API's WebSocket limits are lifted (as in :mod:`bench.protocols`), so only the workers
can refuse. Clients: the ``websockets`` library in this process (one asyncio loop).

**Load.** ``--connections`` sockets (50) × ``--contexts`` contexts each (4), all at once (their
starts spread over ``--ramp-s``). Each context appends its text (three sentences) in pieces of
one to three words, ``--piece-ms`` (30 ms) apart, as an LLM writes, then ``close``; it is done
at its ``done``. On every second connection its last context is cancelled ``--cancel-after-ms``
(300 ms) after its first audio. PCM at 24 kHz.

**Baseline** (same run, same stack): the same contexts, each on a connection of its own
(``--connections × --contexts`` sockets of one context).

**Measures.**

* first audio — a context's first ``append`` sent → its first ``audio`` message received;
* cancel ack — ``cancel`` sent → ``cancelled`` received (client-measured, loopback); "after
  cancel": messages of a cancelled context received after its ``cancelled`` (must be 0);
* underran — a 150 ms playback buffer started at the context's first audio: audio at ``pts``
  arriving at ``t`` is late when ``t > t0 + pts + 150 ms``; a context underran when any was;
* word timing error (espeak) — the decoded PCM in 10 ms frames, a frame voiced when its RMS is
  over 5% of the context's loudest frame; a voiced *onset* is a voiced frame after at least
  50 ms unvoiced (or the first frame). For the first word of each sentence (its start follows
  a silence), the error is its ``start_ms`` minus the nearest onset: p50 / p99 of the absolute
  value. And for every word, whether its ``[start_ms, end_ms)`` holds voiced audio ("words on
  voice").

Run: ``.venv/bin/python -m bench.agent [--connections 50] [--contexts 4] [--workers 2]``
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import websockets

from bench.tables import header, percentile
from tests.support.stack import ACME_KEY, Stack

RATE_HZ = 24000
BUFFER_S = 0.150
FRAME_MS = 10
VOICED_RATIO = 0.05
"""A frame is voiced when its RMS is over this share of the context's loudest frame."""
ONSET_SILENCE_MS = 50
SENTENCES = (
    "The harbor was quiet in the early morning.",
    "Only the gulls were awake, calling over the water.",
    "Margaret unlocked the bakery at half past five.",
    "Did anyone remember to water the tomatoes?",
    "The committee will meet again on Thursday.",
    "He folded the map and walked toward the station.",
    "Fresh bread and strong coffee were all she needed.",
    "The storm passed overnight and left the square wet.",
)
OVERRIDES = {
    "VOICELANE_TENANT_REQUESTS_PER_S": "100000",
    "VOICELANE_TENANT_REQUEST_BURST": "100000",
    "VOICELANE_TENANT_MAX_STREAMS": "100000",
    "VOICELANE_TENANT_MAX_QUEUED_CHARS": "1000000000",
    "VOICELANE_WEBSOCKET_MAX_PER_ADDRESS": "100000",
    "VOICELANE_WEBSOCKET_MAX_CONNECTIONS": "100000",
}
AUTH = {"Authorization": f"Bearer {ACME_KEY}"}


# ---- word timings against the audio -------------------------------------------------------------


def voiced_frames(pcm: bytes) -> np.ndarray:
    """Per 10 ms frame of 16-bit PCM at :data:`RATE_HZ`: voiced (RMS over the threshold)."""
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    size = RATE_HZ * FRAME_MS // 1000
    count = len(samples) // size
    if count == 0:
        return np.zeros(0, dtype=bool)
    frames = samples[: count * size].reshape(count, size)
    rms = np.sqrt((frames**2).mean(axis=1))
    peak = float(rms.max())
    return rms > peak * VOICED_RATIO if peak > 0 else np.zeros(count, dtype=bool)


def onsets_ms(voiced: np.ndarray) -> list[int]:
    """Where voiced audio starts after at least :data:`ONSET_SILENCE_MS` of silence."""
    quiet = ONSET_SILENCE_MS // FRAME_MS
    out: list[int] = []
    run = quiet  # the start counts as silence before
    for index, flag in enumerate(voiced):
        if flag:
            if run >= quiet:
                out.append(index * FRAME_MS)
            run = 0
        else:
            run += 1
    return out


def sentence_starts(text: str, words: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The words that start a sentence: the first, and each after a ``.``, ``!`` or ``?``."""
    out = []
    for word in words:
        before = text[: word["char_start"]].rstrip()
        if not before or before[-1] in ".!?":
            out.append(word)
    return out


def timing_errors_ms(text: str, words: Sequence[dict[str, Any]], pcm: bytes) -> list[float]:
    """Each sentence's first word: its ``start_ms`` minus the nearest voiced onset."""
    onsets = onsets_ms(voiced_frames(pcm))
    if not onsets:
        return []
    return [
        float(word["start_ms"] - min(onsets, key=lambda at: abs(at - word["start_ms"])))
        for word in sentence_starts(text, words)
    ]


def worst_first_words(runs: Sequence[ContextRun], count: int = 6) -> str:
    """The sentence-first words farthest from their onset (signed ms), for the notes."""
    found: dict[str, float] = {}
    for run in runs:
        pcm = run.pcm
        onsets = onsets_ms(voiced_frames(pcm))
        for word in sentence_starts(run.text, run.words):
            if onsets:
                near = min(onsets, key=lambda at: abs(at - word["start_ms"]))
                error = float(word["start_ms"] - near)
                if abs(error) > abs(found.get(word["text"], 0.0)):
                    found[word["text"]] = error
    worst = sorted(found.items(), key=lambda item: -abs(item[1]))[:count]
    return ", ".join(f"{text} {error:+.0f} ms" for text, error in worst)


def words_on_voice(words: Sequence[dict[str, Any]], pcm: bytes) -> tuple[int, int]:
    """(words whose span holds voiced audio, words)."""
    voiced = voiced_frames(pcm)
    hits = 0
    for word in words:
        first = word["start_ms"] // FRAME_MS
        last = max(first + 1, math.ceil(word["end_ms"] / FRAME_MS))
        hits += bool(voiced[first:last].any())
    return hits, len(words)


# ---- the clients ---------------------------------------------------------------------------------


@dataclass
class ContextRun:
    """One context's plan and what it got."""

    context_id: str
    text: str
    cancel: bool
    sent_at: float = 0.0
    first_audio_s: float | None = None
    t0: float | None = None
    worst_late_s: float = 0.0
    audio_b64: list[str] = field(default_factory=list)
    words: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    cancel_sent: float | None = None
    cancel_ack_s: float | None = None
    after_cancel: int = 0
    error: str | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    first_audio: asyncio.Event = field(default_factory=asyncio.Event)

    def audio(self, message: dict[str, Any], now: float) -> None:
        if self.t0 is None:
            self.t0 = now
            self.first_audio_s = now - self.sent_at
            self.first_audio.set()
        late = now - (self.t0 + message["pts_ms"] / 1000)
        self.worst_late_s = max(self.worst_late_s, late)
        self.audio_b64.append(message["audio"])  # decoded after the run (client CPU)

    @property
    def pcm(self) -> bytes:
        return b"".join(base64.b64decode(part) for part in self.audio_b64)


def pieces(text: str, rng: random.Random) -> list[str]:
    """The text in pieces of one to three words (each with its trailing space), as tokens."""
    words = text.split(" ")
    out = []
    index = 0
    while index < len(words):
        size = rng.randint(1, 3)
        chunk = " ".join(words[index : index + size])
        index += size
        out.append(chunk + (" " if index < len(words) else ""))
    return out


async def connection(
    url: str, runs: list[ContextRun], *, piece_s: float, cancel_after_s: float, seed: int
) -> None:
    """One socket carrying ``runs`` concurrently."""
    rng = random.Random(seed)
    async with websockets.connect(url, additional_headers=AUTH, max_size=1 << 24) as socket:
        ready = json.loads(await socket.recv())
        assert ready["type"] == "ready", ready
        by_id = {run.context_id: run for run in runs}

        async def reader() -> None:
            async for raw in socket:
                now = time.perf_counter()
                message = json.loads(raw)
                run = by_id.get(message.get("context_id", ""))
                if run is None:
                    continue
                kind = message["type"]
                if run.cancel_ack_s is not None:
                    run.after_cancel += kind != "cancelled"
                    continue
                if kind == "audio":
                    run.audio(message, now)
                elif kind == "words":
                    run.words.extend(message["words"])
                elif kind == "done":
                    run.done = True
                    run.finished.set()
                elif kind == "cancelled" and run.cancel_sent is not None:
                    run.cancel_ack_s = now - run.cancel_sent
                    run.finished.set()
                elif kind == "error":
                    run.error = str(message.get("error_code") or message.get("code"))
                    run.finished.set()

        async def writer(run: ContextRun) -> None:
            parts = pieces(run.text, rng)
            for index, part in enumerate(parts):
                message: dict[str, Any] = {"type": "append", "context_id": run.context_id,
                                           "text": part}  # fmt: skip
                if index == 0:
                    message["sample_rate_hz"] = RATE_HZ
                    run.sent_at = time.perf_counter()
                await socket.send(json.dumps(message))
                await asyncio.sleep(piece_s)
            await socket.send(json.dumps({"type": "close", "context_id": run.context_id}))
            if run.cancel:
                await run.first_audio.wait()
                await asyncio.sleep(cancel_after_s)
                if not run.done:
                    run.cancel_sent = time.perf_counter()
                    await socket.send(json.dumps({"type": "cancel", "context_id": run.context_id}))
            await run.finished.wait()

        reading = asyncio.create_task(reader())
        try:
            await asyncio.gather(*(writer(run) for run in runs))
            if any(run.cancel for run in runs):
                # Anything of a cancelled context arriving late would come now: one more
                # round trip (a cancel of an unknown id is answered) before leaving.
                probe = ContextRun("probe", "", cancel=False)
                by_id["probe"] = probe
                probe.cancel_sent = time.perf_counter()
                await socket.send(json.dumps({"type": "cancel", "context_id": "probe"}))
                await asyncio.wait_for(probe.finished.wait(), 30)
        finally:
            reading.cancel()


def plan(connections: int, contexts: int) -> list[list[ContextRun]]:
    """Each connection's contexts: three sentences each; every second connection cancels its
    last context."""
    out = []
    for c in range(connections):
        runs = []
        for k in range(contexts):
            start = (c * contexts + k) % len(SENTENCES)
            text = " ".join(SENTENCES[(start + i) % len(SENTENCES)] for i in range(3))
            runs.append(ContextRun(f"c{k}", text, cancel=(c % 2 == 1 and k == contexts - 1)))
        out.append(runs)
    return out


async def load(
    url: str, groups: list[list[ContextRun]], *, piece_s: float, cancel_after_s: float,
    ramp_s: float,
) -> float:  # fmt: skip
    started = time.perf_counter()

    async def one(index: int, runs: list[ContextRun]) -> None:
        await asyncio.sleep(index * ramp_s / max(1, len(groups)))
        try:
            await asyncio.wait_for(
                connection(url, runs, piece_s=piece_s, cancel_after_s=cancel_after_s, seed=index),
                300,
            )
        except Exception as error:
            for run in runs:
                if not run.done and run.cancel_ack_s is None and run.error is None:
                    run.error = type(error).__name__

    await asyncio.gather(*(one(i, runs) for i, runs in enumerate(groups)))
    return time.perf_counter() - started


# ---- the table -----------------------------------------------------------------------------------


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0f} ms"


def _ms1(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f} ms"


def row(name: str, runs: list[ContextRun], wall_s: float) -> str:
    first = [r.first_audio_s * 1000 for r in runs if r.first_audio_s is not None]
    acks = [r.cancel_ack_s * 1000 for r in runs if r.cancel_ack_s is not None]
    done = [r for r in runs if r.done]
    errors = [abs(e) for r in done for e in timing_errors_ms(r.text, r.words, bytes(r.pcm))]
    on_voice = [words_on_voice(r.words, bytes(r.pcm)) for r in done]
    hits, total = sum(h for h, _ in on_voice), sum(t for _, t in on_voice)
    underran = sum(1 for r in runs if r.t0 is not None and r.worst_late_s > BUFFER_S)
    failures = Counter(r.error for r in runs if r.error)
    audio_s = statistics.median(len(r.pcm) / 2 / RATE_HZ for r in done) if done else 0.0
    return (
        f"| {name} | {len(done)} / {sum(1 for r in runs if r.cancel_ack_s is not None)} "
        f"| {dict(failures) or 0} | {audio_s:.1f} s "
        f"| {_ms(percentile(first, 0.5))} | {_ms(percentile(first, 0.99))} "
        f"| {_ms1(percentile(acks, 0.5))} | {_ms1(percentile(acks, 0.99))} "
        f"| {sum(r.after_cancel for r in runs)} "
        f"| {_ms(percentile(errors, 0.5))} | {_ms(percentile(errors, 0.99))} ({len(errors)}) "
        f"| {100 * hits / max(1, total):.1f}% | {underran} | {wall_s:.0f} s |"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.agent", description=__doc__)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--contexts", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--slots", type=int, default=256, help="real-time slots per worker")
    parser.add_argument("--piece-ms", type=float, default=30.0)
    parser.add_argument("--cancel-after-ms", type=float, default=300.0)
    parser.add_argument("--ramp-s", type=float, default=2.0)
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args(argv)
    from voicelane.core.redis_server import RedisServer

    load_before = os.getloadavg()[0]

    overrides = {
        **OVERRIDES,
        "VOICELANE_REALTIME__SLOTS_PER_WORKER": str(args.slots),
        "VOICELANE_AGENT_MAX_CONTEXTS": str(max(8, args.contexts + 1)),
    }
    timing = {"piece_s": args.piece_ms / 1000, "cancel_after_s": args.cancel_after_ms / 1000,
              "ramp_s": args.ramp_s}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp:
        redis_server = RedisServer(Path(tmp) / "redis").start()
        lane = Stack(Path(tmp) / "lane", redis_server.url, env_overrides=overrides)
        try:
            for index in range(args.workers):
                lane.gpu_worker(name=f"gpu{index}")
            lane.api()
            lane.wait_realtime_workers(count=args.workers)
            url = lane.api_url.replace("http://", "ws://") + "/v1/agent"
            asyncio.run(load(url, plan(1, 1), **timing))  # warm-up
            print(f"... agent {args.connections} x {args.contexts}", file=sys.stderr, flush=True)
            groups = plan(args.connections, args.contexts)
            wall_s = asyncio.run(load(url, groups, **timing))
            runs = list(itertools.chain.from_iterable(groups))
            notes = worst_first_words([r for r in runs if r.done])
            rows = [
                row(
                    f"{args.connections} × {args.contexts}",
                    list(itertools.chain.from_iterable(groups)),
                    wall_s,
                )
            ]
            if not args.no_baseline:
                print("... baseline: one context per connection", file=sys.stderr, flush=True)
                single = [
                    [run]
                    for run in itertools.chain.from_iterable(plan(args.connections, args.contexts))
                ]
                for runs in single:
                    runs[0].context_id = "c0"
                wall_s = asyncio.run(load(url, single, **timing))
                rows.append(
                    row(f"{len(single)} × 1 (baseline)", [r for g in single for r in g], wall_s)
                )
        except Exception:
            print(lane.logs(), file=sys.stderr)
            raise
        finally:
            lane.stop()
            redis_server.stop()
    print(
        f"## bench.agent: {args.workers} GPU workers (espeak), {os.cpu_count()} CPU cores "
        f"(load average {load_before:.1f} at the start), "
        f"pieces every {args.piece_ms:g} ms, cancel {args.cancel_after_ms:g} ms after first "
        "audio on every second connection's last context\n"
    )
    header(
        "connections × contexts", "done / cancelled", "failures", "audio per context (median)",
        "first audio p50", "first audio p99", "cancel ack p50", "cancel ack p99",
        "messages after cancelled", "word error p50", "word error p99 (words)", "words on voice",
        "underran", "wall",
    )  # fmt: skip
    for line in rows:
        print(line)
    print(f"\nsentence-first words farthest from their onset: {notes}")


if __name__ == "__main__":
    main()
