"""The agent streaming protocol (``GET /v1/agent``, ``docs/agent-protocol.md``) against a real
stack: redis-server, an espeak render worker serving the real-time lane and ``voicelane api``,
as processes, driven with the ``websockets`` client library.

Several contexts on one socket, their words and audio; flush, close, cancel; the cap on open
contexts and their reclaim; auth; bad messages; a socket that leaves gives its tenant's
streams back.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
import websockets
import websockets.exceptions

from tests.support.stack import ACME_KEY, Stack, wait_for
from voicelane.core.lane.keys import tenant_streams_key
from voicelane.core.redis_server import RedisServer

pytestmark = pytest.mark.integration

AUTH = {"Authorization": f"Bearer {ACME_KEY}"}
MAX_CONTEXTS = 3
RATE_HZ = 16000
TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("agent")
    redis_server = RedisServer(directory / "redis").start()
    lane = Stack(
        directory / "stack",
        redis_server.url,
        env_overrides={"VOICELANE_AGENT_MAX_CONTEXTS": str(MAX_CONTEXTS)},
    )
    try:
        lane.gpu_worker()
        lane.api()
        lane.wait_realtime_workers()
        yield lane
    except Exception:
        print(lane.logs())
        raise
    finally:
        lane.stop()
        redis_server.stop()


def url(stack: Stack) -> str:
    return stack.api_url.replace("http://", "ws://") + "/v1/agent"


@dataclass
class Context:
    """What one context received."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    pcm: bytearray = field(default_factory=bytearray)
    words: list[dict[str, Any]] = field(default_factory=list)

    def types(self) -> list[str]:
        return [m["type"] for m in self.messages]

    @property
    def duration_ms(self) -> float:
        return len(self.pcm) / 2 * 1000 / RATE_HZ


class Client:
    """A socket and what each of its contexts received."""

    def __init__(self, socket: websockets.ClientConnection) -> None:
        self.socket = socket
        self.contexts: dict[str, Context] = {}
        self.other: list[dict[str, Any]] = []

    async def send(self, **message: Any) -> None:
        await self.socket.send(json.dumps(message))

    async def append(self, context_id: str, text: str, **options: Any) -> None:
        options.setdefault("sample_rate_hz", RATE_HZ)
        await self.send(type="append", context_id=context_id, text=text, **options)

    async def next(self) -> dict[str, Any]:
        raw = await asyncio.wait_for(self.socket.recv(), TIMEOUT_S)
        assert isinstance(raw, str), "every server message is JSON text"
        message: dict[str, Any] = json.loads(raw)
        context_id = message.get("context_id")
        if context_id is None:
            self.other.append(message)
            return message
        context = self.contexts.setdefault(context_id, Context())
        context.messages.append(message)
        if message["type"] == "audio" and "audio" in message:
            context.pcm.extend(base64.b64decode(message["audio"]))
        elif message["type"] == "words":
            context.words.extend(message["words"])
        return message

    async def until(self, context_id: str | None, *types: str) -> dict[str, Any]:
        while True:
            message = await self.next()
            if message.get("context_id") == context_id and message["type"] in types:
                return message


async def connect(stack: Stack) -> tuple[Any, Client]:
    socket = await websockets.connect(url(stack), additional_headers=AUTH, max_size=1 << 22)
    client = Client(socket)
    ready = await client.next()
    assert ready == {"type": "ready", "max_contexts": MAX_CONTEXTS,
                     "sample_rates_hz": [8000, 16000, 24000, 48000]}  # fmt: skip
    return socket, client


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_the_socket_never_negotiates_compression(stack: Stack) -> None:
    """A client offering per-message-deflate (``websockets`` does by default) gets plain
    frames: deflating base64 audio cost the API half its CPU under load (docs/benchmarks.md,
    agent protocol). ``/v1/stream`` still negotiates it."""

    async def extensions(path: str) -> str | None:
        target = stack.api_url.replace("http://", "ws://") + path
        async with websockets.connect(
            target, additional_headers=AUTH, compression="deflate"
        ) as socket:
            assert socket.response is not None
            return socket.response.headers.get("Sec-WebSocket-Extensions")

    assert run(extensions("/v1/agent")) is None
    assert "permessage-deflate" in (run(extensions("/v1/stream")) or "")


