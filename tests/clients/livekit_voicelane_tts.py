"""Our LiveKit plugin (``livekit-plugins-voicelane``, installed from ./integrations/livekit)
against a voicelane server, as a LiveKit agent drives a TTS, outside a worker
(``utils.http_context.open()`` gives the plugin its aiohttp session):

- ``synthesize(text)``: frames and the aligned transcript;
- ``stream()``: several ``push_text`` pieces, ``flush()``, ``end_input()``: frames, aligned
  words (``TimedString``s in the frames' userdata, as LiveKit's transcription reads them);
- an interruption mid-sentence while the text is still coming: ``aclose()`` of a stream after
  its first second of audio, then a ``synthesize()`` on the same TTS (the socket goes on).

Every protocol message the plugin sends or receives is recorded by wrapping aiohttp's
WebSocket methods (the plugin is not changed), so the findings say what went over the wire:
the ``cancel``, the server's ``cancelled``, and what of that context came after it.

Usage: ``livekit_voicelane_tts.py BASE_URL API_KEY [VOICE]``. Prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from importlib.metadata import version
from typing import Any

import aiohttp
from livekit.agents import Plugin, utils
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT
from livekit.plugins import voicelane

TEXT = "The quick brown fox jumps over the lazy dog. Then it runs home."
PIECES = [
    " ",  # whitespace first: the context opens with the first words
    "Hello there, ",
    "this is a stre",
    "aming test of the plugin. ",
    "It speaks while the text",
    " is still coming in",
    ".",
]
LONG_TEXT = " ".join(
    f"This is sentence number {n} of a long answer that the user will interrupt."
    for n in range(1, 13)
)
INTERRUPT_AFTER_S = 1.0
AFTER_TEXT = "After the interruption."

WIRE: list[dict[str, Any]] = []
COUNTS = {"connections": 0}


def _summary(direction: str, data: dict[str, Any]) -> dict[str, Any]:
    entry = {"dir": direction, "t": time.monotonic(), "type": data.get("type")}
    entry["context_id"] = data.get("context_id")
    if data.get("type") == "audio":
        entry["duration_ms"] = data.get("duration_ms")
    if data.get("type") == "words":
        entry["words"] = len(data.get("words") or [])
    if data.get("type") == "error":
        entry["error"] = data
    return entry


def _record_the_wire() -> None:
    """Wrap aiohttp's WebSocket so every JSON message is recorded (and connections counted)."""
    receive = aiohttp.ClientWebSocketResponse.receive
    send_str = aiohttp.ClientWebSocketResponse.send_str
    ws_connect = aiohttp.ClientSession._ws_connect

    async def recorded_receive(self: Any, timeout: Any = None) -> Any:
        msg = await receive(self, timeout)
        if msg.type == aiohttp.WSMsgType.TEXT:
            WIRE.append(_summary("in", json.loads(msg.data)))
        return msg

    async def recorded_send_str(self: Any, data: str, *args: Any, **kwargs: Any) -> Any:
        WIRE.append(_summary("out", json.loads(data)))
        return await send_str(self, data, *args, **kwargs)

    async def counted_ws_connect(self: Any, *args: Any, **kwargs: Any) -> Any:
        COUNTS["connections"] += 1
        return await ws_connect(self, *args, **kwargs)

    aiohttp.ClientWebSocketResponse.receive = recorded_receive  # type: ignore[method-assign]
    aiohttp.ClientWebSocketResponse.send_str = recorded_send_str  # type: ignore[method-assign]
    aiohttp.ClientSession._ws_connect = counted_ws_connect  # type: ignore[method-assign]


class Collected:
    def __init__(self) -> None:
        self.frames = 0
        self.duration_s = 0.0
        self.sample_rates: set[int] = set()
        self.channels: set[int] = set()
        self.words: list[list[Any]] = []
        self.segment_ids: set[str] = set()
        self.finals = 0

    def add(self, audio: Any) -> None:
        frame = audio.frame
        self.frames += 1
        self.duration_s += frame.samples_per_channel / frame.sample_rate
        self.sample_rates.add(frame.sample_rate)
        self.channels.add(frame.num_channels)
        self.segment_ids.add(audio.segment_id)
        self.finals += int(audio.is_final)
        for word in frame.userdata.get(USERDATA_TIMED_TRANSCRIPT) or []:
            self.words.append([str(word), word.start_time, word.end_time])

    def findings(self) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "duration_s": round(self.duration_s, 4),
            "sample_rates": sorted(self.sample_rates),
            "channels": sorted(self.channels),
            "words": self.words,
            "segment_ids": sorted(self.segment_ids),
            "finals": self.finals,
        }


async def synthesize(tts: voicelane.TTS, text: str) -> dict[str, Any]:
    collected = Collected()
    async with tts.synthesize(text) as stream:
        async for audio in stream:
            collected.add(audio)
    return {"text": text, **collected.findings()}


async def stream_pieces(tts: voicelane.TTS) -> dict[str, Any]:
    collected = Collected()
    async with tts.stream() as stream:
        for piece in PIECES:
            stream.push_text(piece)
            await asyncio.sleep(0)  # let the plugin send it: pieces arrive one by one
        stream.flush()
        stream.end_input()
        async for audio in stream:
            collected.add(audio)
    return {"text": "".join(PIECES), **collected.findings()}


