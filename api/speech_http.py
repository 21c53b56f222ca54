"""The real-time lane's twins on the REST app: a WebSocket stream and OpenAI's speech API.

Both use the same machinery as the gRPC front (``api/grpc_params``, ``api/grpc_relay``):
the same checks before anything reaches Redis, the same admission control, the same relay
of the request's output stream with its liveness rules, and a cancel mark when the client
leaves early.

``GET /v1/stream`` (WebSocket)
    Authenticate with ``Authorization: Bearer KEY`` on the upgrade request (or, for browsers,
    ``"api_key"`` in the first message). Send one JSON text message ``{"text", "voice"?,
    "sample_rate_hz"?, "speed"?, "client_ts_ms"?}``. The server answers
    ``{"type": "start", "request_id"}``; then per chunk a JSON ``{"type": "audio", "seq",
    "pts_ms", "packets": N, "server_ts_ms", "client_ts_ms", "captions": [...]}`` followed by
    N binary messages, one 20 ms Opus packet each; then ``{"type": "end", "seq", "pts_ms"}``
    and a normal close. Errors: ``{"type": "error", "code", "message"}`` (gRPC status names)
    and a close (1008 for bad input or auth, 1013 when over capacity, 1011 otherwise).
    Closing the socket early cancels the stream.

``POST /v1/audio/speech`` (OpenAI-compatible)
    JSON ``{"input", "voice", "response_format"?: opus|mp3|wav|flac|pcm, "speed"?,
    "model"?}``; the audio streams back as it is produced (chunked). ``opus`` is Ogg Opus;
    ``pcm`` is raw 16-bit little-endian mono at 24 kHz, as OpenAI's. OpenAI's voice names
    (``alloy``, ``echo``...) map to ``auto``; voicelane voice ids work as they are. The
    lane's Opus packets are decoded and re-encoded into the asked format (``wav`` and
    ``pcm`` cost nothing more; an Ogg stream could carry the packets as they are — a later
    optimisation).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import FastAPI, Header, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.auth import ApiKeys
from api.grpc_params import absolute_deadline_ms, check_voice_params
from api.grpc_relay import Admission, ChunkDefaults, Liveness, OutputRelay
from api.voices import VoiceRegistry
from core.audio import AudioFormat, OpusStreamDecoder, float_to_int16, open_writer
from core.errors import InvalidInputError, VoicelaneError, grpc_status_name
from core.lane import LaneClient, Mode, StreamRequest, new_request_id, now_ms
from core.settings import LaneSettings
from core.text_input import check_text
from core.wire import speech_pb2 as pb

log = logging.getLogger(__name__)

OPENAI_VOICES = frozenset({"alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova",
                           "sage", "shimmer", "verse"})  # fmt: skip
OPENAI_RATE_HZ = 24000
_WS_CLOSE = {"INVALID_ARGUMENT": 1008, "UNAUTHENTICATED": 1008, "RESOURCE_EXHAUSTED": 1013}


@dataclass
class StreamFronts:
    """What both twins share: the lane, admission, voices, settings."""

    settings: LaneSettings
    keys: ApiKeys
    lane: LaneClient
    voices: VoiceRegistry
    admission: Admission

    async def open(
        self,
        *,
        tenant: str,
        text: str,
        voice: str,
        sample_rate_hz: int,
        speed: float,
        client_ts_ms: int = 0,
        source: str = "text",
    ) -> OutputRelay:
        """Check, admit, submit; the relay of the new stream's output."""
        text = check_text(text, max_chars=self.settings.max_stream_text_chars, source=source)
        known = await self.voices.voice_ids()
        params = check_voice_params(voice, sample_rate_hz, speed, known_voices=known)
        rt = self.settings.realtime
        deadline_ms = absolute_deadline_ms(None, rt.default_deadline_s, now_ms())
        request = StreamRequest(
            request_id=new_request_id(),
            tenant=tenant,
            voice=params.voice,
            sample_rate_hz=params.sample_rate_hz,
            deadline_ms=deadline_ms,
            mode=Mode.SYNTHESIZE,
            speed=params.speed,
            client_ts_ms=client_ts_ms,
        )
        async with self.admission.slot():
            await self.lane.submit(request, text)
        liveness = Liveness(
            self.lane,
            request.request_id,
            claim_timeout_s=rt.claim_timeout_s,
            unavailable_after_s=rt.unavailable_after_s,
            picked_up=False,
        )
        return OutputRelay(
            self.lane,
            request.request_id,
            deadline_ms=deadline_ms,
            liveness=liveness,
            defaults=ChunkDefaults(params.sample_rate_hz, client_ts_ms),
        )

    async def close(self, relay: OutputRelay | None) -> None:
        """Cancel a stream its client left before the end."""
        if relay is None or relay.finished or relay.closed:
            return
        relay.closed = True
        with contextlib.suppress(Exception):
            await asyncio.shield(self.lane.cancel(relay.request_id))


