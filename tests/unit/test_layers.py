"""The shape of the code (docs/architecture.md), checked on every import statement, lazy and
``TYPE_CHECKING`` ones included:

* who may import whom: ``voicelane.common`` (shared with the SDK) imports nothing of ours
  above it; ``core`` only ``common``; ``workers`` only ``core``; the SDK (``client``) only
  ``common``; the fronts (``api``) reach into ``workers`` only where a command runs worker code
  (the CLI) and for espeak's own capabilities before any worker published;
* everything is imported by its installed name (``voicelane.core...``), never by a folder name
  (``core...``) that would land a second copy of a module in ``sys.modules``;
* no import cycle between the modules of a package;
* no object reads or writes another object's ``_private`` names outside the module that
  defines them (an object's privates are its module's business; anything another module
  needs is public and documented).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {
    "common": ROOT / "client" / "voicelane" / "common",
    "client": ROOT / "client" / "voicelane" / "client",
    "core": ROOT / "core",
    "workers": ROOT / "workers",
    "api": ROOT / "api",
}
ALLOWED = {
    "common": {"common"},
    "core": {"common", "core"},
    "workers": {"common", "core", "workers"},
    "client": {"common", "client"},
    "api": {"common", "core", "api", "client"},
}
API_MODULES_ALLOWED_INTO_WORKERS = {"api/cli.py", "api/engines.py"}
FOLDER_NAMES = {"core", "api", "workers", "client", "common"}
"""Our packages' short names: importing one of them bare is importing a folder, not ours."""
CHECKED_ELSEWHERE = {"tests", "bench"}
PRIVATE_NAMES_OF_LIBRARIES = {
    "_replace",  # namedtuple's public API
    "_asdict",
    "_fields",
    "_make",
    "_exit",  # os._exit: a child that must not run atexit handlers
    "_Pointer",  # ctypes._Pointer: typeshed's name for pointer types, in annotations only
}
LIBRARY_PRIVATES_USED = {
    ("workers/engines/chattts.py", "_decode"): "ChatTTS 0.2.5 has no public decoder of its own "
    "spk_emb strings (Speaker._decode); pinned, and tested against the real package",
}
"""Third-party private names we call on purpose, each with its reason."""


def modules(package: str) -> list[Path]:
    root = SOURCES[package]
    return sorted(p for p in root.rglob("*.py") if "wire" not in p.relative_to(root).parts)


