"""LiveKit's OpenAI plugin (``livekit-plugins-openai``, whichever version the environment has)
against a voicelane server: ``openai.TTS(base_url=.../v1, api_key, model, voice)``'s
``synthesize()``, every frame collected.

Usage: ``livekit_openai_tts.py BASE_URL API_KEY MODEL VOICE [RESPONSE_FORMAT]``. Prints one
JSON line: the package versions, the frames (count, sample rates, channels, seconds), the
ChunkedStream class the plugin chose (1.7.0 picks SSE or raw audio by model name) and the
error, if any (the script itself exits 0 then: the test asserts on the findings).
"""

from __future__ import annotations

import asyncio
import json
import sys
from importlib.metadata import version
from typing import Any

from livekit.agents import utils
from livekit.plugins import openai

TEXT = "The quick brown fox jumps over the lazy dog. Then it runs home."


async def synthesize(base_url: str, api_key: str, model: str, voice: str, fmt: str | None) -> Any:
    kwargs: dict[str, Any] = {"base_url": base_url, "api_key": api_key, "model": model}
    kwargs["voice"] = voice
    if fmt:
        kwargs["response_format"] = fmt
    findings: dict[str, Any] = {
        "agents": version("livekit-agents"),
        "plugin": version("livekit-plugins-openai"),
        "model": model,
        "frames": 0,
        "sample_rates": [],
        "channels": [],
        "duration_s": 0.0,
        "error": None,
    }
    async with utils.http_context.open():
        tts = openai.TTS(**kwargs)
        try:
            stream = tts.synthesize(TEXT)
            findings["stream_class"] = type(stream).__name__
            async with stream:
                async for audio in stream:
                    frame = audio.frame
                    findings["frames"] += 1
                    findings["duration_s"] += frame.samples_per_channel / frame.sample_rate
                    if frame.sample_rate not in findings["sample_rates"]:
                        findings["sample_rates"].append(frame.sample_rate)
                    if frame.num_channels not in findings["channels"]:
                        findings["channels"].append(frame.num_channels)
        except Exception as e:  # the test reads it
            findings["error"] = f"{type(e).__name__}: {e}"
        finally:
            await tts.aclose()
    return findings


def main() -> None:
    base_url, api_key, model, voice = sys.argv[1:5]
    fmt = sys.argv[5] if len(sys.argv) > 5 else None
    findings = asyncio.run(synthesize(base_url, api_key, model, voice, fmt))
    print(json.dumps(findings))


if __name__ == "__main__":
    main()
