"""SSML: a documented subset of W3C SSML 1.1, as Polly, Azure and Google accept it.

:func:`read_ssml` reads a document into a flat tuple of items in reading order:
:class:`Speech` (a run of text to speak, with how to voice it), :class:`Break`,
:class:`Mark` and :class:`Boundary`, and the :class:`SsmlWarning` objects for what it ignored.
It is pure (no I/O) and parses with the hardened reader (:mod:`voicelane.core.safe_xml`): no
DTDs, entities or external references; at most :data:`MAX_SSML_CHARS` characters, 64 nested
elements and 50,000 elements. A malformed or hostile document, or a known attribute with a
value it cannot read, is :class:`~voicelane.common.errors.InvalidInputError` (``field="text"``)
``text: SSML line L, column C: reason`` (the field first, as every field error), within
milliseconds.

Every :class:`Speech` carries a :class:`~voicelane.core.text_map.Mapped` whose source is the
whole SSML string: character data maps to its own characters (``&amp;`` → ``&`` maps to the
five characters of the reference), a ``say-as`` expansion to the content it reads, a ``sub``
alias to the whole element. ``docs/ssml.md`` lists the elements, attributes, values and
conversions; in short:

* ``speak`` (the root), ``p``, ``s`` (a :class:`Boundary` after each, and at their start
  where text precedes), ``lang`` (``xml:lang``);
* ``break``: ``time`` (``500ms``, ``1.5s``; at most 10 s) or ``strength`` (none 0, x-weak
  100, weak 250, medium 400, strong 750, x-strong 1200 ms); neither: medium;
* ``prosody`` (rate, volume, pitch), ``emphasis`` (a rate and gain), ``voice`` (``name``):
  :class:`~voicelane.core.text_blocks.Voicing`, nested ones combined (rates multiply, decibels
  and semitones add);
* ``say-as`` (characters / spell-out, cardinal / number, ordinal, digits, date, time,
  telephone): expanded to words here, in English or Chinese (:class:`Speech` ``verbatim``);
* ``sub`` (``alias``), ``phoneme`` (IPA or X-SAMPA, carried as IPA with the content as the
  fallback), ``mark`` (``name``);
* ``audio`` (its fallback content is spoken), ``desc`` (dropped), and any other element —
  vendor extensions (``amazon:effect``, ``mstts:express-as``, ``google:style``, ``par``...)
  included: its content is spoken, the tag ignored, one warning each.
"""

from __future__ import annotations

import calendar
import math
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal, NoReturn

from voicelane.common.errors import InvalidInputError, MalformedRequestError, TextTooLargeError
from voicelane.core.normalize import normalize_text
from voicelane.core.normalize.numbers import (
    en_cardinal,
    en_digits,
    en_ordinal,
    en_year,
    zh_cardinal,
    zh_digits,
)
from voicelane.core.phonemes import validate_ipa, xsampa_to_ipa
from voicelane.core.safe_xml import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_ELEMENTS,
    XmlElement,
    XmlError,
    XmlText,
    parse_xml,
)
from voicelane.core.text_blocks import PLAIN, Voicing
from voicelane.core.text_map import MapBuilder, Mapped, Piece

__all__ = [
    "BREAK_STRENGTH_MS",
    "MAX_BREAK_MS",
    "MAX_SSML_CHARS",
    "Boundary",
    "Break",
    "Mark",
    "Phonemes",
    "Speech",
    "SsmlDocument",
    "SsmlItem",
    "SsmlWarning",
    "looks_like_ssml",
    "read_ssml",
]

MAX_SSML_CHARS = 1_000_000
"""The longest document read, in code points."""
MAX_DEPTH = DEFAULT_MAX_DEPTH
MAX_ELEMENTS = DEFAULT_MAX_ELEMENTS
MAX_BREAK_MS = 10_000
"""The longest ``break`` (Polly's and Azure's cap)."""
BREAK_STRENGTH_MS = {
    "none": 0,
    "x-weak": 100,
    "weak": 250,
    "medium": 400,
    "strong": 750,
    "x-strong": 1200,
}


@dataclass(frozen=True, slots=True)
class Phonemes:
    ipa: str
    """Always IPA (X-SAMPA converted)."""
    alphabet: str
    """As given, in its canonical spelling: ``ipa`` or ``x-sampa``."""


@dataclass(frozen=True, slots=True)
class Speech:
    """A run of text to speak."""

    mapped: Mapped
    """The text, and its map back to the SSML source (offsets into the whole document)."""
    voicing: Voicing
    """From the enclosing ``voice``, ``prosody`` and ``emphasis``, combined."""
    verbatim: bool
    """Already words (a ``say-as`` expansion, a ``sub`` alias): the pipeline must not
    normalize it or apply lexicons to it."""
    phonemes: Phonemes | None = None
    """A ``phoneme`` element: say these; ``mapped.text`` (the element's content) is the
    fallback for engines that take no phonemes."""
    lang: str | None = None
    """The ``xml:lang`` in force."""

    @property
    def text(self) -> str:
        return self.mapped.text


@dataclass(frozen=True, slots=True)
class Break:
    """Exactly ``time_ms`` of silence here (replacing the engine's own pause)."""

    time_ms: int
    position: int
    """Source offset of the ``<break>`` tag."""


@dataclass(frozen=True, slots=True)
class Mark:
    name: str
    position: int
    """Source offset of the ``<mark>`` tag."""


@dataclass(frozen=True, slots=True)
class Boundary:
    """The end of a sentence (``</s>``) or paragraph (``</p>``)."""

    kind: Literal["sentence", "paragraph"]


SsmlItem = Speech | Break | Mark | Boundary


