"""Text normalization: numbers and symbols become the words a reader would say.

:func:`normalize_text` rewrites, in one left-to-right pass of one compiled pattern, every
number and symbol it knows, in Chinese or English: the language of a token is that of the
nearest letter on either side within the sentence (a Han character: Chinese; else English),
unless ``lang`` forces one. Every rewrite is mapped back to its source
(:class:`~voicelane.core.text_map.Mapped`), so ``$3.5M`` is one span spoken as five words.

Categories (first match wins, in this order), en / zh:

* ISO dates ``2024-05-06``: ``May sixth, twenty twenty-four`` / ``二零二四年五月六日``;
* Chinese years ``2024年``: ``二零二四年``;
* times ``14:30``, ``9:05``, ``10:30:15``: ``fourteen thirty``, ``nine oh five`` / ``十四点三十分``;
* phone numbers (``+1 (555) 010-9999``, ``010-12345678``, 11-digit mobiles ``13800138000``):
  digit by digit;
* money ``$3.5M``, ``€20``, ``£5``, ``¥100``: ``three point five million dollars``;
* percentages ``15%``: ``fifteen percent`` / ``百分之十五``;
* ordinals ``21st``: ``twenty-first``;
* fractions ``3/4``: ``three fourths`` / ``四分之三``;
* years ``in 1999``: four-digit numbers from 1100 to 2099 after in/since/by/of/from/year(s)
  or before ``s`` (``1990s``) read as years;
* numbers with thousands separators, decimals and signs: ``-1,234.5``:
  ``minus one thousand two hundred thirty-four point five`` / ``负一千二百三十四点五``;
  digit runs over 15 digits are read digit by digit; ``2个`` reads ``两个``;
* symbols: ``& + = @ # ° ~ × ÷ ½ ¼ ¾`` → ``and plus equals at number degrees about times
  divided by one half one quarter three quarters`` / ``和 加 等于 艾特 号 度 约 乘 除以
  二分之一...``.

Never raises on any ``str``; runs in linear time (no nested quantifiers that backtrack).
"""

from __future__ import annotations

import re
from typing import Literal

from voicelane.core.normalize.numbers import (
    en_cardinal,
    en_digits,
    en_ordinal,
    en_year,
    zh_cardinal,
    zh_digits,
)
from voicelane.core.text_map import MapBuilder, Mapped

__all__ = ["normalize_text"]

Lang = Literal["auto", "en", "zh"]

_SCALES = r"[KkMmBb](?![a-zA-Z])|thousand|million|billion|trillion"
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_PATTERN = re.compile(
    rf"""
    (?P<date>(?<!\d)(?P<dy>\d{{4}})-(?P<dm>0?[1-9]|1[0-2])-(?P<dd>0?[1-9]|[12]\d|3[01])(?!\d))
  | (?P<zhyear>(?<!\d)(?P<zy>\d{{4}})(?=年))
  | (?P<time>(?<![\d:])(?P<th>[01]?\d|2[0-3]):(?P<tm>[0-5]\d)(?::(?P<ts>[0-5]\d))?(?![\d:]))
  | (?P<phone>(?<![\d\w])(?:\+\d{{1,3}}[ -]?)?(?:\(\d{{2,4}}\)[ -]?)?\d{{3,4}}-\d{{4}}(?!\d)
      |(?<!\d)\+\d{{1,3}}[ -]?\(?\d{{2,4}}\)?[ -]?\d{{3,4}}[ -]?\d{{3,4}}(?!\d)
      |(?<![\d.,])1[3-9]\d{{9}}(?![\d.,]))
  | (?P<money>(?P<cur>[$€£¥])\s?(?P<mn>{_NUM})(?:\s?(?P<scale>{_SCALES}))?)
  | (?P<percent>(?P<pn>-?(?:{_NUM}))\s?%)
  | (?P<ordinal>(?<![\d.])(?P<on>\d+)(?:st|nd|rd|th)(?![a-zA-Z]))
  | (?P<fraction>(?<![\d/])(?P<fa>\d{{1,3}})/(?P<fb>\d{{1,3}})(?![\d/]))
  | (?P<number>(?P<sign>(?<![\w.])-)?(?P<n>{_NUM}))
  | (?P<symbol>[&+=@#°~×÷½¼¾])
    """,
    re.VERBOSE,
)
_HAN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_LETTER = re.compile(r"[^\W\d_]")
_YEAR_BEFORE = re.compile(r"(?:\b(?:in|since|by|of|from|year|years|until|till)\s+)$", re.I)
_CONTEXT = 24
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
_CURRENCY_EN = {
    "$": ("dollar", "dollars"),
    "€": ("euro", "euros"),
    "£": ("pound", "pounds"),
    "¥": ("yen", "yen"),
}
_CURRENCY_ZH = {"$": "美元", "€": "欧元", "£": "英镑", "¥": "元"}
_SCALE_EN = {"k": "thousand", "m": "million", "b": "billion"}
_SCALE_ZH = {
    "k": "千",
    "m": "百万",
    "b": "十亿",
    "thousand": "千",
    "million": "百万",
    "billion": "十亿",
    "trillion": "万亿",
}
_SYMBOL_EN = {
    "&": "and",
    "+": "plus",
    "=": "equals",
    "@": "at",
    "#": "number",
    "°": "degrees",
    "~": "about",
    "×": "times",
    "÷": "divided by",
    "½": "one half",
    "¼": "one quarter",
    "¾": "three quarters",
}
_SYMBOL_ZH = {
    "&": "和",
    "+": "加",
    "=": "等于",
    "@": "艾特",
    "#": "号",
    "°": "度",
    "~": "约",
    "×": "乘",
    "÷": "除以",
    "½": "二分之一",
    "¼": "四分之一",
    "¾": "四分之三",
}
_FRACTION_EN = {2: ("half", "halves"), 4: ("quarter", "quarters")}
_MEASURE_AFTER_ZH = re.compile(r"^\s?[个只位本条张件次天年]")


