"""The real-time lane's keys (:mod:`voicelane.core.lane.keys`): one table, agreed by the docs,
every builder's key in its family, the Lua shipped as package data, and the roles apart."""

from __future__ import annotations

import ast
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import pytest

from voicelane.core.lane import keys
from voicelane.core.lane.keys import KEYS, LaneKey, family
from voicelane.core.lua import read_script

ROOT = Path(__file__).resolve().parents[4]
PAGE = ROOT / "docs" / "realtime-lane.md"
LANE = ROOT / "core" / "lane"

BUILDERS = {
    "input_key": keys.INPUT_KEY,
    "output_key": keys.OUTPUT_KEY,
    "cancel_key": keys.CANCEL_KEY,
    "heartbeat_key": keys.HEARTBEAT_KEY,
    "owner_key": keys.OWNER_KEY,
    "tenant_key": keys.TENANT_KEY,
    "tenant_streams_key": keys.TENANT_STREAMS_KEY,
    "wake_key": keys.WAKE_KEY,
    "capabilities_key": keys.CAPABILITIES_KEY,
    "requests_key": keys.REQUESTS_KEY,
    "workers_key": keys.WORKERS_KEY,
}


@pytest.mark.parametrize("name", list(BUILDERS))
def test_each_builder_makes_a_key_of_its_family_and_no_other(name: str) -> None:
    build: Callable[[str], str] = getattr(keys, name)
    expected = BUILDERS[name]
    key = build("acme.r-1")
    assert key == expected.pattern.partition("{")[0] + "acme.r-1"
    assert [k for k in KEYS if k.describes(key)] == [expected]
    assert family(key) is expected


def test_each_engine_has_its_own_request_stream_and_capacity() -> None:
    assert keys.requests_key("piper") != keys.requests_key("espeak")
    assert family(keys.requests_key("piper")) is keys.REQUESTS_KEY
    assert family(keys.workers_key("chattts")) is keys.WORKERS_KEY
    assert family("vl:rt:requests") is None  # the one stream of old: no engine, no family
    assert family("vl:rt:in:") is None  # a family's prefix alone is no key of it
    assert family("vl:quota:rate:acme") is None


def test_every_family_is_declared_once_and_in_the_table() -> None:
    declared = [v for v in vars(keys).values() if isinstance(v, LaneKey)]
    assert sorted(k.pattern for k in declared) == sorted(k.pattern for k in KEYS)
    assert len({k.pattern for k in KEYS}) == len(KEYS)
    assert all(k.type in {"stream", "string", "hash", "zset"} for k in KEYS)
    assert all(k.writer.split()[0] in {"front", "worker"} for k in KEYS)


def test_the_docs_draw_the_table_of_the_code() -> None:
    """docs/realtime-lane.md ("Keys") lists exactly the families of KEYS, as declared."""
    page = PAGE.read_text()
    section = page.split("\n## Keys\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    expected = [
        f"| `{k.pattern}` | {k.type} | {k.contents} | {k.lifetime} | {k.writer} |" for k in KEYS
    ]
    assert rows == expected


@pytest.mark.parametrize("name", ["hold_tenant_slot.lua", "append_if_owner.lua"])
def test_the_lua_ships_with_the_package_and_goes_out_without_comments(name: str) -> None:
    assert resources.files("voicelane.core.lane").joinpath(name).is_file()
    script = read_script("voicelane.core.lane", name)
    assert script.strip() and "redis.call" in script
    assert not any(line.lstrip().startswith("--") for line in script.splitlines())


def test_the_package_data_includes_the_lua() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    data = pyproject.split("[tool.setuptools.package-data]", 1)[1].split("\n[", 1)[0]
    assert '"*.lua"' in data


def lane_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m.startswith("voicelane.core.lane")}


@pytest.mark.parametrize("role", ["front", "worker", "keys", "messages", "__init__"])
def test_a_role_imports_only_keys_and_messages_of_the_lane(role: str) -> None:
    allowed = {
        "front": {"voicelane.core.lane.keys", "voicelane.core.lane.messages"},
        "worker": {"voicelane.core.lane.keys", "voicelane.core.lane.messages"},
        "keys": set(),
        "messages": set(),
        "__init__": set(),
    }[role]
    assert lane_imports(LANE / f"{role}.py") <= allowed