@dataclass(frozen=True, slots=True)
class SsmlWarning:
    """Something of the document that is not rendered as written."""

    code: str
    """``ignored-element``: an unknown or vendor element (its content is spoken), ``audio``;
    ``ignored-attribute``: an attribute not supported (the element is read without it);
    ``ignored-content``: text inside an element that has none (``break``, ``mark``) or
    markup inside one that reads only text (``say-as``, ``phoneme``);
    ``unsupported-language``: a ``say-as`` in a language other than English or Chinese,
    read in English."""
    message: str
    position: int
    """Source offset of the element."""


@dataclass(frozen=True, slots=True)
class SsmlDocument:
    items: tuple[SsmlItem, ...]
    warnings: tuple[SsmlWarning, ...]

    @property
    def speech(self) -> tuple[Speech, ...]:
        return tuple(item for item in self.items if isinstance(item, Speech))


# ---- detection -------------------------------------------------------------------------

_LOOKS_LIKE = re.compile(r"[\s\ufeff]*(?:<\?xml[\s?]|<!DOCTYPE[\s>]|<speak[\s>/])", re.IGNORECASE)


def looks_like_ssml(text: str) -> bool:
    """``text`` starts (after whitespace and a byte-order mark) with a ``<speak`` tag, an XML
    declaration or a document type declaration: an XML document, read (and refused, if it is
    not SSML or is hostile) as SSML rather than spoken tag by tag."""
    return _LOOKS_LIKE.match(text) is not None


# ---- errors ----------------------------------------------------------------------------


def _fail(line: int, column: int, reason: str) -> NoReturn:
    raise InvalidInputError(f"text: SSML line {line}, column {column}: {reason}", field="text")


def _shown(value: str) -> str:
    """A user's value, quoted and cut short, for a message."""
    value = " ".join(value.split())
    return f'"{value[:40]}…"' if len(value) > 40 else f'"{value}"'


# ---- attribute values ------------------------------------------------------------------

_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_BREAK_TIME = re.compile(rf"\s*{_NUMBER}\s*(ms|s)\s*", re.IGNORECASE)
_SIGNED = re.compile(rf"\s*([+-]?){_NUMBER}\s*(%|db|st|hz)?\s*", re.IGNORECASE)
_LANG_TAG = re.compile(r"[A-Za-z]{1,8}(?:[-_][A-Za-z0-9]{1,8})*")

_RATE_LABELS = {
    "x-slow": 0.5,
    "slow": 0.75,
    "medium": 1.0,
    "default": 1.0,
    "fast": 1.25,
    "x-fast": 1.5,
}
_VOLUME_LABELS = {
    "silent": -96.0,
    "x-soft": -12.0,
    "soft": -6.0,
    "medium": 0.0,
    "default": 0.0,
    "loud": 6.0,
    "x-loud": 12.0,
}
_PITCH_LABELS = {
    "x-low": -6.0,
    "low": -3.0,
    "medium": 0.0,
    "default": 0.0,
    "high": 3.0,
    "x-high": 6.0,
}
_EMPHASIS = {
    "strong": (0.9, 4.0),
    "moderate": (0.95, 2.0),
    "none": (1.0, 0.0),
    "reduced": (1.1, -4.0),
}
SILENT_DB = -96.0
MAX_GAIN_DB = 24.0
MAX_PITCH_SEMITONES = 24.0
MIN_RATE, MAX_RATE = 0.1, 10.0
NOMINAL_PITCH_HZ = 150.0
"""What a pitch change in hertz is measured against (a speaking voice between a typical
male ~110 Hz and female ~200 Hz): ``+15Hz`` is 12·log2(165/150) ≈ +1.65 semitones."""


class _BadValueError(ValueError):
    pass


def _parse_rate(value: str) -> float:
    label = _RATE_LABELS.get(value.strip().lower())
    if label is not None:
        return label
    match = _SIGNED.fullmatch(value)
    if match is None or match.group(3) not in (None, "%"):
        raise _BadValueError
    sign, number, unit = match.group(1), float(match.group(2)), match.group(3)
    if unit and sign:  # "+20%" / "-10%": a change
        rate = 1 + (-number if sign == "-" else number) / 100
    elif unit:  # "150%": of the default rate
        rate = number / 100
    elif sign:
        raise _BadValueError  # "+0.2": a change needs a percentage
    else:
        rate = number  # a multiplier: "1.2"
    if not MIN_RATE <= rate <= MAX_RATE:
        raise _BadValueError
    return rate


def _parse_volume(value: str) -> float:
    label = _VOLUME_LABELS.get(value.strip().lower())
    if label is not None:
        return label
    match = _SIGNED.fullmatch(value)
    if match is None:
        raise _BadValueError
    sign, number, unit = match.group(1), float(match.group(2)), (match.group(3) or "").lower()
    signed = -number if sign == "-" else number
    if unit == "db":
        db = signed
    elif unit == "%" and sign:  # "+10%": the amplitude changed by this much
        db = _amplitude_db(1 + signed / 100)
    elif unit in ("%", "") and not sign:  # "50" / "50%": of the full (default) volume
        if number > 100:
            raise _BadValueError
        db = _amplitude_db(number / 100)
    else:
        raise _BadValueError
    if not SILENT_DB <= db <= MAX_GAIN_DB:
        raise _BadValueError
    return db


def _amplitude_db(ratio: float) -> float:
    return SILENT_DB if ratio <= 0 else max(SILENT_DB, 20 * math.log10(ratio))


