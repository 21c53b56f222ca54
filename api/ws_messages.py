"""A stream's chunks as the WebSocket's JSON messages (``GET /v1/stream``; ``docs/api.md``).

Per chunk with audio, :func:`audio_message` (followed by its packets, one binary message
each); at the end, :func:`end_message`. Both carry what rode on the chunk besides audio:
captions, word timings and SSML marks, in the gRPC ``AudioChunk``'s shapes
(``docs/grpc.md``), so a client reads them the same way on either wire.
"""

from __future__ import annotations

from typing import Any

from voicelane.api.streams import StreamChunk


def _extras(chunk: StreamChunk | None) -> dict[str, Any]:
    if chunk is None:
        return {"captions": [], "words": [], "marks": []}
    return {
        "captions": [
            {"text": c.text, "start": c.start, "end": c.end, "pts_ms": c.pts_ms,
             "sentence": c.sentence}
            for c in chunk.captions
        ],
        "words": [w.to_json() for w in chunk.words],
        "marks": [m.to_json() for m in chunk.marks],
    }  # fmt: skip


def audio_message(chunk: StreamChunk) -> dict[str, Any]:
    """The JSON header of a chunk: ``packets`` binary messages follow it."""
    return {
        "type": "audio",
        "seq": chunk.seq,
        "pts_ms": chunk.pts_ms,
        "packets": len(chunk.data),
        "sample_rate_hz": chunk.sample_rate_hz,
        "server_ts_ms": chunk.server_ts_ms,
        "client_ts_ms": chunk.client_ts_ms,
        **_extras(chunk),
    }


def end_message(chunk: StreamChunk) -> dict[str, Any]:
    """The last message of a stream, from its final chunk, with what rode on it that no
    audio message carried: a caption, words or marks written just before the end (SSML marks
    after the last word). A final chunk with packets goes out as an audio message first,
    which carries them; the end's lists are then empty."""
    return {
        "type": "end",
        "seq": chunk.seq,
        "pts_ms": chunk.pts_ms,
        **_extras(None if chunk.data else chunk),
    }