# ------------------------------------------------------------------------ WebSocket


class _WsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str
    voice: str = ""
    sample_rate_hz: int = 0
    speed: float = 0.0
    client_ts_ms: int = 0
    api_key: str | None = None


def _chunk_header(chunk: pb.AudioChunk) -> dict[str, Any]:
    return {
        "type": "audio",
        "seq": chunk.seq,
        "pts_ms": chunk.pts_ms,
        "packets": len(chunk.opus_packets),
        "sample_rate_hz": chunk.sample_rate_hz,
        "server_ts_ms": chunk.server_ts_ms,
        "client_ts_ms": chunk.client_ts_ms,
        "captions": [
            {
                "text": c.text,
                "start": c.start,
                "end": c.end,
                "pts_ms": c.pts_ms,
                "sentence": c.sentence,
            }
            for c in chunk.captions
        ],
    }


async def websocket_stream(fronts: StreamFronts, socket: WebSocket) -> None:
    await socket.accept()
    relay: OutputRelay | None = None
    try:
        body = _WsRequest.model_validate_json(await socket.receive_text())
        header = socket.headers.get("authorization")
        tenant = (
            fronts.keys.tenant_for_header(header)
            if header or not body.api_key
            else fronts.keys.tenant_for(body.api_key)
        )
        relay = await fronts.open(
            tenant=tenant,
            text=body.text,
            voice=body.voice,
            sample_rate_hz=body.sample_rate_hz,
            speed=body.speed,
            client_ts_ms=body.client_ts_ms,
        )
        await socket.send_json({"type": "start", "request_id": relay.request_id})
        async with contextlib.aclosing(relay.chunks()) as chunks:
            async for chunk in chunks:
                if chunk.final:
                    if chunk.opus_packets:
                        await _send_chunk(socket, chunk)
                    await socket.send_json(
                        {"type": "end", "seq": chunk.seq, "pts_ms": chunk.pts_ms}
                    )
                else:
                    await _send_chunk(socket, chunk)
        await socket.close(1000)
    except WebSocketDisconnect:
        log.info("websocket client left stream %s", relay.request_id if relay else "-")
    except ValidationError as error:
        await _ws_fail(socket, InvalidInputError(f"bad stream request: {_first_error(error)}"))
    except (VoicelaneError, json.JSONDecodeError) as error:
        await _ws_fail(socket, error)
    except Exception:
        log.exception("websocket stream failed")
        await _ws_fail(socket, VoicelaneError("internal error"))
    finally:
        await fronts.close(relay)


async def _send_chunk(socket: WebSocket, chunk: pb.AudioChunk) -> None:
    await socket.send_json(_chunk_header(chunk))
    for packet in chunk.opus_packets:
        await socket.send_bytes(packet)


async def _ws_fail(socket: WebSocket, error: Exception) -> None:
    code = grpc_status_name(error) if isinstance(error, VoicelaneError) else "INVALID_ARGUMENT"
    if isinstance(error, json.JSONDecodeError):
        code = "INVALID_ARGUMENT"
    message = " ".join(str(error).split()) or code
    with contextlib.suppress(Exception):
        await socket.send_json({"type": "error", "code": code, "message": message})
        await socket.close(_WS_CLOSE.get(code, 1011))


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    return f"{where}: {first.get('msg', 'invalid')}"


# ------------------------------------------------------------------------ OpenAI


class SpeechRequest(BaseModel):
    """OpenAI's ``POST /v1/audio/speech`` body."""

    model_config = ConfigDict(extra="ignore")

    input: str = Field(description="The text to speak.")
    voice: str = Field("auto", description="A voicelane voice id; OpenAI's names map to auto.")
    response_format: str = Field("mp3", description="opus, mp3, wav, flac or pcm.")
    speed: float = Field(1.0, ge=0.25, le=4.0)
    model: str | None = Field(None, description="Ignored: the workers' engine speaks.")


