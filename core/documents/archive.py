"""Reading a zip archive (an EPUB's container) without trusting it.

* The member count is read from the end-of-central-directory record *before* :mod:`zipfile`
  builds its index (a central directory of millions of entries costs memory to index), and
  checked again after;
* every member name is checked up front, whether or not it is ever read: ``..`` segments,
  absolute paths, backslashes, drive letters (``C:``), NUL → refused; so is a name twice;
* a member is inflated in 64 KiB steps with running counts, so what a header claims does
  not matter: over ``max_member_bytes`` for the member, over ``max_unpacked_bytes`` for all
  members read together, or (past :data:`RATIO_FLOOR_BYTES`) more than
  ``max_compression_ratio`` times its packed size → refused, having inflated at most one
  step past the cap;
* encrypted (password) members, and compression methods other than stored and deflate (all
  EPUB allows), are refused; a bad CRC or broken deflate stream is "corrupt".

Errors are :class:`~voicelane.common.errors.InvalidDocumentError` naming the member,
prefixed by the archive's kind ("EPUB: ...").
"""

from __future__ import annotations

import io
import posixpath
import re
import struct
import zipfile
import zlib

from voicelane.common.errors import InvalidDocumentError
from voicelane.core.documents.model import DocumentLimits

__all__ = ["RATIO_FLOOR_BYTES", "SafeArchive", "check_member_name", "claimed_member_count"]

RATIO_FLOOR_BYTES = 1024 * 1024
"""Members that unpack to less than this are exempt from the ratio cap (a small, very
repetitive XHTML file legitimately compresses 300:1)."""
READ_STEP_BYTES = 64 * 1024
MIB = 1024 * 1024
_EOCD = b"PK\x05\x06"
_CENTRAL_ENTRY = b"PK\x01\x02"
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_EOCD = b"PK\x06\x06"
_DRIVE = re.compile(r"^[A-Za-z]:")


def _size(count: int) -> str:
    return f"{count // MIB} MiB" if count % MIB == 0 else f"{count:,} bytes"


def claimed_member_count(data: bytes) -> int | None:
    """How many members the archive holds at most, before indexing it: the larger of the
    count its end-of-central-directory record states (ZIP64 too) and the number of entry
    signatures in the central directory it points at (a record can understate). None where
    there is no record to read (zipfile will say why)."""
    tail_start = max(0, len(data) - (22 + 65535))
    at = data.rfind(_EOCD, tail_start)
    if at < 0 or at + 22 > len(data):
        return None
    count, directory_bytes, directory_at = struct.unpack_from("<HII", data, at + 10)
    if count != 0xFFFF or at < 20 or data[at - 20 : at - 16] != _ZIP64_LOCATOR:
        directory_end = min(len(data), directory_at + directory_bytes)
        return max(int(count), data.count(_CENTRAL_ENTRY, min(directory_at, at), directory_end))
    (zip64_at,) = struct.unpack_from("<Q", data, at - 20 + 8)
    if zip64_at + 56 > len(data) or data[zip64_at : zip64_at + 4] != _ZIP64_EOCD:
        return None
    (count64,) = struct.unpack_from("<Q", data, zip64_at + 32)
    return int(count64)


def check_member_name(name: str, *, kind: str) -> None:
    """Refuse a member name that could leave the archive when unpacked anywhere."""
    if "\x00" in name or "\\" in name or name.startswith("/") or _DRIVE.match(name):
        raise InvalidDocumentError(
            f"{kind}: member name {name!r} is absolute or not a plain relative path",
            field="file",
        )
    if ".." in name.split("/"):
        raise InvalidDocumentError(f"{kind}: path {name!r} leaves the archive", field="file")


