"""The one compiled pattern of the normalizer: every category is a named alternative, tried in
order at each position (first match wins).

Speed and linear time: the pattern is four branches, each opened by an assertion on one
character, so a position that can start nothing costs a few checks (a Han character, a
lower-case letter inside a word). Every repeat is over characters that the next element cannot
take, or bounded, so nothing backtracks more than a fixed amount: a long run of ``1-1-1…`` or
``a.a.a…`` is scanned once (``bench.text_norm --speed`` times such runs).
"""

from __future__ import annotations

import re

from voicelane.core.normalize.tables import (
    ABBREVIATIONS_AFTER_NAME,
    ABBREVIATIONS_BEFORE_NAME,
    ABBREVIATIONS_BEFORE_NUMBER,
    ROMAN_CARDINAL_TITLES,
    ROMAN_CARDINAL_TITLES_MULTI,
    ROMAN_REGNAL_NAMES,
    ROMAN_REGNAL_TITLES,
    TLDS,
    UNITS,
)

__all__ = ["PATTERN"]


class _Node(dict[str, "_Node"]):
    """A trie of words; the key ``""`` marks the end of a word."""


def _alternatives(words: tuple[str, ...] | list[str]) -> str:
    """``words`` as one alternation shaped as a trie (``m(?:m|s|/s)?``): each choice starts
    with a distinct literal, so the regex engine skips the ones that cannot match with one
    comparison, and a longer word is tried before its prefix (``mm`` before ``m``)."""
    root = _Node()
    for word in set(words):
        node = root
        for char in word:
            node = node.setdefault(char, _Node())
        node[""] = _Node()
    return _trie(root)


def _trie(node: _Node) -> str:
    choices = [re.escape(char) + _trie(child) for char, child in sorted(node.items()) if char]
    if not choices:
        return ""
    body = choices[0] if len(choices) == 1 else "(?:" + "|".join(choices) + ")"
    if "" in node:
        return f"(?:{body})?" if len(choices) == 1 else body + "?"
    return body


def _with_upper(words: tuple[str, ...]) -> tuple[str, ...]:
    return words + tuple(w.upper() for w in words)


_NUM = r"\d{1,3}(?:,\d{3})+(?!\d)(?:\.\d+)?|\d+(?:\.\d+)?"
_SP = r"[ \u00a0]"
_SIGN = r"(?<![A-Za-z0-9.%‰)）万亿千百元块])[-−]"


def _month(name: str) -> str:
    return (
        rf"(?P<{name}>Jan(?:uary|\.)?|Feb(?:ruary|\.)?|Mar(?:ch|\.)?|Apr(?:il|\.)?|May"
        rf"|Jun(?:e|\.)?|Jul(?:y|\.)?|Aug(?:ust|\.)?|Sep(?:tember|t\.|t|\.)?|Oct(?:ober|\.)?"
        rf"|Nov(?:ember|\.)?|Dec(?:ember|\.)?)(?![A-Za-z])"
    )


def _day(name: str) -> str:
    return rf"(?P<{name}>3[01]|[12]\d|0?[1-9])(?:st|nd|rd|th)?"


def _year(name: str) -> str:
    return rf"(?P<{name}>1\d{{3}}|20\d{{2}})(?!\d)"


_ROMAN = r"(?=[IVXLCDM])M{0,3}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})"
_UNIT_NAMES = _alternatives(list(UNITS))
_TLD = _alternatives(TLDS)
_LABEL = r"[A-Za-z0-9-]+"
_PATH = r"(?:/(?:[A-Za-z0-9\-._~/?#@!$&*+,;=%:]*[A-Za-z0-9/_~#=&%\-])?)?"
_TITLES_BEFORE = _alternatives([*ABBREVIATIONS_BEFORE_NAME])
_TITLES_AFTER = _alternatives([*ABBREVIATIONS_AFTER_NAME])
_BEFORE_NUMBER = _alternatives([*ABBREVIATIONS_BEFORE_NUMBER])