def _parse_pitch(value: str) -> float:
    label = _PITCH_LABELS.get(value.strip().lower())
    if label is not None:
        return label
    match = _SIGNED.fullmatch(value)
    if match is None:
        raise _BadValueError
    sign, number, unit = match.group(1), float(match.group(2)), (match.group(3) or "").lower()
    signed = -number if sign == "-" else number
    if unit == "st" and sign:
        semitones = signed
    elif unit == "%":  # "+10%" a change; "110%" of the default
        ratio = 1 + signed / 100 if sign else number / 100
        if ratio <= 0:
            raise _BadValueError
        semitones = 12 * math.log2(ratio)
    elif unit == "hz":  # "+15Hz" a change; "200Hz" absolute; both against the nominal pitch
        hertz = NOMINAL_PITCH_HZ + signed if sign else number
        if hertz <= 0:
            raise _BadValueError
        semitones = 12 * math.log2(hertz / NOMINAL_PITCH_HZ)
    else:
        raise _BadValueError
    if abs(semitones) > MAX_PITCH_SEMITONES:
        raise _BadValueError
    return semitones


def _combine(
    voicing: Voicing,
    *,
    rate: float = 1.0,
    volume_db: float = 0.0,
    pitch_semitones: float = 0.0,
    voice: str | None = None,
) -> Voicing:
    """``voicing`` changed by a nested element: rates multiply, decibels and semitones add
    (gain kept within [-96, +24] dB, pitch within ±24 semitones)."""
    return Voicing(
        voice=voice if voice is not None else voicing.voice,
        rate=round(voicing.rate * rate, 6),
        volume_db=round(min(MAX_GAIN_DB, max(SILENT_DB, voicing.volume_db + volume_db)), 6),
        pitch_semitones=round(
            min(
                MAX_PITCH_SEMITONES,
                max(-MAX_PITCH_SEMITONES, voicing.pitch_semitones + pitch_semitones),
            ),
            6,
        ),
    )


# ---- say-as ----------------------------------------------------------------------------


class _NoFitError(ValueError):
    """The content of a ``say-as`` does not fit its ``interpret-as``."""


Token = tuple[int, int, str]
"""``(start, end, words)``: content ``[start, end)`` is read as ``words``."""

_ZH_LANGS = frozenset({"zh", "cmn", "yue", "wuu", "hak", "nan", "gan", "hsn", "cjy", "lzh"})
_HAN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_LETTER = re.compile(r"[^\W\d_]")
_TAG = re.compile(r"<[^<>]*>")
_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_MONTH_NAMES = {name.lower(): index + 1 for index, name in enumerate(_MONTHS)} | {
    name[:3].lower(): index + 1 for index, name in enumerate(_MONTHS)
}
_MONTH_NAMES["sept"] = 9
_SYMBOLS_EN = {
    "-": "dash",
    ".": "dot",
    "_": "underscore",
    "@": "at",
    "/": "slash",
    "\\": "backslash",
    "+": "plus",
    "#": "hash",
    "&": "and",
    "*": "star",
    ":": "colon",
    "%": "percent",
    "$": "dollar",
    "=": "equals",
}
_SYMBOLS_ZH = {
    "-": "杠",
    ".": "点",
    "_": "下划线",
    "@": "艾特",
    "/": "斜杠",
    "\\": "反斜杠",
    "+": "加",
    "#": "井号",
    "&": "和",
    "*": "星号",
    ":": "冒号",
    "%": "百分号",
    "$": "美元",
    "=": "等于",
}


def _digit_word(char: str, zh: bool) -> str:
    return zh_digits(char) if zh else en_digits(char)


def _say_characters(text: str, zh: bool) -> list[Token]:
    """One token per character: letters (upper case, so engines say the letter's name),
    digits as digit words, common symbols by name; spaces and other punctuation are not
    read."""
    tokens: list[Token] = []
    for index, char in enumerate(text):
        if char.isspace():
            continue
        if "0" <= char <= "9":
            words = _digit_word(char, zh)
        elif char.isalpha():
            words = char.upper()
        elif char in _SYMBOLS_EN:
            words = (_SYMBOLS_ZH if zh else _SYMBOLS_EN)[char]
        elif unicodedata.category(char).startswith("P"):
            continue
        else:
            words = char
        tokens.append((index, index + 1, words))
    return tokens


_CARDINAL = re.compile(r"([+-]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?")
_ORDINAL = re.compile(r"(\d+)(?:st|nd|rd|th|\.)?|第(\d+)", re.IGNORECASE)


def _say_cardinal(text: str, zh: bool) -> str:
    match = _CARDINAL.fullmatch(text)
    if match is None:
        raise _NoFitError("not a number (digits, with an optional sign, separators and decimals)")
    sign, whole, fraction = match.group(1), match.group(2).replace(",", ""), match.group(3)
    if zh:
        words = ("负" if sign == "-" else "") + zh_cardinal(whole)
        return words + ("点" + zh_digits(fraction) if fraction else "")
    words = ("minus " if sign == "-" else "") + en_cardinal(whole)
    return words + (" point " + en_digits(fraction) if fraction else "")


def _say_ordinal(text: str, zh: bool) -> str:
    match = _ORDINAL.fullmatch(text)
    if match is None:
        raise _NoFitError("not an ordinal (a whole number such as 3 or 3rd)")
    digits = match.group(1) or match.group(2)
    return "第" + zh_cardinal(digits) if zh else en_ordinal(digits)


_DIGIT_SEPARATORS = frozenset(" -.,/()")


def _say_digits(text: str, zh: bool) -> list[Token]:
    tokens = [
        (index, index + 1, _digit_word(char, zh))
        for index, char in enumerate(text)
        if "0" <= char <= "9"
    ]
    if not tokens or any(
        not ("0" <= char <= "9") and char not in _DIGIT_SEPARATORS for char in text
    ):
        raise _NoFitError("not digits")
    return tokens


