"""Command-line tools the tests run (``ffprobe``, ``pandoc``...): a test that needs one that
is missing fails under CI (``make test`` installs them) and is skipped elsewhere."""

from __future__ import annotations

import os
import shutil

import pytest


def require_tool(name: str) -> str:
    """The tool's path; fails when it is missing and ``CI`` is set, skips otherwise."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (make test installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path
