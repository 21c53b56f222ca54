"""OpenAI's speech stream as server-sent events (``stream_format: "sse"``).

OpenAI's schema (``SpeechAudioDeltaEvent`` / ``SpeechAudioDoneEvent``), one ``data:`` line per
event and no ``event:`` line:

* ``{"type": "speech.audio.delta", "audio": BASE64}`` per piece of audio, in the asked
  ``response_format`` (``pcm``: raw 16-bit little-endian mono; a file format: the pieces'
  bytes, decoded and concatenated, are the whole file);
* last, ``{"type": "speech.audio.done", "usage": {"input_tokens", "output_tokens",
  "total_tokens"}}``. voicelane meters characters and audio, not tokens: ``input_tokens`` is
  the input's characters, ``output_tokens`` the audio's 20 ms frames (50 a second, rounded
  up) — :func:`usage`;
* a failure after the stream began: ``{"type": "error", "error": {"message", "type",
  "param", "code"}}`` (:func:`voicelane.api.failures.sse_error`), and the stream ends.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

MEDIA_TYPE = "text/event-stream"
FRAME_MS = 20
"""One output token: 20 ms of audio."""


def event(data: dict[str, Any]) -> bytes:
    """One server-sent event carrying ``data`` as JSON."""
    return b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"


def audio_delta(audio: bytes) -> bytes:
    return event({"type": "speech.audio.delta", "audio": base64.b64encode(audio).decode()})


def usage(input_chars: int, audio_ms: int) -> dict[str, int]:
    """OpenAI's usage of a speech stream, in voicelane's units (module docstring)."""
    output = math.ceil(max(0, audio_ms) / FRAME_MS)
    total = input_chars + output
    return {"input_tokens": input_chars, "output_tokens": output, "total_tokens": total}


def audio_done(input_chars: int, audio_ms: int) -> bytes:
    return event({"type": "speech.audio.done", "usage": usage(input_chars, audio_ms)})


def error_event(error: dict[str, Any]) -> bytes:
    """The failure of a stream that began: ``error`` is the ``{"error": {...}}`` body."""
    return event({"type": "error", **error})