# ---- several contexts, words, flush, close ---------------------------------------------------

PIECES = {
    "a": ["The weather ", "is nice ", "today. We will ", "walk along the river."],
    "b": ["Please keep ", "your ticket until ", "the end. Thank ", "you."],
}


def test_contexts_on_one_socket_speak_their_words_with_spans_and_times(stack: Stack) -> None:
    async def until_done(client: Client) -> None:
        finished: set[str] = set()
        while finished != set(PIECES):
            message = await client.next()
            assert message["type"] != "error", message
            if message["type"] == "done":
                finished.add(message["context_id"])

    async def main() -> Client:
        socket, client = await connect(stack)
        async with socket:
            for index in range(len(PIECES["a"])):
                for context_id, pieces in PIECES.items():
                    await client.append(context_id, pieces[index])
            for context_id in PIECES:
                await client.send(type="close", context_id=context_id)
            await until_done(client)
        return client

    client = run(main())
    for context_id, pieces in PIECES.items():
        text = "".join(pieces)
        context = client.contexts[context_id]
        types = context.types()
        assert types[0] == "started" and types[-1] == "done", types
        assert types.count("started") == 1 and types.count("done") == 1
        assert context.messages[0]["sample_rate_hz"] == RATE_HZ
        assert context.messages[0]["encoding"] == "pcm"
        # The audio: contiguous pts, and done's duration is what the PCM holds.
        audio = [m for m in context.messages if m["type"] == "audio"]
        assert audio and audio[0]["pts_ms"] == 0
        assert context.duration_ms > 2000, context.duration_ms  # two sentences of speech
        assert abs(context.messages[-1]["duration_ms"] - context.duration_ms) < 1
        for before, after in itertools.pairwise(audio):
            assert after["seq"] > before["seq"]
            assert abs(after["pts_ms"] - (before["pts_ms"] + before["duration_ms"])) <= 1
        # The words: their spans slice the text as appended; their times lie in the audio.
        words = context.words
        assert [w["text"] for w in words] == text.replace(".", "").split(), words
        for word in words:
            assert text[word["char_start"] : word["char_end"]] == word["text"]
            assert 0 <= word["start_ms"] <= word["end_ms"] <= context.duration_ms + 1
        starts = [w["start_ms"] for w in words]
        assert starts == sorted(starts)
        # Words go out before the audio they fall in.
        seen_ms = 0.0
        for message in context.messages:
            if message["type"] == "audio":
                seen_ms = message["pts_ms"] + message["duration_ms"]
            if message["type"] == "words":
                assert all(w["start_ms"] >= seen_ms - 1 for w in message["words"]), (
                    message,
                    seen_ms,
                )


def test_flush_speaks_an_unfinished_sentence_and_close_ends_with_done(stack: Stack) -> None:
    async def main() -> Client:
        socket, client = await connect(stack)
        async with socket:
            await client.append("f", "Good morning to you")
            await client.send(type="flush", context_id="f")
            await client.until("f", "audio")  # before any close: the flush spoke it
            words = list(client.contexts["f"].words)
            await client.append("f", " and", close=True)
            await client.until("f", "done")
            assert [w["text"] for w in words] == ["Good", "morning", "to", "you"]
        return client

    client = run(main())
    context = client.contexts["f"]
    assert [w["text"] for w in context.words] == ["Good", "morning", "to", "you", "and"]
    text = "Good morning to you and"
    for word in context.words:  # spans across the flush, into the text as appended
        assert text[word["char_start"] : word["char_end"]] == word["text"]
    starts = [w["start_ms"] for w in context.words]
    assert starts == sorted(starts) and starts[-1] < context.duration_ms
    assert context.types()[-1] == "done"


def test_an_opus_context_sends_20_ms_packets(stack: Stack) -> None:
    async def main() -> Client:
        socket, client = await connect(stack)
        async with socket:
            await client.append("op", "Short and sweet.", encoding="opus", close=True)
            await client.until("op", "done")
        return client

    context = run(main()).contexts["op"]
    assert context.messages[0]["encoding"] == "opus"
    audio = [m for m in context.messages if m["type"] == "audio"]
    packets = [base64.b64decode(p) for m in audio for p in m["packets"]]
    assert packets and all(packets)
    assert all(m["duration_ms"] == 20 * len(m["packets"]) for m in audio)
    assert context.messages[-1]["duration_ms"] == 20 * len(packets)


