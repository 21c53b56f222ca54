"""Benchmark: an LLM's reply spoken while it is written (gRPC ``Chat``), against speaking its
first fragment alone, in the same run.

Real processes: redis-server, ``--workers`` GPU workers (espeak), one ``voicelane grpc`` front
per LLM speed, each pointed at its own stand-in Ollama server
(``python -m voicelane.api.ollama_standin``, a process: the load generator does not share its
CPU) emitting the reply at each of ``--rates`` tokens per second (50, 15 and 3: the stand-in's
tokens are ~3.6 characters, so 15 tokens/s is ~54 characters/s, still faster than speech at
~14 characters/s; 3 tokens/s is slower than speech, where gaps show). Tenant quotas and the
LLM's generation cap are raised so that only the machine limits.

For each speed and each level of ``--levels`` (1, 16, 64), that many clients run in a closed
loop for ``--duration-s``: ask (one user message), read the call to its end, ask again.
Per conversation (client clocks only):

* **first token → first audio**: the first ``text_delta`` to the first audio packet;
* of which **fragment wait**: the first token to the text delta that completes the first
  speakable fragment (found with the server's own cutter, :class:`voicelane.core.speakable
  .SpeakableStream`, fed the deltas as they arrive) — the LLM's time, not ours;
* **fragment → first audio**: the rest, the synthesis of that fragment through the lane;
* **underruns**: a 150 ms playback buffer started at the first audio: audio with presentation
  time ``pts`` arriving at ``t`` is late when ``t > t0 + pts + 150 ms``; "gap" is the largest
  ``t - (t0 + pts)`` (how long a player would have waited);
* failures by status.

Baseline, same run, same level: gRPC ``Synthesize`` of the first fragment's text alone
(``Good question.``, paced live), its time to first audio. Targets (PASS/FAIL), at the first
rate: first token → first audio p50 <= the baseline p50 + 15 ms (as the issue states it: the
LLM's own time to write the fragment is inside it); fragment complete → first audio p50 <= the
same (our part); no underrun after the audio starts.

**A real LLM** (``--real``, issue 25): one more front on the ``openai`` backend, talking to
llama.cpp's server with SmolLM2-135M-Instruct (:mod:`voicelane.api.llm_local`, a process,
``--real-threads`` threads, one slot per conversation of the highest level, replies capped at
``--real-max-tokens``), measured the same way beside the stand-in's rates in the same run.
Its first fragment is whatever the model writes first; the Synthesize baseline stays
``Good question.``.

Run: ``.venv/bin/python -m bench.llm [--workers 2] [--levels 1,16,64] [--duration-s 20]``;
with the real model: ``.venv/bin/python -m bench.llm --real --rates 50 --levels 1,8``
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import grpc.aio

from bench.tables import percentile
from tests.support.stack import ACME_KEY, ROOT, Stack
from voicelane.api.llm_local import DEFAULT_ALIAS
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.redis_server import RedisServer, free_port
from voicelane.core.speakable import SpeakableStream

if TYPE_CHECKING:
    from voicelane.common.wire.speech_pb2_grpc import SpeechAsyncStub

METADATA = (("authorization", f"Bearer {ACME_KEY}"),)
MODEL = "qwen2.5:7b"
QUESTION = "What should I pack for a weekend in the mountains?"
FIRST_FRAGMENT = "Good question."
"""The first speakable fragment of the stand-in's reply to :data:`QUESTION`."""
PLAYBACK_BUFFER_MS = 150.0
TARGET_MARGIN_MS = 15.0
OVERRIDES = {
    "VOICELANE_TENANT_REQUESTS_PER_S": "100000",
    "VOICELANE_TENANT_REQUEST_BURST": "100000",
    "VOICELANE_TENANT_MAX_STREAMS": "100000",
    "VOICELANE_TENANT_MAX_QUEUED_CHARS": "1000000000",
    "VOICELANE_LLM__MODEL": MODEL,
    "VOICELANE_LLM__MAX_PARALLEL": "1000",
}


@dataclass
class Conversation:
    first_token_s: float | None = None
    fragment_s: float | None = None
    first_audio_s: float | None = None
    worst_late_ms: float = 0.0
    failure: str | None = None
    tokens_per_s: float | None = None
    """The LLM's own writing speed for this reply (its stats: reply tokens / eval time)."""

    @property
    def underran(self) -> bool:
        return self.worst_late_ms > PLAYBACK_BUFFER_MS


