"""URLs and e-mail addresses read aloud, part by part: ``john.doe@example.com`` → ``john dot
doe at example dot com`` (Chinese: ``john点doe艾特example点com``).

The scheme (``https://``) is not read: listeners type the address, not the protocol. Words stay
as written; digits are read one by one (``bob123`` → ``bob one two three``); ``www`` and
two-letter domain labels are spelled (``i o``, ``u k``; ``co`` is a word)."""

from __future__ import annotations

import re

from voicelane.core.normalize.numbers import en_digits, zh_digits
from voicelane.core.normalize.tables import SPELLED_TLDS_KEPT, WEB_PUNCT_EN, WEB_PUNCT_ZH

__all__ = ["read_email", "read_url"]

_RUN = re.compile(r"[A-Za-z]+|\d+|.", re.DOTALL)


def _words(part: str, zh: bool, *, tld: str = "") -> list[str]:
    """``part`` as spoken tokens; ``tld`` is the label to spell when it has two letters."""
    punct = WEB_PUNCT_ZH if zh else WEB_PUNCT_EN
    out: list[str] = []
    for run in _RUN.findall(part):
        if run.isascii() and run.isalpha():
            spell = run.lower() == "www" or (
                run == tld and len(run) == 2 and run.lower() not in SPELLED_TLDS_KEPT
            )
            out.append(" ".join(run) if spell else run)
        elif run.isdigit():
            out.append(zh_digits(run) if zh else en_digits(run))
        elif run in punct:
            out.append(punct[run])
        elif not run.isspace():
            out.append(run)
    return out


def _join(words: list[str], zh: bool) -> str:
    """English words with spaces; in Chinese only Latin words next to each other are spaced."""
    if not zh:
        return " ".join(words)
    text = ""
    for word in words:
        if text and text[-1].isascii() and word[0].isascii():
            text += " "
        text += word
    return text


def _last_label(host: str) -> str:
    return host.rsplit(".", 1)[-1]


def read_email(address: str, zh: bool) -> str:
    """``jane.doe@example.com`` → ``jane dot doe at example dot com``."""
    local, _, domain = address.partition("@")
    punct = WEB_PUNCT_ZH if zh else WEB_PUNCT_EN
    words = [*_words(local, zh), punct["@"], *_words(domain, zh, tld=_last_label(domain))]
    return _join(words, zh)


def read_url(url: str, zh: bool) -> str:
    """``https://docs.python.org/3/`` → ``docs dot python dot org slash three slash`` (the
    scheme is not read)."""
    rest = url.split("://", 1)[1] if "://" in url else url
    host = re.split(r"[/:]", rest, maxsplit=1)[0]
    return _join(_words(rest, zh, tld=_last_label(host)), zh)
