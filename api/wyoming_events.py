"""Wyoming's events ↔ the gateway's terms: what ``describe`` answers, which voice a
``synthesize`` names, an error as an ``error`` event, and a stream's PCM as ``audio-chunk``
events of a fixed size.

Pure mapping (no sockets, no Redis): :mod:`voicelane.api.wyoming_session` drives it.

- **Info**: one TTS program, ``voicelane``, listing every served engine's published voices
  by their qualified ids (``piper:en_US-joe-medium``, ``espeak:cmn``: unambiguous whatever the
  engine order), each with its languages; ``supports_synthesize_streaming``.
- **Voice**: ``voice.name`` is any voice the gateway resolves (a listed id, a bare engine id,
  ``auto``, the tenant's own voices and mixes); ``voice.speaker`` picks a seed speaker
  (``42`` or ``seed:42``) of an engine that draws speakers from seeds (ChatTTS), anything
  else is refused; ``voice.language`` alone picks the first listed voice of that language;
  none: ``auto``.
- **Audio**: raw PCM, 16-bit little-endian mono, at the rate ``audio-start`` states; chunks of
  ``samples_per_chunk`` samples (the last of a cycle shorter).
"""

from __future__ import annotations

from collections.abc import Sequence

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Attribution, Info, TtsProgram, TtsVoice
from wyoming.tts import SynthesizeTextFormat, SynthesizeVoice

from voicelane.common.errors import InvalidInputError, UnknownVoiceError, VoicelaneError
from voicelane.core.engines import qualified, split_voice
from voicelane.core.rules import SEED_VOICE_PREFIX, EngineCapabilities, shown

PROGRAM_NAME = "voicelane"
ATTRIBUTION = Attribution(name="voicelane", url="")
"""No public address to point at: a self-hosted service."""
SAMPLE_WIDTH_BYTES = 2
"""16-bit samples (the lane's PCM encoding)."""
CHANNELS = 1


def tts_info(engines: Sequence[EngineCapabilities], *, version: str | None = None) -> Info:
    """``describe``'s answer: every served engine's voices (in the engines' order)."""
    voices = [
        TtsVoice(
            name=qualified(caps.engine, voice.id),
            attribution=ATTRIBUTION,
            installed=True,
            description=voice.name or voice.id,
            version=None,
            languages=list(voice.languages),
        )
        for caps in engines
        for voice in caps.voices
    ]
    served = ", ".join(caps.engine for caps in engines) or "none published yet"
    program = TtsProgram(
        name=PROGRAM_NAME,
        attribution=ATTRIBUTION,
        installed=True,
        description=f"voicelane speech ({served})",
        version=version,
        voices=voices,
        supports_synthesize_streaming=True,
    )
    return Info(tts=[program])


def requested_voice(
    voice: SynthesizeVoice | None, engines: Sequence[EngineCapabilities]
) -> str | None:
    """The gateway's ``voice`` for a Wyoming voice (module docstring); None: ``auto``."""
    if voice is None:
        return None
    if voice.name:
        if not voice.speaker:
            return voice.name
        return _seed_speaker(voice.name, voice.speaker, engines)
    if voice.language:
        wanted = _language(voice.language)
        for caps in engines:
            for info in caps.voices:
                if any(_language(code) == wanted for code in info.languages):
                    return qualified(caps.engine, info.id)
        for caps in engines:  # "en" for "en-us", "en_GB"...
            for info in caps.voices:
                if any(_language(code).split("-")[0] == wanted for code in info.languages):
                    return qualified(caps.engine, info.id)
        raise UnknownVoiceError(
            f"voice.language {shown(voice.language)}: no voice served here speaks it",
            field="voice",
        )
    return None


def _language(code: str) -> str:
    return code.strip().lower().replace("_", "-")


def _seed_speaker(name: str, speaker: str, engines: Sequence[EngineCapabilities]) -> str:
    """``name`` with ``speaker`` as a seed voice of its engine (which must draw from seeds)."""
    engine, local = split_voice(name)
    if engine is None:
        engine = next((c.engine for c in engines if local in c.voice_ids), None)
    caps = next((c for c in engines if c.engine == engine), None)
    seed = speaker.removeprefix(SEED_VOICE_PREFIX)
    if caps is None or not caps.seed_voices or not seed.isdigit():
        raise UnknownVoiceError(
            f"voice.speaker {shown(speaker)}: voice {shown(name)} has no speakers "
            "(engines that draw speakers from seeds take a number)",
            field="voice",
        )
    return qualified(caps.engine, f"{SEED_VOICE_PREFIX}{int(seed)}")


def wants_ssml(text_format: str | SynthesizeTextFormat | None) -> bool | None:
    """``text_format``: ``ssml`` → True, ``text`` → False, none → None (SSML when the text
    starts with ``<speak``); anything else is refused."""
    if text_format is None:
        return None
    value = text_format.value if isinstance(text_format, SynthesizeTextFormat) else text_format
    if value == SynthesizeTextFormat.SSML.value:
        return True
    if value == SynthesizeTextFormat.TEXT.value:
        return False
    raise InvalidInputError(
        f"text_format {shown(str(value))} is not supported (text or ssml)", field="text_format"
    )


def error_event(error: VoicelaneError) -> Event:
    """The ``error`` event of a refusal or failure: its message and its code
    (``unknown_voice``, ``no_capacity``... as on every front)."""
    return Error(text=error.message, code=error.code).event()


class PcmFramer:
    """A stream's PCM bytes → ``audio-chunk`` events of ``samples_per_chunk`` samples each
    (what is left waits for more, or for :meth:`flush` at the end of a cycle)."""

    def __init__(self, rate_hz: int, samples_per_chunk: int) -> None:
        self.rate_hz = rate_hz
        self._chunk_bytes = samples_per_chunk * SAMPLE_WIDTH_BYTES * CHANNELS
        self._pending = b""
        self.bytes_out = 0

    def start(self) -> Event:
        return AudioStart(rate=self.rate_hz, width=SAMPLE_WIDTH_BYTES, channels=CHANNELS).event()

    def stop(self) -> Event:
        return AudioStop().event()

    def feed(self, data: bytes) -> list[Event]:
        """Whole chunks of what has arrived so far."""
        pending = self._pending + data
        whole = len(pending) - len(pending) % self._chunk_bytes
        self._pending = pending[whole:]
        return [
            self._chunk(pending[i : i + self._chunk_bytes])
            for i in range(0, whole, self._chunk_bytes)
        ]

    def flush(self) -> list[Event]:
        """The rest, whole samples only (a stray odd byte cannot be a sample)."""
        usable = len(self._pending) - len(self._pending) % (SAMPLE_WIDTH_BYTES * CHANNELS)
        rest, self._pending = self._pending[:usable], b""
        return [self._chunk(rest)] if rest else []

    def _chunk(self, audio: bytes) -> Event:
        self.bytes_out += len(audio)
        return AudioChunk(
            rate=self.rate_hz, width=SAMPLE_WIDTH_BYTES, channels=CHANNELS, audio=audio
        ).event()