@dataclass
class Level:
    source: str
    """The LLM: the stand-in's tokens/s, or the real model's name."""
    clients: int
    chats: list[Conversation] = field(default_factory=list)
    baseline_ms: list[float] = field(default_factory=list)

    def ok(self) -> list[Conversation]:
        return [c for c in self.chats if c.failure is None and c.first_audio_s is not None]

    def ms(self, pick: str, q: float) -> float:
        values = []
        for chat in self.ok():
            assert chat.first_token_s is not None and chat.first_audio_s is not None
            start = chat.first_token_s if pick != "after_fragment" else chat.fragment_s
            end = chat.fragment_s if pick == "fragment" else chat.first_audio_s
            if start is not None and end is not None:
                values.append((end - start) * 1000)
        return percentile(values, q)


async def one_chat(stub: SpeechAsyncStub) -> Conversation:
    chat = Conversation()
    cutter = SpeakableStream()
    request = pb.ChatRequest(messages=[pb.ChatMessage(role="user", content=QUESTION)])
    t0: float | None = None
    try:
        async for response in stub.Chat(request, metadata=METADATA, timeout=120):
            now = time.monotonic()
            kind = response.WhichOneof("event")
            if kind == "text_delta":
                chat.first_token_s = chat.first_token_s or now
                if chat.fragment_s is None and cutter.feed(response.text_delta).flush:
                    chat.fragment_s = now
            elif kind == "stats" and response.stats.eval_ms > 0:
                chat.tokens_per_s = response.stats.reply_tokens / (response.stats.eval_ms / 1000)
            elif kind == "audio" and response.audio.opus_packets:
                audio = response.audio
                if t0 is None:
                    t0 = chat.first_audio_s = now
                for index in range(len(audio.opus_packets)):
                    late_ms = (now - t0) * 1000 - (audio.pts_ms + 20 * index)
                    chat.worst_late_ms = max(chat.worst_late_ms, late_ms)
    except grpc.aio.AioRpcError as error:
        chat.failure = error.code().name
    return chat


