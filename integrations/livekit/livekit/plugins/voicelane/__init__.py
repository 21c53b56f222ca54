"""voicelane plugin for LiveKit Agents: a streaming TTS with word-aligned transcripts over
voicelane's agent protocol (``GET /v1/agent``, one context per segment)."""

from livekit.agents import Plugin

from .log import logger
from .tts import TTS, ChunkedStream, SynthesizeStream
from .version import __version__

__all__ = ["TTS", "ChunkedStream", "SynthesizeStream", "__version__"]


class VoicelanePlugin(Plugin):
    def __init__(self) -> None:
        super().__init__(__name__, __version__, __package__ or __name__, logger)


Plugin.register_plugin(VoicelanePlugin())