_MEDIA = {
    "opus": "audio/ogg",
    "mp3": "audio/mpeg",
    "wav": "audio/wav",
    "flac": "audio/flac",
    "pcm": "audio/pcm",
}


class _Sink(io.RawIOBase):
    """A write-only, non-seekable file that hands out what was written since last asked."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self._parts.append(chunk)
        return len(chunk)

    def take(self) -> bytes:
        data, self._parts = b"".join(self._parts), []
        return data


def _wav_header(rate_hz: int) -> bytes:
    """A WAV header for a stream of unknown length (sizes at their maximum)."""
    unknown = 0xFFFFFFFF
    return (
        b"RIFF" + struct.pack("<I", unknown) + b"WAVE"
        + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate_hz, rate_hz * 2, 2, 16)
        + b"data" + struct.pack("<I", unknown)
    )  # fmt: skip


async def openai_speech(
    fronts: StreamFronts, request: Request, authorization: str | None
) -> StreamingResponse:
    tenant = fronts.keys.tenant_for_header(authorization)
    try:
        body = SpeechRequest.model_validate(await request.json())
    except ValidationError as error:
        raise InvalidInputError(f"bad speech request: {_first_error(error)}") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InvalidInputError("malformed JSON") from None
    fmt = body.response_format.lower()
    if fmt not in _MEDIA:
        raise InvalidInputError(
            f"response_format {body.response_format!r} is not supported; use "
            + ", ".join(sorted(_MEDIA))
        )
    voice = "auto" if body.voice in OPENAI_VOICES else body.voice
    relay = await fronts.open(
        tenant=tenant,
        text=body.input,
        voice=voice,
        sample_rate_hz=OPENAI_RATE_HZ,
        speed=body.speed,
        source="input",
    )
    return StreamingResponse(
        _encoded(fronts, relay, fmt),
        media_type=_MEDIA[fmt],
        headers={"X-Request-Id": relay.request_id},
    )


async def _encoded(fronts: StreamFronts, relay: OutputRelay, fmt: str) -> AsyncIterator[bytes]:
    decoder = OpusStreamDecoder(OPENAI_RATE_HZ)
    sink = _Sink()
    writer = None
    if fmt in ("opus", "mp3", "flac"):
        target = AudioFormat.OGG if fmt == "opus" else AudioFormat(fmt)
        writer = open_writer(sink, target, OPENAI_RATE_HZ)  # type: ignore[arg-type]
    elif fmt == "wav":
        yield _wav_header(OPENAI_RATE_HZ)
    try:
        async with contextlib.aclosing(relay.chunks()) as chunks:
            async for chunk in chunks:
                pcm = decoder.decode_all(chunk.opus_packets) if chunk.opus_packets else None
                if pcm is None or not len(pcm):
                    continue
                if writer is None:
                    yield float_to_int16(pcm).astype("<i2").tobytes()
                else:
                    writer.write(pcm)
                    if data := sink.take():
                        yield data
        if writer is not None:
            writer.close()
            if data := sink.take():
                yield data
    finally:
        await fronts.close(relay)


AuthHeader = Annotated[str | None, Header(include_in_schema=False)]


def install_stream_routes(app: FastAPI, make_fronts: Callable[[], Awaitable[StreamFronts]]) -> None:
    """Add ``/v1/stream`` and ``/v1/audio/speech`` to ``app``."""
    fronts_holder: dict[str, StreamFronts] = {}
    lock = asyncio.Lock()

    async def fronts() -> StreamFronts:
        async with lock:
            if "fronts" not in fronts_holder:
                fronts_holder["fronts"] = await make_fronts()
            return fronts_holder["fronts"]

    @app.websocket("/v1/stream")
    async def stream(socket: WebSocket) -> None:
        await websocket_stream(await fronts(), socket)

    @app.post(
        "/v1/audio/speech",
        summary="OpenAI-compatible speech: audio streams back as it is produced",
        response_class=StreamingResponse,
    )
    async def speech(request: Request, authorization: AuthHeader = None) -> StreamingResponse:
        return await openai_speech(await fronts(), request, authorization)