async def closed_loop(target: str, level: Level, duration_s: float) -> None:
    """``level.clients`` clients asking again and again for ``duration_s``; then the same
    number of clients speaking the first fragment alone, for a third of that."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub: SpeechAsyncStub = pb_grpc.SpeechStub(channel)
        await one_chat(stub)  # warm-up
        end = time.monotonic() + duration_s

        async def chatter() -> None:
            while time.monotonic() < end:
                level.chats.append(await one_chat(stub))

        await asyncio.gather(*(chatter() for _ in range(level.clients)))
        end = time.monotonic() + duration_s / 3

        async def speaker() -> None:
            while time.monotonic() < end:
                first = await first_audio_ms(stub)
                if first is not None:
                    level.baseline_ms.append(first)

        await asyncio.gather(*(speaker() for _ in range(level.clients)))


async def first_audio_ms(stub: SpeechAsyncStub) -> float | None:
    started = time.monotonic()
    first: float | None = None
    try:
        async for chunk in stub.Synthesize(
            pb.SynthesizeRequest(text=FIRST_FRAGMENT), metadata=METADATA, timeout=60
        ):
            if chunk.opus_packets and first is None:
                first = (time.monotonic() - started) * 1000
    except grpc.aio.AioRpcError:
        return None
    return first


def start_standin(port: int, tokens_per_s: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "voicelane.api.ollama_standin", "--port", str(port),
             "--tokens-per-s", str(tokens_per_s)],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    return process


def print_table(levels: list[Level]) -> None:
    print(
        "| LLM (stand-in: tokens/s) | conversations | chats | LLM tokens/s per reply p50 "
        "| first token → first audio p50 / p99 ms "
        "| of which fragment wait p50 | fragment → first audio p50 / p99 ms "
        "| Synthesize(first fragment) TTFA p50 ms | underran | worst gap ms | failures |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for level in levels:
        ok = level.ok()
        failures = Counter(c.failure for c in level.chats if c.failure)
        worst = max((c.worst_late_ms for c in ok), default=math.nan)
        print(
            f"| {level.source} | {level.clients} | {len(level.chats)} "
            f"| {percentile([c.tokens_per_s for c in ok if c.tokens_per_s], 0.5):.0f} "
            f"| {level.ms('all', 0.5):.0f} / {level.ms('all', 0.99):.0f} "
            f"| {level.ms('fragment', 0.5):.0f} "
            f"| {level.ms('after_fragment', 0.5):.0f} / {level.ms('after_fragment', 0.99):.0f} "
            f"| {percentile(level.baseline_ms, 0.5):.0f} "
            f"| {sum(c.underran for c in ok)} / {len(ok)} | {worst:.0f} "
            f"| {dict(failures) or '-'} |"
        )


def _verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def print_targets(levels: list[Level], fast_tps: str) -> None:
    for level in levels:
        if level.source != fast_tps:
            continue
        baseline = percentile(level.baseline_ms, 0.5)
        first = level.ms("all", 0.5)
        ours = level.ms("after_fragment", 0.5)
        print(
            f"- {_verdict(first <= baseline + TARGET_MARGIN_MS)}: {level.clients} conversations "
            f"at {fast_tps} tokens/s: first token → first audio p50 {first:.0f} ms vs the first "
            f"fragment synthesised alone {baseline:.0f} ms + {TARGET_MARGIN_MS:.0f} ms (the LLM "
            f"writes the fragment in {level.ms('fragment', 0.5):.0f} ms of it)"
        )
        print(
            f"- {_verdict(ours <= baseline + TARGET_MARGIN_MS)}: {level.clients} conversations "
            f"at {fast_tps} tokens/s: fragment complete → first audio p50 {ours:.0f} ms vs "
            f"{baseline:.0f} ms + {TARGET_MARGIN_MS:.0f} ms"
        )
        underran = sum(c.underran for c in level.ok())
        print(
            f"- {'PASS' if underran == 0 else 'FAIL'}: {level.clients} conversations at "
            f"{fast_tps} tokens/s: {underran} replies underran after their audio started"
        )


REAL_MODEL = "SmolLM2-135M"


def start_real_llm(
    port: int, threads: int, parallel: int, max_tokens: int, log: Path
) -> subprocess.Popen[bytes]:
    """llama.cpp's server with SmolLM2-135M (``voicelane.api.llm_local``), listening on return."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "voicelane.api.llm_local", "--port", str(port),
             "--threads", str(threads), "--parallel", str(parallel),
             "--max-tokens", str(max_tokens)],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while "listening on" not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the local LLM did not start: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    return process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--levels", default="1,16,64")
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument(
        "--rates", default="50,15,3", help="stand-in tokens/s; the first is the target's"
    )
    parser.add_argument("--real", action="store_true", help="also the real model (SmolLM2)")
    parser.add_argument("--real-threads", type=int, default=2)
    parser.add_argument("--real-max-tokens", type=int, default=60)
    args = parser.parse_args()
    rates = [int(rate) for rate in args.rates.split(",")]
    levels_wanted = [int(n) for n in args.levels.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-llm-") as tmp:
        directory = Path(tmp)
        redis_server = RedisServer(directory / "redis").start()
        lane = Stack(directory / "lane", redis_server.url, env_overrides=dict(OVERRIDES))
        standins: list[subprocess.Popen[bytes]] = []
        fronts: dict[str, str] = {}
        try:
            for index in range(args.workers):
                lane.gpu_worker(name=f"gpu{index}")
            lane.wait_realtime_workers(count=args.workers)
            for rate in rates:
                port = free_port()
                standins.append(start_standin(port, rate, directory / f"standin-{rate}.log"))
                front = Stack(lane.directory / f"front-{rate}", redis_server.url, env_overrides={
                    **OVERRIDES, "OLLAMA_HOST": f"http://127.0.0.1:{port}",
                    "VOICELANE_LLM__PRELOAD": "1",
                })  # fmt: skip
                front.grpc()
                lane.procs.extend(front.procs)
                fronts[str(rate)] = front.grpc_target
            if args.real:
                port = free_port()
                standins.append(
                    start_real_llm(
                        port, args.real_threads, max(levels_wanted), args.real_max_tokens,
                        directory / "llm-local.log",
                    )
                )  # fmt: skip
                front = Stack(lane.directory / "front-real", redis_server.url, env_overrides={
                    **OVERRIDES, "VOICELANE_LLM__BACKEND": "openai",
                    "VOICELANE_LLM__BASE_URL": f"http://127.0.0.1:{port}/v1",
                    "VOICELANE_LLM__MODEL": DEFAULT_ALIAS, "VOICELANE_LLM__PRELOAD": "1",
                    "VOICELANE_LLM__MAX_REPLY_TOKENS": str(args.real_max_tokens),
                })  # fmt: skip
                front.grpc()
                lane.procs.extend(front.procs)
                fronts[REAL_MODEL] = front.grpc_target
            real = (
                f"; {REAL_MODEL} (llama.cpp, {args.real_threads} threads, replies of at most "
                f"{args.real_max_tokens} tokens)"
                if args.real
                else ""
            )
            print(
                f"## bench.llm: {args.workers} GPU workers (espeak), stand-in Ollama at "
                f"{', '.join(map(str, rates))} tokens/s{real}, {os.cpu_count()} CPU cores, "
                f"{args.duration_s:g} s per level\n"
            )
            levels: list[Level] = []
            for source, target in fronts.items():
                for clients in levels_wanted:
                    level = Level(source, clients)
                    asyncio.run(closed_loop(target, level, args.duration_s))
                    levels.append(level)
                    print(f"- done: {source}, {clients} conversations", flush=True)
            print()
            print_table(levels)
            print()
            print_targets(levels, str(rates[0]))
        finally:
            lane.stop()
            for process in standins:
                process.terminate()
                process.wait(10)
            redis_server.stop()


if __name__ == "__main__":
    main()
