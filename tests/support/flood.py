"""A tenant flooding the service, for the chaos test and the benchmark of tenant fairness.

:class:`Flood` makes tenant ``acme`` submit long jobs and open streams from several threads,
as fast as its quotas let it: each refusal (429 / RESOURCE_EXHAUSTED) comes with a retry
hint, and the flood retries as soon as the hint allows — so ``acme`` holds all the work its
quotas allow, all the time. (A client that ignores the hints and hammers the API with refused
requests is an HTTP-level denial of service, for a proxy's rate limiting in front of the API;
on a 2-core machine it would also starve the measuring client.) :func:`job_seconds` and
:func:`stream_seconds` time another tenant's small job and live stream.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections import Counter

import grpc
import httpx

from tests.support.stack import ACME_KEY, Stack, wait_for
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc

SMALL_JOB = "A small job of two sentences. It should not wait for anyone's book."
LIVE_TEXT = "Hello, this stream should start right away."
BOOK = "A long chapter of somebody else's book goes on and on. " * 400  # ~22k characters
QUOTAS = {
    "VOICELANE_TENANT_REQUESTS_PER_S": "5",
    "VOICELANE_TENANT_REQUEST_BURST": "10",
    "VOICELANE_TENANT_MAX_QUEUED_CHARS": "200000",
    "VOICELANE_TENANT_MAX_STREAMS": "8",
    "VOICELANE_RENDER_QUEUE_TARGET": "4",
}
"""The flooding tenant's limits: it can hold ~9 books and 8 streams at once."""


def job_seconds(lane: Stack, key: str, text: str, *, timeout_s: float = 120) -> float:
    """Submit → done, in seconds."""
    with httpx.Client(
        base_url=lane.api_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as client:
        started = time.monotonic()
        response = client.post("/v1/jobs", json={"text": text, "format": "wav"})
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]

        def done() -> bool:
            state = str(client.get(f"/v1/jobs/{job_id}").json()["state"])
            assert state not in ("failed", "cancelled"), state
            return state == "done"

        wait_for(done, timeout_s, "the small job")
        return time.monotonic() - started


async def stream_seconds(lane: Stack, key: str, text: str) -> float:
    """Open → final chunk, in seconds (StatusCode on refusal raises)."""
    metadata = (("authorization", f"Bearer {key}"),)
    async with grpc.aio.insecure_channel(lane.grpc_target) as channel:
        stub = pb_grpc.SpeechStub(channel)
        started = time.monotonic()
        async for _ in stub.Synthesize(pb.SynthesizeRequest(text=text), metadata=metadata):
            pass
        return time.monotonic() - started


def typical(samples: list[float]) -> float:
    return statistics.median(samples)


class Flood:
    """``acme`` submitting books and opening streams from threads until stopped."""

    def __init__(self, lane: Stack) -> None:
        self.lane = lane
        self.stop = threading.Event()
        self.outcomes: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._jobs) for _ in range(3)] + [
            threading.Thread(target=self._streams) for _ in range(2)
        ]

    def __enter__(self) -> Flood:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(60)

    def _count(self, outcome: str) -> None:
        with self._lock:
            self.outcomes[outcome] += 1

    def _jobs(self) -> None:
        headers = {"Authorization": f"Bearer {ACME_KEY}"}
        with httpx.Client(base_url=self.lane.api_url, headers=headers, timeout=30) as client:
            while not self.stop.is_set():
                response = client.post("/v1/jobs", json={"text": BOOK, "format": "wav"})
                self._count(f"job {response.status_code}")
                if response.status_code == 429:  # back at the hint, not before
                    self.stop.wait(float(response.headers["Retry-After"]))

    def _streams(self) -> None:
        async def run() -> None:
            metadata = (("authorization", f"Bearer {ACME_KEY}"),)
            async with grpc.aio.insecure_channel(self.lane.grpc_target) as channel:
                stub = pb_grpc.SpeechStub(channel)

                async def one() -> None:
                    call = stub.Synthesize(
                        pb.SynthesizeRequest(text=BOOK[:2000]), metadata=metadata, timeout=30
                    )
                    try:
                        async for _ in call:
                            if self.stop.is_set():
                                call.cancel()
                                break
                        self._count("stream OK")
                    except grpc.aio.AioRpcError as error:
                        self._count(f"stream {error.code().name}")
                        hint = dict(await call.trailing_metadata() or ()).get("retry-after-ms")
                        await asyncio.sleep(int(hint or 1000) / 1000)

                while not self.stop.is_set():
                    await asyncio.gather(*(one() for _ in range(6)))

        asyncio.run(run())