def _language(text: str, start: int, end: int, lang: Lang) -> Literal["en", "zh"]:
    if lang != "auto":
        return lang
    before = text[max(0, start - _CONTEXT) : start]
    after = text[end : end + _CONTEXT]
    left = [m.group() for m in _LETTER.finditer(before)]
    right = _LETTER.search(after)
    near = left[-1] if left else (right.group() if right else "")
    if right and right.start() <= 1 and _HAN.match(right.group()):
        near = right.group()  # "5月", "35.5元": a unit right after decides
    return "zh" if near and _HAN.match(near) else "en"


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


def _speak(match: re.Match[str], text: str, lang: Lang) -> str:
    kind = match.lastgroup
    g = match.group
    zh = _language(text, match.start(), match.end(), lang) == "zh"
    if kind == "date":
        month, day = int(g("dm")), int(g("dd"))
        if zh:
            return f"{zh_digits(g('dy'))}年{zh_cardinal(str(month))}月{zh_cardinal(str(day))}日"
        return f"{_MONTHS[month - 1]} {en_ordinal(str(day))}, {en_year(g('dy'))}"
    if kind == "zhyear":
        return zh_digits(g("zy"))
    if kind == "time":
        hour, minute, second = int(g("th")), g("tm"), g("ts")
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
    if kind == "phone":
        digits = re.sub(r"\D", "", g())
        spoken = zh_digits(digits) if zh else en_digits(digits)
        if g().startswith("+"):
            spoken = ("加" if zh else "plus ") + spoken
        return spoken
    if kind == "money":
        currency, amount, scale = g("cur"), g("mn"), (g("scale") or "")
        key = scale.lower()[:1] if len(scale) == 1 else scale.lower()
        if zh:
            return _zh_number(amount) + _SCALE_ZH.get(key, "") + _CURRENCY_ZH[currency]
        one, many = _CURRENCY_EN[currency]
        words = _en_number(amount)
        if scale:
            words += " " + _SCALE_EN.get(key, scale.lower())
        return f"{words} {one if amount == '1' and not scale else many}"
    if kind == "percent":
        amount = g("pn")
        negative = amount.startswith("-")
        amount = amount.lstrip("-")
        if zh:
            return ("负" if negative else "") + "百分之" + _zh_number(amount)
        return ("minus " if negative else "") + _en_number(amount) + " percent"
    if kind == "ordinal":
        return ("第" + zh_cardinal(g("on"))) if zh else en_ordinal(g("on"))
    if kind == "fraction":
        top, bottom = int(g("fa")), int(g("fb"))
        if zh:
            return f"{zh_cardinal(str(bottom))}分之{zh_cardinal(str(top))}"
        if bottom == 0:
            return f"{en_cardinal(str(top))} over zero"
        if bottom == 1:
            return f"{en_cardinal(str(top))} over one"
        one, many = _FRACTION_EN.get(
            bottom, (en_ordinal(str(bottom)), en_ordinal(str(bottom)) + "s")
        )
        return f"{en_cardinal(str(top))} {one if top == 1 else many}"
    if kind == "number":
        raw = g("n")
        sign = g("sign")
        if zh:
            liang = _MEASURE_AFTER_ZH.match(text[match.end() : match.end() + 2]) is not None
            return ("负" if sign else "") + _zh_number(raw, liang=liang)
        plain = raw.isdigit()
        if plain and len(raw) == 4 and 1100 <= int(raw) <= 2099 and not sign:
            before = text[max(0, match.start() - 12) : match.start()]
            after = text[match.end() : match.end() + 1]
            if _YEAR_BEFORE.search(before) or after == "s":
                return en_year(raw)
        return ("minus " if sign else "") + _en_number(raw)
    symbol = g()
    return (_SYMBOL_ZH if zh else _SYMBOL_EN)[symbol]


def normalize_text(text: str, *, lang: Lang = "auto") -> Mapped:
    """``text`` with its numbers and symbols as words, mapped back to ``text``."""
    builder = MapBuilder(text)
    position = 0
    for match in _PATTERN.finditer(text):
        start, end = match.span()
        spoken = _speak(match, text, lang)
        builder.keep(position, start)
        # Words need spaces around them in Latin text: "5km" -> "five km".
        if not _HAN.search(spoken):
            if start > 0 and text[start - 1].isalnum():
                spoken = " " + spoken
            if end < len(text) and text[end].isalnum():
                spoken += " "
        builder.replace(start, end, spoken)
        position = end
    builder.keep(position, len(text))
    return builder.build()