# Words: e-mail addresses and URLs, at the start of a token of URL characters.
_WEB = rf"""
(?<![A-Za-z0-9_.%+\-@/:])(?=[A-Za-z0-9])(?:
    (?P<email>[A-Za-z0-9](?:[A-Za-z0-9._%+-]*[A-Za-z0-9])?@(?:{_LABEL}\.)+[A-Za-z]{{2,}}
        (?![A-Za-z0-9-]))
  | (?P<url>(?:(?P<scheme>(?:https?|ftp)://)(?:{_LABEL}\.)*{_LABEL}
        | www\.(?:{_LABEL}\.)+[A-Za-z]{{2,}}(?![A-Za-z0-9-])
        | (?:{_LABEL}\.)+(?:{_TLD})(?![A-Za-z0-9-]))
      (?::\d{{1,5}})?{_PATH})
)"""

# Capitalized words: dates with month names, Roman numerals after a title, abbreviations.
_CAPITAL = rf"""
(?<![A-Za-z0-9])(?=[A-Z])(?:
    (?P<mdate>{_month("mm1")}{_SP}(?:the{_SP})?{_day("md1")}(?![\d:]|[.,]\d|[A-Za-z])
        (?:,?{_SP}{_year("my1")})?)
  | (?P<myear>{_month("mm2")}{_SP}{_year("my2")})
  | (?P<mabbr>(?P<mab>Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept?|Oct|Nov|Dec)\.)
  | (?P<roman>(?:(?P<rcard>{_alternatives(_with_upper(ROMAN_CARDINAL_TITLES))})
        | (?P<rmulti>{_alternatives(_with_upper(ROMAN_CARDINAL_TITLES_MULTI))})
        | (?P<rtitle>{_alternatives(ROMAN_REGNAL_TITLES)})(?:{_SP}[A-Z][a-z]+){{1,2}}
        | (?P<rname>{_alternatives(ROMAN_REGNAL_NAMES)}))
      {_SP}(?P<rn>{_ROMAN})(?![A-Za-z0-9\-]|['’][A-Za-rt-z]))
  | (?P<abefore>(?P<abt>{_TITLES_BEFORE})(?P<abtdot>\.)?(?={_SP}[A-Z]))
  | (?P<aafter>(?P<aat>{_TITLES_AFTER})\.(?![A-Za-z0-9]))
)"""

# Lower-case words and the abbreviations read before a number.
_WORD = rf"""
(?<![A-Za-z0-9])(?=[A-Za-z])(?:
    (?P<anum>(?P<ant>{_BEFORE_NUMBER})\.{_SP}?(?=\d))
  | (?P<aany>(?P<aak>e\.g|i\.e|a\.k\.a|etc|approx|Approx|cf|incl|dept|Dept|vs)(?P<aadot>\.)?
      (?![A-Za-z0-9]))
)"""