_TELEPHONE_SEPARATORS = frozenset(" -.()/")


def _say_telephone(text: str, zh: bool) -> list[Token]:
    """Digit by digit (a leading ``+`` is "plus"), letters by name; a pause (a comma)
    between the groups the separators make."""
    tokens: list[Token] = []
    group_end = False
    for index, char in enumerate(text):
        if char in _TELEPHONE_SEPARATORS:
            group_end = bool(tokens)
            continue
        if "0" <= char <= "9":
            words = _digit_word(char, zh)
        elif char == "+" and not tokens:
            words = "加" if zh else "plus"
        elif char.isascii() and char.isalpha():
            words = char.upper()
        else:
            raise _NoFitError(f"{char!r} is not part of a telephone number")
        if group_end and tokens:
            start, end, previous = tokens[-1]
            tokens[-1] = (start, end, previous + ("，" if zh else ","))
        group_end = False
        tokens.append((index, index + 1, words))
    if not any("0" <= char <= "9" for char in text):
        raise _NoFitError("a telephone number has digits")
    return tokens


_DATE_FIELD_SPLIT = re.compile(r"[\s/.,-]+")


def _date_format(format_value: str | None, text: str, zh: bool) -> str:
    """The order of the fields: ``ymd``, ``mdy``...; ``yyyy-mm-dd``-style formats are
    reduced to their letters. Without one: an ISO-like ``2024-05-06`` or ``20240506`` is
    ``ymd``; two fields ``ym`` / ``my`` (one is a year) or ``md``; one ``y``; three ``mdy``
    (Chinese: ``ymd``)."""
    if format_value is not None:
        letters = ""
        for char in format_value.lower():
            if char in "ymd" and not letters.endswith(char):
                letters += char
            elif char not in "ymd-/. ":
                raise _BadValueError
        if not letters or len(set(letters)) != len(letters):
            raise _BadValueError
        return letters
    fields = [field for field in _DATE_FIELD_SPLIT.split(text) if field]
    if re.fullmatch(r"\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{8}", text):
        return "ymd"
    if len(fields) == 2:
        if re.fullmatch(r"\d{3,4}", fields[0]):
            return "ym"
        return "my" if re.fullmatch(r"\d{3,4}", fields[1]) else "md"
    if len(fields) == 1:
        return "y"
    return "ymd" if zh else "mdy"


def _say_date(text: str, format_value: str | None, zh: bool) -> str:
    order = _date_format(format_value, text, zh)
    fields = [field for field in _DATE_FIELD_SPLIT.split(text) if field]
    if len(fields) == 1 and len(order) == 3 and fields[0].isdigit() and len(fields[0]) == 8:
        compact = fields[0]  # 20240506 / 06052024 / 05062024
        widths = {"y": 4, "m": 2, "d": 2}
        fields, position = [], 0
        for letter in order:
            fields.append(compact[position : position + widths[letter]])
            position += widths[letter]
    if len(fields) != len(order):
        raise _NoFitError(f"not a date in the format {order} ({len(order)} fields)")
    year: str | None = None
    month: int | None = None
    day: int | None = None
    for letter, field in zip(order, fields, strict=True):
        if letter == "y":
            if not re.fullmatch(r"\d{1,4}", field):
                raise _NoFitError(f"{_shown(field)} is not a year")
            year = field
        elif letter == "m":
            if field.isdigit():
                month = int(field) if len(field) <= 2 else 0
            else:
                month = _MONTH_NAMES.get(field.lower().rstrip("."), 0)
            if not 1 <= month <= 12:
                raise _NoFitError(f"{_shown(field)} is not a month")
        else:
            found = re.fullmatch(r"(\d{1,2})(?:st|nd|rd|th)?", field, re.IGNORECASE)
            if found is None:
                raise _NoFitError(f"{_shown(field)} is not a day")
            day = int(found.group(1))
            longest = calendar.monthrange(int(year) if year else 2000, month)[1] if month else 31
            if not 1 <= day <= longest:
                raise _NoFitError(f"{_shown(field)} is not a day of that month")
    # The year may come after the day (mdy): check the day against it now.
    if (
        day is not None
        and month is not None
        and year is not None
        and day > calendar.monthrange(int(year), month)[1]
    ):
        raise _NoFitError(f"day {day} is not in month {month} of {year}")
    if zh:
        out = f"{zh_digits(year)}年" if year else ""
        out += f"{zh_cardinal(str(month))}月" if month else ""
        return out + (f"{zh_cardinal(str(day))}日" if day else "")
    parts: list[str] = []
    if month:
        parts.append(_MONTHS[month - 1])
    if day:
        parts.append(en_ordinal(str(day)) if month else "the " + en_ordinal(str(day)))
    words = " ".join(parts)
    if year:
        spoken = en_year(year) if len(year) == 4 else en_cardinal(year)
        words = f"{words}, {spoken}" if day and month else f"{words} {spoken}".strip()
    return words


_TIME = re.compile(
    r"(?P<h>\d{1,2})(?:[:.](?P<m>\d{2})(?::(?P<s>\d{2}))?)?"
    r"\s*(?:(?P<ampm>[ap])\.?\s?m\.?)?",
    re.IGNORECASE,
)


