"""Write a file so that readers see either nothing or all of it.

:func:`atomic_output` hands out a hidden temporary path beside the target (created with
``O_EXCL`` and mode 0o666, so the umask applies as for any new file); when the block ends
without an error the file is flushed to disk and renamed onto the target, otherwise it is
removed. A failed or interrupted write leaves nothing behind and never damages an existing
file at the target.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from voicelane.common.errors import OutputError


@contextlib.contextmanager
def atomic_output(target: Path) -> Iterator[Path]:
    """A temporary path beside ``target``; renamed onto it on success, removed on failure."""
    if target.is_dir():
        raise OutputError(f"cannot write {target}: it is a directory")
    directory = target.parent if str(target.parent) else Path(".")
    part = directory / f".{target.name}.{secrets.token_hex(6)}.part"
    try:
        os.close(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    except OSError as error:
        raise OutputError(f"cannot write {target}: {error.strerror or error}") from None
    try:
        yield part
        descriptor = os.open(part, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(part, target)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