async def blank(tts: voicelane.TTS) -> dict[str, Any]:
    """A segment of whitespace only: no context, no frames, no error."""
    collected = Collected()
    before = len(WIRE)
    async with tts.stream() as stream:
        stream.push_text("  ")
        stream.push_text("\n")
        stream.end_input()
        async for audio in stream:
            collected.add(audio)
    sent = [m["type"] for m in WIRE[before:] if m["dir"] == "out"]
    return {"sent": sent, **collected.findings()}


async def interrupt(tts: voicelane.TTS) -> dict[str, Any]:
    collected = Collected()
    stream = tts.stream()
    for word in LONG_TEXT.split(" "):  # as an LLM writes, which has not finished when the
        stream.push_text(word + " ")  # user interrupts: no end_input()
    async for audio in stream:
        collected.add(audio)
        if collected.duration_s >= INTERRUPT_AFTER_S:
            break
    heard_s = collected.duration_s
    at = time.monotonic()
    await stream.aclose()  # what LiveKit's agent session does on an interruption
    closed_ms = (time.monotonic() - at) * 1000
    late_frames = 0
    async for _ in stream:  # nothing more comes out of an interrupted stream
        late_frames += 1
    context_id = next(iter(collected.segment_ids))
    after = await synthesize(tts, AFTER_TEXT)  # the same TTS, the same pooled socket
    mine = [m for m in WIRE if m["context_id"] == context_id]
    cancel_at = next((i for i, m in enumerate(mine) if m["type"] == "cancel"), None)
    cancelled_at = next((i for i, m in enumerate(mine) if m["type"] == "cancelled"), None)
    after_cancel = mine[cancel_at + 1 :] if cancel_at is not None else []
    after_cancelled = mine[cancelled_at + 1 :] if cancelled_at is not None else []
    return {
        "context_id": context_id,
        "heard_s": round(heard_s, 4),
        "aclose_ms": round(closed_ms, 2),
        "late_frames": late_frames,
        "cancel_sent": cancel_at is not None,
        "cancelled_received": cancelled_at is not None,
        "server_audio_s": sum(m.get("duration_ms") or 0 for m in mine if m["type"] == "audio")
        / 1000,
        "audio_after_cancel": sum(1 for m in after_cancel if m["type"] == "audio"),
        "after_cancelled": [m["type"] for m in after_cancelled],
        "done_received": any(m["type"] == "done" for m in mine),
        "after": after,
        **{"frames": collected.frames},
    }


async def failure(tts: voicelane.TTS, **options: Any) -> dict[str, Any] | None:
    """What ``synthesize()`` raises (None: nothing) with ``options`` (``update_options``)."""
    if options:
        tts.update_options(**options)
    try:
        await synthesize(tts, TEXT)
    except Exception as e:
        body = getattr(e, "body", None)
        return {
            "class": type(e).__name__,
            "status_code": getattr(e, "status_code", None),
            "retryable": getattr(e, "retryable", None),
            "error_code": body.get("error_code") if isinstance(body, dict) else None,
        }
    return None


async def run(base_url: str, api_key: str, voice: str | None) -> dict[str, Any]:
    _record_the_wire()
    findings: dict[str, Any] = {
        "agents": version("livekit-agents"),
        "plugin": version("livekit-plugins-voicelane"),
        "registered": [p.title for p in Plugin.registered_plugins],
    }
    async with utils.http_context.open():
        tts = voicelane.TTS(base_url=base_url, api_key=api_key, voice=voice)
        findings["capabilities"] = {
            "streaming": tts.capabilities.streaming,
            "aligned_transcript": tts.capabilities.aligned_transcript,
        }
        findings["sample_rate"] = tts.sample_rate
        try:
            findings["synthesize"] = await synthesize(tts, TEXT)
            findings["stream"] = await stream_pieces(tts)
            findings["blank"] = await blank(tts)
            findings["interrupt"] = await interrupt(tts)
            findings["bad_voice"] = await failure(tts, voice="no-such-voice")
            tts.update_options(voice=voice)
            findings["after_error"] = await synthesize(tts, AFTER_TEXT)  # the socket went on
        finally:
            await tts.aclose()
        findings["connections"] = COUNTS["connections"]  # the TTS above opened these
        bad = voicelane.TTS(base_url=base_url, api_key="not-a-key")
        try:
            findings["bad_key"] = await failure(bad)
        finally:
            await bad.aclose()
        narrow = voicelane.TTS(base_url=base_url, api_key=api_key, voice=voice, sample_rate=16000)
        try:
            findings["rate_16k"] = await synthesize(narrow, AFTER_TEXT)
        finally:
            await narrow.aclose()
    findings["errors_on_wire"] = [m["error"] for m in WIRE if m["type"] == "error"]
    return findings


def main() -> None:
    base_url, api_key = sys.argv[1:3]
    voice = sys.argv[3] if len(sys.argv) > 3 else None
    print(json.dumps(asyncio.run(run(base_url, api_key, voice))))


if __name__ == "__main__":
    main()