def module_name(path: Path) -> str:
    """The installed dotted name of a source file (``core/x/y.py`` → ``voicelane.core.x.y``)."""
    for package, root in SOURCES.items():
        if path.is_relative_to(root):
            parts = [*path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join(["voicelane", package, *parts])
    raise ValueError(f"{path} is in none of our packages")


def imported_names(path: Path) -> Iterator[tuple[str, int]]:
    """Every module ``path`` imports (absolute and relative), with the line; ``from X import y``
    yields ``X.y`` too (it may be a module)."""
    for module, members, line in import_statements(path):
        yield module, line
        for member in members:
            yield f"{module}.{member}", line


def import_statements(path: Path) -> Iterator[tuple[str, list[str], int]]:
    """``(module, names taken from it, line)`` for every import statement of ``path``, relative
    ones resolved (``import x.y`` takes nothing from ``x.y``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = module_name(path) if _ours(path) else ""
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield module, [alias.name for alias in node.names], node.lineno


def _ours(path: Path) -> bool:
    return any(path.is_relative_to(root) for root in SOURCES.values())


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) >= 2 and parts[0] == "voicelane" and parts[1] in SOURCES:
        return parts[1]
    return None


@pytest.mark.parametrize("package", list(SOURCES))
def test_no_package_imports_one_above_it(package: str) -> None:
    wrong = []
    for path in modules(package):
        name = path.relative_to(ROOT).as_posix()
        allowed = set(ALLOWED[package])
        if name in API_MODULES_ALLOWED_INTO_WORKERS:
            allowed.add("workers")
        for module, line in imported_names(path):
            layer = layer_of(module)
            if layer is not None and layer not in allowed:
                wrong.append(f"{name}:{line} imports {module}")
    assert modules(package), f"no modules found for {package}"
    assert not wrong, "\n".join(sorted(set(wrong)))


def every_python_file() -> list[Path]:
    folders = [*SOURCES.values(), ROOT / "tests", ROOT / "bench"]
    return sorted(p for folder in folders for p in folder.rglob("*.py") if "wire" not in p.parts)


def test_nothing_imports_a_folder_name() -> None:
    """``import core.x`` would work from the repository root and load a second copy of a
    module next to ``voicelane.core.x``: every import uses the installed name."""
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in every_python_file()
        for module, line in imported_names(path)
        if module.split(".")[0] in FOLDER_NAMES
    ]
    assert not wrong, "\n".join(sorted(set(wrong)))


# ---- cycles ---------------------------------------------------------------------------------


def import_graph() -> dict[str, set[str]]:
    """Module → the modules of ours it imports (a package's ``__init__`` counts as a module).
    ``from voicelane.core import ledger`` where ``ledger`` is a module is an import of
    ``voicelane.core.ledger`` alone: it runs nothing of the package's ``__init__`` that
    importing any of its modules does not run anyway."""
    paths = [p for package in SOURCES for p in modules(package)]
    known = {module_name(p) for p in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        here = module_name(path)
        targets = set()
        for module, members, _line in import_statements(path):
            submodules = {f"{module}.{m}" for m in members} & known
            if members and len(submodules) == len(members):
                targets |= submodules
            elif module in known:
                targets.add(module)
                targets |= submodules
        graph[here] = targets - {here}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as a path that starts and ends at the same module), or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " → ".join(cycle or [])


def test_the_cycle_check_sees_a_cycle() -> None:
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": set()}
    assert find_cycle(graph) == ["a.x", "a.y", "a.z", "a.x"]
    assert find_cycle({"a.x": {"a.y"}, "a.y": set()}) is None


def probe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, package: str, code: str) -> Path:
    """A module of ``package`` (a stand-in folder under ``tmp_path``) holding ``code``."""
    folder = tmp_path / package
    folder.mkdir()
    monkeypatch.setitem(SOURCES, package, folder)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    module = folder / "probe.py"
    module.write_text(code)
    return module


def test_the_graph_sees_lazy_and_type_checking_imports(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    module = probe(
        monkeypatch,
        tmp_path,
        "workers",
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from voicelane.core.ledger import Ledger\n"
        "def f():\n    from .batching import batcher\n",
    )
    found = {m for m, _ in imported_names(module)}
    assert "voicelane.core.ledger" in found
    assert "voicelane.workers.batching.batcher" in found


# ---- private names ------------------------------------------------------------------------


def private_names_defined(tree: ast.AST) -> set[str]:
    """The ``_private`` names a module defines: functions, classes, class-body names and
    attributes assigned on any object (``self._x = ...``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if _private(n)}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def foreign_private_accesses(path: Path) -> list[str]:
    """``obj._name`` in ``path`` where ``_name`` is not defined in that module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    own = private_names_defined(tree)
    name = path.relative_to(ROOT).as_posix()
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and node.attr not in own
            and node.attr not in PRIVATE_NAMES_OF_LIBRARIES
            and (name, node.attr) not in LIBRARY_PRIVATES_USED
        ):
            found.append(f"{name}:{node.lineno} .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.level or layer_of(node.module or "")):
            found.extend(
                f"{name}:{node.lineno} imports {alias.name}"
                for alias in node.names
                if _private(alias.name)
            )
    return found


@pytest.mark.parametrize("package", list(SOURCES))
def test_no_object_touches_another_modules_private_names(package: str) -> None:
    wrong = [access for path in modules(package) for access in foreign_private_accesses(path)]
    assert not wrong, "\n".join(wrong)


def test_the_private_check_sees_a_foreign_private(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    module = probe(
        monkeypatch,
        tmp_path,
        "core",
        "from voicelane.core.ledger import _keys\n"
        "class A:\n    def __init__(self):\n        self._mine = 1\n"
        "    def f(self, other):\n        return self._mine + other._mine + other._theirs\n",
    )
    found = foreign_private_accesses(module)
    assert sorted(found) == ["core/probe.py:1 imports _keys", "core/probe.py:6 ._theirs"]
