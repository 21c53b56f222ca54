"""Our Pipecat service (voicelane_pipecat.VoicelaneTTSService) in a real Pipecat 1.14 pipeline
against a running server: an LLM turn streamed as tokens (frames, PCM at the pipeline's rate,
word timestamps), an interruption while a long utterance's audio flows (how soon its audio
stops in the pipeline, the server's cancel acknowledgement, nothing of it after), the next
utterance on the same connection, a context the server refuses (an unknown voice) as an
ErrorFrame; then a pipeline at a rate the server does not offer (22050 Hz: resampled), one
with a wrong key, and the LLM turn again with tokens streamed as they come (TOKEN mode).

Usage: pipecat_voicelane.py BASE_URL API_KEY [VOICE]. Prints one JSON line of findings last.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSStoppedFrame,
    TTSTextFrame,
    TTSUpdateSettingsFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.tts_service import TextAggregationMode
from pipecat.workers.runner import WorkerRunner
from pipecat_frames import STEP_TIMEOUT_S, Seen, Tap
from voicelane_pipecat import VoicelaneTTSService, agent_url

SAMPLE_RATE_HZ = 16000  # not the server's default (24000): the pipeline's rate is asked for
UNOFFERED_RATE_HZ = 22050  # not offered by the server: 24000 is asked for and resampled

TURN = (
    "Hello from Pipecat. The quick brown fox jumps over the lazy dog, "
    "and every word arrives with its time."
)
LONG = " ".join(
    [
        "This is a long answer that keeps going for a while, so that it can be interrupted"
        " somewhere in the middle of its first sentence, long before it reaches the end of"
        " that sentence or any of the sentences that come after it.",
        "It talks about rivers and mountains and the weather in the valley.",
        "It lists the seasons one by one, spring and summer and autumn and winter.",
        "It describes the trains that run along the coast from town to town every morning.",
        "It says a few more things about the sea, the boats, and the people who sail them.",
        "And then it goes on to describe the markets, the bakeries and the small cafes.",
        "Finally it would end with a summary, if anyone were still listening by then.",
    ]
)
AFTER = "Back again after the interruption."
INTERRUPT_AFTER_AUDIO_S = 2.5  # into the first sentence, while its audio arrives paced


class RecordingService(VoicelaneTTSService):
    """The service, recording what crosses the wire (with arrival times) and the word
    timestamps it hands to Pipecat."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sent: list[tuple[float, dict[str, Any]]] = []
        self.received: list[tuple[float, dict[str, Any]]] = []
        self.word_times: list[tuple[str, float, str | None]] = []
        self.cancelled_ids: list[str] = []
        self.cancel_acked = asyncio.Event()

        @self.event_handler("on_context_cancelled")
        async def _on_cancelled(_service: VoicelaneTTSService, context_id: str) -> None:
            self.cancelled_ids.append(context_id)
            self.cancel_acked.set()

    async def _send(self, message: dict[str, Any]) -> None:
        self.sent.append((time.monotonic(), message))
        await super()._send(message)

    async def _handle_message(self, message: dict[str, Any]) -> None:
        self.received.append((time.monotonic(), message))
        await super()._handle_message(message)

    async def add_word_timestamps(
        self, word_times: list[tuple[str, float]], context_id: str | None = None, **kwargs: Any
    ) -> None:
        self.word_times.extend((word, at, context_id) for word, at in word_times)
        await super().add_word_timestamps(word_times, context_id, **kwargs)


def audio_of(
    seen: Seen, context_id: str | None = None, start: int = 0, end: int | None = None
) -> list[tuple[float, TTSAudioRawFrame]]:
    """The audio frames that reached the end of the pipeline (of one context; from index
    ``start`` to ``end`` of what arrived there)."""
    return [
        (at, f)
        for at, f in seen.down[start:end]
        if isinstance(f, TTSAudioRawFrame) and (context_id is None or f.context_id == context_id)
    ]


def stopped(seen: Seen, after: int) -> TTSStoppedFrame | None:
    """The first TTSStoppedFrame among the frames from index ``after`` on."""
    return next((f for _, f in seen.down[after:] if isinstance(f, TTSStoppedFrame)), None)


def received(service: RecordingService, kind: str, context_id: str | None) -> dict[str, Any]:
    """The first message of a kind the server sent for a context ({} if none)."""
    return next(
        (m for _, m in service.received if m["type"] == kind and m["context_id"] == context_id),
        {},
    )