def _say_time(text: str, format_value: str | None, zh: bool) -> str:
    """``14:30`` (24-hour: ``fourteen thirty``), ``2:30 pm`` / ``format="hms12"`` (12-hour:
    ``two thirty P M``), seconds ``and five seconds``; Chinese ``下午两点三十分``."""
    style = (format_value or "").strip().lower()
    if style not in ("", "hms12", "hms24", "hm12", "hm24", "hms", "hm"):
        raise _BadValueError
    match = _TIME.fullmatch(text)
    if match is None or (match.group("m") is None and match.group("ampm") is None):
        raise _NoFitError("not a time (hh:mm, hh:mm:ss, with an optional am / pm)")
    hour = int(match.group("h"))
    minute = int(match.group("m") or 0)
    second = int(match.group("s")) if match.group("s") else None
    ampm = (match.group("ampm") or "").lower()
    if (ampm and not 1 <= hour <= 12) or not 0 <= hour <= 23:
        raise _NoFitError(f"hour {hour} is out of range")
    if minute > 59 or (second is not None and second > 59):
        raise _NoFitError("minutes and seconds run from 00 to 59")
    twelve = bool(ampm) or style.endswith("12")
    if ampm:
        pm = ampm == "p"
        hour24 = hour % 12 + (12 if pm else 0)
    else:
        hour24, pm = hour, hour >= 12
    shown_hour = (hour24 % 12 or 12) if twelve else hour24
    if zh:
        words = ("下午" if pm else "上午") if twelve else ""
        words += zh_cardinal(str(shown_hour), liang=True) + "点"
        if minute:
            words += ("零" if minute < 10 else "") + zh_cardinal(str(minute)) + "分"
        return words + (f"{zh_cardinal(str(second))}秒" if second else "")
    words = en_cardinal(str(shown_hour))
    if minute == 0:
        if not twelve:
            words += " o'clock" if 0 < shown_hour <= 12 else " hundred"
    elif minute < 10:
        words += " oh " + en_cardinal(str(minute))
    else:
        words += " " + en_cardinal(str(minute))
    if second:
        words += f" and {en_cardinal(str(second))} second" + ("s" if second != 1 else "")
    if twelve:
        words += " P M" if pm else " A M"
    return words


_INTERPRET_AS = {
    "characters": "characters",
    "spell-out": "characters",
    "verbatim": "characters",
    "cardinal": "cardinal",
    "number": "cardinal",
    "ordinal": "ordinal",
    "digits": "digits",
    "date": "date",
    "time": "time",
    "telephone": "telephone",
}
"""``interpret-as`` values read, and what they are read as."""


def _say(kind: str, text: str, format_value: str | None, zh: bool) -> list[Token]:
    """The tokens of a ``say-as`` of ``kind`` over its (stripped, NFKC) content."""
    if kind == "characters":
        return _say_characters(text, zh)
    if kind == "digits":
        return _say_digits(text, zh)
    if kind == "telephone":
        return _say_telephone(text, zh)
    if kind == "cardinal":
        words = _say_cardinal(text.replace(" ", ""), zh)
    elif kind == "ordinal":
        words = _say_ordinal(text.replace(" ", ""), zh)
    elif kind == "date":
        words = _say_date(text, format_value, zh)
    else:
        words = _say_time(text, format_value, zh)
    return [(0, len(text), words)]


# ---- the reader ------------------------------------------------------------------------

_SILENT_ATTRIBUTES = frozenset({"xmlns", "xml:id", "xml:base", "id"})
_ALPHABETS = {"ipa": "ipa", "x-sampa": "x-sampa", "xsampa": "x-sampa", "sampa": "x-sampa"}


@dataclass(frozen=True, slots=True)
class _Context:
    voicing: Voicing = PLAIN
    lang: str | None = None


_RunKey = tuple[Voicing, bool, str | None]


