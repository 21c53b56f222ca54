"""ChatTTS's speaker embedding string (``spk_emb``), decoded and encoded without torch.

``Chat.sample_random_speaker()`` gives a speaker as a string: the embedding's values as
float16 bytes, compressed with raw LZMA2 (preset 9, extreme), written in base16384 (every
7 bytes as 4 characters from U+4E00, a last partial group followed by a marker U+3D01 to
U+3D06 giving its length in bytes). A front checks a tenant's ``emb:<string>`` with
:func:`decode_spk_emb` before storing it; the ChatTTS engine decodes it the same way.

base16384 is implemented here (ChatTTS uses the ``pybase16384`` package, which only the
``chattts`` extra installs); the tests check that both agree.
"""

from __future__ import annotations

import lzma

import numpy as np
import numpy.typing as npt

from voicelane.common.errors import InvalidInputError

MAX_SPK_EMB_VALUES = 8192
"""The most values a speaker embedding may have (ChatTTS's official weights: 768)."""
MAX_SPK_EMB_CHARS = 16_384
"""The longest ``spk_emb`` string accepted, as :data:`voicelane.core.voices.MAX_SPK_EMB_CHARS`
(768 values make about 850 characters; 8192 incompressible ones about 9400)."""

_FIRST = 0x4E00
"""The character of the 14-bit value 0."""
_LAST = _FIRST + (1 << 14) - 1
_MARKER = 0x3D00
"""U+3D01 ... U+3D06: the last group held 1 ... 6 bytes."""
_LZMA_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}]

SpeakerValues = npt.NDArray[np.float32]


def _chars_of(remainder_bytes: int) -> int:
    """Characters of a last group of ``remainder_bytes`` (1-6) bytes: ceil(8 x n / 14)."""
    return -(-8 * remainder_bytes // 14)


def b14_encode(data: bytes) -> str:
    """``data`` in base16384, as ``pybase16384.encode_to_string`` writes it."""
    out: list[str] = []
    whole = len(data) - len(data) % 7
    for start in range(0, whole, 7):
        value = int.from_bytes(data[start : start + 7], "big")
        out.extend(chr(_FIRST + (value >> shift & 0x3FFF)) for shift in (42, 28, 14, 0))
    remainder = len(data) - whole
    if remainder:
        chars = _chars_of(remainder)
        value = int.from_bytes(data[whole:], "big") << (14 * chars - 8 * remainder)
        out.extend(chr(_FIRST + (value >> 14 * i & 0x3FFF)) for i in reversed(range(chars)))
        out.append(chr(_MARKER + remainder))
    return "".join(out)


def b14_decode(text: str) -> bytes:
    """The bytes of a base16384 string; ValueError when it is not one."""
    remainder = 0
    if text and _MARKER < ord(text[-1]) <= _MARKER + 6:
        remainder = ord(text[-1]) - _MARKER
        text = text[:-1]
    tail = _chars_of(remainder) if remainder else 0
    if len(text) < tail or (len(text) - tail) % 4:
        raise ValueError("not base16384: wrong length")
    values = [ord(c) - _FIRST for c in text]
    if any(not 0 <= v <= _LAST - _FIRST for v in values):
        raise ValueError("not base16384: a character out of its range")
    out = bytearray()
    whole = len(values) - tail
    for start in range(0, whole, 4):
        a, b, c, d = values[start : start + 4]
        out += ((a << 42) | (b << 28) | (c << 14) | d).to_bytes(7, "big")
    if remainder:
        value = 0
        for v in values[whole:]:
            value = value << 14 | v
        out += (value >> (14 * tail - 8 * remainder)).to_bytes(remainder, "big")
    return bytes(out)


def decode_spk_emb(text: str) -> SpeakerValues:
    """A ChatTTS ``spk_emb`` string → its values (float16 values, as float32).

    Raises :class:`InvalidInputError` (field ``voice``) when it is not one: not base16384,
    not LZMA, an odd byte count, no values or too many, a value not finite.
    """
    text = text.strip()
    if not text:
        raise InvalidInputError("voice: an empty speaker embedding", field="voice")
    if len(text) > MAX_SPK_EMB_CHARS:
        raise InvalidInputError(
            f"voice: a speaker embedding string of at most {MAX_SPK_EMB_CHARS} characters",
            field="voice",
        )
    try:
        compressed = b14_decode(text)
        decompressor = lzma.LZMADecompressor(format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)
        raw = decompressor.decompress(compressed, max_length=2 * MAX_SPK_EMB_VALUES + 1)
    except (ValueError, lzma.LZMAError) as error:
        raise InvalidInputError(
            f"voice: not a ChatTTS speaker embedding string ({error})", field="voice"
        ) from None
    if not decompressor.eof or len(raw) % 2 or not raw:
        raise InvalidInputError(
            "voice: not a ChatTTS speaker embedding string (its data is cut, too long or "
            "not float16 values)",
            field="voice",
        )
    values = np.frombuffer(raw, dtype=np.float16).astype(np.float32)
    if not np.isfinite(values).all():
        raise InvalidInputError("voice: a speaker embedding with a value not finite", field="voice")
    return values


def encode_spk_emb(values: npt.ArrayLike) -> str:
    """Values → ChatTTS's ``spk_emb`` string (rounded to float16, as ChatTTS stores them);
    ``Chat.speaker._decode`` reads it back. ValueError on an empty, non-1-D, too long or
    non-finite array."""
    array = np.asarray(values, dtype=np.float32)
    if array.ndim != 1 or not 0 < array.size <= MAX_SPK_EMB_VALUES:
        raise ValueError(f"a speaker embedding is 1 to {MAX_SPK_EMB_VALUES} values in a row")
    with np.errstate(over="ignore"):
        half = array.astype(np.float16)
    if not np.isfinite(half).all():
        raise ValueError("a speaker embedding's values must be finite (in float16)")
    compressed = lzma.compress(half.tobytes(), format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)
    return b14_encode(compressed)
