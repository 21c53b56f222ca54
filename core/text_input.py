"""Turning untrusted bytes into text to speak, or a one-line error saying why not.

Rules, in order:

* no bytes at all → "input is empty";
* a NUL byte, or more than 1% control characters, → "input looks binary": speech engines
  expect text, and a binary file read as text is almost always a mistake;
* invalid UTF-8 → the offset of the first bad byte (a UTF-8 byte-order mark is dropped);
  text that arrived decoded (JSON) with a lone surrogate (``"\ud800"``) cannot be stored
  or spoken either → its offset;
* the remaining control characters (other than tab, line feed, carriage return, form feed,
  vertical tab) are removed: they cannot be spoken;
* only whitespace → "input has no text to speak";
* more than ``max_chars`` characters → :class:`~voicelane.common.errors.TextTooLargeError`.
"""

from __future__ import annotations

import re

from voicelane.common.errors import InvalidInputError, TextTooLargeError

BOM = "\ufeff"
CONTROL_CHARS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")
"""Control characters that cannot be spoken (tab, LF, VT, FF and CR are whitespace)."""
BINARY_CONTROL_RATIO = 0.01
"""More control characters than this share of the text: binary, not text."""


def decode_text(
    data: bytes, *, max_chars: int, source: str = "input", field: str | None = None
) -> str:
    """Decode and check ``data``; raises :class:`InvalidInputError` (one line) when unusable.
    ``source`` names the input in messages; ``field`` is the request field it came in."""
    if not data:
        raise InvalidInputError(f"{source} is empty", field=field)
    nul = data.find(b"\x00")
    if nul >= 0:
        raise InvalidInputError(
            f"{source} looks binary (NUL byte at offset {nul}); expected text", field=field
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidInputError(
            f"{source} is not valid UTF-8 (byte 0x{data[error.start]:02x} at offset {error.start})",
            field=field,
        ) from None
    return check_text(text, max_chars=max_chars, source=source, field=field)


def check_encodable(text: str, *, source: str = "text", field: str | None = None) -> str:
    """``text`` unless it holds a lone surrogate (JSON's ``"\ud800"``), which no UTF-8 store
    or engine can take: then InvalidInputError with its offset."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidInputError(
            f"{source} is not valid Unicode (a lone surrogate at offset {error.start})",
            field=field,
        ) from None
    return text


def check_strings_encodable(value: object, *, path: tuple[str, ...] = ()) -> None:
    """Every string in decoded JSON (keys and values, at any depth) passes
    :func:`check_encodable`: InvalidInputError names the top-level field (``field``) and the
    dotted path and offset (``messages.0.content is not valid Unicode (... offset 4)``)."""
    if isinstance(value, str):
        check_encodable(value, source=".".join(path) or "body", field=path[0] if path else None)
    elif isinstance(value, dict):
        for key, item in value.items():
            where = ".".join(path) or "body"
            check_encodable(str(key), source=f"a key in {where}", field=path[0] if path else None)
            check_strings_encodable(item, path=(*path, str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_strings_encodable(item, path=(*path, str(index)))


def check_text(text: str, *, max_chars: int, source: str = "text", field: str | None = None) -> str:
    """The same checks for text that arrived already decoded (JSON, command line)."""
    check_encodable(text, source=source, field=field)
    text = text.removeprefix(BOM)
    controls = len(CONTROL_CHARS.findall(text))
    if "\x00" in text or (controls and controls > BINARY_CONTROL_RATIO * len(text)):
        raise InvalidInputError(
            f"{source} looks binary ({controls} control characters)", field=field
        )
    if controls:
        text = CONTROL_CHARS.sub("", text)
    if not text.strip():
        raise InvalidInputError(f"{source} has no text to speak", field=field)
    if len(text) > max_chars:
        raise TextTooLargeError(
            f"{source} has {len(text):,} characters; the limit is {max_chars:,}", field=field
        )
    return text