def duration_s(frames: list[tuple[float, TTSAudioRawFrame]]) -> float:
    return sum(len(f.audio) // 2 / f.sample_rate for _, f in frames)


async def llm_turn(worker: PipelineWorker, seen: Seen, service: RecordingService) -> dict[str, Any]:
    """An LLM reply streamed a few characters at a time, then its end."""
    mark = len(seen.down)
    await worker.queue_frame(LLMFullResponseStartFrame())
    for start in range(0, len(TURN), 7):
        await worker.queue_frame(LLMTextFrame(TURN[start : start + 7]))
    await worker.queue_frame(LLMFullResponseEndFrame())
    stop = await seen.until("the turn's TTSStoppedFrame", lambda: stopped(seen, mark))
    context_id = stop.context_id
    frames = audio_of(seen, context_id)
    texts = [f for _, f in seen.down[mark:] if isinstance(f, TTSTextFrame)]
    appended = "".join(
        m["text"] for _, m in service.sent if m.get("context_id") == context_id and "text" in m
    )
    wire_words = [
        w
        for _, m in service.received
        if m.get("type") == "words" and m.get("context_id") == context_id
        for w in m["words"]
    ]
    word_starts = [at for _, at, ctx in service.word_times if ctx == context_id]
    started = received(service, "started", context_id)
    done = received(service, "done", context_id)
    pts = [f.pts for f in texts if f.pts]
    return {
        "context_id": context_id,
        "appended_text": appended,
        "audio_frames": len(frames),
        "audio_s": duration_s(frames),
        "frame_sample_rates_hz": sorted({f.sample_rate for _, f in frames}),
        "frame_channels": sorted({f.num_channels for _, f in frames}),
        "started_sample_rate_hz": started.get("sample_rate_hz"),
        "done_duration_ms": done.get("duration_ms"),
        "wire_words": wire_words,
        "wire_word_slices_match": all(
            appended[w["char_start"] : w["char_end"]] == w["text"] for w in wire_words
        ),
        "word_starts_s": word_starts,
        "text_frames": [f.text for f in texts],
        "text_frame_pts_increasing": all(b >= a for a, b in itertools.pairwise(pts)),
        "text_frames_with_pts": len(pts),
    }


async def interruption(
    worker: PipelineWorker, seen: Seen, service: RecordingService
) -> dict[str, Any]:
    """A long utterance interrupted once its audio flows; then a short one."""
    mark = len(seen.down)
    await worker.queue_frame(TTSSpeakFrame(LONG))

    def flowing() -> str | None:
        frames = audio_of(seen, start=mark)
        if frames and duration_s(frames) >= INTERRUPT_AFTER_AUDIO_S:
            return frames[0][1].context_id
        return None

    context_id = await seen.until("the long utterance's audio", flowing)
    before = duration_s(audio_of(seen, context_id))
    interrupted_at = time.monotonic()
    await worker.queue_frame(InterruptionFrame())
    async with asyncio.timeout(STEP_TIMEOUT_S):
        await service.cancel_acked.wait()
    cancel_sent = next(
        (at for at, m in service.sent if m == {"type": "cancel", "context_id": context_id}), None
    )
    cancelled_at = next(
        (
            at
            for at, m in service.received
            if m["type"] == "cancelled" and m["context_id"] == context_id
        ),
        None,
    )
    # The next utterance on the same connection: everything of the interrupted context that
    # was still on its way has arrived by the time this one is done.
    mark_after = len(seen.down)
    await worker.queue_frame(TTSSpeakFrame(AFTER))
    after_stop = await seen.until("the next utterance", lambda: stopped(seen, mark_after))
    frames = audio_of(seen, context_id)
    last_audio_at = max(at for at, _ in frames)
    wire_after_cancelled = [
        m
        for at, m in service.received
        if m.get("context_id") == context_id
        and cancelled_at is not None
        and at > cancelled_at
        and m["type"] in ("audio", "words", "done")
    ]
    wire_audio_after_cancel_sent = [
        m
        for at, m in service.received
        if m.get("context_id") == context_id
        and m["type"] == "audio"
        and cancel_sent is not None
        and at > cancel_sent
    ]
    wire_audio = [
        at
        for at, m in service.received
        if m.get("context_id") == context_id and m["type"] == "audio" and at <= interrupted_at
    ]
    # Where it was cut: the words whose audio had begun, and the rest of their sentence.
    heard = [
        w
        for _, m in service.received
        if m.get("type") == "words" and m.get("context_id") == context_id
        for w in m["words"]
        if w["start_ms"] < before * 1000
    ]
    heard_end = heard[-1]["char_end"] if heard else 0
    sentence_end = LONG.find(".", heard_end)
    return {
        "context_id": context_id,
        "heard_text": LONG[:heard_end],
        "unheard_rest_of_sentence": LONG[heard_end : sentence_end + 1],
        "wire_audio_before_interrupt": len(wire_audio),
        "wire_audio_span_before_interrupt_ms": (wire_audio[-1] - wire_audio[0]) * 1000,
        "last_wire_audio_before_interrupt_ms": (interrupted_at - wire_audio[-1]) * 1000,
        "text_s_estimate": len(LONG) / 15,
        "audio_s_before_interrupt": before,
        "audio_s_total": duration_s(frames),
        "frames_after_interrupt": sum(1 for at, _ in frames if at > interrupted_at),
        "last_audio_after_interrupt_ms": (last_audio_at - interrupted_at) * 1000,
        "cancel_sent": cancel_sent is not None,
        "on_context_cancelled": service.cancelled_ids,
        "cancel_sent_after_interrupt_ms": (
            (cancel_sent - interrupted_at) * 1000 if cancel_sent is not None else None
        ),
        "cancel_ack_ms": (
            (cancelled_at - cancel_sent) * 1000
            if cancel_sent is not None and cancelled_at is not None
            else None
        ),
        "wire_messages_after_cancelled": len(wire_after_cancelled),
        "wire_audio_after_cancel_sent": len(wire_audio_after_cancel_sent),
        "done_of_interrupted": any(
            m["type"] == "done" and m.get("context_id") == context_id for _, m in service.received
        ),
        "next_context_id": after_stop.context_id,
        "next_audio_s": duration_s(audio_of(seen, after_stop.context_id)),
    }


async def refused_voice(
    worker: PipelineWorker, seen: Seen, service: RecordingService, voice: str | None
) -> dict[str, Any]:
    """An unknown voice for a turn of three sentences: the server refuses the context;
    Pipecat gets one ErrorFrame for the turn (the rest of the turn is not sent), the service
    stays usable, and with the voice set back the next utterance is spoken."""
    mark_up = len(seen.up)
    mark = len(seen.down)
    settings = VoicelaneTTSService.Settings
    await worker.queue_frame(TTSUpdateSettingsFrame(delta=settings(voice="no-such-voice")))
    await worker.queue_frame(LLMFullResponseStartFrame())
    for sentence in ("This voice does not exist. ", "Nor does this one. ", "Nor this one."):
        await worker.queue_frame(LLMTextFrame(sentence))
    await worker.queue_frame(LLMFullResponseEndFrame())

    def turn_over() -> bool:
        ended = any(isinstance(f, LLMFullResponseEndFrame) for _, f in seen.down[mark:])
        return ended and any(isinstance(f, ErrorFrame) for _, f in seen.up[mark_up:])

    await seen.until("the refused turn's end and its ErrorFrame", turn_over)
    await worker.queue_frame(TTSUpdateSettingsFrame(delta=settings(voice=voice)))
    mark_next = len(seen.down)
    await worker.queue_frame(TTSSpeakFrame("And this one does."))

    def spoken() -> TTSStoppedFrame | None:
        return next(
            (
                f
                for _, f in seen.down[mark_next:]
                if isinstance(f, TTSStoppedFrame) and audio_of(seen, f.context_id, mark_next)
            ),
            None,
        )

    stop = await seen.until("the utterance after the error", spoken)
    errors = [f.error for _, f in seen.up[mark_up:] if isinstance(f, ErrorFrame)]
    appends = [m for _, m in service.sent[-20:] if m["type"] == "append"]
    return {
        "errors": errors,
        "voicelane_errors": [e for e in errors if e.startswith("voicelane:")],
        "refused_appends": sum(1 for m in appends if m.get("voice") == "no-such-voice"),
        "usable": service.is_usable,
        "audio_of_refused": duration_s(audio_of(seen, start=mark, end=mark_next)),
        "audio_s_after": duration_s(audio_of(seen, stop.context_id)),
    }


async def overlapping(
    worker: PipelineWorker, seen: Seen, service: RecordingService
) -> dict[str, Any]:
    """Two utterances queued back to back: two contexts open at once on the one socket (the
    second sent before the first is done); Pipecat plays them one after the other, whole."""
    mark = len(seen.down)
    texts = ("The first of two utterances, said in full.", "And the second one, after it.")
    for text in texts:
        await worker.queue_frame(TTSSpeakFrame(text))

    def both_stopped() -> list[str] | None:
        ids = [f.context_id for _, f in seen.down[mark:] if isinstance(f, TTSStoppedFrame)]
        return ids if len(ids) >= 2 else None

    first, second = (await seen.until("both utterances", both_stopped))[:2]
    order = [f.context_id for _, f in audio_of(seen, start=mark)]
    first_done_at = next(
        at for at, m in service.received if m["type"] == "done" and m["context_id"] == first
    )
    second_started_at = next(
        at for at, m in service.received if m["type"] == "started" and m["context_id"] == second
    )
    return {
        "context_ids": [first, second],
        "second_started_before_first_done": second_started_at < first_done_at,
        "played_in_order": order == sorted(order, key=lambda c: c != first),
        "audio_s": [duration_s(audio_of(seen, c, mark)) for c in (first, second)],
        "done_duration_ms": [
            received(service, "done", c).get("duration_ms") for c in (first, second)
        ],
    }


Steps = Callable[[PipelineWorker, Seen, RecordingService], Awaitable[None]]


async def in_pipeline(
    base_url: str,
    api_key: str,
    voice: str | None,
    rate_hz: int,
    steps: Steps,
    **options: Any,
) -> RecordingService:
    """Run ``steps`` in a pipeline [tap, our service, tap] at output rate ``rate_hz``, then
    end it (EndFrame) and wait until it has."""
    seen = Seen()
    service = RecordingService(url=base_url, api_key=api_key, voice=voice, **options)
    pipeline = Pipeline(
        [Tap(seen, FrameDirection.UPSTREAM), service, Tap(seen, FrameDirection.DOWNSTREAM)]
    )
    worker = PipelineWorker(
        pipeline, params=PipelineParams(audio_out_sample_rate=rate_hz), cancel_on_idle_timeout=False
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _on_started(_worker: PipelineWorker, _frame: Frame) -> None:
        started.set()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    try:
        async with asyncio.timeout(STEP_TIMEOUT_S):
            await started.wait()
        await steps(worker, seen, service)
        await worker.queue_frame(EndFrame())
        async with asyncio.timeout(STEP_TIMEOUT_S):
            await running
    finally:
        if not running.done():
            await worker.cancel()
            await asyncio.wait_for(running, STEP_TIMEOUT_S)
    return service


async def main(base_url: str, api_key: str, voice: str | None) -> dict[str, Any]:
    findings: dict[str, Any] = {
        "pipecat_sample_rate_hz": SAMPLE_RATE_HZ,
        "agent_urls": {
            url: agent_url(url)
            for url in (
                "http://h:8000",
                "https://h/v1/",
                "ws://h:8000/v1/agent",
                "http://h/prefix?x=1",
            )
        },
    }

    async def conversation(worker: PipelineWorker, seen: Seen, service: RecordingService) -> None:
        findings["max_contexts"] = service.max_contexts
        findings["turn"] = await llm_turn(worker, seen, service)
        findings["interruption"] = await interruption(worker, seen, service)
        findings["overlapping"] = await overlapping(worker, seen, service)
        findings["refused_voice"] = await refused_voice(worker, seen, service, voice)
        findings["errors_before_end"] = [f.error for _, f in seen.up if isinstance(f, ErrorFrame)]

    async def resampled(worker: PipelineWorker, seen: Seen, service: RecordingService) -> None:
        await worker.queue_frame(TTSSpeakFrame(AFTER))
        stop = await seen.until("the utterance", lambda: stopped(seen, 0))
        frames = audio_of(seen, stop.context_id)
        findings["resampled"] = {
            "pipeline_rate_hz": UNOFFERED_RATE_HZ,
            "started_sample_rate_hz": received(service, "started", stop.context_id).get(
                "sample_rate_hz"
            ),
            "frame_sample_rates_hz": sorted({f.sample_rate for _, f in frames}),
            "audio_s": duration_s(frames),
            "done_duration_ms": received(service, "done", stop.context_id).get("duration_ms"),
        }

    async def tokens(worker: PipelineWorker, seen: Seen, service: RecordingService) -> None:
        findings["token_turn"] = await llm_turn(worker, seen, service)

    async def wrong_key(worker: PipelineWorker, seen: Seen, service: RecordingService) -> None:
        await worker.queue_frame(TTSSpeakFrame(AFTER))

        def errors() -> list[str]:
            return [f.error for _, f in seen.up if isinstance(f, ErrorFrame)]

        findings["wrong_key"] = {
            "errors": await seen.until("an ErrorFrame", errors),
            "usable": service.is_usable,
            "audio_frames": len(audio_of(seen)),
        }

    try:
        await in_pipeline(base_url, api_key, voice, SAMPLE_RATE_HZ, conversation)
        await in_pipeline(base_url, api_key, voice, UNOFFERED_RATE_HZ, resampled)
        await in_pipeline(base_url, "not-a-key", voice, SAMPLE_RATE_HZ, wrong_key)
        await in_pipeline(
            base_url,
            api_key,
            voice,
            SAMPLE_RATE_HZ,
            tokens,
            text_aggregation_mode=TextAggregationMode.TOKEN,
        )
    except BaseException:
        print(json.dumps(findings, default=str), file=sys.stderr)
        raise
    return findings


if __name__ == "__main__":
    url, key = sys.argv[1], sys.argv[2]
    chosen = sys.argv[3] if len(sys.argv) > 3 else None
    print(json.dumps(asyncio.run(main(url, key, chosen))))
