"""One Wyoming connection (``voicelane.api.wyoming_session``) over a real socket, driven by the
``wyoming`` package's client, against a stand-in gateway that records what it was asked and
plays scripted streams: the mapping of events to gateway calls and of chunks to audio events,
the per-sentence cycles of a text stream, errors, and the end of a connection cancelling its
stream. The gateway itself is tested on its own (and end to end in
``tests/integration/test_wyoming.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest
from wyoming.audio import AudioChunk, AudioStart
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe, Info, SelectProgram
from wyoming.ping import Ping, Pong
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeVoice,
)

from voicelane.api.engines import ResolvedVoice
from voicelane.api.streams import Caption, StreamAsk, StreamChunk, StreamGateway
from voicelane.api.wyoming_session import SessionConfig, WyomingSession
from voicelane.common.audio.stream import StreamEncoding
from voicelane.common.errors import NoCapacityError, UnknownVoiceError
from voicelane.core.rules import EngineCapabilities, VoiceInfo

ESPEAK = EngineCapabilities(
    engine="espeak",
    sample_rate_hz=22050,
    min_speed=0.5,
    max_speed=2.5,
    voices=(VoiceInfo("en-us", "English", ("en-us",)), VoiceInfo("de", "German", ("de",))),
)
CHATTTS = EngineCapabilities(
    engine="chattts",
    sample_rate_hz=24000,
    min_speed=0.5,
    max_speed=2.0,
    voices=(VoiceInfo("default", "Default", ("zh",)),),
    seed_voices=True,
)
SAMPLES_PER_CHUNK = 4
CONFIG = SessionConfig(
    tenant="acme", max_event_bytes=64 * 1024, samples_per_chunk=SAMPLES_PER_CHUNK, idle_timeout_s=30
)


def chunk(seq: int, data: bytes, *, captions: int = 0, final: bool = False) -> StreamChunk:
    return StreamChunk(
        request_id="r1",
        seq=seq,
        data=(data,) if data else (),
        pts_ms=0,
        sample_rate_hz=22050,
        server_ts_ms=0,
        client_ts_ms=0,
        final=final,
        captions=tuple(Caption("s", 0, 1, 0, n) for n in range(captions)),
    )


@dataclass
class FakeStream:
    """Plays ``script``; with ``hold``, waits forever after it (a long synthesis)."""

    script: Sequence[StreamChunk]
    hold: bool = False
    request_id: str = "r1"
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    sent: list[str] = field(default_factory=list)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    wait_for_end: bool = False
    delay_s: float = 0.0
    """A slow synthesis: this long before the first chunk."""

    async def __aenter__(self) -> FakeStream:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self.closed.set()

    async def chunks(self) -> AsyncGenerator[StreamChunk, None]:
        if self.wait_for_end:
            await self.ended.wait()
        await asyncio.sleep(self.delay_s)
        for item in self.script:
            yield item
        if self.hold:
            await asyncio.Event().wait()

    async def send(self, delta: str) -> None:
        self.sent.append(delta)

    async def end(self) -> None:
        self.ended.set()


@dataclass
class FakeGateway:
    streams: list[FakeStream] = field(default_factory=list)
    asks: list[tuple[str, str | None, StreamAsk]] = field(default_factory=list)
    refuse: Exception | None = None
    settings: Any = field(default_factory=lambda: SimpleNamespace(max_stream_text_chars=100))

    def __post_init__(self) -> None:
        async def published() -> list[EngineCapabilities]:
            return [ESPEAK, CHATTTS]

        self.engines = SimpleNamespace(published=published)

    async def resolve_voice(self, tenant: str, voice: str | None, *, text: str) -> ResolvedVoice:
        if voice == "nope":
            raise UnknownVoiceError("voice 'nope' is unknown", field="voice")
        caps = CHATTTS if voice and voice.startswith("chattts") else ESPEAK
        return ResolvedVoice(caps, voice or "auto")

    async def synthesize(self, tenant: str, text: str, ask: StreamAsk, **_: object) -> FakeStream:
        return self._open(tenant, text, ask)

    async def converse(self, tenant: str, ask: StreamAsk, **_: object) -> FakeStream:
        return self._open(tenant, None, ask)

    def _open(self, tenant: str, text: str | None, ask: StreamAsk) -> FakeStream:
        if self.refuse is not None:
            raise self.refuse
        self.asks.append((tenant, text, ask))
        return self.streams.pop(0)


@asynccontextmanager
async def connected(
    gateway: FakeGateway, config: SessionConfig = CONFIG
) -> AsyncIterator[AsyncTcpClient]:
    sessions: list[asyncio.Task[None]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = WyomingSession(reader, writer, cast(StreamGateway, gateway), config)
        task = asyncio.ensure_future(session.run())
        sessions.append(task)
        await task

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with AsyncTcpClient("127.0.0.1", port, read_timeout=10) as client:
            yield client
    finally:
        server.close()
        await asyncio.gather(*sessions, return_exceptions=True)


async def read_until(client: AsyncTcpClient, *types: str) -> list[Event]:
    received: list[Event] = []
    while True:
        event = await client.read_event()
        assert event is not None, [e.type for e in received]
        received.append(event)
        if event.type in types:
            return received


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_describe_and_ping_are_answered() -> None:
    async def go() -> tuple[Info, Pong]:
        async with connected(FakeGateway()) as client:
            await client.write_event(Describe().event())
            info = Info.from_event((await read_until(client, "info"))[-1])
            await client.write_event(Ping(text="hi").event())
            pong = Pong.from_event((await read_until(client, "pong"))[-1])
            await client.write_event(SelectProgram(name="voicelane").event())
            await client.write_event(Event(type="not-a-wyoming-event"))  # ignored
            await client.write_event(Describe().event())
            await read_until(client, "info")  # still answering
            return info, pong

    info, pong = run(go())
    assert [v.name for v in info.tts[0].voices] == ["espeak:en-us", "espeak:de", "chattts:default"]
    assert pong.text == "hi"


def test_synthesize_asks_the_gateway_for_pcm_at_the_voices_rate_and_relays_it() -> None:
    pcm = bytes(range(20))  # 10 samples
    gateway = FakeGateway(
        streams=[FakeStream([chunk(0, pcm[:6], captions=1), chunk(1, pcm[6:], captions=1),
                             chunk(2, b"", final=True)])]
    )  # fmt: skip

    async def go() -> list[Event]:
        async with connected(gateway) as client:
            await client.write_event(
                Synthesize(text="Hello. Hi.", voice=SynthesizeVoice(name="espeak:de")).event()
            )
            return await read_until(client, "audio-stop")

    events = run(go())
    ((tenant, text, ask),) = gateway.asks
    assert (tenant, text) == ("acme", "Hello. Hi.")
    assert ask.voice == "espeak:de"
    assert ask.encoding is StreamEncoding.PCM
    assert ask.sample_rate_hz == 22050
    assert ask.front == "wyoming"
    assert not ask.paced
    types = [e.type for e in events]
    assert types == ["audio-start", "audio-chunk", "audio-chunk", "audio-chunk", "audio-stop"], (
        "one cycle in the non-streaming mode, whatever the sentences"
    )
    chunks = [AudioChunk.from_event(e).audio for e in events if e.type == "audio-chunk"]
    assert [len(c) for c in chunks] == [8, 8, 4]
    assert b"".join(chunks) == pcm
    assert AudioStart.from_event(events[0]).rate == 22050


def test_a_seed_speaker_asks_for_the_seed_voice_at_its_engines_rate() -> None:
    gateway = FakeGateway(streams=[FakeStream([chunk(0, b"\x00\x00", final=True)])])

    async def go() -> None:
        async with connected(gateway) as client:
            voice = SynthesizeVoice(name="chattts:default", speaker="42")
            await client.write_event(Synthesize(text="你好", voice=voice).event())
            await read_until(client, "audio-stop")

    run(go())
    ask = gateway.asks[0][2]
    assert (ask.voice, ask.sample_rate_hz) == ("chattts:seed:42", 24000)


def test_a_text_stream_feeds_a_conversation_and_relays_a_cycle_per_sentence() -> None:
    conversation = FakeStream(
        [
            chunk(0, b"\x01\x00" * 5, captions=1),
            chunk(1, b"\x02\x00" * 3),
            chunk(2, b"\x03\x00" * 2, captions=1),
            chunk(3, b"", captions=1, final=True),
        ],
        wait_for_end=True,
    )
    gateway = FakeGateway(streams=[conversation])

    async def go() -> list[Event]:
        async with connected(gateway) as client:
            await client.write_event(SynthesizeStart(voice=SynthesizeVoice(name="de")).event())
            for piece in ("Hallo ", "Welt. ", "Wie geht's?"):
                await client.write_event(SynthesizeChunk(text=piece).event())
            await client.write_event(Synthesize(text="Hallo Welt. Wie geht's?").event())
            await client.write_event(SynthesizeStop().event())
            return await read_until(client, "synthesize-stopped")

    events = run(go())
    assert len(gateway.asks) == 1, "the whole-text copy inside the stream is not synthesized"
    tenant, text, ask = gateway.asks[0]
    assert (tenant, text, ask.voice) == ("acme", None, "de")
    assert conversation.sent == ["Hallo ", "Welt. ", "Wie geht's?"]
    assert conversation.ended.is_set()
    types = [e.type for e in events]
    assert types == [
        "audio-start", "audio-chunk", "audio-chunk", "audio-stop",  # 8 samples: 2 chunks of 4
        "audio-start", "audio-chunk", "audio-stop",
        "synthesize-stopped",
    ]  # fmt: skip
    first = b"".join(AudioChunk.from_event(e).audio for e in events[1:3])
    assert first == b"\x01\x00" * 5 + b"\x02\x00" * 3


@pytest.mark.parametrize(
    ("events", "code"),
    [
        ([Synthesize(text="Hi.", voice=SynthesizeVoice(name="nope")).event()], "unknown_voice"),
        ([SynthesizeChunk(text="Hi.").event()], "invalid_input"),
        ([SynthesizeStop().event()], "invalid_input"),
        ([SynthesizeStart().event(), SynthesizeStart().event()], "invalid_input"),
        ([SynthesizeStart(text_format="ssml").event()], "unsupported_format"),
        (
            [SynthesizeStart().event(), SynthesizeChunk(text="x" * 101).event()],
            "text_too_large",
        ),
        ([SelectProgram(name="piper").event()], "invalid_input"),
        ([Event(type="synthesize", data={"text": ["a"]})], "malformed_request"),
        ([Event(type="synthesize", data={"text": "a", "voice": 3})], "malformed_request"),
        ([Event(type="synthesize", data={"text": "a", "voice": {"name": 3}})], "malformed_request"),
        ([Event(type="synthesize-chunk", data={})], "invalid_input"),
        ([Event(type="ping", data={"text": 3})], None),
    ],
    ids=[
        "unknown-voice",
        "chunk-outside",
        "stop-outside",
        "start-twice",
        "ssml-stream",
        "stream-too-long",
        "other-program",
        "text-not-a-string",
        "voice-not-an-object",
        "voice-name-not-a-string",
        "chunk-outside-without-text",
        "ping-with-any-text",
    ],
)
def test_a_refusal_is_an_error_event_then_the_end(events: list[Event], code: str | None) -> None:
    gateway = FakeGateway(streams=[FakeStream([], hold=True)])

    async def go() -> tuple[list[Event], Event | None]:
        async with connected(gateway) as client:
            for event in events:
                await client.write_event(event)
            if code is None:
                return await read_until(client, "pong"), None
            received = await read_until(client, "error")
            return received, await client.read_event()

    received, after = run(go())
    if code is None:
        return
    error = Error.from_event(received[-1])
    assert error.code == code, error.text
    assert after is None, "the connection ends after an error"


def test_a_refusal_by_the_gateway_is_an_error_event() -> None:
    gateway = FakeGateway(refuse=NoCapacityError("no real-time capacity; retry shortly"))

    async def go() -> Error:
        async with connected(gateway) as client:
            await client.write_event(Synthesize(text="Hello.").event())
            return Error.from_event((await read_until(client, "error"))[-1])

    error = run(go())
    assert (error.code, error.text) == ("no_capacity", "no real-time capacity; retry shortly")


def test_a_bug_is_an_internal_error_event_not_a_crash() -> None:
    gateway = FakeGateway(refuse=RuntimeError("boom with a secret"))

    async def go() -> Error:
        async with connected(gateway) as client:
            await client.write_event(Synthesize(text="Hello.").event())
            return Error.from_event((await read_until(client, "error"))[-1])

    error = run(go())
    assert error.text == "internal error"
    assert "secret" not in error.text


@pytest.mark.parametrize("streaming", [False, True], ids=["synthesize", "text-stream"])
def test_the_client_leaving_mid_synthesis_closes_its_stream(streaming: bool) -> None:
    stream = FakeStream([chunk(0, b"\x01\x00" * 8, captions=1)], hold=True)
    gateway = FakeGateway(streams=[stream])

    async def go() -> None:
        async with connected(gateway) as client:
            if streaming:
                await client.write_event(SynthesizeStart().event())
                await client.write_event(SynthesizeChunk(text="Hello. ").event())
            else:
                await client.write_event(Synthesize(text="Hello.").event())
            await read_until(client, "audio-chunk")
            assert not stream.closed.is_set()
        await asyncio.wait_for(stream.closed.wait(), 10)

    run(go())
    assert stream.closed.is_set()


def test_syntheses_on_one_connection_run_in_order() -> None:
    gateway = FakeGateway(
        streams=[
            FakeStream([chunk(0, b"\x01\x00", final=True)], request_id="a"),
            FakeStream([chunk(0, b"\x02\x00", final=True)], request_id="b"),
        ]
    )

    async def go() -> list[bytes]:
        async with connected(gateway) as client:
            await client.write_event(Synthesize(text="One.").event())
            await client.write_event(Synthesize(text="Two.").event())
            first = await read_until(client, "audio-stop")
            second = await read_until(client, "audio-stop")
        return [
            b"".join(AudioChunk.from_event(e).audio for e in part if e.type == "audio-chunk")
            for part in (first, second)
        ]

    assert run(go()) == [b"\x01\x00", b"\x02\x00"]
    assert [text for _, text, _ in gateway.asks] == ["One.", "Two."]


def test_an_idle_connection_is_closed_but_not_one_that_is_synthesizing() -> None:
    stream = FakeStream([chunk(0, b"\x01\x00" * 8)], hold=True, delay_s=0.25)
    gateway = FakeGateway(streams=[stream])
    quick = SessionConfig(
        tenant="acme", max_event_bytes=4096, samples_per_chunk=4, idle_timeout_s=0.05
    )

    async def go() -> tuple[Error, Event | None, bool]:
        async with connected(gateway, quick) as client:
            error = Error.from_event((await read_until(client, "error"))[-1])
            end = await client.read_event()
        async with connected(gateway, quick) as client:
            await client.write_event(Synthesize(text="Hello.").event())
            await read_until(client, "audio-chunk")  # five idle periods later: still open
            await client.write_event(Ping(text="still there").event())
            await read_until(client, "pong")
            still_open = not stream.closed.is_set()
        return error, end, still_open

    error, end, still_open = run(go())
    assert error.code == "deadline_exceeded"
    assert end is None
    assert still_open
