"""Who may import whom (docs/architecture.md), checked on every import statement, lazy ones
included: ``core`` imports nothing of ours above it; ``workers`` only ``core``; the SDK
(``client``) only ``core``; the fronts (``api``) reach into ``workers`` only where a command
runs worker code (the CLI) and for espeak's own capabilities before any worker published."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "workers", "api", "client")
ALLOWED = {
    "core": {"core"},
    "workers": {"core", "workers"},
    "client": {"core", "client"},
    "api": {"core", "api", "client"},
}
API_MODULES_ALLOWED_INTO_WORKERS = {"api/cli.py", "api/engines.py"}


def imports_of(path: Path) -> set[str]:
    """Top-level packages of everything ``path`` imports (absolute imports)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found & set(PACKAGES)


def modules(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if "wire" not in p.parts)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_package_imports_one_above_it(package: str) -> None:
    wrong = []
    for path in modules(package):
        name = path.relative_to(ROOT).as_posix()
        allowed = set(ALLOWED[package])
        if name in API_MODULES_ALLOWED_INTO_WORKERS:
            allowed.add("workers")
        if extra := imports_of(path) - allowed:
            wrong.append(f"{name} imports {sorted(extra)}")
    assert modules(package), f"no modules found in {package}/"
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_a_wrong_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from api.rest import create_app\n")
    assert imports_of(module) == {"api"}
