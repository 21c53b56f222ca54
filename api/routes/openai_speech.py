"""OpenAI's speech API on the REST app: ``POST /v1/audio/speech``.

A thin adapter over the stream gateway (:mod:`voicelane.api.streams`), like every front: the
same request rules, admission, relay and cancel mark when the client leaves early.

``POST /v1/audio/speech``
    JSON ``{"input", "voice", "model"?, "response_format"?: mp3|opus|aac|flac|wav|pcm
    (default mp3), "speed"?: 0.25-4.0, "instructions"?, "stream_format"?: audio|sse}``, plus
    voicelane's ``normalize``, ``ssml``, ``lexicons`` (as on the WebSocket), ``seed``,
    ``sample_rate_hz`` (default 24000, OpenAI's rate) and ``pace`` (default false: rendered as
    fast as the workers can, like a file download — true paces it just ahead of playback, for
    a live player). ``opus`` is Ogg Opus, ``aac`` ADTS, ``pcm`` raw 16-bit little-endian mono,
    as OpenAI's. The worker encodes the asked format itself: this route only relays bytes.

    * ``voice``: a string or OpenAI's voice object ``{"id": ...}``; OpenAI's names map to real
      voices (:mod:`voicelane.api.openai_voices`, the setting ``openai_voices``), voicelane
      voice ids work as they are; the header ``X-Voicelane-Voice`` says which voice spoke.
    * ``speed``: OpenAI's range; the engine's own speed where it reaches, time-stretched beyond
      (the gateway's ``stretch_speed``).
    * ``instructions``: no engine served takes style instructions through the gateway (ChatTTS's
      ``[oral_N]``/``[laugh_N]``/``[break_N]`` controls belong to its text-refinement step,
      which voicelane does not run, and tags in the text are stripped): a non-empty value is
      answered with the header ``X-Voicelane-Warning: instructions ignored: ...``, never
      dropped silently.
    * ``stream_format``: ``audio`` (default) streams the bytes as they are produced (chunked);
      ``sse`` sends OpenAI's server-sent events (:mod:`voicelane.api.openai_sse`).
    * ``model``: any (``tts-1``, ``gpt-4o-mini-tts``, an engine's name): the voice picks the
      engine.

    Errors: OpenAI's shape and statuses (:mod:`voicelane.api.openai_compat`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from voicelane.api import openai_sse
from voicelane.api.deps import State, Tenant
from voicelane.api.failures import sse_error
from voicelane.api.openai_compat import OpenAIRoute, openai_body, openai_voice
from voicelane.api.streams import Stream, StreamAsk
from voicelane.common.audio.stream import StreamEncoding
from voicelane.common.errors import InvalidInputError

log = logging.getLogger(__name__)

router = APIRouter(tags=["openai"], route_class=OpenAIRoute)

SPEECH_FORMATS = {
    "mp3": "mp3",
    "opus": "ogg",
    "aac": "aac",
    "flac": "flac",
    "wav": "wav",
    "pcm": "pcm",
}
"""OpenAI's ``response_format`` → the value of the :class:`StreamEncoding` the worker makes
(``aac``: ``StreamEncoding.AAC``, ADTS)."""
STREAM_FORMATS = ("audio", "sse")
WARNING_HEADER = "X-Voicelane-Warning"
VOICE_HEADER = "X-Voicelane-Voice"
"""The voicelane voice the request speaks as (an OpenAI name mapped, an id as it came)."""
INSTRUCTIONS_IGNORED = (
    "instructions ignored: no engine served here takes style instructions (docs/api.md)"
)


class VoiceRef(BaseModel):
    """OpenAI's voice object: ``{"id": ...}`` (a voicelane voice id or an OpenAI name)."""

    model_config = ConfigDict(extra="ignore")

    id: str


