"""The request rules: one set of checks for every way in, from the engine's capabilities.

REST jobs, gRPC streams, the WebSocket stream, OpenAI's speech route and the embedded CLI
all check a request here, before anything is queued, with the limits the workers' engine
published (:class:`EngineCapabilities`: its voices, its speed range) and the encodings'
sample rates. What passes here is what a worker renders: a job accepted with 202 never fails
for a reason knowable at submission, and every front refuses the same requests.

Every refusal is an :class:`~voicelane.common.errors.InvalidInputError` (a subclass for voices and
sizes) whose message starts with the name of the field at fault and whose ``field`` names
it, so a client can tell what to fix. Defaults live here and nowhere else: a field left out
(``None``; gRPC's ``""`` / ``0``) means :data:`DEFAULT_VOICE`, :data:`DEFAULT_SPEED`,
:data:`DEFAULT_SAMPLE_RATE_HZ`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from voicelane.common.defaults import DEFAULT_SAMPLE_RATE_HZ
from voicelane.common.errors import (
    InvalidInputError,
    TextTooLargeError,
    UnknownVoiceError,
    UnsupportedFormatError,
)
from voicelane.core.text import has_speakable_text
from voicelane.core.text_input import (
    BINARY_CONTROL_RATIO,
    BOM,
    CONTROL_CHARS,
    check_encodable,
    check_text,
)

DEFAULT_VOICE = "auto"
"""Every engine's default voice: the engine picks by the text's script."""
DEFAULT_SPEED = 1.0
STRETCH_MIN_SPEED = 0.25
STRETCH_MAX_SPEED = 4.0
"""The speeds a request that allows time-stretching (``stretch_speed``) may ask of any engine
(OpenAI's range): the engine renders what it can, the audio is time-stretched by the rest."""
SEED_VOICE_PREFIX = "seed:"
"""Engines that draw speakers from a seed (ChatTTS) accept any ``seed:N`` as a voice."""
MAX_SEED = 2**63 - 1
MIN_USEFUL_DEADLINE_S = 0.05
"""A stream with less time left than this is refused: no audio can arrive in time."""

_REQUEST_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SHOWN_CHARS = 64
_CONTROL_ALLOWANCE = 4
"""Control characters a conversation may carry before the 1% rule applies (stray ones)."""


def shown(value: str) -> str:
    """``value`` quoted for an error message, cut to a sane length."""
    return repr(value if len(value) <= _SHOWN_CHARS else value[:_SHOWN_CHARS] + "…")


# ---- what an engine can do ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VoiceInfo:
    id: str
    """The name callers pass as ``voice``."""
    name: str = ""
    languages: tuple[str, ...] = ()
    gender: str = "unknown"


@dataclass(frozen=True, slots=True)
class EngineCapabilities:
    """What one engine accepts; workers publish it, fronts check requests against it."""

    engine: str
    sample_rate_hz: int
    """The engine's own rate (outputs are resampled to what the request asks)."""
    min_speed: float
    max_speed: float
    voices: tuple[VoiceInfo, ...]
    seed_voices: bool = False
    """Any ``seed:N`` (0 <= N <= MAX_SEED) is a voice too."""
    word_timings: bool = False
    """The engine reports when each word starts (word timings; else sentence timings)."""
    voice_kinds: tuple[str, ...] = ()
    """The kinds of tenant voice the engine can make (:data:`voicelane.core.speakers.VOICE_KINDS`:
    seed, embedding, clip, mix); none: only its own voices."""
    voice_ids: frozenset[str] = field(init=False, repr=False, compare=False)
    """The voices' ids (computed once: every request looks its voice up here)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "voice_ids", frozenset(v.id for v in self.voices))

    def to_json(self) -> str:
        return json.dumps(
            {
                "engine": self.engine,
                "sample_rate_hz": self.sample_rate_hz,
                "min_speed": self.min_speed,
                "max_speed": self.max_speed,
                "seed_voices": self.seed_voices,
                "word_timings": self.word_timings,
                "voice_kinds": list(self.voice_kinds),
                "voices": [[v.id, v.name, list(v.languages), v.gender] for v in self.voices],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, raw: str | bytes) -> EngineCapabilities:
        """Raises ValueError (KeyError, TypeError included) on anything malformed."""
        data = json.loads(raw)
        return cls(
            engine=str(data["engine"]),
            sample_rate_hz=int(data["sample_rate_hz"]),
            min_speed=float(data["min_speed"]),
            max_speed=float(data["max_speed"]),
            seed_voices=bool(data["seed_voices"]),
            # Absent from what workers published before word timings: none.
            word_timings=bool(data.get("word_timings", False)),
            voice_kinds=tuple(str(k) for k in data.get("voice_kinds", ())),
            voices=tuple(
                VoiceInfo(str(i), str(n), tuple(str(x) for x in langs), str(g))
                for i, n, langs, g in data["voices"]
            ),
        )


@dataclass(frozen=True, slots=True)
class SpeechOptions:
    """A request's checked voice options, defaults applied."""

    voice: str
    speed: float
    """What the engine renders at (within its range)."""
    sample_rate_hz: int
    tempo: float = 1.0
    """What the audio is time-stretched by after the engine: the speed asked is ``speed x
    tempo``; 1 unless the request allows stretching and asked a speed beyond the engine's."""


# ---- the rules --------------------------------------------------------------------------------


def check_speech_text(text: str, *, max_chars: int, field: str = "text") -> str:
    """Decoded text: not binary, not empty, within ``max_chars``, and something to say
    (at least one letter or digit: a text of punctuation only has nothing to speak)."""
    text = check_text(text, max_chars=max_chars, source=field, field=field)
    if not has_speakable_text(text):
        raise InvalidInputError(f"{field} has nothing to speak (no letters or digits)", field=field)
    return text


def seed_of(voice: str, *, field: str = "voice") -> int | None:
    """``seed:1234`` → 1234; None for any other voice id. Raises on a malformed seed."""
    if not voice.startswith(SEED_VOICE_PREFIX):
        return None
    digits = voice[len(SEED_VOICE_PREFIX) :]
    if not digits.isdigit() or int(digits) > MAX_SEED or (len(digits) > 1 and digits[0] == "0"):
        raise UnknownVoiceError(
            f"{field} {shown(voice)} is unknown: seed voices are seed:N with N from 0 to "
            f"{MAX_SEED}",
            field=field,
        )
    return int(digits)


def has_voice(voice: str, caps: EngineCapabilities, *, field: str = "voice") -> bool:
    """Whether ``voice`` is one of the engine's (a listed id, or ``seed:N`` where any seed
    is a voice); a malformed seed voice raises."""
    return voice in caps.voice_ids or (caps.seed_voices and seed_of(voice, field=field) is not None)


def check_voice(voice: str | None, caps: EngineCapabilities, *, field: str = "voice") -> str:
    voice = voice or DEFAULT_VOICE
    if has_voice(voice, caps, field=field):
        return voice
    raise UnknownVoiceError(
        f"{field} {shown(voice)} is unknown to the {caps.engine} engine; "
        "GET /v1/voices, ListVoices or `voicelane voices` lists the voices",
        field=field,
    )


def check_speed(
    speed: float | None, min_speed: float, max_speed: float, *, field: str = "speed"
) -> float:
    """The speaking-rate multiplier, rounded to 3 decimals (gRPC carries a float32)."""
    if speed is None:
        return DEFAULT_SPEED
    value = round(float(speed), 3) if math.isfinite(speed) else speed
    if not (math.isfinite(value) and min_speed <= value <= max_speed):
        raise InvalidInputError(
            f"{field} {value:g} is out of range ({min_speed:g} to {max_speed:g})", field=field
        )
    return value


def check_sample_rate(
    sample_rate_hz: int | None,
    allowed: Sequence[int],
    *,
    encoding: str,
    field: str = "sample_rate_hz",
) -> int:
    """The output rate; ``allowed`` are the rates ``encoding`` can carry."""
    if sample_rate_hz is None:
        sample_rate_hz = DEFAULT_SAMPLE_RATE_HZ
    if isinstance(sample_rate_hz, bool) or sample_rate_hz not in allowed:
        if isinstance(allowed, range):
            listed = f"{allowed.start} to {allowed.stop - 1}"
        else:
            listed = ", ".join(str(r) for r in allowed)
        raise UnsupportedFormatError(
            f"{field} {sample_rate_hz!r} is not supported for {encoding}; allowed: {listed}",
            field=field,
        )
    return int(sample_rate_hz)


def split_speed(speed: float, caps: EngineCapabilities) -> tuple[float, float]:
    """``(engine speed, tempo)`` for a speed: the engine's nearest (``speed`` clamped into its
    range) and the factor left for time-stretching (``speed / engine speed``; 1 within it)."""
    engine_speed = min(max(speed, caps.min_speed), caps.max_speed)
    return engine_speed, (1.0 if engine_speed == speed else speed / engine_speed)


def check_speech_options(
    caps: EngineCapabilities,
    *,
    voice: str | None,
    speed: float | None,
    sample_rate_hz: int | None,
    allowed_rates: Sequence[int],
    encoding: str,
    custom_voice: bool = False,
    stretch_speed: bool = False,
) -> SpeechOptions:
    """Voice, speed and output rate of one request, defaults applied. ``custom_voice``: the
    voice is a tenant's voice or a mix, already resolved for this engine (``custom:...``).
    ``stretch_speed``: any speed from :data:`STRETCH_MIN_SPEED` to :data:`STRETCH_MAX_SPEED`
    (or the engine's own, where wider) is taken, what the engine cannot reach becoming the
    ``tempo`` the audio is stretched by (:func:`split_speed`); without it, the engine's range."""
    if stretch_speed:
        asked = check_speed(
            speed, min(caps.min_speed, STRETCH_MIN_SPEED), max(caps.max_speed, STRETCH_MAX_SPEED)
        )
        engine_speed, tempo = split_speed(asked, caps)
    else:
        engine_speed, tempo = check_speed(speed, caps.min_speed, caps.max_speed), 1.0
    return SpeechOptions(
        voice=voice or DEFAULT_VOICE if custom_voice else check_voice(voice, caps),
        speed=engine_speed,
        sample_rate_hz=check_sample_rate(sample_rate_hz, allowed_rates, encoding=encoding),
        tempo=tempo,
    )


MAX_CLIENT_TS_MS = 2**63 - 1


def check_seed(seed: int | None, *, field: str = "seed") -> int | None:
    """A sampling seed: 0 to :data:`MAX_SEED`, or None (a fresh draw each time)."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise InvalidInputError(f"{field} must be from 0 to {MAX_SEED}", field=field)
    return seed


def check_client_ts_ms(client_ts_ms: int, *, field: str = "client_ts_ms") -> int:
    """A client's own timestamp, echoed back: any unix ms an int64 can carry, not negative."""
    if not 0 <= client_ts_ms <= MAX_CLIENT_TS_MS:
        raise InvalidInputError(
            f"{field} must be from 0 to {MAX_CLIENT_TS_MS} (unix milliseconds)", field=field
        )
    return client_ts_ms


def check_request_id(request_id: str, *, field: str = "request_id") -> str:
    if not _REQUEST_ID.match(request_id):
        raise InvalidInputError(
            f"{field} must be 1 to 64 characters of A-Z, a-z, 0-9, _ or -", field=field
        )
    return request_id


class ConversationText:
    """The rules for text that arrives in pieces (a conversation): binary content and the
    size limit are checked per delta, against everything received so far."""

    def __init__(self, max_chars: int, *, field: str = "text_delta") -> None:
        self.max_chars = max_chars
        self.field = field
        self.chars_received = 0
        self.control_chars = 0

    def accept(self, delta: str) -> str:
        """The delta to speak (control characters removed); raises on binary or too much."""
        field = self.field
        check_encodable(delta, source=field, field=field)
        if "\x00" in delta:
            raise InvalidInputError(
                f"{field} looks binary (NUL character); expected text", field=field
            )
        if self.chars_received == 0:
            delta = delta.removeprefix(BOM)
        controls = len(CONTROL_CHARS.findall(delta))
        self.chars_received += len(delta)
        self.control_chars += controls
        allowed = max(_CONTROL_ALLOWANCE, BINARY_CONTROL_RATIO * self.chars_received)
        if self.control_chars > allowed:
            raise InvalidInputError(
                f"{field} looks binary ({self.control_chars} control characters); expected text",
                field=field,
            )
        if self.chars_received > self.max_chars:
            raise TextTooLargeError(
                f"{field}: the conversation's text exceeds the limit of {self.max_chars:,} "
                "characters",
                field=field,
            )
        return CONTROL_CHARS.sub("", delta) if controls else delta