class _Run:
    """Text being gathered into one :class:`Speech`: its parts and their map pieces (built
    directly: the reader adds them in source order, as :class:`MapBuilder` would)."""

    __slots__ = ("key", "last", "length", "pieces", "position", "texts")

    def __init__(self, key: _RunKey) -> None:
        self.key = key
        self.texts: list[str] = []
        self.pieces: list[Piece] = []
        self.length = 0
        self.position = 0
        """Where the map has reached in the source."""
        self.last = ""
        """The last character of the text."""

    def add(self, text: str, src_start: int, src_end: int, *, exact: bool) -> None:
        if not text:
            return
        end = self.length + len(text)
        last = self.pieces[-1] if self.pieces else None
        if exact and last is not None and last.exact and last.src_end == src_start:
            self.pieces[-1] = Piece(last.out_start, end, last.src_start, src_end, True)
        else:
            self.pieces.append(Piece(self.length, end, src_start, src_end, exact))
        self.texts.append(text)
        self.length = end
        self.position = src_end
        self.last = text[-1]

    def speech(self, source_length: int) -> Speech:
        voicing, verbatim, lang = self.key
        mapped = Mapped("".join(self.texts), tuple(self.pieces), source_length)
        return Speech(mapped, voicing, verbatim, None, lang)


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[SsmlItem] = []
        self.warnings: list[SsmlWarning] = []
        self._run: _Run | None = None
        self._spoken = False
        """Something was spoken since the last boundary."""
        self._last_boundary: int | None = None
        self._handlers: dict[str, Callable[[XmlElement, _Context], None]] = {
            "p": self._paragraph,
            "s": self._paragraph,
            "break": self._break,
            "prosody": self._prosody,
            "emphasis": self._emphasis,
            "say-as": self._say_as,
            "sub": self._sub,
            "phoneme": self._phoneme,
            "voice": self._voice,
            "mark": self._mark,
            "lang": self._lang,
            "audio": self._audio,
            "desc": self._desc,
        }

    # -- output
    def document(self) -> SsmlDocument:
        self._flush()
        return SsmlDocument(tuple(self.items), tuple(self.warnings))

    def _flush(self) -> None:
        if self._run is not None and self._run.texts:
            self.items.append(self._run.speech(len(self.source)))
        self._run = None

    def _builder(self, context: _Context, *, verbatim: bool) -> _Run:
        """The run to add text to: the current one if it reads alike, else a new one."""
        key = (context.voicing, verbatim, context.lang)
        if self._run is None or self._run.key != key:
            self._flush()
            self._run = _Run(key)
        return self._run

    def _append(self, item: SsmlItem) -> None:
        self._flush()
        self.items.append(item)

    def _warn(self, code: str, message: str, element: XmlElement) -> None:
        self.warnings.append(SsmlWarning(code, message, element.start))

    def _boundary(self, kind: Literal["sentence", "paragraph"]) -> None:
        self._flush()
        if not self._spoken:
            index = self._last_boundary
            if kind == "paragraph" and index is not None:
                self.items[index] = Boundary("paragraph")  # a sentence end that ends a paragraph
            return
        self._last_boundary = len(self.items)
        self.items.append(Boundary(kind))
        self._spoken = False

    # -- text
    def _text(self, text: XmlText, context: _Context) -> None:
        self._builder(context, verbatim=False).add(
            text.text, text.start, text.end, exact=text.exact
        )
        if not self._spoken and not text.text.isspace():
            self._spoken = True

    def _words(
        self, context: _Context, tokens: list[tuple[int, int, str]], element: XmlElement
    ) -> None:
        """Verbatim words, each token mapped to its source range; a space before / after
        where the source runs on into a letter or digit."""
        if not tokens:
            return
        run = self._builder(context, verbatim=True)
        # Spaces between Latin words; none next to Chinese (as the normalizer writes it).
        first, last = tokens[0][2], tokens[-1][2]
        before = element.start > 0 and self.source[element.start - 1].isalnum()
        before = before or bool(run.last and not run.last.isspace())
        before = before and not _cjk(first[:1]) and not _cjk(run.last or " ")
        after = element.end < len(self.source) and self.source[element.end].isalnum()
        after = after and not _cjk(last[-1:]) and not _cjk(self.source[element.end])
        for index, (token_start, token_end, words) in enumerate(tokens):
            text = words
            if index == 0 and before:
                text = " " + text
            if index + 1 < len(tokens):
                following = tokens[index + 1][2]
                text += "" if _cjk(words[-1:]) and _cjk(following[:1]) else " "
            elif after:
                text += " "
            # Never back over what is already mapped (tokens only move forward).
            start = max(token_start, run.position)
            run.add(text, start, max(start, token_end), exact=False)
        self._spoken = True

    def _content(self, element: XmlElement, what: str) -> Mapped:
        """The character data inside ``element``, mapped; markup inside it is ignored
        (a warning each)."""
        builder = MapBuilder(self.source)

        def walk(node: XmlElement) -> None:
            for child in node.children:
                if isinstance(child, XmlText):
                    if child.exact:
                        builder.keep(child.start, child.end)
                    else:
                        builder.replace(child.start, child.end, child.text)
                else:
                    self._warn(
                        "ignored-content",
                        f"<{child.tag}> inside <{what}> is ignored: only its text is read",
                        child,
                    )
                    walk(child)

        walk(element)
        return builder.build()

    # -- elements
    def read_root(self, root: XmlElement) -> None:
        if root.tag != "speak":
            _fail(root.line, root.column, f"the root element must be <speak>, not <{root.tag}>")
        context = self._attributes(root, _Context(), ("version", "xml:lang", "onlangfailure"))
        self._children(root, context)
        self._flush()

    def _children(self, element: XmlElement, context: _Context) -> None:
        for child in element.children:
            if isinstance(child, XmlText):
                self._text(child, context)
            else:
                self._element(child, context)

    def _element(self, element: XmlElement, context: _Context) -> None:
        handler = self._handlers.get(element.tag)
        if handler is None:
            if element.tag == "speak":
                why = "a nested <speak> is read as its content"
            elif element.children:
                why = f"<{element.tag}> is not supported: its content is spoken, the tag ignored"
            else:
                why = f"<{element.tag}> is not supported: ignored"
            self._warn("ignored-element", why, element)
            self._children(element, context)
            return
        handler(element, context)

    def _attributes(
        self, element: XmlElement, context: _Context, known: tuple[str, ...]
    ) -> _Context:
        """Warn about attributes not in ``known`` (namespace declarations and ids are
        silently fine); read ``xml:lang``."""
        for name in element.attrs:
            if name in known or name in _SILENT_ATTRIBUTES or name.startswith(("xmlns:", "xsi:")):
                continue
            self._warn(
                "ignored-attribute",
                f'<{element.tag}> attribute "{name}" is not supported: ignored',
                element,
            )
        lang = element.attrs.get("xml:lang")
        if lang is None:
            return context
        return replace(context, lang=self._lang_tag(element, lang))

    def _lang_tag(self, element: XmlElement, value: str) -> str:
        value = value.strip()
        if not _LANG_TAG.fullmatch(value):
            _fail(element.line, element.column, f"xml:lang={_shown(value)} is not a language tag")
        return value

    def _bad(self, element: XmlElement, attribute: str, expected: str) -> NoReturn:
        value = element.attrs.get(attribute, "")
        _fail(
            element.line,
            element.column,
            f"<{element.tag}> {attribute}={_shown(value)} is not valid: {expected}",
        )

    def _required(self, element: XmlElement, attribute: str) -> str:
        value = element.attrs.get(attribute)
        if value is None or not value.strip():
            _fail(element.line, element.column, f"<{element.tag}> needs a {attribute} attribute")
        return value

    def _no_children(self, element: XmlElement) -> None:
        if element.children:
            self._warn(
                "ignored-content",
                f"<{element.tag}> has no content: what is inside it is not spoken",
                element,
            )

    def _paragraph(self, element: XmlElement, context: _Context) -> None:
        kind: Literal["sentence", "paragraph"] = "paragraph" if element.tag == "p" else "sentence"
        context = self._attributes(element, context, ("xml:lang",))
        if self._spoken:
            self._boundary(kind)
        self._flush()  # a run never spans the start of a paragraph or sentence
        self._children(element, context)
        self._boundary(kind)

    def _break(self, element: XmlElement, context: _Context) -> None:
        self._attributes(element, context, ("time", "strength"))
        time = element.attrs.get("time")
        strength = element.attrs.get("strength")
        if time is not None:
            match = _BREAK_TIME.fullmatch(time)
            if match is None:
                self._bad(element, "time", "a duration such as 500ms or 1.5s")
            exact_ms = float(match.group(1)) * (1000 if match.group(2).lower() == "s" else 1)
            if not exact_ms <= MAX_BREAK_MS:  # inf too (a thousand digits)
                self._bad(element, "time", f"at most {MAX_BREAK_MS // 1000} s")
            time_ms = round(exact_ms)
        elif strength is not None:
            found = BREAK_STRENGTH_MS.get(strength.strip().lower())
            if found is None:
                self._bad(element, "strength", "none, x-weak, weak, medium, strong or x-strong")
            time_ms = found
        else:
            time_ms = BREAK_STRENGTH_MS["medium"]
        self._no_children(element)
        self._append(Break(time_ms, element.start))

    def _prosody(self, element: XmlElement, context: _Context) -> None:
        inner = self._attributes(element, context, ("rate", "volume", "pitch"))
        rate, volume_db, pitch = 1.0, 0.0, 0.0
        for name, parse, expected in (
            ("rate", _parse_rate, "x-slow … x-fast, a percentage (150%, +20%) or 0.1 to 10"),
            (
                "volume",
                _parse_volume,
                "silent, x-soft … x-loud, ±N dB (-96 to +24), ±N% or 0 to 100",
            ),
            ("pitch", _parse_pitch, "x-low … x-high, ±N st, ±N%, ±N Hz (within ±24 semitones)"),
        ):
            value = element.attrs.get(name)
            if value is None:
                continue
            try:
                parsed = parse(value)
            except (_BadValueError, ValueError):
                self._bad(element, name, expected)
            if name == "rate":
                rate = parsed
            elif name == "volume":
                volume_db = parsed
            else:
                pitch = parsed
        voicing = _combine(inner.voicing, rate=rate, volume_db=volume_db, pitch_semitones=pitch)
        self._children(element, replace(inner, voicing=voicing))

    def _emphasis(self, element: XmlElement, context: _Context) -> None:
        inner = self._attributes(element, context, ("level",))
        level = element.attrs.get("level", "moderate").strip().lower()
        if level not in _EMPHASIS:
            self._bad(element, "level", "strong, moderate, none or reduced")
        rate, volume_db = _EMPHASIS[level]
        voicing = _combine(inner.voicing, rate=rate, volume_db=volume_db)
        self._children(element, replace(inner, voicing=voicing))

    def _voice(self, element: XmlElement, context: _Context) -> None:
        selectors = ("gender", "age", "variant", "languages", "required", "ordering")
        inner = self._attributes(
            element, context, ("name", "xml:lang", "onvoicefailure", *selectors)
        )
        name = element.attrs.get("name", "").strip()
        if len(name) > 200 or any(unicodedata.category(c) == "Cc" for c in name):
            self._bad(element, "name", "a voice name")
        given = [attribute for attribute in selectors if attribute in element.attrs]
        if not name:
            what = ", ".join(given + (["xml:lang"] if "xml:lang" in element.attrs else []))
            self._warn(
                "ignored-attribute",
                f"<voice> without a name ({what or 'no attributes'}): the voice is unchanged",
                element,
            )
        elif given:
            self._warn(
                "ignored-attribute",
                f"<voice> {', '.join(given)}: only the name selects the voice",
                element,
            )
        if name:
            inner = replace(inner, voicing=_combine(inner.voicing, voice=name))
        self._children(element, inner)

    def _lang(self, element: XmlElement, context: _Context) -> None:
        self._required(element, "xml:lang")
        self._children(element, self._attributes(element, context, ("xml:lang", "onlangfailure")))

    def _mark(self, element: XmlElement, context: _Context) -> None:
        self._attributes(element, context, ("name",))
        name = self._required(element, "name").strip()
        self._no_children(element)
        self._append(Mark(name, element.start))

    def _audio(self, element: XmlElement, context: _Context) -> None:
        self._warn(
            "ignored-element",
            "<audio> is not supported: its fallback text (if any) is spoken instead",
            element,
        )
        self._children(element, context)

    def _desc(self, element: XmlElement, context: _Context) -> None:
        """A description of audio for those who cannot hear it: never spoken."""

    def _sub(self, element: XmlElement, context: _Context) -> None:
        inner = self._attributes(element, context, ("alias", "xml:lang"))
        alias = " ".join(self._required(element, "alias").split())
        lang = _number_lang(inner.lang)
        words = normalize_text(alias, lang=lang).text if any(c.isdigit() for c in alias) else alias
        self._words(inner, [(element.start, element.end, words)], element)

    def _say_as(self, element: XmlElement, context: _Context) -> None:
        inner = self._attributes(element, context, ("interpret-as", "format", "detail", "xml:lang"))
        interpret = self._required(element, "interpret-as").strip().lower()
        kind = _INTERPRET_AS.get(interpret)
        if kind is None:
            self._warn(
                "ignored-attribute",
                f"say-as interpret-as={_shown(interpret)} is not supported: "
                "its content is read as text",
                element,
            )
            self._children(element, inner)
            return
        format_value = element.attrs.get("format")
        if format_value is not None and kind not in ("date", "time"):
            self._warn(
                "ignored-attribute",
                f'say-as format is read for dates and times only, not "{interpret}"',
                element,
            )
            format_value = None
        content = self._content(element, "say-as")
        text = content.text
        lead = len(text) - len(text.lstrip())
        stripped = text.strip()
        if not stripped:
            return
        zh = self._zh(inner.lang, stripped, element)
        # Full-width digits and letters read as ASCII; one character for one, so offsets hold.
        normal = "".join(_nfkc_char(char) for char in stripped)
        try:
            tokens = _say(kind, normal, format_value, zh)
        except _BadValueError:
            self._bad(
                element,
                "format",
                "a date order (mdy, dmy, ymd, md, dm, ym, my, y, m, d) "
                "or a time format (hms12, hms24)",
            )
        except _NoFitError as problem:
            _fail(
                element.line,
                element.column,
                f'say-as interpret-as="{interpret}": {_shown(stripped)} is {problem}'
                if str(problem).startswith("not")
                else f'say-as interpret-as="{interpret}": {problem}',
            )
        mapped_tokens: list[tuple[int, int, str]] = []
        for start, end, words in tokens:
            src_start, src_end = content.source_span(lead + start, lead + end)
            mapped_tokens.append((src_start, src_end, words))
        self._words(inner, mapped_tokens, element)

    def _zh(self, lang: str | None, text: str, element: XmlElement) -> bool:
        """A ``say-as`` in Chinese: by ``xml:lang``, else by its content's script, else by
        the nearest letter around it."""
        if lang is not None:
            primary = lang.replace("_", "-").split("-")[0].lower()
            if primary in _ZH_LANGS:
                return True
            if primary != "en":
                self._warn(
                    "unsupported-language",
                    f"say-as in {lang}: read in English (only English and Chinese are expanded)",
                    element,
                )
            return False
        if _HAN.search(text):
            return True
        if _LETTER.search(text):
            return False
        before = _TAG.sub(" ", self.source[max(0, element.start - 64) : element.start])
        before = before[before.rfind(">") + 1 :]
        after = _TAG.sub(" ", self.source[element.end : element.end + 64])
        after = after[: after.find("<")] if "<" in after else after
        letters = _LETTER.findall(before)
        near = letters[-1] if letters else ""
        if not near:
            following = _LETTER.search(after)
            near = following.group() if following else ""
        return bool(near) and _HAN.match(near) is not None

    def _phoneme(self, element: XmlElement, context: _Context) -> None:
        inner = self._attributes(element, context, ("alphabet", "ph", "xml:lang"))
        ph = self._required(element, "ph").strip()
        given = element.attrs.get("alphabet", "ipa")
        alphabet = _ALPHABETS.get(given.strip().lower())
        if alphabet is None:
            self._bad(element, "alphabet", "ipa or x-sampa")
        try:
            ipa = xsampa_to_ipa(ph) if alphabet == "x-sampa" else ph
            validate_ipa(ipa)
        except InvalidInputError as problem:
            reason = str(problem).removeprefix("text: ")
            _fail(element.line, element.column, f"<phoneme> ph={_shown(ph)}: {reason}")
        content = self._content(element, "phoneme")
        if not content.text.strip():
            _fail(
                element.line,
                element.column,
                "<phoneme> needs its text: it is what engines without phonemes say",
            )
        self._flush()
        self.items.append(
            Speech(content, inner.voicing, False, Phonemes(ipa, alphabet), inner.lang)
        )
        self._spoken = True


