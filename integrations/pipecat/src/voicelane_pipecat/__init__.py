"""voicelane for Pipecat: :class:`VoicelaneTTSService`, a WebSocket TTS service over
voicelane's agent streaming protocol (``/v1/agent``) with word timestamps and interruption."""

from voicelane_pipecat.tts import VoicelaneTTSService, VoicelaneTTSSettings, agent_url

__all__ = ["VoicelaneTTSService", "VoicelaneTTSSettings", "agent_url"]
