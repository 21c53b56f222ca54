"""Reading the Lua scripts that ship beside their modules (``.lua`` package data): the
ledger's (:mod:`voicelane.core.ledger.lua`) and the real-time lane's
(:mod:`voicelane.core.lane.keys`)."""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def read_script(package: str, name: str) -> str:
    """``name`` (a ``.lua`` file of ``package``), read from the installed package once per
    process, without its comment lines: they are for readers, and a script sent as EVAL text
    with every call (the lane's append) carries no bytes for them."""
    text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
