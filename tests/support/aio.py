"""Coroutine tests without a plugin: each runs in a fresh event loop, with a time limit."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec

P = ParamSpec("P")


def async_test_with(
    timeout_s: float,
) -> Callable[[Callable[P, Coroutine[Any, Any, None]]], Callable[P, None]]:
    """A decorator running the coroutine test in a fresh event loop, failing it after
    ``timeout_s``."""

    def decorate(fn: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> None:
            asyncio.run(asyncio.wait_for(fn(*args, **kwargs), timeout_s))

        return run

    return decorate