def test_a_cancel_is_answered_and_nothing_of_its_context_follows(stack: Stack) -> None:
    long_text = " ".join(["The river runs past the old mill and on toward the sea."] * 6)

    async def main() -> tuple[Client, float, int]:
        socket, client = await connect(stack)
        async with socket:
            await client.append("c", long_text, close=True)
            await client.until("c", "audio")
            sent = time.perf_counter()
            await client.send(type="cancel", context_id="c")
            await client.until("c", "cancelled")
            ack_ms = (time.perf_counter() - sent) * 1000
            index = len(client.contexts["c"].messages)
            # Another context runs to its end on the same socket: nothing of "c" comes
            # meanwhile, and the connection goes on.
            await client.append("probe", "Still here.", close=True)
            await client.until("probe", "done")
            await client.send(type="cancel", context_id="c")  # idempotent
            await client.until("c", "cancelled")
        return client, ack_ms, index

    client, ack_ms, index = run(main())
    print(f"cancel acknowledged in {ack_ms:.1f} ms")
    messages = client.contexts["c"].messages
    assert messages[index - 1]["type"] == "cancelled"
    assert [m["type"] for m in messages[index:]] == ["cancelled"], messages[index:]
    assert "done" not in client.contexts["c"].types()


def test_the_cap_on_open_contexts_and_their_reclaim(stack: Stack) -> None:
    async def main() -> Client:
        socket, client = await connect(stack)
        async with socket:
            for n in range(MAX_CONTEXTS):
                await client.append(f"k{n}", "")
                await client.until(f"k{n}", "started")
            await client.append("extra", "One too many.")
            error = await client.until("extra", "error")
            assert error["code"] == "RESOURCE_EXHAUSTED"
            assert error["error_code"] == "too_many_contexts"
            # Reclaimed by a cancel: the id (and the room) are free again.
            await client.send(type="cancel", context_id="k0")
            await client.until("k0", "cancelled")
            await client.append("k0", "Back again.", close=True)
            await client.until("k0", "started")
            await client.until("k0", "done")
            # Reclaimed by its done: the same id opens a new context.
            await client.append("k0", "Once more.", close=True)
            started = await client.until("k0", "started")
            await client.until("k0", "done")
            assert started["request_id"]
        return client

    client = run(main())
    assert client.contexts["k0"].types().count("started") == 3


def test_auth_by_header_by_first_message_or_refused(stack: Stack) -> None:
    async def refused(headers: dict[str, str], first: dict[str, Any] | None) -> tuple[Any, int]:
        async with websockets.connect(url(stack), additional_headers=headers) as socket:
            if first is not None:
                await socket.send(json.dumps(first))
            error = json.loads(await asyncio.wait_for(socket.recv(), TIMEOUT_S))
            with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
                await asyncio.wait_for(socket.recv(), TIMEOUT_S)
            assert closed.value.rcvd is not None
            return error, closed.value.rcvd.code

    async def main() -> None:
        error, code = await refused({"Authorization": "Bearer nope-0000"}, None)
        assert (error["code"], code) == ("UNAUTHENTICATED", 1008)
        error, code = await refused({}, {"type": "append", "context_id": "a", "text": "Hi."})
        assert (error["code"], code) == ("UNAUTHENTICATED", 1008)
        assert "auth" in error["message"]
        error, code = await refused({}, {"type": "auth", "api_key": "nope-0000"})
        assert (error["code"], code) == ("UNAUTHENTICATED", 1008)
        async with websockets.connect(url(stack)) as socket:
            await socket.send(json.dumps({"type": "auth", "api_key": ACME_KEY}))
            ready = json.loads(await asyncio.wait_for(socket.recv(), TIMEOUT_S))
            assert ready["type"] == "ready"

    run(main())


