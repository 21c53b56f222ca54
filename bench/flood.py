"""Benchmark: another tenant's small job, live stream and chat, idle vs while one tenant floods.

Real processes: redis-server (with a ``maxmemory`` budget), the API, the gRPC front, a GPU, a
CPU and a callbacks worker (espeak), and the stand-in Ollama (in this process) behind the chat
route. Tenant ``acme`` floods along one path at a time (a row each; issue 26's lockout paths):

- ``quotas``: books and streams as fast as its quotas let it (``tests.support.flood``);
- ``never-reading speech``: 8 ``POST /v1/audio/speech`` (20k characters, pcm, 48 kHz) whose
  client never reads (raw sockets, tiny receive buffers);
- ``idle Converse``: 1,000 ``Converse`` calls on one connection that never send ``start``,
  re-opened as the front ends them;
- ``text chat``: 40 text-only chats at once, half of them leaving after 0.3 s, all retried
  at once (or at a 429's hint);
- ``trickling callbacks``: 20 jobs whose callbacks go to a receiver that answers a byte every
  2 s, forever (``callback_timeout_s`` high: only where callbacks run is measured);
- ``resumes``: 50 concurrent resumes of one of its live streams, retried at every hint.

Tenant ``other`` meanwhile runs a 2-sentence job (submit → done), a paced live gRPC stream
(first audio, and open → final chunk) and a text chat (request → whole reply), first with the
service idle (baseline, same run), then under each flood. Reported: median of ``--rounds``,
the ratio to idle (target: <= 2x) and Redis ``used_memory``'s peak during the row vs the
budget (target: under it).

Run: ``.venv/bin/python -m bench.flood [--rounds 1] [--maxmemory-mib 512] [--rows ...]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import grpc
import grpc.aio
import httpx
import redis

from tests.support.flood import BOOK, LIVE_TEXT, QUOTAS, SMALL_JOB, Flood, job_seconds
from tests.support.stack import ACME_KEY, OTHER_KEY, Stack, wait_for
from tests.support.trickle import Trickler
from voicelane.api.ollama_standin import OllamaStandin, StandinConfig
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.redis_server import RedisServer

TARGET_RATIO = 2.0
MODEL = "qwen2.5:7b"
WARMUP_S = 5.0
"""How long each flood runs before ``other`` is measured."""
SETTLE_S = 3.0
ENV = {
    **QUOTAS,
    "OLLAMA_HOST": "",  # set to the stand-in's URL at start
    "VOICELANE_LLM__MODEL": MODEL,
    "VOICELANE_LLM__MAX_PARALLEL": "2",
    "VOICELANE_CALLBACK_SIGNING_SECRET": "callback-master-secret-0123456789",
    "VOICELANE_CALLBACK_ALLOW": "127.0.0.1",
    "VOICELANE_CALLBACK_TIMEOUT_S": "600",
}
SPEECH_TEXT = ("The committee met on Tuesday to review the budget for the coming year. " * 300)[
    :20_000
]
CHAT_QUESTION = "What is a small benchmark for?"


# ---- the measured tenant ---------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One round of ``other``'s three requests, in seconds."""

    job_s: float
    first_audio_s: float
    stream_s: float
    chat_s: float


METRICS: tuple[tuple[str, Callable[[Sample], float]], ...] = (
    ("small job, submit → done", lambda s: s.job_s),
    ("live stream, first audio", lambda s: s.first_audio_s),
    ("live stream, open → final chunk", lambda s: s.stream_s),
    ("text chat, request → reply", lambda s: s.chat_s),
)


async def stream_seconds(lane: Stack) -> tuple[float, float]:
    """First audio and final chunk of a paced live stream, seconds from opening it."""
    metadata = (("authorization", f"Bearer {OTHER_KEY}"),)
    first = None
    async with grpc.aio.insecure_channel(lane.grpc_target) as channel:
        stub = pb_grpc.SpeechStub(channel)
        started = time.monotonic()
        call = stub.Synthesize(pb.SynthesizeRequest(text=LIVE_TEXT), metadata=metadata, timeout=120)
        async for chunk in call:
            if first is None and chunk.opus_packets:
                first = time.monotonic() - started
        total = time.monotonic() - started
    return (first if first is not None else total), total


