"""voicelane.core.text_input: untrusted bytes → text, or a one-line error."""

from __future__ import annotations

import pytest

from voicelane.common.errors import InvalidInputError, TextTooLargeError
from voicelane.core.text_input import check_strings_encodable, check_text, decode_text

LIMIT = 1000


def test_plain_utf8_passes_through() -> None:
    assert decode_text("Hello 你好\n".encode(), max_chars=LIMIT) == "Hello 你好\n"


def test_bom_is_dropped() -> None:
    assert decode_text(b"\xef\xbb\xbfHi", max_chars=LIMIT) == "Hi"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "is empty"),
        (b"   \n\t \r\n", "no text to speak"),
        (b"ab\x00cd", r"looks binary \(NUL byte at offset 2\)"),
        (b"caf\xe9 au lait", r"not valid UTF-8 \(byte 0xe9 at offset 3\)"),
        (bytes(range(1, 32)) * 10, "looks binary"),
    ],
)
def test_bad_input_is_one_clear_line(data: bytes, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message) as info:
        decode_text(data, max_chars=LIMIT, source="book.txt")
    assert "\n" not in str(info.value)
    assert str(info.value).startswith("book.txt")


def test_a_few_stray_control_characters_are_removed() -> None:
    text = "Hello" + "\x1b" + " world, this is a long enough sentence to dilute it." * 3
    assert "\x1b" not in decode_text(text.encode(), max_chars=LIMIT)


def test_tabs_newlines_and_form_feeds_are_kept() -> None:
    assert check_text("a\tb\nc\fd\re", max_chars=LIMIT) == "a\tb\nc\fd\re"


def test_over_the_limit_is_text_too_large() -> None:
    with pytest.raises(TextTooLargeError, match="1,001 characters; the limit is 1,000"):
        check_text("x" * 1001, max_chars=LIMIT)
    assert TextTooLargeError.http_status == 413


def test_every_string_of_decoded_json_is_checked_for_lone_surrogates() -> None:
    check_strings_encodable({"input": "fine", "messages": [{"content": "also fine"}], "n": 1})
    with pytest.raises(InvalidInputError) as nested:
        check_strings_encodable({"messages": [{"role": "user", "content": "Say \udc00 hi."}]})
    assert nested.value.field == "messages"
    assert "messages.0.content" in str(nested.value) and "offset 4" in str(nested.value)
    with pytest.raises(InvalidInputError) as key:
        check_strings_encodable({"\ud800": 1})
    assert key.value.field is None and "a key in body" in str(key.value)
