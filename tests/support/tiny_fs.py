"""A tiny tmpfs for disk-full tests: mounted where the test says, unmounted after.

Mounting needs root (or CAP_SYS_ADMIN), which ``make test`` has (it installs apt packages as
root); where ``mount`` is refused the test fails under CI and is skipped elsewhere, and the
free-space threshold tests (``min_free_bytes`` larger than any disk) still run.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tiny_tmpfs(directory: Path, size_bytes: int = 4 * 1024 * 1024) -> Iterator[Path]:
    """``directory`` as a fresh tmpfs of ``size_bytes`` (writes past it fail with ENOSPC)."""
    directory.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(directory)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        message = f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace')}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], capture_output=True, check=False)


def fill(directory: Path) -> None:
    """Fill the file system holding ``directory`` (a file ``filler`` takes every free block)."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    block = b"\0" * 65536
    try:
        with contextlib.suppress(OSError):
            while os.write(fd, block):
                pass
    finally:
        os.close(fd)