def _cjk(char: str) -> bool:
    """A Chinese character or a Chinese comma (no spaces around those)."""
    return bool(char) and (char in "，。、" or _HAN.match(char) is not None)


def _nfkc_char(char: str) -> str:
    folded = unicodedata.normalize("NFKC", char)
    return folded if len(folded) == 1 else char


def _number_lang(lang: str | None) -> Literal["auto", "en", "zh"]:
    if lang is None:
        return "auto"
    return "zh" if lang.replace("_", "-").split("-")[0].lower() in _ZH_LANGS else "en"


def read_ssml(source: str, *, max_chars: int = MAX_SSML_CHARS, field: str = "text") -> SsmlDocument:
    """``source`` read as SSML (see the module docstring);
    :class:`~voicelane.common.errors.InvalidInputError` naming the line and column of what
    is wrong (:class:`~voicelane.common.errors.TextTooLargeError`, a kind of it, for a
    document over ``max_chars``), about ``field`` (the request's name for the text: ``input``
    on the OpenAI-compatible route) and starting with it."""
    try:
        return _read(source, max_chars)
    except InvalidInputError as error:
        if field == "text":
            raise
        message = str(error).removeprefix("text: ")
        raise type(error)(f"{field}: {message}", field=field) from None


def _read(source: str, max_chars: int) -> SsmlDocument:
    try:
        root = parse_xml(
            source, max_chars=max_chars, max_depth=MAX_DEPTH, max_elements=MAX_ELEMENTS
        )
    except XmlError as error:
        message = f"text: SSML line {error.line}, column {error.column}: {error.reason}"
        if len(source) > max_chars:
            raise TextTooLargeError(message, field="text") from None
        # Not well-formed, or hostile (a DTD, entities, too deep): it cannot be read at all.
        raise MalformedRequestError(message, field="text") from None
    reader = _Reader(source)
    reader.read_root(root)
    return reader.document()