# Numbers and symbols.
_NUMERIC = rf"""
(?=[x\d\-−+＋(（:：$€£¥%％‰=＝<>≤≥≠≈@＠#＃&＆°℃℉~～〜–—×÷½¼¾⅓⅔⅛*/^±§©®™№¢'’])(?:
    (?P<ymd>(?<![\d.])(?P<dy>\d{{4}})(?P<ds>[-/.])(?P<dm>0?[1-9]|1[0-2])(?P=ds)
        (?P<dd>0?[1-9]|[12]\d|3[01])(?!\d|\.\d))
  | (?P<mdy>(?<![\d./-])(?P<ua>0?[1-9]|[12]\d|3[01])(?P<us>[/.-])(?P<ub>0?[1-9]|[12]\d|3[01])
        (?P=us)(?P<uy>\d{{4}}|\d{{2}})(?!\d|[/.-]\d))
  | (?P<dmy>(?<![\d.])(?P<nd>3[01]|[12]\d|0?[1-9])(?:st|nd|rd|th)?{_SP}(?:of{_SP})?
        {_month("mm3")}(?:,?{_SP}{_year("my3")})?)
  | (?P<zhyear>(?<!\d)(?P<zy>\d{{4}})(?=年))
  | (?P<zhgen>(?<!\d)(?P<zg>\d0)(?=后))
  | (?P<yrange>(?<![\d.,])(?P<ya>\d{{4}}){_SP}?[-–—~～〜]{_SP}?(?P<yb>\d{{4}})(?!\d|[.,]\d))
  | (?P<decade>(?<![\d.,])['’]?(?P<dec>\d*00|(?:1\d|20)?[1-9]0)s(?![A-Za-z0-9]))
  | (?P<time>(?<![\d:])(?P<th>[01]?\d|2[0-4])[:：](?P<tm>[0-5]\d)(?:[:：](?P<ts>[0-5]\d))?
        (?![\d:]))
  | (?P<phone>(?<![0-9A-Za-z_+.])(?:
          \+\d{{1,3}}[ -]?(?:[(（]\d{{1,4}}[)）][ -]?)?\d{{1,4}}(?:[ -]\d{{2,4}}){{1,4}}
        | 1-\d{{3}}-\d{{3}}-\d{{4}}
        | [(（]\d{{2,4}}[)）][ -]?\d{{3,4}}[ -]?\d{{4}}
        | \d{{3}}-\d{{3}}-\d{{4}}
        | 0\d{{2,3}}-\d{{7,8}}
        | 0\d{{2,4}}[ ]\d{{3,4}}[ ]\d{{4}}
        | \d{{3,4}}-\d{{4}}
        | 1[3-9]\d{{9}})(?!\d))
  | (?P<money>(?P<cur>[$€£¥])[ \u00a0]?(?P<mn>{_NUM})
        (?:[ \u00a0]?(?P<scale>[KkMmBb](?![A-Za-z])|thousand|million|billion|trillion))?)
  | (?P<percent>(?P<psign>{_SIGN})?(?P<pn>{_NUM})[ \u00a0]?(?P<pc>[%％‰]))
  | (?P<mixed>(?<![\d.,/])(?P<mw>\d{{1,3}})(?:{_SP}(?P<ma>\d{{1,2}})/(?P<mb>\d{{1,2}})(?![\d/])
        | (?P<mu>[½¼¾⅓⅔⅛])))
  | (?P<ordinal>(?<![\d.])(?P<on>\d+)(?:st|nd|rd|th)(?![A-Za-z]))
  | (?P<version>(?<![\d.])(?P<vn>\d+(?:\.\d+){{2,}})(?!\d))
  | (?P<fraction>(?<![\d/])(?P<fa>\d{{1,3}})/(?P<fb>\d{{1,3}})(?![\d/]))
  | (?P<unit>(?<![A-Za-z])(?P<usign>{_SIGN})?(?P<un>{_NUM})[ \u00a0]?(?P<u>{_UNIT_NAMES})
        (?![A-Za-z0-9²]))
  | (?P<feet>(?<![\d.])(?P<ft>\d{{1,2}})['′](?P<inch>\d{{1,2}})(?:\.\d+)?["″])
  | (?P<power>(?P<pa>\d+)\^(?P<pb>-?\d+))
  | (?P<number>(?P<sign>{_SIGN})?(?P<n>{_NUM}))
  | (?P<range>(?:(?<=[\d%‰万亿千百元块℃℉°])|(?<=[\d%]{_SP})|(?<=\d[A-Za-z])|(?<=\d[A-Za-z]{{2}})
        |(?<=\d[A-Za-z]{{3}}))[-–—~～〜]
        (?:{_SP}(?=[$€£¥]?\d)|(?=[$€£¥]?\d)))
  | (?P<ratio>(?<=\d)[:：](?=\d))
  | (?P<times>(?<=\d)[x×*](?=\d)|(?<=\d{_SP})[x×*](?={_SP}\d)|(?<=\d)[x×](?![A-Za-z0-9]))
  | (?P<compare>[≤≥≠≈]|[<>]=?(?={_SP}?[-+]?\d)|(?<={_SP})[<>]=?(?={_SP}))
  | (?P<topic>[#＃](?P<tb>[^#＃\s]{{1,40}})[#＃])
  | (?P<hashtag>[#＃](?=[^\W\d_]))
  | (?P<numsign>[#＃](?=\d))
  | (?P<slash>(?<=[A-Za-z\u3400-\u9fff])/(?=[A-Za-z\u3400-\u9fff]))
  | (?P<symbol>[&＆+＋=＝@＠#＃°~～×÷½¼¾⅓⅔⅛*%％‰±≈§©®™№℃℉$€£¥¢])
)"""

PATTERN = re.compile("|".join((_WEB, _CAPITAL, _WORD, _NUMERIC)), re.VERBOSE)
"""Every category, one named group each (see :mod:`voicelane.core.normalize.readers`)."""
