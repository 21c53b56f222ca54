"""The gRPC front and requests that are not their message (real Redis, the front in-process):
a string field holding invalid UTF-8 — which protobuf refuses while decoding, before any
handler runs — ends the call with ``INVALID_ARGUMENT`` naming the message, as any other bad
input does, never ``UNKNOWN``; the front keeps serving."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest

from tests.integration.test_grpc_front import REALTIME, grpc_settings
from voicelane.api.grpc_front import start_front, stop_front
from voicelane.common.wire import speech_pb2 as pb
from voicelane.core.lane.front import RealtimeClient

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

METADATA = (("authorization", "Bearer acme-key-0001"),)
BAD_TEXT = b"\x0a\x02\xff\xfe"
"""Field 1 of SynthesizeRequest (``text``), length 2, bytes that are not UTF-8."""
BAD_DELTA = b"\x12\x02\xff\xfe"
"""Field 2 of ConverseRequest (``text_delta``), invalid UTF-8."""


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def channel(redis_url: str) -> AsyncIterator[grpc.aio.Channel]:
    lane = RealtimeClient.from_url(redis_url, REALTIME)
    front = await start_front(grpc_settings(redis_url), lane)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{front.port}")
    try:
        yield channel
    finally:
        await channel.close()
        await stop_front(front, 0)
        await lane.close()


def raw(data: bytes) -> bytes:
    return data


async def test_invalid_utf8_in_a_unary_stream_request_is_invalid_argument(
    channel: grpc.aio.Channel,
) -> None:
    call = channel.unary_stream(
        "/voicelane.v1.Speech/Synthesize", request_serializer=raw, response_deserializer=raw
    )(BAD_TEXT, metadata=METADATA, timeout=10)
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        async for _ in call:
            pass
    assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT, ended.value
    assert "SynthesizeRequest" in (ended.value.details() or ""), ended.value.details()


async def test_invalid_utf8_in_a_streamed_request_is_invalid_argument(
    channel: grpc.aio.Channel,
) -> None:
    async def requests() -> AsyncIterator[bytes]:
        yield BAD_DELTA

    call = channel.stream_stream(
        "/voicelane.v1.Speech/Converse", request_serializer=raw, response_deserializer=raw
    )(requests(), metadata=METADATA, timeout=10)
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        async for _ in call:
            pass
    assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT, ended.value
    assert "ConverseRequest" in (ended.value.details() or ""), ended.value.details()


async def test_the_front_serves_after_an_undecodable_request(channel: grpc.aio.Channel) -> None:
    call = channel.unary_unary(
        "/voicelane.v1.Speech/ListVoices", request_serializer=raw, response_deserializer=raw
    )
    # ListVoicesRequest has no fields: an unknown field 1 with invalid UTF-8 is skipped.
    reply = await call(BAD_TEXT, metadata=METADATA, timeout=10)
    assert pb.ListVoicesResponse.FromString(reply) is not None
