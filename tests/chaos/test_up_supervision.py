"""``voicelane up`` supervises: each process it runs, and the Redis it started, comes back
after a SIGKILL while the others keep serving, and the stack works end to end afterwards.

One real ``voicelane up`` on free ports (espeak, local storage); each kind of process is
killed in turn (its pid from ``children.json``). At the end SIGTERM stops the stack and no
process of it is left.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from wyoming.audio import AudioChunk
from wyoming.client import AsyncTcpClient
from wyoming.tts import Synthesize

from tests.support.stack import ACME_KEY, API_KEYS, ROOT, wait_for
from voicelane.api.stack import grpc_serving
from voicelane.api.wyoming_wire import wyoming_serving
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.redis_server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KINDS = ("gpu-worker", "cpu-worker", "callback-worker", "api", "grpc", "wyoming", "flower", "redis")
AUTH = {"Authorization": f"Bearer {ACME_KEY}"}
METADATA = (("authorization", f"Bearer {ACME_KEY}"),)
FINAL = ("done", "failed", "cancelled")
READY_LINE = "Ctrl-C stops everything"
TIMINGS = {  # a dead worker's capacity and leases lapse quickly
    "VOICELANE_LEASE_TTL_S": "3",
    "VOICELANE_RECONCILE_INTERVAL_S": "0.5",
    "VOICELANE_STALL_TIMEOUT_S": "15",
    "VOICELANE_REALTIME__HEARTBEAT_TTL_S": "1",
    "VOICELANE_REALTIME__RECLAIM_IDLE_S": "1",
    "VOICELANE_REALTIME__UNAVAILABLE_AFTER_S": "3",
    "VOICELANE_REALTIME__CLAIM_TIMEOUT_S": "3",
    "VOICELANE_RENDER_WORKERS": "1",  # one of each kind (the default: one per core)
    "VOICELANE_ENGINE": "espeak",  # one engine (the default: Piper and espeak, installed)
}


def retrying(attempt: Callable[[], Any]) -> Callable[[], Any]:
    """``attempt`` for :func:`wait_for`, pausing a little after each miss or connection error
    (so a service that is still coming up is not hammered)."""

    def once() -> Any:
        try:
            result = attempt()
        except (httpx.HTTPError, OSError, ValueError):
            result = None
        if not result:
            time.sleep(0.2)
        return result

    return once


@dataclass
class Up:
    process: subprocess.Popen[bytes]
    state_dir: Path
    output: Path
    api_port: int
    grpc_port: int
    flower_port: int
    wyoming_port: int

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def children(self) -> dict[str, Any]:
        try:
            state: dict[str, Any] = json.loads((self.state_dir / "children.json").read_text())
        except FileNotFoundError:
            return {}
        return state

    def pid(self, kind: str) -> int | None:
        entry = self.children().get(kind) or {}
        pid: int | None = entry.get("pid")
        return pid

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"voicelane up exited with {self.process.returncode}")
        printed = self.output.exists() and READY_LINE in self.output.read_text()
        return printed and all(self.pid(kind) for kind in KINDS)

    def api_answers(self) -> bool:
        response = httpx.get(f"http://127.0.0.1:{self.api_port}/healthz", timeout=2)
        return response.status_code == 200

    def flower_answers(self) -> bool:
        response = httpx.get(f"http://127.0.0.1:{self.flower_port}/healthcheck", timeout=2)
        return response.status_code == 200

    def grpc_answers(self) -> bool:
        return grpc_serving(self.grpc_target)

    def wyoming_answers(self) -> bool:
        return wyoming_serving("127.0.0.1", self.wyoming_port)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(60)

    def logs(self) -> str:
        parts = [f"----- voicelane up -----\n{read(self.output)}"]
        for log in sorted((self.state_dir / "logs").glob("*.log")):
            tail = "\n".join(read(log).splitlines()[-30:])
            parts.append(f"----- {log.name} -----\n{tail}")
        return "\n".join(parts)


def read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def alive(pid: int) -> bool:
    """Running (not a zombie waiting for its parent)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def leftovers(state_dir: Path) -> list[int]:
    """Live processes whose command line or environment names ``state_dir``: every process
    of the stack does (the storage root, Redis's data directory)."""
    marker = str(state_dir).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            named = any(marker in (entry / part).read_bytes() for part in ("cmdline", "environ"))
        except OSError:
            continue
        if named and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    state_dir = tmp_path / "state"
    output = tmp_path / "up.out"
    api_port, grpc_port, flower_port, redis_port, wyoming_port = (free_port() for _ in range(5))
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOICELANE_")}
    env.update(TIMINGS)
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "VOICELANE_API_KEYS": API_KEYS,
            "VOICELANE_FLOWER_BASIC_AUTH": "watcher:flower-pass",
            "VOICELANE_PORT": str(api_port),
            "VOICELANE_GRPC_PORT": str(grpc_port),
            "VOICELANE_FLOWER_PORT": str(flower_port),
            "VOICELANE_WYOMING_PORT": str(wyoming_port),
            "VOICELANE_WYOMING_API_KEY": ACME_KEY,
            "VOICELANE_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
            "VOICELANE_METRICS_BASE_PORT": str(free_port()),  # and the next four
        }
    )
    command = [sys.executable, "-m", "voicelane.api.cli", "up", "--state-dir", str(state_dir)]
    with output.open("wb") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    stack = Up(process, state_dir, output, api_port, grpc_port, flower_port, wyoming_port)
    try:
        wait_for(stack.ready, 120, "voicelane up to be ready")
        yield stack
    finally:
        try:
            stack.stop()
        finally:
            print(stack.logs())  # shown when the test failed
            for pid in leftovers(state_dir):  # never leak processes, even after a failure
                os.kill(pid, signal.SIGKILL)


