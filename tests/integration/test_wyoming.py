"""The Wyoming server against a real stack: redis-server, an espeak render worker and
``voicelane wyoming`` as processes; the clients are the ``wyoming`` package's own
(``AsyncTcpClient``) and the third-party ``wyoming-bench tts`` CLI (in its own environment,
``tests/clients/venvs/wyoming.txt``).

Both modes (``synthesize``; ``synthesize-start``/``-chunk``/``-stop``), ``describe``, the
errors (an ``error`` event with voicelane's code, then the connection closes; the server goes
on), the tenant's quotas, and a client that leaves mid-synthesis (its stream is cancelled).
Nothing sleeps to synchronise: tests read events, or poll Redis with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pytest
import redis
from wyoming.audio import AudioChunk, AudioStart
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeVoice,
)

from tests.support.client_venv import run_client
from tests.support.stack import OTHER_KEY, Stack, wait_for
from voicelane.api.wyoming_wire import wyoming_serving
from voicelane.core.engines import qualified
from voicelane.core.lane.keys import cancel_key, tenant_streams_key
from voicelane.core.redis_server import RedisServer
from voicelane.workers.engines import create_engine

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Hello there. This is a test of the Wyoming server, speaking through the gateway."
SENTENCES = ("The kettle is on.", "Tea will be ready in five minutes.", "Do you take milk?")
LONG_TEXT = " ".join(f"This is sentence number {n} of a very long reading." for n in range(300))
READ_TIMEOUT_S = 60.0
ESPEAK_RATE_HZ = 22050
SECONDS_PER_WORD = (0.15, 0.7)
"""espeak speaks about 175 words a minute (0.34 s a word); generous bounds either way."""


@dataclass
class WyomingStack:
    stack: Stack
    port: int
    """The server acting as tenant ``acme``."""
    other_port: int
    """A second server, tenant ``other``, allowed one open stream."""


@pytest.fixture(scope="module")
def wyoming(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WyomingStack]:
    directory = tmp_path_factory.mktemp("wyoming")
    redis_server = RedisServer(directory / "redis").start()
    stack = Stack(directory / "stack", redis_server.url)
    try:
        stack.gpu_worker(concurrency=2)
        stack.wyoming()
        port = stack.wyoming_port
        stack.wyoming(
            "wyoming-other",
            extra_env={
                "VOICELANE_WYOMING_API_KEY": OTHER_KEY,
                "VOICELANE_TENANT_MAX_STREAMS": "1",
            },
        )
        stack.wait_realtime_workers()
        yield WyomingStack(stack, port, stack.wyoming_port)
    except BaseException:
        print(stack.logs())
        raise
    finally:
        stack.stop()
        redis_server.stop()


# ---- helpers -----------------------------------------------------------------------------


async def _exchange(port: int, events: Sequence[Event], *, until: str) -> list[Event]:
    """Send ``events``, read until an event of type ``until`` or an error (then, after an
    error, check that the server closed the connection)."""
    async with AsyncTcpClient("127.0.0.1", port, read_timeout=READ_TIMEOUT_S) as client:
        for event in events:
            await client.write_event(event)
        received: list[Event] = []
        while True:
            event = await client.read_event()
            assert event is not None, f"connection closed before {until}: {received[-3:]}"
            received.append(event)
            if event.type == until:
                return received
            if Error.is_type(event.type):
                assert await client.read_event() is None, "the connection stays open"
                return received


def exchange(port: int, events: Sequence[Event], *, until: str) -> list[Event]:
    return asyncio.run(_exchange(port, events, until=until))


def audio_of(events: Sequence[Event]) -> tuple[AudioStart, list[AudioChunk]]:
    starts = [AudioStart.from_event(e) for e in events if AudioStart.is_type(e.type)]
    chunks = [AudioChunk.from_event(e) for e in events if AudioChunk.is_type(e.type)]
    assert starts, [e.type for e in events]
    return starts[0], chunks


def seconds(chunks: Sequence[AudioChunk]) -> float:
    return sum(chunk.seconds for chunk in chunks)


def error_of(events: Sequence[Event]) -> Error:
    assert Error.is_type(events[-1].type), [e.type for e in events]
    return Error.from_event(events[-1])


def words(text: str) -> int:
    return len(re.findall(r"\w+", text))


# ---- describe ------------------------------------------------------------------------------


def test_describe_lists_every_voice_of_the_engines_with_their_languages(
    wyoming: WyomingStack,
) -> None:
    events = exchange(wyoming.port, [Describe().event()], until="info")
    info = Info.from_event(events[-1])
    assert [program.name for program in info.tts] == ["voicelane"]
    program = info.tts[0]
    assert program.supports_synthesize_streaming
    espeak = create_engine("espeak").capabilities()
    listed = {voice.name: voice.languages for voice in program.voices}
    assert set(listed) == {qualified("espeak", v.id) for v in espeak.voices}
    for voice in espeak.voices:
        assert listed[qualified("espeak", voice.id)] == list(voice.languages)
    assert any(code.startswith("en") for code in listed["espeak:en-us"])


# ---- synthesize ----------------------------------------------------------------------------


def test_synthesize_sends_pcm_as_audio_start_states_and_as_long_as_the_text(
    wyoming: WyomingStack,
) -> None:
    events = exchange(wyoming.port, [Synthesize(text=TEXT).event()], until="audio-stop")
    start, chunks = audio_of(events)
    assert (start.rate, start.width, start.channels) == (ESPEAK_RATE_HZ, 2, 1)
    types = [e.type for e in events]
    assert (types[0], types[-1]) == ("audio-start", "audio-stop")
    assert all((c.rate, c.width, c.channels) == (start.rate, 2, 1) for c in chunks)
    sizes = [len(chunk.audio) for chunk in chunks]
    assert all(size == 1024 * 2 for size in sizes[:-1]), "1024 samples per chunk"
    assert 0 < sizes[-1] <= 1024 * 2 and sizes[-1] % 2 == 0
    duration_s = seconds(chunks)
    low, high = (words(TEXT) * s for s in SECONDS_PER_WORD)
    assert low <= duration_s <= high, duration_s
    samples = np.frombuffer(b"".join(c.audio for c in chunks), dtype="<i2").astype(np.float64)
    assert math.sqrt(float(np.mean(samples**2))) > 100, "speech, not silence"

    twice = exchange(wyoming.port, [Synthesize(text=f"{TEXT} {TEXT}").event()], until="audio-stop")
    ratio = seconds(audio_of(twice)[1]) / duration_s
    assert 1.7 <= ratio <= 2.3, ratio


def _submitted_voice(stack: Stack, server: str = "wyoming") -> str:
    """The engine voice of the last stream the server submitted (its log line)."""
    log = next(proc for proc in stack.procs if proc.name == server).log.read_text()
    found = re.findall(r"stream \S+ submitted: tenant=\S+ voice=(\S+)", log)
    assert found, log[-2000:]
    return str(found[-1])


def test_synthesize_speaks_the_voice_named_or_a_voice_of_the_language(
    wyoming: WyomingStack,
) -> None:
    text = "Guten Morgen, wie geht es dir heute?"

    def spoken(voice: SynthesizeVoice | None) -> tuple[str, float]:
        events = exchange(
            wyoming.port, [Synthesize(text=text, voice=voice).event()], until="audio-stop"
        )
        duration_s = seconds(audio_of(events)[1])
        assert duration_s > 1.0
        return _submitted_voice(wyoming.stack), duration_s

    assert spoken(SynthesizeVoice(name="espeak:de"))[0] == "de"
    assert spoken(SynthesizeVoice(name="de"))[0] == "de", "a bare voice id names the same voice"
    assert spoken(SynthesizeVoice(name="espeak:en-us"))[0] == "en-us"
    assert spoken(SynthesizeVoice(language="de"))[0] == "de", "the first voice of the language"
    assert spoken(None)[0] == "auto"


# ---- streaming -----------------------------------------------------------------------------


def test_a_text_stream_is_spoken_sentence_by_sentence_then_stopped(
    wyoming: WyomingStack,
) -> None:
    whole = " ".join(SENTENCES)
    pieces = ["The kettle ", "is on. Tea will be ", "ready in five minutes. Do you ", "take milk?"]
    assert "".join(pieces) == whole
    events = exchange(
        wyoming.port,
        [
            SynthesizeStart().event(),
            *(SynthesizeChunk(text=piece).event() for piece in pieces),
            Synthesize(text=whole).event(),  # Home Assistant's copy for servers that do not stream
            SynthesizeStop().event(),
        ],
        until="synthesize-stopped",
    )
    types = [e.type for e in events]
    assert types[-1] == "synthesize-stopped"
    assert "error" not in types
    assert types.count("audio-start") == types.count("audio-stop") == len(SENTENCES)
    cycles = " ".join(types).split("audio-start")[1:]
    assert all(cycle.split() and cycle.split()[-1] == "audio-stop" for cycle in cycles[:-1])
    start, chunks = audio_of(events)
    assert (start.rate, start.width, start.channels) == (ESPEAK_RATE_HZ, 2, 1)
    streamed_s = seconds(chunks)

    reference = exchange(wyoming.port, [Synthesize(text=whole).event()], until="audio-stop")
    whole_s = seconds(audio_of(reference)[1])
    assert abs(streamed_s - whole_s) <= 0.25 * whole_s, "the copy inside the stream is not spoken"


# ---- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "code"),
    [
        ([Synthesize(text="   ").event()], "invalid_input"),
        ([Synthesize(text="Hello.", voice=SynthesizeVoice(name="nope")).event()], "unknown_voice"),
        (
            [Synthesize(text="Hello.", voice=SynthesizeVoice(language="xx")).event()],
            "unknown_voice",
        ),
        ([Synthesize(text="word " * 5000).event()], "text_too_large"),
        ([Synthesize(text="Hello.", text_format="markdown").event()], "invalid_input"),
        ([SynthesizeChunk(text="Hello.").event()], "invalid_input"),
        ([SynthesizeStop().event()], "invalid_input"),
        ([Event(type="synthesize", data={"voice": {"name": "espeak:en-us"}})], "malformed_request"),
        ([Event(type="synthesize", data={"text": 42})], "malformed_request"),
    ],
    ids=[
        "empty-text",
        "unknown-voice",
        "unknown-language",
        "huge-text",
        "text-format",
        "chunk-outside-a-stream",
        "stop-outside-a-stream",
        "no-text",
        "text-not-a-string",
    ],
)
def test_bad_input_is_an_error_event_then_the_connection_closes(
    wyoming: WyomingStack, events: list[Event], code: str
) -> None:
    error = error_of(exchange(wyoming.port, events, until="audio-stop"))
    assert error.code == code, error.text
    assert wyoming_serving("127.0.0.1", wyoming.port), "the server goes on"


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"this is not json\n", "malformed_request"),
        (b'["a list"]\n', "malformed_request"),
        (b'{"data": {}}\n', "malformed_request"),
        (b'{"type": "synthesize", "data_length": 1073741824}\n', "malformed_request"),
        (b'{"type": "synthesize", "payload_length": -1}\n', "malformed_request"),
        (b'{"type": "synthesize", "data_length": 3}\n[1]', "malformed_request"),
        (b"{" + b" " * 40_000 + b"}\n", "malformed_request"),
    ],
    ids=[
        "not-json",
        "not-an-object",
        "no-type",
        "huge-data-length",
        "negative-length",
        "data-not-an-object",
        "huge-header",
    ],
)
def test_malformed_events_are_an_error_event_then_the_connection_closes(
    wyoming: WyomingStack, raw: bytes, code: str
) -> None:
    async def send() -> tuple[Error, bytes]:
        reader, writer = await asyncio.open_connection("127.0.0.1", wyoming.port)
        try:
            writer.write(raw)
            await writer.drain()
            header = await asyncio.wait_for(reader.readline(), READ_TIMEOUT_S)
            parsed = json.loads(header)
            data = json.loads(await reader.readexactly(parsed["data_length"]))
            rest = await asyncio.wait_for(reader.read(), READ_TIMEOUT_S)
            return Error.from_event(Event(type=parsed["type"], data=data)), rest
        finally:
            writer.close()

    error, rest = asyncio.run(send())
    assert error.code == code, error.text
    assert rest == b"", "the connection closes after the error"
    assert wyoming_serving("127.0.0.1", wyoming.port), "the server goes on"


# ---- the gateway's rules: the tenant, its quotas, cancellation ------------------------------


def _held_streams(stack: Stack, tenant: str) -> int:
    client = redis.Redis.from_url(stack.redis_url)
    try:
        return int(client.zcard(tenant_streams_key(tenant)))
    finally:
        client.close()


def _cancel_marks(stack: Stack, tenant: str) -> int:
    client = redis.Redis.from_url(stack.redis_url)
    try:
        return sum(1 for _ in client.scan_iter(match=cancel_key(f"{tenant}.*")))
    finally:
        client.close()


def test_a_client_gone_mid_synthesis_cancels_its_stream(wyoming: WyomingStack) -> None:
    marks_before = _cancel_marks(wyoming.stack, "acme")

    async def leave_early() -> None:
        async with AsyncTcpClient("127.0.0.1", wyoming.port, read_timeout=READ_TIMEOUT_S) as c:
            await c.write_event(Synthesize(text=LONG_TEXT).event())
            while not AudioChunk.is_type((await c.read_event() or Event("none")).type):
                pass
            assert _held_streams(wyoming.stack, "acme") == 1
        # disconnected here, the synthesis far from done (minutes of audio, 5 s ahead at most)

    asyncio.run(leave_early())
    wait_for(lambda: _held_streams(wyoming.stack, "acme") == 0, 20, "the slot given back")
    wait_for(lambda: _cancel_marks(wyoming.stack, "acme") > marks_before, 20, "a cancel mark")


def test_the_tenant_of_the_wyoming_key_and_its_stream_quota_apply(wyoming: WyomingStack) -> None:
    async def two_at_once() -> Error:
        async with AsyncTcpClient(
            "127.0.0.1", wyoming.other_port, read_timeout=READ_TIMEOUT_S
        ) as first:
            await first.write_event(Synthesize(text=LONG_TEXT).event())
            while not AudioChunk.is_type((await first.read_event() or Event("none")).type):
                pass
            assert _held_streams(wyoming.stack, "other") == 1, "tenant other's stream"
            events = await _exchange(
                wyoming.other_port, [Synthesize(text="Hello.").event()], until="audio-stop"
            )
            return error_of(events)

    error = asyncio.run(two_at_once())
    assert error.code == "quota_exceeded", error.text
    wait_for(lambda: _held_streams(wyoming.stack, "other") == 0, 20, "the slot given back")


# ---- the third-party benchmark -------------------------------------------------------------


def test_wyoming_bench_tts_measures_both_modes(wyoming: WyomingStack) -> None:
    texts = [" ".join(SENTENCES[:1]), " ".join(SENTENCES)]
    found = run_client(
        "wyoming",
        "wyoming_bench_tts.py",
        f"127.0.0.1:{wyoming.port}",
        "--rounds",
        "2",
        "--warmup",
        "1",
        "--timeout",
        "30",
        "--no-unique",  # no nonce spoken (voicelane keeps no synthesis cache to defeat)
        "--texts",
        *texts,
        timeout_s=300,
    )
    assert found["returncode"] == 0, found["tail"]
    assert not found["failures"], found["failures"]
    rounds = 2 * len(texts)
    assert found["modes"] == {
        "non_streaming": {"ok": rounds, "fail": 0},
        "streaming": {"ok": rounds, "fail": 0},
    }, found["tail"]
    measurements = found["measurements"]
    assert len(measurements) == 2 * rounds
    for m in measurements:
        cycles = 1 if m["mode"] == "non_streaming" else m["sentences"]
        assert m["cycles"] == cycles, m
        assert abs(m["bytes"] / (2 * ESPEAK_RATE_HZ) - m["audio_s"]) <= 0.01, m
        spoken = words(texts[0] if m["sentences"] == 1 else texts[1])
        low, high = (spoken * s for s in SECONDS_PER_WORD)
        assert low <= m["audio_s"] <= high, m
