"""voicelane's Python client SDK; the long form, with the reasons, is ``docs/client.md``.

It is its own distribution (``pip install ./client``: ``voicelane-client``) and needs none of
the server's dependencies: only ``voicelane.common`` (errors, audio, atomic writes, the
generated wire code, shipped beside it), grpc, protobuf, numpy, opuslib, PyAV and httpx.

The real-time lane (gRPC ``voicelane.v1.Speech``), asyncio only::

    async with SpeechClient("localhost:50051", api_key) as client:
        async for chunk in client.synthesize("Hello there."):
            play(chunk.opus_packets)
        result = await client.synthesize_to_file("Hello there.", "hello.wav")

* **Channel pool** (``voicelane.client.pool``) — ``channels`` gRPC channels, each its own HTTP/2
  connection (``grpc.use_local_subchannel_pool``), at most ``streams_per_channel`` streams
  each. A new stream takes the least-loaded channel; when all are full the caller waits for a
  slot (flow control, never an error). Unary calls (``ListVoices``) take the least-loaded
  channel without a slot.
* **Retry** (``voicelane.client.retry``) — ``UNAVAILABLE`` before the first chunk: the call is made
  again (as a new request) with exponential backoff and jitter (:class:`RetryPolicy`).
* **Resume** (``voicelane.client.synthesis``) — ``UNAVAILABLE`` (a dropped connection surfaces as that
  too) or a stream that ends without its final chunk, after the first chunk: ``Synthesize``
  is called again with the stream's ``request_id`` and ``resume_after_seq`` = the last seq
  received; chunks at or below it are dropped, so no seq is ever yielded twice. ``NOT_FOUND``
  (output expired) ends it. The attempt budget counts attempts in a row that brought no new
  chunk.
* **Converse** (``voicelane.client.converse``) is never resumed (the wire has no resume for it and its
  input is not replayable); ``UNAVAILABLE`` before the first chunk is retried only while no
  text was sent.
* **Errors** — every gRPC failure that is not retried, or whose retries ran out, is a
  :class:`RemoteError` with the status name in ``.status`` and what the server said besides:
  its error code in ``.code``, the field at fault in ``.field``, the retry hint in
  ``.retry_after_s`` (``voicelane.client.failure``).
* **Figures** (``voicelane.client.stats``) — :class:`StreamStats` on every stream.
* **Clock** (``voicelane.client.clock``) — ``await client.sync_clock()``: the server's clock offset
  (NTP-style, shortest round trip of a few ``Clock`` calls) with an error bound;
  ``stats.local_time_ms(pts_ms)`` puts a chunk on the client's wall clock.
* **Decoding** (``voicelane.client.audio``) — PCM with the codec delay trimmed and pts gaps concealed;
  files written atomically. :func:`say_to_file` (``voicelane.client.sync``) does it all from
  blocking code.

The batch lane (REST ``/v1/jobs``): :class:`JobsClient` (``voicelane.client.jobs``), blocking, httpx.

What this package exports is the public API; the modules behind it are its implementation.
"""

from voicelane.client.audio import SynthesisResult
from voicelane.client.chat import ChatResult
from voicelane.client.clock import (
    ClockEstimate,
    ClockSync,
    MappedTime,
    StreamTimeline,
    measure_clock,
    measure_clock_sync,
)
from voicelane.client.converse import ConverseSession
from voicelane.client.jobs import JobsClient
from voicelane.client.retry import RetryPolicy
from voicelane.client.speech import SpeechClient, VoiceInfo
from voicelane.client.stats import StreamStats
from voicelane.client.sync import chat_to_file, say_to_file, sync_clock
from voicelane.client.synthesis import SynthesisStream
from voicelane.common.errors import RemoteError
from voicelane.common.defaults import DEFAULT_SAMPLE_RATE_HZ

__all__ = [
    "DEFAULT_SAMPLE_RATE_HZ",
    "ChatResult",
    "ClockEstimate",
    "ClockSync",
    "ConverseSession",
    "JobsClient",
    "MappedTime",
    "RemoteError",
    "RetryPolicy",
    "SpeechClient",
    "StreamStats",
    "StreamTimeline",
    "SynthesisResult",
    "SynthesisStream",
    "VoiceInfo",
    "chat_to_file",
    "measure_clock",
    "measure_clock_sync",
    "say_to_file",
    "sync_clock",
]
