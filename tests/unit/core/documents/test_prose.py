"""The prose writer: blocks, collapsed whitespace, anchors at the next character."""

from __future__ import annotations

import pytest

from voicelane.common.errors import TextTooLargeError
from voicelane.core.documents.prose import ProseWriter


def test_blocks_whitespace_and_anchors() -> None:
    writer = ProseWriter(max_chars=100, source="HTML")
    writer.anchor("top")
    writer.write("  a \n b ")
    writer.write("c")
    writer.end_block()
    writer.anchor("second")
    writer.write("\t\x01d")
    text = writer.text()
    assert text == "a b c\n\nd"
    assert writer.anchors == {"top": 0, "second": text.index("d")}


def test_the_writer_stops_at_max_chars() -> None:
    writer = ProseWriter(max_chars=5, source="EPUB")
    writer.write("abcde")
    with pytest.raises(TextTooLargeError, match="EPUB has more than 5 characters"):
        writer.write(" f")