def resolve_href(base: str, href: str, *, kind: str) -> str:
    """``href`` (already percent-decoded, no fragment) relative to the member ``base``, as
    an archive path; one that climbs out of the archive, or is absolute, is refused."""
    if href.startswith("/") or "\\" in href or _DRIVE.match(href):
        raise InvalidDocumentError(f"{kind}: path {href!r} leaves the archive", field="file")
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(base), href))
    if joined == ".." or joined.startswith("../") or joined.startswith("/"):
        raise InvalidDocumentError(f"{kind}: path {href!r} leaves the archive", field="file")
    return "" if joined == "." else joined


class SafeArchive:
    """A zip archive opened under ``limits``; :meth:`read` inflates one member with caps."""

    def __init__(self, data: bytes, *, limits: DocumentLimits, kind: str = "EPUB") -> None:
        self.kind = kind
        self.limits = limits
        self.packed_bytes = len(data)
        self.unpacked_bytes = 0
        """Inflated so far, all members together."""
        claimed = claimed_member_count(data)
        if claimed is not None and claimed > limits.max_archive_members:
            self._too_many(claimed)
        try:
            self._zip = zipfile.ZipFile(io.BytesIO(data))
        except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError) as e:
            raise InvalidDocumentError(
                f"{kind} is not a readable zip archive ({e})", field="file"
            ) from None
        infos = self._zip.infolist()
        if len(infos) > limits.max_archive_members:
            self._too_many(len(infos))
        self._members: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            check_member_name(info.filename, kind=kind)
            if info.filename in self._members:
                raise InvalidDocumentError(
                    f"{kind}: member {info.filename!r} appears twice", field="file"
                )
            self._members[info.filename] = info

    def _too_many(self, count: int) -> None:
        raise InvalidDocumentError(
            f"{self.kind} has {count:,} members; the limit is {self.limits.max_archive_members:,}",
            field="file",
        )

    def __contains__(self, name: str) -> bool:
        return name in self._members

    def names(self) -> list[str]:
        return list(self._members)

    def read(self, name: str, *, max_bytes: int | None = None) -> bytes:
        """Member ``name`` inflated under the caps (``max_bytes``: a tighter one of its own)."""
        info = self._members.get(name)
        if info is None:
            raise InvalidDocumentError(f"{self.kind}: no member {name!r}", field="file")
        kind = self.kind
        if info.flag_bits & 0x1:
            raise InvalidDocumentError(
                f"{kind}: member {name!r} is encrypted (password-protected)", field="file"
            )
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise InvalidDocumentError(
                f"{kind}: member {name!r} uses compression method {info.compress_type}"
                " (EPUB allows stored and deflate)",
                field="file",
            )
        limits = self.limits
        member_cap = limits.max_member_bytes if max_bytes is None else max_bytes
        packed = max(1, min(info.compress_size, self.packed_bytes))
        chunks: list[bytes] = []
        count = 0
        try:
            with self._zip.open(info) as stream:
                while True:
                    chunk = stream.read(READ_STEP_BYTES)
                    if not chunk:
                        break
                    count += len(chunk)
                    self.unpacked_bytes += len(chunk)
                    if count > member_cap:
                        raise InvalidDocumentError(
                            f"{kind}: member {name!r} unpacks to over {_size(member_cap)}",
                            field="file",
                        )
                    if self.unpacked_bytes > limits.max_unpacked_bytes:
                        raise InvalidDocumentError(
                            f"{kind}: members unpack to over {_size(limits.max_unpacked_bytes)}"
                            f" in all (at {name!r})",
                            field="file",
                        )
                    if count > RATIO_FLOOR_BYTES and count > limits.max_compression_ratio * packed:
                        raise InvalidDocumentError(
                            f"{kind}: member {name!r} unpacks to over"
                            f" {limits.max_compression_ratio:g} times its packed size"
                            " (a zip bomb?)",
                            field="file",
                        )
                    chunks.append(chunk)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as error:
            raise InvalidDocumentError(
                f"{kind}: member {name!r} is corrupt ({error})", field="file"
            ) from None
        return b"".join(chunks)
