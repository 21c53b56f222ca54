"""Pipecat 1.14's own OpenAI TTS service (pipecat.services.openai.tts.OpenAITTSService) in a
real pipeline against a running server's ``/v1/audio/speech``: an utterance with OpenAI's
voice ``marin`` (audio frames), a request the server refuses (speed 10: OpenAI allows 0.25 to
4) and whether it became an ErrorFrame or escaped as an exception, the next utterance, and
the openai SDK's own error for an unknown voice.

Usage: pipecat_openai.py BASE_URL API_KEY. Prints one JSON line of findings last.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import openai
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSStoppedFrame,
    TTSUpdateSettingsFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.openai.tts import OpenAITTSService
from pipecat.workers.runner import WorkerRunner
from pipecat_frames import STEP_TIMEOUT_S, Seen, Tap

VOICE = "marin"


async def speak(worker: PipelineWorker, seen: Seen, text: str) -> dict[str, Any]:
    """Speak ``text``; what came down (until its TTSStoppedFrame) and up (errors)."""
    mark_down, mark_up = len(seen.down), len(seen.up)
    await worker.queue_frame(TTSSpeakFrame(text))

    def stopped() -> TTSStoppedFrame | None:
        return next((f for _, f in seen.down[mark_down:] if isinstance(f, TTSStoppedFrame)), None)

    await seen.until(f"the TTSStoppedFrame of {text!r}", stopped)
    frames = [f for _, f in seen.down[mark_down:] if isinstance(f, TTSAudioRawFrame)]
    return {
        "audio_frames": len(frames),
        "audio_s": sum(len(f.audio) // 2 / f.sample_rate for f in frames),
        "frame_sample_rates_hz": sorted({f.sample_rate for f in frames}),
        "errors": [f.error for _, f in seen.up[mark_up:] if isinstance(f, ErrorFrame)],
    }


async def raw_bad_voice(base_url: str, api_key: str) -> dict[str, Any]:
    """The openai SDK itself asking for a voice that does not exist."""
    client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key=api_key, max_retries=0)
    try:
        await client.audio.speech.create(model="tts-1", voice="no-such-voice", input="Hello.")
    except openai.APIStatusError as e:
        try:
            body = e.response.json()
        except ValueError:
            body = e.response.text
        return {"exception": type(e).__name__, "status": e.status_code, "body": body}
    finally:
        await client.close()
    return {"exception": None}


async def main(base_url: str, api_key: str) -> dict[str, Any]:
    seen = Seen()
    service = OpenAITTSService(
        base_url=f"{base_url}/v1", api_key=api_key, settings=OpenAITTSService.Settings(voice=VOICE)
    )
    pipeline = Pipeline(
        [Tap(seen, FrameDirection.UPSTREAM), service, Tap(seen, FrameDirection.DOWNSTREAM)]
    )
    worker = PipelineWorker(
        pipeline, params=PipelineParams(audio_out_sample_rate=24000), cancel_on_idle_timeout=False
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _on_started(_worker: PipelineWorker, _frame: Frame) -> None:
        started.set()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    findings: dict[str, Any] = {}
    try:
        async with asyncio.timeout(STEP_TIMEOUT_S):
            await started.wait()
        findings["spoken"] = {
            "voice": VOICE,
            **await speak(worker, seen, "Hello from Pipecat's OpenAI service, speaking as marin."),
        }
        settings = OpenAITTSService.Settings
        await worker.queue_frame(TTSUpdateSettingsFrame(delta=settings(speed=10.0)))
        findings["refused"] = await speak(worker, seen, "This speed is out of range.")
        await worker.queue_frame(TTSUpdateSettingsFrame(delta=settings(speed=1.0)))
        findings["after_refused"] = await speak(worker, seen, "And this one is fine again.")
        findings["raw_bad_voice"] = await raw_bad_voice(base_url, api_key)
        await worker.queue_frame(EndFrame())
        async with asyncio.timeout(STEP_TIMEOUT_S):
            await running
    except BaseException:
        print(json.dumps(findings, default=str), file=sys.stderr)
        raise
    finally:
        if not running.done():
            await worker.cancel()
            await asyncio.wait_for(running, STEP_TIMEOUT_S)
    return findings


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))))