def job_done(stack: Up) -> None:
    """A short REST job goes all the way through (submitted once the API accepts it)."""
    base = f"http://127.0.0.1:{stack.api_port}"
    with httpx.Client(base_url=base, headers=AUTH, timeout=10) as client:

        def submit() -> str | None:
            response = client.post("/v1/jobs", json={"text": "Still here after a crash."})
            return str(response.json()["id"]) if response.status_code == 202 else None

        def final() -> dict[str, Any] | None:
            job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
            return job if job.get("state") in FINAL else None

        job_id = wait_for(retrying(submit), 60, "the API to accept a job")
        job = wait_for(retrying(final), 60, f"job {job_id} to finish")
    assert job["state"] == "done", job


async def synthesize(target: str) -> bool:
    """Whether one gRPC stream is spoken to its final chunk."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.SpeechStub(channel)
        request = pb.SynthesizeRequest(text="Streaming again.")
        try:
            chunks = [c async for c in stub.Synthesize(request, metadata=METADATA, timeout=30)]
        except grpc.aio.AioRpcError:
            return False
    return bool(chunks) and chunks[-1].final


async def wyoming_speaks(port: int) -> bool:
    """Whether one Wyoming synthesis is spoken to its ``audio-stop``."""
    async with AsyncTcpClient("127.0.0.1", port, read_timeout=30) as client:
        await client.write_event(Synthesize(text="Speaking again.").event())
        chunks = 0
        while (event := await client.read_event()) is not None:
            chunks += AudioChunk.is_type(event.type)
            if event.type in ("audio-stop", "error"):
                return event.type == "audio-stop" and chunks > 0
    return False


def works_end_to_end(stack: Up) -> None:
    job_done(stack)
    wait_for(retrying(lambda: asyncio.run(synthesize(stack.grpc_target))), 60, "a gRPC stream")
    wait_for(retrying(stack.flower_answers), 60, "Flower to answer")
    wait_for(retrying(lambda: asyncio.run(wyoming_speaks(stack.wyoming_port))), 60, "Wyoming")


def kill_and_recover(stack: Up, kind: str) -> None:
    before = stack.children()[kind]
    os.kill(before["pid"], signal.SIGKILL)
    wait_for(lambda: stack.pid(kind) is None, 5, f"up to see {kind} exit")
    # Meanwhile (its backoff is 1 s) the others keep serving.
    others = {
        "api": stack.api_answers,
        "grpc": stack.grpc_answers,
        "wyoming": stack.wyoming_answers,
        "flower": stack.flower_answers,
    }
    for name, answers in others.items():
        if name != kind:
            assert answers(), f"{name} stopped answering while {kind} was down"

    def replaced() -> bool:
        entry = stack.children().get(kind) or {}
        restarted = entry.get("restarts") == before["restarts"] + 1
        return restarted and entry.get("pid") not in (None, before["pid"])

    wait_for(replaced, 30, f"{kind} to be restarted")
    works_end_to_end(stack)


def test_every_process_of_up_comes_back_after_a_sigkill_and_sigterm_stops_them_all(
    up: Up,
) -> None:
    started = time.monotonic()
    works_end_to_end(up)
    targets = json.loads(read(up.state_dir / "prometheus-targets.json"))
    listed = {t["labels"]["process"]: t["targets"][0] for t in targets}
    metered = ("gpu-worker", "cpu-worker", "callback-worker", "grpc", "wyoming")
    assert set(listed) == {"api", *metered}, listed
    # the API's needs its token
    for process in metered:
        scraped = httpx.get(f"http://{listed[process]}/metrics", timeout=5).text
        assert "voicelane_" in scraped or "grpc_stream_errors_total" in scraped, process
    for kind in KINDS:
        kill_and_recover(up, kind)
        print(f"{kind}: back and working after {time.monotonic() - started:.1f} s")
    reported = read(up.state_dir / "logs" / "supervisor.log")
    for kind in KINDS:
        assert f" {kind} killed by SIGKILL; restart 1 in 1 s\n" in reported, reported

    pids = [entry["pid"] for entry in up.children().values() if entry]
    assert up.stop() == 0
    assert [pid for pid in pids if alive(pid)] == []
    assert leftovers(up.state_dir) == []
    assert not (up.state_dir / "children.json").exists()
