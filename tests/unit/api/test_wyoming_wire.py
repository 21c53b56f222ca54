"""Wyoming's framing read with bounds (``voicelane.api.wyoming_wire``)."""

from __future__ import annotations

import asyncio
import io
import socket
import threading
from collections.abc import Iterator

import pytest
from wyoming.event import Event, write_event

from voicelane.api.wyoming_wire import MAX_HEADER_BYTES, read_event, wyoming_serving
from voicelane.common.errors import MalformedRequestError

MAX_EVENT_BYTES = 4096


def wire(*events: Event) -> bytes:
    """The events as the ``wyoming`` package writes them."""
    out = io.BytesIO()
    for event in events:
        write_event(event, out)
    return out.getvalue()


def read_all(raw: bytes, *, max_event_bytes: int = MAX_EVENT_BYTES) -> list[Event | None]:
    async def go() -> list[Event | None]:
        reader = asyncio.StreamReader(limit=MAX_HEADER_BYTES)
        reader.feed_data(raw)
        reader.feed_eof()
        found: list[Event | None] = []
        while True:
            event = await read_event(reader, max_event_bytes=max_event_bytes)
            found.append(event)
            if event is None:
                return found

    return asyncio.run(go())


def test_events_written_by_the_wyoming_package_read_back_whole() -> None:
    events = [
        Event("describe"),
        Event("synthesize", data={"text": "Hello, 世界.", "voice": {"name": "espeak:de"}}),
        Event("audio-chunk", data={"rate": 22050, "width": 2, "channels": 1}, payload=b"\x01\x02"),
    ]
    assert read_all(wire(*events)) == [*events, None]


def test_data_on_the_header_line_and_after_it_are_merged() -> None:
    raw = b'{"type": "synthesize", "data": {"text": "a"}, "data_length": 15}\n{"voice": null}'
    (event, end) = read_all(raw)
    assert event == Event("synthesize", data={"text": "a", "voice": None})
    assert end is None


@pytest.mark.parametrize(
    "raw",
    [
        b"not json\n",
        b"[1, 2]\n",
        b'{"data": {}}\n',
        b'{"type": ""}\n',
        b'{"type": 3}\n',
        b'{"type": "x", "data": [1]}\n',
        b'{"type": "x", "data_length": -1}\n',
        b'{"type": "x", "payload_length": "12"}\n',
        b'{"type": "x", "data_length": true}\n',
        b'{"type": "x", "data_length": 5}\n[1,2]',
        b'{"type": "x", "data_length": 2}\n\xff\xfe',
        b'{"type": "x", "data_length": 4097}\n',
        b'{"type": "x", "data_length": 2000, "payload_length": 2100}\n',
        b"{" + b" " * (MAX_HEADER_BYTES + 10) + b"}\n",
    ],
    ids=[
        "not-json",
        "not-an-object",
        "no-type",
        "empty-type",
        "type-not-a-string",
        "data-not-an-object",
        "negative-length",
        "length-not-a-number",
        "length-a-boolean",
        "data-not-an-object-after-the-line",
        "data-not-utf8",
        "data-over-the-limit",
        "data-and-payload-over-the-limit",
        "header-over-the-limit",
    ],
)
def test_a_malformed_event_is_refused_saying_so(raw: bytes) -> None:
    with pytest.raises(MalformedRequestError):
        read_all(raw)


def test_an_oversized_event_is_refused_before_its_body_is_read() -> None:
    async def go() -> None:
        reader = asyncio.StreamReader(limit=MAX_HEADER_BYTES)
        reader.feed_data(b'{"type": "synthesize", "data_length": 1073741824}\n')
        # no EOF and no body: reading the declared gigabyte would wait forever
        with pytest.raises(MalformedRequestError, match="over 4096 bytes"):
            await asyncio.wait_for(read_event(reader, max_event_bytes=MAX_EVENT_BYTES), 5)

    asyncio.run(go())


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b'{"type": "describe"',
        b'{"type": "x", "data_length": 10}\n{"a"',
        b'{"type": "x", "payload_length": 3}\nab',
    ],
    ids=["nothing", "cut-in-the-header", "cut-in-the-data", "cut-in-the-payload"],
)
def test_the_end_of_the_connection_is_none_even_mid_event(raw: bytes) -> None:
    assert read_all(raw) == [None]


@pytest.fixture
def answering_server() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server that answers any line with ``info`` (and records what it read)."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def serve() -> None:
        connection, _ = listener.accept()
        with connection, connection.makefile("rb") as stream:
            seen.append(stream.readline())
            connection.sendall(wire(Event("info", data={"tts": []})))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], seen
    thread.join(5)
    listener.close()


def test_a_server_answering_describe_with_info_is_serving(
    answering_server: tuple[int, list[bytes]],
) -> None:
    port, seen = answering_server
    assert wyoming_serving("127.0.0.1", port)
    assert seen == [b'{"type": "describe"}\n']


def test_nothing_listening_is_not_serving() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, never listening: refused
        assert not wyoming_serving("127.0.0.1", port)
