"""How each match of :data:`~voicelane.core.normalize.patterns.PATTERN` is read, in English
or Chinese: :func:`read` returns the replacements inside the match (source ranges and their
words); what a match does not replace is kept as written (``World War`` in ``World War II``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Literal

from voicelane.core.normalize.numbers import (
    en_cardinal,
    en_digits,
    en_ordinal,
    en_plural,
    en_year,
    roman_value,
    zh_cardinal,
    zh_digits,
)
from voicelane.core.normalize.tables import (
    ABBREVIATIONS_AFTER_NAME,
    ABBREVIATIONS_ANYWHERE,
    ABBREVIATIONS_BEFORE_NAME,
    ABBREVIATIONS_BEFORE_NUMBER,
    CURRENCY_EN,
    CURRENCY_ZH,
    FRACTION_EN,
    MONTH_BY_PREFIX,
    MONTHS,
    SCALE_EN,
    SCALE_ZH,
    SYMBOL_EN,
    SYMBOL_ZH,
    TEMPERATURE_UNITS,
    UNICODE_FRACTIONS,
    UNITS,
    VERSION_CUES,
    YEN_CUES,
    YUAN_CUES,
    YUAN_EN,
    ZH_LIANG_AFTER,
    ZH_LIANG_WORDS,
    ZH_NO_LIANG_WORDS,
)
from voicelane.core.normalize.web import read_email, read_url

__all__ = ["Lang", "Replacement", "is_han", "read"]

Lang = Literal["auto", "en", "zh"]
Replacement = tuple[int, int, str]
"""``(start, end, words)``: ``text[start:end]`` is read as ``words`` (``""``: not read)."""

_LETTER = re.compile(r"[^\W\d_]")
_LAST_LETTER = re.compile(r"(?s:.*)([^\W\d_])")
_GLUED = re.compile(r"(?<![A-Za-z0-9])[A-Za-z0-9]+$")
_CONTEXT = 24
_YEAR_BEFORE = re.compile(r"(?:\b(?:in|since|by|of|from|year|years|until|till)\s+)$", re.I)
_DECADE_BEFORE = re.compile(
    r"(?:\b(?:the|their|his|her|my|your|our|early|mid|late|in)[\s-]+)$", re.I
)
_VERSION_CUES = frozenset(VERSION_CUES)
_LATIN_WORD_END = re.compile(r"[A-Za-z][A-Za-z.\-]*$")
_PHONE_BEFORE_EN = re.compile(
    r"\b(?:dial|call|phone|tel|text|fax|hotline)(?:\s+(?:us|me|him|her|them))?"
    r"(?:\s+(?:at|on))?[\s:.]*$",
    re.I,
)
_PHONE_BEFORE_ZH = re.compile(
    r"(?:拨打?|致电|电话(?:号码)?|热线|手机号?码?|号码|传真)[是为：:\s]*$"
)
_CAPITALIZED_BEFORE = re.compile(r"(?<![A-Za-z])[A-Z][A-Za-z'’-]*,?[ \u00a0]$")
_SENTENCE_END_AFTER = re.compile(r"[ \u00a0]*(?:$|[\r\n]|[ \u00a0][A-Z\u3400-\u9fff])")
_ROUND_RANGE = re.compile(r"(\d{3,4})-(\d{4})")
_CURRENCY_CUE = re.compile(
    r"\b(?:" + "|".join(re.escape(c) for c in (*YUAN_CUES, *YEN_CUES)) + r")\b"
)
_CODE_BEFORE = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]+\d+$")
_EQUALS_AFTER = re.compile(r"[ \u00a0]?[\d.]+[ \u00a0]?[=＝]")
_MINUS_AFTER = re.compile(r"[ \u00a0]?[$€£¥]?\d+(?:\.\d+)?[ \u00a0]?[=＝]")


def is_han(char: str) -> bool:
    """``char`` is a Han character (the Chinese side of every rule)."""
    return "\u3400" <= char <= "\u9fff" or "\uf900" <= char <= "\ufaff"


def _language(text: str, start: int, end: int, lang: Lang) -> bool:
    """Chinese (``True``) or English for the token ``text[start:end]``: the nearest letter
    on the left (skipping Latin letters glued to the token: ``CA1234``), else on the right; a
    Han character right after the token (or after Latin letters glued to it) decides (``5月``,
    ``35.5元``, ``3D打印``)."""
    if lang != "auto":
        return lang == "zh"
    after = end
    while after < len(text) and after - end < 4 and text[after].isascii() and text[after].isalpha():
        after += 1  # letters glued on the right: 3D打印, 5G网络
    right = _LETTER.search(text, after, after + _CONTEXT)
    if right and right.start() <= after + (after == end) and is_han(right.group()):
        return True
    edge = start
    if start and text[start - 1].isascii() and text[start - 1].isalnum():
        glued = _GLUED.search(text, max(0, start - _CONTEXT), start)
        edge = glued.start() if glued else start
    left = _LAST_LETTER.match(text, max(0, edge - _CONTEXT), edge)
    near = left.group(1) if left else (right.group() if right else "")
    return bool(near) and is_han(near)


# --- numbers ----------------------------------------------------------------------------------


def _en_number(raw: str) -> str:
    whole, _, fraction = raw.replace(",", "").partition(".")
    words = en_cardinal(whole)
    if fraction:
        words += " point " + en_digits(fraction)
    return words


def _zh_number(raw: str, *, liang: bool = False) -> str:
    whole, _, fraction = raw.replace(",", "").partition(".")
    words = zh_cardinal(whole, liang=liang and not fraction)
    if fraction:
        words += "点" + zh_digits(fraction)
    return words


def _after_version_cue(before: str) -> bool:
    """``before`` ends with a word after which a decimal is a version (``Python 3.11``)."""
    head = before[:-1] if before.endswith((" ", "\u00a0")) else before
    if head.endswith(("版本", "版")):
        return True
    word = _LATIN_WORD_END.search(head[-12:])
    return word is not None and word.group() in _VERSION_CUES


def _zh_liang(text: str, start: int, end: int) -> bool:
    """A Chinese 2 here is ``两``: a measure word follows and no ``第`` precedes."""
    if start > 0 and text[start - 1] == "第":
        return False
    after = text[end : end + 3].lstrip(" ")
    if not after or after.startswith(ZH_NO_LIANG_WORDS):
        return False
    return after[0] in ZH_LIANG_AFTER or after.startswith(ZH_LIANG_WORDS)


def _en_version_part(part: str) -> str:
    if len(part) > 1 and part.startswith("0"):
        return "oh " + en_digits(part[1:]) if len(part) == 2 else en_digits(part)
    return en_cardinal(part)


def _zh_version_part(part: str) -> str:
    return zh_digits(part) if len(part) > 1 and part.startswith("0") else zh_cardinal(part)


def _version(parts: list[str], zh: bool, *, minor_as_digits: bool = False) -> str:
    if zh:
        head = zh_cardinal(parts[0])
        tail = [zh_digits(p) if minor_as_digits else _zh_version_part(p) for p in parts[1:]]
        return "点".join([head, *tail])
    return " point ".join(_en_version_part(p) for p in parts)


def _number(m: re.Match[str], text: str, zh: bool) -> str:
    raw, sign = m.group("n"), m.group("sign")
    start, end = m.start("n"), m.end()
    before = text[max(0, start - 30) : start]
    plain = raw.isdigit()
    if "." in raw and "," not in raw and _after_version_cue(before):
        return _version(raw.split("."), zh, minor_as_digits=True)
    glued = 0
    while (
        glued < 4
        and start - glued > 0
        and text[start - glued - 1].isascii()
        and (text[start - glued - 1].isalpha())
    ):
        glued += 1
    letters = text[start - glued : start]
    code = (
        glued > 0
        and plain
        and (len(raw) >= 5 or (2 <= glued <= 3 and letters.isupper() and 3 <= len(raw) <= 4))
    )
    phone = (
        plain
        and len(raw) >= 3
        and ((_PHONE_BEFORE_ZH if zh else _PHONE_BEFORE_EN).search(before) is not None)
    )
    if code or phone or (plain and len(raw) > 1 and raw.startswith("0")):
        return zh_digits(raw) if zh else en_digits(raw)
    if zh:
        return ("负" if sign else "") + _zh_number(raw, liang=_zh_liang(text, start, end))
    year = plain and len(raw) == 4 and 1100 <= int(raw) <= 2099 and not sign
    if year and _YEAR_BEFORE.search(before[-12:]):
        return en_year(raw)
    return ("minus " if sign else "") + _en_number(raw)


# --- dates and times -------------------------------------------------------------------------


def _month_number(name: str) -> int:
    return MONTH_BY_PREFIX[name[:3]]


def _en_date(month: int, day: int, year: str | None) -> str:
    words = f"{MONTHS[month - 1]} {en_ordinal(str(day))}"
    return words + (f", {_en_year_any(year)}" if year else "")


def _en_year_any(year: str) -> str:
    if len(year) == 2:
        return "oh " + en_digits(year[1]) if year[0] == "0" else en_cardinal(year)
    return en_year(year)


def _zh_date(year: str | None, month: int, day: int) -> str:
    head = f"{zh_digits(year)}年" if year else ""
    return f"{head}{zh_cardinal(str(month))}月{zh_cardinal(str(day))}日"


def _time(m: re.Match[str], zh: bool) -> str:
    hour, minute, second = int(m.group("th")), m.group("tm"), m.group("ts")
    if zh:
        words = f"{zh_cardinal(str(hour))}点"
        words += f"{zh_cardinal(minute)}分" if minute != "00" else ""
        return words + (f"{zh_cardinal(second)}秒" if second else "")
    words = en_cardinal(str(hour))
    if minute == "00":
        words += " o'clock" if not second else " hundred"
    elif minute[0] == "0":
        words += " oh " + en_cardinal(minute)
    else:
        words += " " + en_cardinal(minute)
    return words + (f" and {en_cardinal(second)} seconds" if second else "")


def _year_range(m: re.Match[str], text: str, zh: bool) -> str:
    a, b = m.group("ya"), m.group("yb")
    years = 1000 <= int(a) < int(b) <= 2099
    if zh and (years or text[m.end() : m.end() + 1] == "年"):
        return f"{zh_digits(a)}到{zh_digits(b)}"
    if years:
        return f"{en_year(a)} to {en_year(b)}"
    if int(a) < int(b) and a.endswith("0") and b.endswith("0"):
        if zh:
            liang = _zh_liang(text, m.start(), m.end())
            return f"{zh_cardinal(a)}到{zh_cardinal(b, liang=liang)}"
        return f"{en_cardinal(a)} to {en_cardinal(b)}"
    return zh_digits(a + b) if zh else en_digits(a + b)


def _decade(m: re.Match[str], text: str, zh: bool) -> str:
    digits = m.group("dec")
    if zh:
        return (zh_digits(digits) if len(digits) == 4 else zh_cardinal(digits)) + "年代"
    if len(digits) == 4 and 1100 <= int(digits) <= 2099:
        return en_plural(en_year(digits))
    if digits.endswith("00"):
        words = en_cardinal(digits)
        return en_plural(words.removeprefix("one "))
    before = text[max(0, m.start() - 12) : m.start()]
    if m.group().startswith(("'", "’")) or _DECADE_BEFORE.search(before):
        return en_plural(en_cardinal(digits))
    return en_cardinal(digits) + " seconds"


# --- money, percentages, fractions, units ------------------------------------------------------


def _is_yuan(text: str, at: int) -> bool:
    """A ``¥`` at ``at`` is a yuan: the nearest currency cue within 80 characters says so."""
    lo = max(0, at - 80)
    nearest: tuple[int, bool] | None = None
    for cue in _CURRENCY_CUE.finditer(text, lo, at + 80):
        distance = abs(cue.start() - at)
        if nearest is None or distance < nearest[0]:
            nearest = (distance, cue.group() in YUAN_CUES)
    return nearest is not None and nearest[1]


def _money(m: re.Match[str], text: str, zh: bool) -> str:
    currency, amount, scale = m.group("cur"), m.group("mn"), m.group("scale") or ""
    key = scale.lower()[:1] if len(scale) == 1 else scale.lower()
    if zh:
        liang = not scale
        return _zh_number(amount, liang=liang) + SCALE_ZH.get(key, "") + CURRENCY_ZH[currency]
    names = CURRENCY_EN[currency]
    if currency == "¥" and _is_yuan(text, m.start()):
        names = YUAN_EN
    one, many, sub_one, sub_many = names
    whole, _, fraction = amount.replace(",", "").partition(".")
    if scale:
        return f"{_en_number(amount)} {SCALE_EN.get(key, scale.lower())} {many}"
    if fraction and len(fraction) <= 2 and sub_one:
        cents = int(fraction.ljust(2, "0"))
        parts: list[str] = []
        if int(whole or "0") or not cents:
            parts.append(f"{en_cardinal(whole or '0')} {one if int(whole) == 1 else many}")
        if cents and currency == "£" and parts:
            return f"{parts[0]} {en_cardinal(str(cents))}"
        if cents:
            parts.append(f"{en_cardinal(str(cents))} {sub_one if cents == 1 else sub_many}")
        return " and ".join(parts)
    return f"{_en_number(amount)} {one if amount == '1' else many}"


def _percent(m: re.Match[str], zh: bool) -> str:
    amount, negative, mille = m.group("pn"), bool(m.group("psign")), m.group("pc") == "‰"
    if zh:
        return ("负" if negative else "") + ("千分之" if mille else "百分之") + _zh_number(amount)
    words = _en_number(amount) + (" per mille" if mille else " percent")
    return ("minus " if negative else "") + words


def _en_fraction(top: int, bottom: int) -> str:
    one, many = FRACTION_EN.get(bottom, (en_ordinal(str(bottom)), en_ordinal(str(bottom)) + "s"))
    return f"{en_cardinal(str(top))} {one if top == 1 else many}"


def _fraction(m: re.Match[str], zh: bool) -> str:
    raw_top, raw_bottom = m.group("fa"), m.group("fb")
    top, bottom = int(raw_top), int(raw_bottom)
    date_like = top <= 12 and 13 <= bottom <= 31 and math.gcd(top, bottom) > 1
    if zh:
        if date_like:  # 5/20: May 20th
            return f"{zh_cardinal(raw_top)}月{zh_cardinal(raw_bottom)}日"
        return f"{zh_cardinal(raw_bottom)}分之{zh_cardinal(raw_top)}"
    if m.group() in ("24/7", "50/50") or date_like:
        return f"{en_cardinal(raw_top)} {en_cardinal(raw_bottom)}"
    if bottom == 0:
        return f"{en_cardinal(raw_top)} over zero"
    if bottom == 1:
        return f"{en_cardinal(raw_top)} over one"
    if bottom <= 10 or bottom in (12, 16, 20, 32, 64, 100):
        return _en_fraction(top, bottom)
    if top <= 12 and bottom <= 31:
        return f"{en_cardinal(raw_top)} {en_cardinal(raw_bottom)}"  # 9/11
    return f"{en_cardinal(raw_top)} over {en_cardinal(raw_bottom)}"


def _mixed(m: re.Match[str], zh: bool) -> str:
    whole = m.group("mw")
    if m.group("mu"):
        top, bottom = UNICODE_FRACTIONS[m.group("mu")]
    else:
        top, bottom = int(m.group("ma")), int(m.group("mb"))
    if zh:
        fraction = f"{zh_cardinal(str(bottom))}分之{zh_cardinal(str(top))}"
        return f"{zh_cardinal(whole)}又{fraction}"
    if bottom == 0:
        return f"{en_cardinal(whole)} and {en_cardinal(str(top))} over zero"
    if top == 1 and bottom in (2, 4):
        fraction = "a half" if bottom == 2 else "a quarter"
    else:
        fraction = _en_fraction(top, bottom)
    return f"{en_cardinal(whole)} and {fraction}"


def _unit(m: re.Match[str], text: str, zh: bool) -> str:
    raw, sign, symbol = m.group("un"), bool(m.group("usign")), m.group("u")
    unit = UNITS[symbol]
    if zh:
        if sign:
            head = "零下" if symbol in TEMPERATURE_UNITS else "负"
            return head + _zh_number(raw) + unit.zh
        liang = unit.liang and not (m.start() > 0 and text[m.start() - 1] == "第")
        return _zh_number(raw, liang=liang) + unit.zh
    words = _en_number(raw)
    return ("minus " if sign else "") + f"{words} {unit.one if raw == '1' else unit.many}"


# --- Roman numerals, abbreviations ------------------------------------------------------------


def _roman(m: re.Match[str]) -> list[Replacement]:
    numeral = m.group("rn")
    value = roman_value(numeral)
    single = len(numeral) == 1
    if m.group("rmulti") and single:
        return []
    if single and numeral not in "IVX":
        return []
    if m.group("rname") and numeral == "I":
        return []  # "Henry I said": a pronoun; "King Henry I" has a title
    if m.group("rtitle") or m.group("rname"):
        words = "the " + en_ordinal(str(value))
    else:
        words = en_cardinal(str(value))
    return [(m.start("rn"), m.end("rn"), words)]


def _after_name(text: str, at: int) -> bool:
    """A capitalized word that does not open the sentence ends right before ``at`` (``on
    Main St.``, not ``Visit St. Louis``)."""
    word = _CAPITALIZED_BEFORE.search(text, max(0, at - 30), at)
    if word is None:
        return False
    opening = text[max(0, word.start() - 3) : word.start()].rstrip(" \u00a0\"“'‘(")
    return bool(opening) and opening[-1] not in ".!?。！？\n"


def _ends_sentence(text: str, end: int) -> bool:
    return _SENTENCE_END_AFTER.match(text, end) is not None


def _abbreviation(m: re.Match[str], text: str, zh: bool) -> list[Replacement]:
    kind = m.lastgroup
    if kind == "abefore":
        key, dot = m.group("abt"), m.group("abtdot")
        if not dot and key not in ("Mr", "Mrs", "Ms", "Dr", "St", "Mt"):
            return []
        if dot and key in ABBREVIATIONS_AFTER_NAME and _after_name(text, m.start()):
            end = m.end() - 1 if _ends_sentence(text, m.end()) else m.end()
            return [(m.start(), end, ABBREVIATIONS_AFTER_NAME[key])]  # Elm St. Then
        return [(m.start(), m.end(), ABBREVIATIONS_BEFORE_NAME[key])]
    if kind == "aafter":
        key = m.group("aat")
        if not _after_name(text, m.start()):
            return []
        end = m.end() - 1 if _ends_sentence(text, m.end()) else m.end()
        return [(m.start(), end, ABBREVIATIONS_AFTER_NAME[key])]
    if kind == "mabbr":  # "in Jan." → "in January"; its period stays when it ends the sentence
        end = m.end() - 1 if _ends_sentence(text, m.end()) else m.end()
        return [(m.start(), end, MONTHS[_month_number(m.group("mab")) - 1])]
    if kind == "anum":  # English: the number after it reads in English too (No.007)
        return [(m.start(), m.end(), ABBREVIATIONS_BEFORE_NUMBER[m.group("ant")])]
    key = m.group("aak")
    dot = m.group("aadot")
    if not dot and key not in ("vs", "etc"):
        return []
    end = m.end()
    if dot and key == "etc" and _ends_sentence(text, m.end()):
        end -= 1  # "etc." ends the sentence: its period stays
    return [(m.start(), end, ABBREVIATIONS_ANYWHERE[key])]


# --- symbols ----------------------------------------------------------------------------------


def _range(m: re.Match[str], text: str, zh: bool) -> list[Replacement]:
    if _CODE_BEFORE.search(text, max(0, m.start() - 12), m.start()):
        return []  # x86-64, B12-3: a hyphen inside a code
    return _whole(m, _range_word(m, text, zh))


def _range_word(m: re.Match[str], text: str, zh: bool) -> str:
    if _MINUS_AFTER.match(text, m.end() - (1 if m.group().endswith((" ", "\u00a0")) else 0)):
        return "减" if zh else "minus"
    return "到" if zh else "to"


def _times(m: re.Match[str], text: str, zh: bool) -> list[Replacement]:
    start, end = m.span()
    head = text[max(0, start - 3) : start].rstrip(" \u00a0")
    if m.group() == "x" and head.endswith("0") and (len(head) < 2 or not head[-2].isalnum()):
        return []  # 0x1F: hexadecimal
    followed = text[end : end + 2].strip(" \u00a0")[:1].isdigit()
    if zh:
        return [(start, end, "乘" if followed else "倍")]
    if not followed:
        return [(start, end, "times")]
    if m.group() == "*" or _EQUALS_AFTER.match(text, end, end + 12):
        return [(start, end, "times")]
    return [(start, end, "by")]


def _slash(m: re.Match[str], text: str, zh: bool) -> list[Replacement]:
    start, end = m.span()
    left, right = text[start - 1], text[end]
    if is_han(left) or is_han(right):
        return [(start, end, "每" if left in "元块角分次个人天年月日周时秒斤克升米件台" else "或")]
    word_before = re.search(r"[A-Za-z]+$", text[max(0, start - 20) : start])
    word_after = re.match(r"[A-Za-z]+", text[end : end + 20])
    a = word_before.group() if word_before else ""
    b = word_after.group() if word_after else ""
    pair = f"{a}/{b}".lower()
    special = {"w/o": "without", "c/o": "care of", "n/a": "not applicable", "and/or": "and or"}
    if pair in special:
        return [(start - len(a), end + len(b), special[pair])]
    if a.isupper() and b.isupper():
        return [(start, end, " ")]  # A/B, TCP/IP, I/O
    return [(start, end, "或" if zh else "or")]


def _symbol(m: re.Match[str], text: str, zh: bool) -> list[Replacement]:
    start, end = m.span()
    symbol = m.group()
    note = start and text[start - 1] in "ABCDEFG"
    if symbol in "#＃" and note and (start < 2 or not text[start - 2].isalnum()):
        return [(start, end, "sharp")]  # C#, F#
    if symbol == "*":
        left = text[start - 1] if start else " "
        right = text[end] if end < len(text) else " "
        if left.isalnum() or right.isalnum() or left == "*" or right == "*":
            return []  # *emphasis*, **bold**: markup, not a star
    return [(start, end, (SYMBOL_ZH if zh else SYMBOL_EN)[symbol])]


def _feet(m: re.Match[str], text: str, zh: bool) -> str:
    feet, inches = m.group("ft"), m.group("inch")
    if zh:
        return f"{zh_cardinal(feet)}英尺{zh_cardinal(inches)}英寸"
    foot_words = "foot" if feet == "1" else "feet"
    inch_words = "inch" if inches == "1" else "inches"
    return f"{en_cardinal(feet)} {foot_words} {en_cardinal(inches)} {inch_words}"


def _power(m: re.Match[str], text: str, zh: bool) -> str:
    base, exponent = m.group("pa"), m.group("pb")
    negative = exponent.startswith("-")
    exponent = exponent.lstrip("-")
    if zh:
        return f"{zh_cardinal(base)}的{'负' if negative else ''}{zh_cardinal(exponent)}次方"
    minus = "minus " if negative else ""
    return f"{en_cardinal(base)} to the power of {minus}{en_cardinal(exponent)}"


def _compare(m: re.Match[str], zh: bool) -> str:
    return (SYMBOL_ZH if zh else SYMBOL_EN)[m.group()]


# --- dispatch ---------------------------------------------------------------------------------


def _whole(m: re.Match[str], words: str) -> list[Replacement]:
    return [(m.start(), m.end(), words)]


def _read_dates(m: re.Match[str], text: str, zh: bool) -> str:
    kind = m.lastgroup
    g = m.group
    if kind == "mdate":
        return _en_date(_month_number(g("mm1")), int(g("md1")), g("my1"))
    if kind == "myear":
        return f"{MONTHS[_month_number(g('mm2')) - 1]} {en_year(g('my2'))}"
    if kind == "dmy":
        name = MONTHS[_month_number(g("mm3")) - 1]
        words = f"the {en_ordinal(str(int(g('nd'))))} of {name}"
        return words + (f" {en_year(g('my3'))}" if g("my3") else "")
    if kind == "ymd":
        month, day = int(g("dm")), int(g("dd"))
        return _zh_date(g("dy"), month, day) if zh else _en_date(month, day, g("dy"))
    # mdy: 5/6/2024 is May 6th; 13/6/2024 and 6.5.2024 put the day first
    a, b, year = int(g("ua")), int(g("ub")), g("uy")
    month, day = (b, a) if g("us") == "." or a > 12 else (a, b)
    if month > 12:
        sep = "斜杠" if zh else " slash "
        numbers = [g("ua"), g("ub"), year]
        return sep.join(zh_cardinal(n) if zh else en_cardinal(n) for n in numbers)
    if zh:
        return (zh_digits(year) + "年" if year else "") + _zh_date(None, month, day)
    return _en_date(month, day, year)


_ENGLISH_ONLY = frozenset(
    {"mdate", "myear", "mabbr", "dmy", "roman", "abefore", "aafter", "aany", "anum", "ordinal"}
)
_SIMPLE: dict[str, Callable[[re.Match[str], str, bool], str]] = {
    "mdate": _read_dates,
    "myear": _read_dates,
    "dmy": _read_dates,
    "ymd": _read_dates,
    "mdy": _read_dates,
    "zhyear": lambda m, text, zh: zh_digits(m.group("zy")),
    "zhgen": lambda m, text, zh: zh_digits(m.group("zg")),
    "yrange": _year_range,
    "decade": _decade,
    "time": lambda m, text, zh: _time(m, zh),
    "money": _money,
    "percent": lambda m, text, zh: _percent(m, zh),
    "mixed": lambda m, text, zh: _mixed(m, zh),
    "ordinal": lambda m, text, zh: en_ordinal(m.group("on")),
    "fraction": lambda m, text, zh: _fraction(m, zh),
    "unit": _unit,
    "power": _power,
    "number": _number,
    "ratio": lambda m, text, zh: "比" if zh else "to",
    "feet": _feet,
    "compare": lambda m, text, zh: _compare(m, zh),
    "hashtag": lambda m, text, zh: "话题" if zh else "hashtag",
    "numsign": lambda m, text, zh: "第" if zh else "number",
    "email": lambda m, text, zh: read_email(m.group(), zh),
    "url": lambda m, text, zh: read_url(m.group(), zh),
}


def _phone(m: re.Match[str], text: str, zh: bool) -> str:
    raw = m.group()
    pair = _ROUND_RANGE.fullmatch(raw)
    if pair and int(pair[1]) < int(pair[2]) and pair[1][-1] == pair[2][-1] == "0":
        if zh:
            return f"{zh_cardinal(pair[1])}到{zh_cardinal(pair[2])}"
        return f"{en_cardinal(pair[1])} to {en_cardinal(pair[2])}"
    digits = "".join(c for c in raw if c.isdigit())
    spoken = zh_digits(digits) if zh else en_digits(digits)
    if raw.startswith("+"):
        spoken = ("加" if zh else "plus ") + spoken
    return spoken


def _version_match(m: re.Match[str], text: str, zh: bool) -> str:
    parts = m.group("vn").split(".")
    before = text[max(0, m.start() - 30) : m.start()]
    if len(parts) == 4 and all(int(p) <= 255 for p in parts) and not _after_version_cue(before):
        if zh:  # an IP address
            return "点".join(zh_digits(p) for p in parts)
        return " dot ".join(en_cardinal(p) for p in parts)
    return _version(parts, zh)


def read(m: re.Match[str], text: str, lang: Lang) -> list[Replacement]:
    """The replacements for match ``m`` of ``text``, in order: inside ``m``'s span, except
    that a shorthand around a slash takes its words with it (``w/o`` → ``without``)."""
    kind = m.lastgroup or ""
    zh = False if kind in _ENGLISH_ONLY else _language(text, m.start(), m.end(), lang)
    if kind in _SIMPLE:
        return _whole(m, _SIMPLE[kind](m, text, zh))
    if kind == "phone":
        return _whole(m, _phone(m, text, zh))
    if kind == "version":
        return _whole(m, _version_match(m, text, zh))
    if kind == "roman":
        return _roman(m)
    if kind in ("abefore", "aafter", "anum", "aany", "mabbr"):
        return _abbreviation(m, text, zh)
    if kind == "times":
        return _times(m, text, zh)
    if kind == "range":
        return _range(m, text, zh)
    if kind == "slash":
        return _slash(m, text, zh)
    if kind == "topic":
        start, end = m.span()
        return [(start, start + 1, "话题" if zh else "hashtag"), (end - 1, end, "")]
    return _symbol(m, text, zh)
