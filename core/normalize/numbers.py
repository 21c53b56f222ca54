"""Numbers read aloud: English (:func:`en_cardinal`, :func:`en_ordinal`, :func:`en_year`,
:func:`en_plural`) and Chinese (:func:`zh_cardinal`, :func:`zh_digits`), and the value of a
Roman numeral (:func:`roman_value`). Digit strings longer than :data:`MAX_CARDINAL_DIGITS` are
read digit by digit."""

from __future__ import annotations

MAX_CARDINAL_DIGITS = 15

_ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand"))
_ORDINAL_WORDS = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}
_ZH_DIGITS = "零一二三四五六七八九"
_ZH_UNITS = ("", "十", "百", "千")


def _en_below_1000(n: int) -> str:
    words: list[str] = []
    if n >= 100:
        words.append(f"{_ONES[n // 100]} hundred")
        n %= 100
    if n >= 20:
        words.append(_TENS[n // 10] + (f"-{_ONES[n % 10]}" if n % 10 else ""))
    elif n or not words:
        words.append(_ONES[n])
    return " ".join(words)


def en_digits(digits: str) -> str:
    return " ".join(_ONES[int(d)] for d in digits if d.isdigit())


def en_cardinal(digits: str) -> str:
    """``"1234"`` → ``one thousand two hundred thirty-four``."""
    digits = digits.lstrip("0") or "0"
    if len(digits) > MAX_CARDINAL_DIGITS:
        return en_digits(digits)
    n = int(digits)
    if n < 1000:
        return _en_below_1000(n)
    words: list[str] = []
    for value, name in _SCALES:
        if n >= value:
            words.append(f"{_en_below_1000(n // value)} {name}")
            n %= value
    if n:
        words.append(_en_below_1000(n))
    return " ".join(words)


def en_ordinal(digits: str) -> str:
    """``"21"`` → ``twenty-first``."""
    words = en_cardinal(digits)
    head, sep, last = (
        words.rpartition("-") if "-" in words.split(" ")[-1] else words.rpartition(" ")
    )
    if last in _ORDINAL_WORDS:
        last = _ORDINAL_WORDS[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return head + sep + last


def en_year(digits: str) -> str:
    """``"1999"`` → ``nineteen ninety-nine``; ``"2005"`` → ``two thousand five``."""
    n = int(digits)
    if len(digits) != 4 or n % 1000 < 10 or (n % 100 == 0 and n % 1000 == 0):
        return en_cardinal(digits)
    high, low = divmod(n, 100)
    if low == 0:
        return f"{_en_below_1000(high)} hundred"
    if low < 10:
        return f"{_en_below_1000(high)} oh {_ONES[low]}"
    return f"{_en_below_1000(high)} {_en_below_1000(low)}"


def en_plural(words: str) -> str:
    """The last number word made plural: ``nineteen ninety`` → ``nineteen nineties``,
    ``two thousand`` → ``two thousands`` (decades: ``1990s``, ``80s``)."""
    if words.endswith("y"):
        return words[:-1] + "ies"
    if words.endswith("x"):
        return words + "es"
    return words + "s"


_ROMAN_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def roman_value(numeral: str) -> int:
    """``"XIV"`` → 14 (subtractive pairs; the caller checks the numeral's form); 0 when
    ``numeral`` holds anything but ``IVXLCDM``."""
    total = 0
    previous = 0
    for char in reversed(numeral):
        value = _ROMAN_VALUES.get(char, 0)
        if value == 0:
            return 0
        total += -value if value < previous else value
        previous = max(previous, value)
    return total


def zh_digits(digits: str) -> str:
    """Digit by digit: ``"2024"`` → ``二零二四``."""
    return "".join(_ZH_DIGITS[int(d)] for d in digits if d.isdigit())


def _zh_below_10000(n: int, *, leading: bool) -> str:
    out: list[str] = []
    zero = False
    for power in (3, 2, 1, 0):
        digit = n // 10**power % 10
        if digit == 0:
            zero = bool(out)
            continue
        if zero:
            out.append("零")
            zero = False
        if digit == 1 and power == 1 and not out and leading:
            out.append("十")
        else:
            out.append(_ZH_DIGITS[digit] + _ZH_UNITS[power])
    return "".join(out)


def zh_cardinal(digits: str, *, liang: bool = False) -> str:
    """``"105"`` → ``一百零五``; ``"20000"`` → ``二万`` (``liang``: ``两万``, ``两个``)."""
    digits = digits.lstrip("0") or "0"
    if len(digits) > MAX_CARDINAL_DIGITS:
        return zh_digits(digits)
    n = int(digits)
    if n == 0:
        return "零"
    groups: list[int] = []
    while n:
        n, group = divmod(n, 10000)
        groups.append(group)
    out = ""
    names = ("", "万", "亿", "万亿")
    pending_zero = False
    for index in range(len(groups) - 1, -1, -1):
        group = groups[index]
        if group == 0:
            pending_zero = bool(out)
            continue
        if out and (pending_zero or group < 1000):
            out += "零"
        out += _zh_below_10000(group, leading=not out) + names[index]
        pending_zero = False
    if liang and out.startswith("二") and not out.startswith("二十"):
        out = "两" + out[1:]
    return out
