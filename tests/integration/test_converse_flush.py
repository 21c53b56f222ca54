"""A conversation's ``flush`` messages cost Redis only when they flush something: a flush with
no text since the last one (or before any) is dropped, so a client cannot grow the input
stream with flushes alone (each was an entry of ~17 B, kept until the conversation ended,
counted against no limit). Real Redis, the gRPC front in-process, a fake worker that records
the input it receives."""

from __future__ import annotations

import pytest

from tests.integration import test_grpc_front as grpc_front
from tests.integration.test_grpc_front import (
    ACME,
    END,
    FLUSH,
    Harness,
    collect,
    delta,
    start_message,
)

harness = grpc_front.harness  # the gRPC front's fixtures, by name
anyio_backend = grpc_front.anyio_backend

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

FLUSHES = 300


async def test_flushes_with_nothing_new_to_flush_are_not_written(harness: Harness) -> None:
    worker = harness.worker()
    call = harness.stub.Converse(metadata=ACME, timeout=20)
    await call.write(start_message())
    for _ in range(FLUSHES):  # before any text: nothing to flush
        await call.write(FLUSH)
    await call.write(delta("Hello there."))
    for _ in range(FLUSHES):
        await call.write(FLUSH)
    await call.write(delta(" Bye."))
    await call.write(FLUSH)
    await call.write(END)
    await call.done_writing()
    responses = await collect(call)

    assert [cap.text for r in responses for cap in r.audio.captions] == ["Hello there.", "Bye."]
    [request] = worker.snapshot().claimed
    kinds = [kind for kind, _ in worker.snapshot().inputs[request.request_id]]
    assert kinds == ["text", "flush", "text", "flush", "end"]