def test_a_keyless_socket_is_capped_before_its_key_is_checked(stack: Stack) -> None:
    big = json.dumps({"type": "auth", "api_key": "k" * (64 * 1024)})

    async def main() -> int:
        async with websockets.connect(url(stack), max_size=1 << 22) as socket:
            await socket.send(big)
            with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
                while True:
                    await asyncio.wait_for(socket.recv(), TIMEOUT_S)
            assert closed.value.rcvd is not None
            return closed.value.rcvd.code

    assert run(main()) == 1009


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"type": "speak", "context_id": "x"}, "type"),
        ({"type": "append", "context_id": "x", "text": "Hi.", "encoding": "mp3"}, "encoding"),
        ({"type": "append", "context_id": "x", "text": "Hi.", "pitch": 2}, "pitch"),
        ({"type": "append", "context_id": "x", "text": "Hi.", "speed": 9}, "speed"),
        ({"type": "flush", "context_id": "x"}, "context_id"),
    ],
    ids=["unknown type", "bad encoding", "unknown field", "speed out of range", "unknown context"],
)
def test_a_bad_message_of_a_context_is_its_error_and_the_connection_goes_on(
    stack: Stack, message: dict[str, Any], field: str
) -> None:
    async def main() -> dict[str, Any]:
        socket, client = await connect(stack)
        async with socket:
            await socket.send(json.dumps(message))
            error = await client.until("x", "error")
            await client.append("after", "Fine.", close=True)
            await client.until("after", "done")
        return error

    error = run(main())
    assert error["code"] in ("INVALID_ARGUMENT", "NOT_FOUND"), error
    assert error.get("field") == field, error
    assert error["message"]


def test_a_later_append_with_another_option_fails_its_context(stack: Stack) -> None:
    async def main() -> Client:
        socket, client = await connect(stack)
        async with socket:
            await client.append("o", "Hello")
            await client.until("o", "started")
            await client.append("o", " there.", sample_rate_hz=RATE_HZ)  # the same: fine
            await client.append("o", " again.", sample_rate_hz=24000)
            error = await client.until("o", "error")
            assert error["field"] == "sample_rate_hz" and error["code"] == "INVALID_ARGUMENT"
            await client.append("o", "A new one.", close=True)  # reclaimed: opens anew
            await client.until("o", "done")
        return client

    assert run(main()).contexts["o"].types().count("started") == 2


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x01binary",
        "{",
        json.dumps({"type": "append", "text": "Hi."}),
        json.dumps({"type": "append", "context_id": "no spaces", "text": "Hi."}),
        json.dumps({"type": "append", "context_id": "x" * 65, "text": "Hi."}),
    ],
    ids=["binary", "not json", "missing context_id", "bad id chars", "id too long"],
)
def test_a_message_without_a_usable_context_fails_the_connection(stack: Stack, raw: Any) -> None:
    async def main() -> tuple[dict[str, Any], int]:
        socket, client = await connect(stack)
        async with socket:
            await socket.send(raw)
            error = await client.next()
            with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
                await client.next()
            assert closed.value.rcvd is not None
            return error, closed.value.rcvd.code

    error, code = run(main())
    assert error["type"] == "error" and "context_id" not in error
    assert error["code"] == "INVALID_ARGUMENT" and code == 1008, error
    assert error["message"]


def test_closing_the_socket_cancels_its_contexts_and_frees_the_tenants_streams(
    stack: Stack,
) -> None:
    client = redis.Redis.from_url(stack.redis_url)
    key = tenant_streams_key("acme")

    async def main() -> set[bytes]:
        socket, agent = await connect(stack)
        async with socket:
            ids = set()
            for context_id in ("s1", "s2"):
                await agent.append(context_id, "A long sentence that keeps on going. " * 8)
                started = await agent.until(context_id, "started")
                ids.add(f"acme.{started['request_id']}".encode())
            await agent.until("s1", "audio")
            await agent.until("s2", "audio")
            assert ids <= set(client.zrange(key, 0, -1))
        return ids

    try:
        ids = run(main())
        wait_for(
            lambda: not ids & set(client.zrange(key, 0, -1)),
            30,
            "the socket's streams to be given back",
        )
    finally:
        client.close()


def test_no_context_of_this_module_holds_a_tenant_stream(stack: Stack) -> None:
    """Every context above ended one way or another (done, cancel, error, socket closed):
    none holds one of the tenant's open streams any more."""
    client = redis.Redis.from_url(stack.redis_url)
    key = tenant_streams_key("acme")
    try:
        try:
            wait_for(lambda: client.zcard(key) == 0, 30, "the tenant's streams to be given back")
        except AssertionError:
            print(client.zrange(key, 0, -1, withscores=True), stack.logs())
            raise
    finally:
        client.close()
