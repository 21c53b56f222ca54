"""Checks of what a gRPC client asks for, done before anything reaches Redis.

Every failure is an :class:`~core.errors.InvalidInputError` (``INVALID_ARGUMENT``) with a
one-line message, or :class:`~core.errors.DeadlineExceededError` for a deadline that leaves
no time to speak.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from core.errors import DeadlineExceededError, InvalidInputError, TextTooLargeError
from core.text_input import BINARY_CONTROL_RATIO, BOM, CONTROL_CHARS

SAMPLE_RATES_HZ = (16000, 24000, 48000)
DEFAULT_SAMPLE_RATE_HZ = 24000
MIN_SPEED = 0.5
MAX_SPEED = 2.5
AUTO_VOICE = "auto"
MIN_USEFUL_DEADLINE_S = 0.05
"""A call with less time left than this is refused: no audio can arrive in time."""

_REQUEST_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_CONTROL_ALLOWANCE = 4
"""Control characters a conversation may carry before the 1% rule applies (stray ones)."""
_SHOWN_CHARS = 64


@dataclass(frozen=True, slots=True)
class VoiceParams:
    voice: str
    sample_rate_hz: int
    speed: float


def shown(value: str) -> str:
    """``value`` quoted for an error message, cut to a sane length."""
    return repr(value if len(value) <= _SHOWN_CHARS else value[:_SHOWN_CHARS] + "…")


def check_voice_params(
    voice: str, sample_rate_hz: int, speed: float, *, known_voices: frozenset[str]
) -> VoiceParams:
    """Defaults applied (``""`` → auto, 0 Hz → 24000, speed 0 → 1.0) and ranges checked."""
    voice = voice or AUTO_VOICE
    if voice not in known_voices:
        raise InvalidInputError(f"unknown voice {shown(voice)}; ListVoices lists the voices")
    rate_hz = sample_rate_hz or DEFAULT_SAMPLE_RATE_HZ
    if rate_hz not in SAMPLE_RATES_HZ:
        allowed = ", ".join(str(r) for r in SAMPLE_RATES_HZ)
        raise InvalidInputError(f"sample_rate_hz {rate_hz} is not supported; use {allowed}")
    speed = 1.0 if speed == 0 else round(float(speed), 3)
    if not (math.isfinite(speed) and MIN_SPEED <= speed <= MAX_SPEED):
        raise InvalidInputError(f"speed {speed} is out of range ({MIN_SPEED} to {MAX_SPEED})")
    return VoiceParams(voice, rate_hz, speed)


def check_request_id(request_id: str) -> str:
    if not _REQUEST_ID.match(request_id):
        raise InvalidInputError("request_id must be 1 to 64 characters of A-Z, a-z, 0-9, _ or -")
    return request_id


def absolute_deadline_ms(
    time_remaining_s: float | None,
    default_s: float,
    now_ms: int,
    *,
    min_remaining_s: float = MIN_USEFUL_DEADLINE_S,
) -> int:
    """The call's deadline as unix ms: the client's, else ``default_s`` from now."""
    if time_remaining_s is None:
        return now_ms + round(default_s * 1000)
    if time_remaining_s < min_remaining_s:
        raise DeadlineExceededError("the call's deadline has passed before it could start")
    return now_ms + round(time_remaining_s * 1000)


class TextFeed:
    """The text of a conversation, delta by delta: binary content and the size limit."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.chars_received = 0
        self.control_chars = 0

    def accept(self, delta: str) -> str:
        """The delta to speak (control characters removed); raises on binary or too much."""
        if "\x00" in delta:
            raise InvalidInputError("text_delta looks binary (NUL character); expected text")
        if self.chars_received == 0:
            delta = delta.removeprefix(BOM)
        controls = len(CONTROL_CHARS.findall(delta))
        self.chars_received += len(delta)
        self.control_chars += controls
        allowed = max(_CONTROL_ALLOWANCE, BINARY_CONTROL_RATIO * self.chars_received)
        if self.control_chars > allowed:
            raise InvalidInputError(
                f"text looks binary ({self.control_chars} control characters); expected text"
            )
        if self.chars_received > self.max_chars:
            raise TextTooLargeError(
                f"the conversation's text exceeds the limit of {self.max_chars:,} characters"
            )
        return CONTROL_CHARS.sub("", delta) if controls else delta
