"""The zip reader: names checked up front, members inflated under running caps whatever
the headers say."""

from __future__ import annotations

import io
import struct
import zipfile

import pytest

from tests.support.documents import bomb_by_ratio, zip_epub
from voicelane.common.errors import InvalidDocumentError
from voicelane.core.documents.archive import (
    SafeArchive,
    check_member_name,
    claimed_member_count,
    resolve_href,
)
from voicelane.core.documents.model import DocumentLimits

LIMITS = DocumentLimits(max_chars=1_000_000)
MIB = 1024 * 1024


@pytest.mark.parametrize("name", ["a/../../b", "..", "x/.."])
def test_parent_segments_leave_the_archive(name: str) -> None:
    with pytest.raises(InvalidDocumentError, match="leaves the archive"):
        check_member_name(name, kind="EPUB")


@pytest.mark.parametrize("name", ["/etc/passwd", "C:/x", "c:x", "a\\b", "a\x00b"])
def test_absolute_and_windows_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidDocumentError, match="absolute or not a plain"):
        check_member_name(name, kind="EPUB")


def test_dotted_names_that_stay_inside_are_fine() -> None:
    check_member_name("OEBPS/..hidden/a..b.xhtml", kind="EPUB")
    assert resolve_href("OEBPS/text/c.xhtml", "../img/a.png", kind="EPUB") == "OEBPS/img/a.png"
    with pytest.raises(InvalidDocumentError, match="leaves the archive"):
        resolve_href("OEBPS/c.xhtml", "../../x", kind="EPUB")


def test_the_ratio_cap_stops_a_bomb_after_inflating_little_more_than_the_floor() -> None:
    archive = SafeArchive(bomb_by_ratio(), limits=LIMITS)
    with pytest.raises(InvalidDocumentError, match="200 times its packed size"):
        archive.read("OEBPS/c1.xhtml")
    # ~200 KiB packed: the cap (200:1, ~40 MiB) is met long before the 200 MiB it holds.
    assert archive.unpacked_bytes < 50 * MIB


def test_a_header_that_understates_the_size_does_not_let_more_through() -> None:
    data = bytearray(zip_epub({"a.txt": b"x" * 5000}))
    # The central directory's and local header's uncompressed size: claim 10 bytes.
    struct.pack_into("<I", data, data.find(b"PK\x03\x04", 40) + 22, 10)
    struct.pack_into("<I", data, data.rfind(b"PK\x01\x02") + 24, 10)
    archive = SafeArchive(bytes(data), limits=LIMITS)
    with pytest.raises(InvalidDocumentError, match=r"'a.txt' is corrupt"):
        archive.read("a.txt")


def test_the_member_count_is_read_before_indexing_even_where_the_record_understates() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for index in range(50):
            archive.writestr(f"f{index}", b"")
    data = bytearray(out.getvalue())
    eocd = data.rfind(b"PK\x05\x06")
    struct.pack_into("<HH", data, eocd + 8, 1, 1)  # "one member"
    assert claimed_member_count(bytes(data)) == 50
    with pytest.raises(InvalidDocumentError, match="50 members; the limit is 10"):
        SafeArchive(bytes(data), limits=DocumentLimits(max_chars=1, max_archive_members=10))


def test_a_name_twice_is_refused() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("a", b"1")
        with pytest.warns(UserWarning):
            archive.writestr("a", b"2")
    with pytest.raises(InvalidDocumentError, match="'a' appears twice"):
        SafeArchive(out.getvalue(), limits=LIMITS)


def test_not_a_zip() -> None:
    with pytest.raises(InvalidDocumentError, match="not a readable zip archive"):
        SafeArchive(b"PK\x03\x04 truncated", limits=LIMITS)