def chat_seconds(lane: Stack) -> float:
    body = {"model": MODEL, "messages": [{"role": "user", "content": CHAT_QUESTION}]}
    with httpx.Client(
        base_url=lane.api_url, headers={"Authorization": f"Bearer {OTHER_KEY}"}, timeout=120
    ) as client:
        started = time.monotonic()
        response = client.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        return time.monotonic() - started


def measure(lane: Stack, rounds: int) -> list[Sample]:
    samples = []
    for _ in range(rounds):
        job_s = job_seconds(lane, OTHER_KEY, SMALL_JOB, timeout_s=300)
        first_s, stream_s = asyncio.run(stream_seconds(lane))
        samples.append(Sample(job_s, first_s, stream_s, chat_seconds(lane)))
    return samples


# ---- Redis memory ----------------------------------------------------------------------------


class MemoryPeak:
    """Samples Redis's ``used_memory`` every 0.2 s in a thread; :meth:`take` returns the peak
    since the last call."""

    def __init__(self, redis_url: str) -> None:
        self.client = redis.Redis.from_url(redis_url)
        budget = self.client.config_get("maxmemory")["maxmemory"]
        self.budget_bytes = int(budget or 0)
        self._peak = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            with suppress(redis.RedisError):
                used = int(self.client.info("memory")["used_memory"])
                with self._lock:
                    self._peak = max(self._peak, used)

    def take(self) -> int:
        with self._lock:
            peak, self._peak = self._peak, 0
        return peak

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.client.close()


# ---- the floods ------------------------------------------------------------------------------


class AsyncFlood:
    """A flood as a coroutine on its own event loop in a thread, until stopped; ``outcomes``
    counts what the service answered."""

    def __init__(self, lane: Stack) -> None:
        self.lane = lane
        self.stop = threading.Event()
        self.outcomes: Counter[str] = Counter()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def __enter__(self) -> AsyncFlood:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self._thread.join(60)

    async def _main(self) -> None:
        task = asyncio.ensure_future(self.run())
        while not self.stop.is_set() and not task.done():
            await asyncio.sleep(0.1)
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task

    async def run(self) -> None:
        raise NotImplementedError

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {ACME_KEY}"),)