class SpeechRequest(BaseModel):
    """OpenAI's ``POST /v1/audio/speech`` body, and voicelane's extensions."""

    model_config = ConfigDict(extra="ignore")

    input: str = Field(description="The text to speak.")
    voice: str | VoiceRef = Field(
        "auto",
        description="A voicelane voice id, an OpenAI voice name (mapped: GET /v1/audio/voices) "
        'or OpenAI\'s voice object {"id": ...}.',
    )
    response_format: str = Field("mp3", description="mp3, opus, aac, flac, wav or pcm.")
    speed: float | None = Field(None, description="0.25 to 4.0; 1.0 if unset.")
    model: str | None = Field(None, description="Any: the voice picks the engine.")
    instructions: str | None = Field(
        None, description="Not taken by the engines: answered with X-Voicelane-Warning."
    )
    stream_format: str = Field(
        "audio", description="audio (raw bytes as produced) or sse (OpenAI's events)."
    )
    sample_rate_hz: int | None = Field(
        None, description="voicelane extension: output rate (24000, OpenAI's, if unset)."
    )
    pace: bool = Field(
        False,
        description="voicelane extension: true paces synthesis just ahead of playback (a "
        "live player); false (default) renders as fast as the workers can, like a file.",
    )
    normalize: bool = Field(
        True,
        description="voicelane extension: numbers, dates, symbols... read as words (default) "
        "or, false, as written.",
    )
    ssml: bool | None = Field(
        None,
        description="voicelane extension: the input is SSML (true), plain text (false) or, "
        "unset, SSML when it starts with <speak.",
    )
    lexicons: list[str] | None = Field(
        None,
        description="voicelane extension: the tenant's pronunciation lexicons to apply; "
        "unset: its default lexicon; []: none.",
    )
    seed: int | None = Field(
        None,
        description="voicelane extension: the sampling seed (ChatTTS): the same voice, text "
        "and seed give the same audio; unset: a fresh draw.",
    )

    def voice_id(self) -> str:
        return self.voice.id if isinstance(self.voice, VoiceRef) else self.voice


def speech_encoding(response_format: str) -> StreamEncoding:
    """The encoding of OpenAI's ``response_format``; 400 naming the formats otherwise."""
    value = SPEECH_FORMATS.get(response_format.lower())
    if value is None:
        raise InvalidInputError(
            f"response_format {response_format!r} is not supported; use "
            + ", ".join(SPEECH_FORMATS),
            field="response_format",
        )
    return StreamEncoding(value)


def stream_format(value: str) -> str:
    if value.lower() not in STREAM_FORMATS:
        raise InvalidInputError(
            f"stream_format {value!r} is not supported; use audio or sse", field="stream_format"
        )
    return value.lower()


@router.post(
    "/v1/audio/speech",
    summary="OpenAI-compatible speech: audio (or OpenAI's events) streams back as produced",
    response_class=StreamingResponse,
)
async def openai_speech(request: Request, state: State, tenant: Tenant) -> StreamingResponse:
    body = await openai_body(request, SpeechRequest)
    encoding = speech_encoding(body.response_format)
    sse = stream_format(body.stream_format) == "sse"
    voice = await openai_voice(state, body.voice_id())
    ask = StreamAsk(
        voice=voice,
        speed=body.speed,
        sample_rate_hz=body.sample_rate_hz,
        encoding=encoding,
        paced=body.pace,
        front="openai",
        normalize=body.normalize,
        ssml=body.ssml,
        lexicons=None if body.lexicons is None else tuple(body.lexicons),
        seed=body.seed,
        stretch_speed=True,
    )
    stream = await state.streams.synthesize(tenant, body.input, ask, text_field="input")
    headers = {"X-Request-Id": stream.request_id, VOICE_HEADER: voice}
    if body.instructions and body.instructions.strip():
        headers[WARNING_HEADER] = INSTRUCTIONS_IGNORED
    if sse:
        headers["Cache-Control"] = "no-cache"
        return StreamingResponse(
            _relay_events(stream, len(body.input)),
            media_type=openai_sse.MEDIA_TYPE,
            headers=headers,
        )
    return StreamingResponse(_relay_bytes(stream), media_type=encoding.media_type, headers=headers)


async def _relay_bytes(stream: Stream) -> AsyncIterator[bytes]:
    try:
        async with contextlib.aclosing(stream.chunks()) as chunks:
            async for chunk in chunks:
                if chunk.data:
                    yield b"".join(chunk.data)
    finally:
        await stream.close()


async def _relay_events(stream: Stream, input_chars: int) -> AsyncIterator[bytes]:
    """OpenAI's events: a delta per piece, done with the usage; an error event if the stream
    fails after it began."""
    try:
        async with contextlib.aclosing(stream.chunks()) as chunks:
            async for chunk in chunks:
                if chunk.data:
                    yield openai_sse.audio_delta(b"".join(chunk.data))
                if chunk.final:
                    yield openai_sse.audio_done(input_chars, chunk.pts_ms)
    except Exception as error:
        where = f"speech stream {stream.request_id}"
        yield openai_sse.error_event(sse_error(error, where=where))
    finally:
        await stream.close()
