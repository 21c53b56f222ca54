"""Idle unload under the real-time lane, on a real redis-server: a stream that arrives while
the worker's engine unloads for idleness is claimed (the capacity report does not depend on
the engine being loaded), waits for the engine to load again and is served in full; and a
real worker process with ``VOICELANE_IDLE_UNLOAD_S`` (ChatTTS, tiny checkpoint) unloads, says
so on its ``/metrics``, and serves the next stream."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.test_realtime_worker import SETTINGS, audio_of, events, request, submit
from tests.support.stack import Stack, wait_for
from voicelane.core.lane.front import RealtimeClient
from voicelane.core.lane.messages import EventKind
from voicelane.core.lane.worker import RealtimeWorkerClient
from voicelane.core.redis_server import RedisServer, free_port
from voicelane.workers.batching import Batcher
from voicelane.workers.engines.espeak import EspeakEngine
from voicelane.workers.realtime import RealtimeConsumer

pytestmark = pytest.mark.integration

T = 30.0


class UnloadHeldEspeak(EspeakEngine):
    """espeak (real audio) made to unload for idleness, its unload held at a gate."""

    unload_frees_memory = True

    def __init__(self) -> None:
        super().__init__()
        self.life: list[str] = []
        self.unloading = threading.Event()
        self.unload_gate = threading.Event()

    def load(self) -> None:
        self.life.append("load")

    def unload(self) -> None:
        self.life.append("unload")
        self.unloading.set()
        if not self.unload_gate.wait(T):
            raise TimeoutError("the test never released the unload")


def front_capacity(url: str) -> int:
    async def read() -> int:
        client = RealtimeClient.from_url(url)
        try:
            return await client.capacity("espeak")
        finally:
            await client.close()

    return asyncio.run(read())


def test_a_stream_arriving_mid_unload_is_claimed_waits_and_is_served(redis_url: str) -> None:
    engine = UnloadHeldEspeak()
    batcher = Batcher(engine, idle_unload_s=0.2).start()
    consumer = RealtimeConsumer(
        batcher, RealtimeWorkerClient.from_url(redis_url, "w@test", SETTINGS), SETTINGS
    ).start()
    try:
        assert engine.unloading.wait(T)  # idle: the engine is unloading, held there
        assert front_capacity(redis_url) == SETTINGS.slots_per_worker  # not refused
        req = request()
        submit(redis_url, req)
        wait_for(lambda: consumer.free_slots < SETTINGS.slots_per_worker, T, "the claim")
        assert not batcher.engine_loaded
        engine.unload_gate.set()
        got = events(redis_url, req.request_id, timeout_s=T)
        assert got[-1].kind is EventKind.END, got[-1]
        assert len(audio_of(got)) > 10
        assert engine.life[:3] == ["load", "unload", "load"]
    finally:
        engine.unload_gate.set()
        consumer.close()
        batcher.close()


# ---- a worker process --------------------------------------------------------------------


def _metric(port: int, sample: str) -> float | None:
    """The value of ``sample`` (``name{labels}`` as the worker writes it) on its /metrics."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return None
    for line in text.splitlines():
        if line.startswith(f"{sample} "):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture
def chattts_worker(tmp_path: Path) -> Iterator[tuple[Stack, int]]:
    from tests.support.chattts_checkpoint import build_checkpoint
    from tests.unit.workers.engines.conftest import require_chattts_extra

    require_chattts_extra()
    checkpoint = build_checkpoint(tmp_path / "tiny")
    redis_server = RedisServer(tmp_path / "redis").start()
    port = free_port()
    stack = Stack(
        tmp_path / "stack",
        redis_server.url,
        env_overrides={
            "VOICELANE_ENGINE": "chattts",
            "VOICELANE_CHATTTS__DIR": str(checkpoint.directory),
            "VOICELANE_IDLE_UNLOAD_S": "1",
            "VOICELANE_METRICS_PORT": str(port),
            "VOICELANE_REALTIME__LOOKAHEAD_S": "1000",
        },
    )
    try:
        stack.gpu_worker()
        stack.wait_realtime_workers(timeout_s=120)
        yield stack, port
    finally:
        stack.stop()
        redis_server.stop()


@pytest.mark.slow
def test_a_worker_unloads_when_idle_and_serves_the_next_stream(
    chattts_worker: tuple[Stack, int],
) -> None:
    stack, port = chattts_worker
    loaded = 'voicelane_engine_loaded{engine="chattts"}'
    wait_for(lambda: _metric(port, loaded) == 0.0, 60, "the idle unload")
    # Random weights rarely end early: the text's whole token budget is rendered, slowly on
    # a busy CPU; the deadline is generous so that it tests the unload, not the machine.
    req = dataclasses.replace(request(deadline_s=150, voice="seed:3"), engine="chattts")
    submit(stack.redis_url, req, "Hello there.")
    got = events(stack.redis_url, req.request_id, timeout_s=120)
    assert got[-1].kind is EventKind.END, stack.logs()
    assert audio_of(got)
    demand = 'voicelane_engine_load_seconds_count{cause="demand",engine="chattts"}'
    assert (_metric(port, demand) or 0) >= 1, stack.logs()
    assert "loaded again for new work" in stack.logs()
