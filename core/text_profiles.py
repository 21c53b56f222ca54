"""What each engine can speak, character by character, once the text is normalized.

A :class:`TextProfile` sorts every character the normalizer leaves:

* **spoken**: letters the engine reads (espeak-ng: any script; ChatTTS: the basic Han block
  U+4E00-U+9FFF and ASCII letters, the characters its own normalizer keeps);
* **spelled**: Latin letters with diacritics, for an engine that reads only ASCII letters
  (ChatTTS): ``é`` becomes ``e`` (Unicode decomposition, marks dropped), ``ß`` ``ss``,
  ``æ`` ``ae``, ``ø`` ``o``, ``ł`` ``l``;
* **pause**: punctuation, kept as the engine's pause marks where it has them, else a space;
* **unspeakable**: anything else (a digit or ``$`` when normalization is off on ChatTTS, an
  emoji or pictograph, a script the engine lacks, Han outside the basic block U+4E00-U+9FFF on
  ChatTTS; espeak-ng names math and currency symbols itself): removed, and reported (a
  :class:`~voicelane.core.speech_text.TextWarning` with the character and its position in the
  original input, and the
  ``voicelane_text_unspeakable_chars_total`` metric).

Engines not listed here (a new one) get the espeak-ng profile: letters of every script.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

__all__ = ["CHATTTS", "ESPEAK", "PIPER", "PROFILES", "TextProfile", "profile_for"]

_CHATTTS_PAUSES = ",.!?;:'\"()-，。、！？；：（）…—“”‘’《》「」『』【】"
_SPELLED = {"ß": "ss", "æ": "ae", "Æ": "AE", "ø": "o", "Ø": "O", "ł": "l", "Ł": "L",
            "œ": "oe", "Œ": "OE", "đ": "d", "Đ": "D", "ı": "i", "þ": "th", "ð": "d"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class TextProfile:
    """One engine's alphabet (see the module docstring)."""

    engine: str
    ascii_letters_only: bool
    """Letters: ASCII and basic Han only (ChatTTS); Latin letters with diacritics are spelled
    without them. Otherwise letters of every script are spoken."""
    speaks_digits: bool
    """The engine reads digits itself (only matters when normalization is off)."""
    speaks_symbols: bool
    """The engine names math and currency symbols itself (``$`` ``+``; not emoji)."""
    pauses: frozenset[str] | None
    """The punctuation the engine keeps as pause marks; None: all of it."""
    phonemes: bool
    """The engine takes inline phonemes (SSML ``phoneme``): espeak-ng's ``[[...]]``."""
    pitch: bool
    """The engine renders SSML ``prosody pitch``."""

    def spell(self, char: str) -> str | None:
        """What the engine is given for ``char``: itself when spoken, a replacement (a
        spelling, ``" "`` for punctuation it has no mark for, ``""``), or None when it
        cannot be spoken at all. Pure: callers cache it per character."""
        category = unicodedata.category(char)
        kind = category[0]
        if kind == "Z" or char in "\t\n\r\x0b\x0c":
            return char
        if kind == "P":
            return char if self.pauses is None or char in self.pauses else " "
        if kind == "N":
            if category == "Nd" and char.isascii():
                return char if self.speaks_digits else None
            return char if not self.ascii_letters_only else None
        if kind == "M":
            return "" if self.ascii_letters_only else char
        if kind == "L":
            if not self.ascii_letters_only:
                return char
            if (char.isascii() and char.isalpha()) or "\u4e00" <= char <= "\u9fff":
                return char
            if char in _SPELLED:
                return _SPELLED[char]
            base = "".join(
                c for c in unicodedata.normalize("NFKD", char) if not unicodedata.combining(c)
            )
            if base and base.isascii() and base.isalpha():
                return base
            return None
        if kind == "S" and self.speaks_symbols and category != "So":
            return char  # math, currency and modifier symbols: espeak-ng names them
        return None  # other symbols (emoji, pictographs...), controls, format characters


ESPEAK = TextProfile(
    engine="espeak",
    ascii_letters_only=False,
    speaks_digits=True,
    speaks_symbols=True,
    pauses=None,
    phonemes=True,
    pitch=True,
)

CHATTTS = TextProfile(
    engine="chattts",
    ascii_letters_only=True,
    speaks_digits=False,
    speaks_symbols=False,
    pauses=frozenset(_CHATTTS_PAUSES),
    phonemes=False,
    pitch=False,
)

PIPER = TextProfile(
    engine="piper",
    ascii_letters_only=False,
    speaks_digits=True,
    speaks_symbols=True,
    pauses=None,
    phonemes=False,
    pitch=False,
)
"""Piper phonemizes with espeak-ng (its own copy): what espeak-ng reads, Piper reads, but the
voice's model only knows its own phonemes (an English voice reads Han characters as "Chinese
letter"). Inline phonemes are espeak-ng's ASCII mnemonics in this pipeline, not the IPA a
Piper voice takes: SSML ``phoneme`` and lexicon phonemes are read as written (with a warning).
No pitch control."""

PROFILES = {p.engine: p for p in (ESPEAK, CHATTTS, PIPER)}
"""The engines with a profile of their own, by name."""


def profile_for(engine: str) -> TextProfile:
    """The profile of the engine named ``engine`` (the espeak-ng one for unknown names)."""
    return PROFILES.get(engine, ESPEAK)