class NeverReadingSpeech(AsyncFlood):
    """8 long pcm speech requests whose client reads the head and never the body."""

    COUNT = 8

    async def run(self) -> None:
        sockets = [self._open() for _ in range(self.COUNT)]
        try:
            await asyncio.Event().wait()
        finally:
            for sock in sockets:
                sock.close()

    def _open(self) -> socket.socket:
        body = json.dumps(
            {"input": SPEECH_TEXT, "voice": "alloy", "response_format": "pcm",
             "sample_rate_hz": 48_000}
        ).encode()  # fmt: skip
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", self.lane.api_port))
        head = (
            f"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {ACME_KEY}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        sock.sendall(head + body)
        received = b""
        while b"\r\n\r\n" not in received:
            piece = sock.recv(1)
            if not piece:
                break
            received += piece
        self.outcomes[f"speech {received[9:12].decode() or 'closed'}"] += 1
        return sock


class IdleConverse(AsyncFlood):
    """1,000 ``Converse`` calls on one channel that never send ``start``; each one the front
    ends is opened again (at the refusal's retry hint, if it gave one)."""

    COUNT = 1000

    async def run(self) -> None:
        async with grpc.aio.insecure_channel(self.lane.grpc_target) as channel:
            stub = pb_grpc.SpeechStub(channel)

            async def one() -> None:
                while True:
                    call = stub.Converse(metadata=self.metadata, timeout=120)
                    try:
                        async for _ in call:
                            pass
                        self.outcomes["converse OK"] += 1
                    except grpc.aio.AioRpcError as error:
                        self.outcomes[f"converse {error.code().name}"] += 1
                        hint = dict(await call.trailing_metadata() or ()).get("retry-after-ms")
                        await asyncio.sleep(int(hint or 50) / 1000)  # back at the hint

            await asyncio.gather(*(one() for _ in range(self.COUNT)))


class TextChat(AsyncFlood):
    """40 text-only chats at once, every other one leaving after 0.3 s; each is asked again
    as soon as it ends (or at a 429's hint)."""

    COUNT = 40

    async def run(self) -> None:
        headers = {"Authorization": f"Bearer {ACME_KEY}"}
        limits = httpx.Limits(max_connections=self.COUNT * 2)
        async with httpx.AsyncClient(
            base_url=self.lane.api_url, headers=headers, limits=limits
        ) as client:

            async def one(n: int) -> None:
                timeout = 0.3 if n % 2 else 60.0
                body = {"model": MODEL, "messages": [{"role": "user", "content": f"Flood {n}"}]}
                while True:
                    try:
                        response = await client.post(
                            "/v1/chat/completions", json=body, timeout=timeout
                        )
                    except httpx.TimeoutException:
                        self.outcomes["chat left"] += 1
                        continue
                    self.outcomes[f"chat {response.status_code}"] += 1
                    if response.status_code != 200:
                        await asyncio.sleep(float(response.headers.get("Retry-After", "1")))

            await asyncio.gather(*(one(n) for n in range(self.COUNT)))


class TricklingCallbacks(AsyncFlood):
    """20 small jobs whose callbacks go to a receiver that trickles a byte every 2 s."""

    COUNT = 20

    def __enter__(self) -> TricklingCallbacks:
        self.trickler = Trickler(every_s=2.0, forever=True)
        super().__enter__()
        wait_for(lambda: self.trickler.open >= 2, 120, "the callbacks to be trickled")
        return self

    def __exit__(self, *_exc: object) -> None:
        super().__exit__()
        self.outcomes["callbacks trickled at the end"] = self.trickler.open
        self.trickler.close()

    async def run(self) -> None:
        headers = {"Authorization": f"Bearer {ACME_KEY}"}
        async with httpx.AsyncClient(
            base_url=self.lane.api_url, headers=headers, timeout=30
        ) as client:
            sent = 0
            while sent < self.COUNT:
                body = {"text": f"Call me, {sent}.", "callback_url": self.trickler.url()}
                response = await client.post("/v1/jobs", json=body)
                self.outcomes[f"job {response.status_code}"] += 1
                if response.status_code == 202:
                    sent += 1
                else:
                    await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
            await asyncio.Event().wait()


class Resumes(AsyncFlood):
    """One live stream of ``acme`` and 50 concurrent resumes of it, each retried at its hint."""

    COUNT = 50
    REQUEST_ID = "flood-resumed"

    async def run(self) -> None:
        async with grpc.aio.insecure_channel(self.lane.grpc_target) as channel:
            stub = pb_grpc.SpeechStub(channel)
            origin = stub.Synthesize(
                pb.SynthesizeRequest(text=BOOK[:2000], request_id=self.REQUEST_ID),
                metadata=self.metadata,
            )
            await anext(aiter(origin))  # the stream exists: resumes may begin

            async def read_origin() -> None:
                async for _ in origin:
                    pass

            async def one() -> None:
                while True:
                    call = stub.Synthesize(
                        pb.SynthesizeRequest(request_id=self.REQUEST_ID, resume_after_seq=0),
                        metadata=self.metadata,
                    )
                    try:
                        async for _ in call:
                            pass
                        self.outcomes["resume OK"] += 1
                    except grpc.aio.AioRpcError as error:
                        self.outcomes[f"resume {error.code().name}"] += 1
                        hint = dict(await call.trailing_metadata() or ()).get("retry-after-ms")
                        await asyncio.sleep(int(hint or 1000) / 1000)

            await asyncio.gather(read_origin(), *(one() for _ in range(self.COUNT)))


FLOODS: dict[str, Callable[[Stack], AbstractContextManager[object]]] = {
    "never-reading speech": NeverReadingSpeech,
    "idle Converse": IdleConverse,
    "text chat": TextChat,
    "trickling callbacks": TricklingCallbacks,
    "resumes": Resumes,
    "quotas (books and streams)": Flood,  # last: it leaves a backlog of books behind
}


# ---- the table -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    flood: str
    samples: list[Sample]
    peak_bytes: int
    outcomes: dict[str, int]


def ratios(idle: list[Sample], busy: list[Sample]) -> list[float]:
    """Flooded median / idle median, per metric of :data:`METRICS`."""
    return [
        statistics.median(pick(s) for s in busy) / statistics.median(pick(s) for s in idle)
        for _, pick in METRICS
    ]


def table(idle: list[Sample], idle_peak_bytes: int, rows: list[Row], budget_bytes: int) -> str:
    """The Markdown table: one line per flood, each cell ``flooded (ratio)``; the verdicts."""
    names = " | ".join(name for name, _ in METRICS)
    lines = [
        f"| acme floods with | {names} | Redis peak / budget | verdict |",
        "|---|" + "---:|" * len(METRICS) + "---:|---|",
        "| (idle) | "
        + " | ".join(f"{statistics.median(pick(s) for s in idle):.2f} s" for _, pick in METRICS)
        + f" | {idle_peak_bytes / 2**20:.0f} / {budget_bytes / 2**20:.0f} MiB | baseline |",
    ]
    for row in rows:
        row_ratios = ratios(idle, row.samples)
        cells = [
            f"{statistics.median(pick(s) for s in row.samples):.2f} s ({ratio:.2f}x)"
            for (_, pick), ratio in zip(METRICS, row_ratios, strict=True)
        ]
        misses = [
            name for (name, _), r in zip(METRICS, row_ratios, strict=True) if r > TARGET_RATIO
        ]
        if row.peak_bytes >= budget_bytes:
            misses.append("Redis over budget")
        verdict = "PASS" if not misses else "FAIL: " + ", ".join(misses)
        lines.append(
            f"| {row.flood} | {' | '.join(cells)} | "
            f"{row.peak_bytes / 2**20:.0f} / {budget_bytes / 2**20:.0f} MiB | {verdict} |"
        )
    return "\n".join(lines)


def passed(table_text: str) -> bool:
    return "FAIL" not in table_text


# ---- main ------------------------------------------------------------------------------------


@contextmanager
def stack(directory: Path, maxmemory_bytes: int) -> Iterator[Stack]:
    with OllamaStandin(StandinConfig()) as standin:
        redis_server = RedisServer(directory / "redis", maxmemory_bytes=maxmemory_bytes).start()
        lane = Stack(
            directory / "stack", redis_server.url, env_overrides={**ENV, "OLLAMA_HOST": standin.url}
        )
        try:
            lane.gpu_worker()
            lane.cpu_worker()
            lane.callback_worker()
            lane.grpc()
            lane.api()
            lane.wait_realtime_workers()
            yield lane
        except BaseException:
            print(lane.logs())
            raise
        finally:
            lane.stop()
            redis_server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--maxmemory-mib", type=int, default=512)
    parser.add_argument(
        "--rows", default=",".join(FLOODS), help="comma-separated floods (default: all)"
    )
    args = parser.parse_args()
    chosen = [name.strip() for name in args.rows.split(",") if name.strip()]
    rows: list[Row] = []
    with (
        tempfile.TemporaryDirectory(prefix="voicelane-flood-") as tmp,
        stack(Path(tmp), args.maxmemory_mib * 2**20) as lane,
    ):
        memory = MemoryPeak(lane.redis_url)
        try:
            measure(lane, 1)  # warm-up: the engine, the connections
            memory.take()
            idle = measure(lane, args.rounds)
            idle_peak = memory.take()
            print(f"idle: {idle}", flush=True)
            for name in chosen:
                flood = FLOODS[name](lane)
                with flood:
                    time.sleep(WARMUP_S)
                    samples = measure(lane, args.rounds)
                outcomes = dict(getattr(flood, "outcomes", {}))
                rows.append(Row(name, samples, memory.take(), outcomes))
                print(f"{name}: {samples}; acme's outcomes {outcomes}", flush=True)
                time.sleep(SETTLE_S)
        finally:
            memory.close()
        budget = memory.budget_bytes
    text = table(idle, idle_peak, rows, budget)
    print()
    print(text)
    return 0 if passed(text) else 1


if __name__ == "__main__":
    raise SystemExit(main())
