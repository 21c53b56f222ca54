"""The settings trees: one per process kind, the only readers of the environment, documented.

* each root reads the environment once (its sections read nothing), and only where a process
  starts (the CLI's commands) is a root built;
* nothing else in the code reads the environment for configuration (explicit, documented
  exceptions: writes for libraries and children);
* renamed and retired variables stop the process with one line naming what to set;
* ``docs/configuration.md`` documents every variable, under its class, with its default.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from voicelane.common.errors import ConfigError
from voicelane.core.settings import (
    ROOTS,
    ApiSettings,
    EmbeddedSettings,
    FrontSettings,
    GrpcSettings,
    Root,
    ServiceSettings,
    StackSettings,
    WorkerSettings,
    variable_name,
)
from voicelane.core.settings.environment import RENAMED_SECTIONS, RETIRED

ROOT = Path(__file__).resolve().parents[3]
SOURCES = {
    "core": ROOT / "core",
    "workers": ROOT / "workers",
    "api": ROOT / "api",
    "client": ROOT / "client" / "voicelane",
}
SETTINGS_PACKAGE = "core/settings/"
"""The one place that may read the environment (it leaves that to pydantic-settings)."""
ENVIRONMENT_EXCEPTIONS = {
    ("api/cli.py", 'os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")'): "process setup: "
    "OpenBLAS's thread count, written before numpy loads (not voicelane's configuration)",
    ("api/stack.py", "env = dict(os.environ)"): "`up` passes its environment on to its "
    "children whole (each reads its own settings from it); its own decisions come from "
    "StackSettings",
    ("api/flower.py", 'os.environ["FLOWER_BASIC_AUTH"] = auth'): "Flower reads its login "
    "from the environment: written from FlowerSettings",
    ("api/flower.py", 'os.environ.pop("FLOWER_UNAUTHENTICATED_API", None)'): "...and must "
    "not find Flower's own switch that turns it off",
}
"""Uses of the environment outside the settings, each with its reason."""
ROOT_BUILDERS = {"api/cli.py"}
"""Where a process starts: the only module that builds a settings root."""


def sources() -> Iterator[tuple[str, Path]]:
    for root in SOURCES.values():
        for path in sorted(root.rglob("*.py")):
            if "wire" not in path.parts:
                yield path.relative_to(ROOT).as_posix(), path


def environment_uses(tree: ast.AST, lines: list[str]) -> Iterator[tuple[int, str]]:
    """``os.environ``, ``os.environb``, ``os.getenv``/``os.putenv`` and the same names
    imported from ``os``, with their line."""
    names = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}
    for node in ast.walk(tree):
        used = (
            isinstance(node, ast.Attribute)
            and node.attr in names
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
        ) or (
            isinstance(node, ast.ImportFrom)
            and node.module == "os"
            and any(alias.name in names for alias in node.names)
        )
        if used:
            line: int = getattr(node, "lineno", 0)
            yield line, lines[line - 1].strip()


def test_nothing_outside_the_settings_reads_the_environment() -> None:
    found: dict[tuple[str, str], int] = {}
    for name, path in sources():
        if name.startswith(SETTINGS_PACKAGE):
            continue
        text = path.read_text()
        for line, code in environment_uses(ast.parse(text), text.splitlines()):
            found.setdefault((name, code), line)
    unexpected = [f"{name}:{line}: {code}" for (name, code), line in found.items()
                  if (name, code) not in ENVIRONMENT_EXCEPTIONS]  # fmt: skip
    assert not unexpected, "read through voicelane.core.settings instead:\n" + "\n".join(unexpected)
    stale = set(ENVIRONMENT_EXCEPTIONS) - set(found)
    assert not stale, f"exceptions no longer needed: {sorted(stale)}"


def test_the_environment_check_sees_every_kind_of_read() -> None:
    """The check above is not vacuous."""
    code = "import os\nfrom os import getenv\na = os.environ.get('X')\nb = os.getenv('Y')\n"
    assert sorted(line for line, _ in environment_uses(ast.parse(code), code.splitlines())) == [
        2,
        3,
        4,
    ]


def test_roots_are_built_only_where_a_process_starts() -> None:
    classes: list[type[Root]] = [*ROOTS, ServiceSettings, FrontSettings]
    roots = {cls.__name__ for cls in classes}
    built = []
    for name, path in sources():
        if name in ROOT_BUILDERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                called: str | None = None
                if isinstance(node.func, ast.Attribute):
                    called = node.func.attr
                elif isinstance(node.func, ast.Name):
                    called = node.func.id
                if called in roots:
                    built.append(f"{name}:{node.lineno}: {called}()")
    assert not built, "build the root in the command (api/cli.py) and pass it down:\n" + (
        "\n".join(built)
    )


def nested_models(model: type[BaseModel]) -> Iterator[type[BaseModel]]:
    for field in model.model_fields.values():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield annotation
            yield from nested_models(annotation)


def all_subclasses(cls: type[Any]) -> Iterator[type[Any]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from all_subclasses(sub)


def test_every_settings_class_is_a_root_or_a_plain_section() -> None:
    """Only roots read (through :class:`Root`); the sections they hold read nothing."""
    ours = [c for c in all_subclasses(BaseSettings) if c.__module__.startswith("voicelane.")]
    assert all(issubclass(c, Root) for c in ours), ours
    for root in ROOTS:
        for section in nested_models(root):
            assert not issubclass(section, BaseSettings), (root, section)


@pytest.mark.parametrize("root", ROOTS, ids=lambda r: r.__name__)
def test_a_root_reads_the_environment_once(
    root: type[Root], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pydantic_settings import EnvSettingsSource

    loads: list[str] = []
    original = EnvSettingsSource._load_env_vars

    def counting(self: EnvSettingsSource) -> Any:
        if type(self) is EnvSettingsSource:  # not the .env-file source (reads no environ)
            loads.append(self.settings_cls.__name__)
        return original(self)

    monkeypatch.setattr(EnvSettingsSource, "_load_env_vars", counting)
    monkeypatch.setenv("VOICELANE_STORAGE__BACKEND", "s3")
    built = root()
    assert loads == [root.__name__]
    if isinstance(built, ServiceSettings):  # a section is read with its root, not by itself
        assert built.storage.backend == "s3"


# ---- what operators set ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("root", "old", "new"),
    [
        (ApiSettings, "VOICELANE_LLM_MODEL", "VOICELANE_LLM__MODEL"),
        (GrpcSettings, "VOICELANE_LLM_PRELOAD", "VOICELANE_LLM__PRELOAD"),
        (WorkerSettings, "VOICELANE_CHATTTS_DIR", "VOICELANE_CHATTTS__DIR"),
        (EmbeddedSettings, "VOICELANE_CHATTTS_HALF", "VOICELANE_CHATTTS__HALF"),
        (WorkerSettings, "VOICELANE_STORAGE_BACKEND", "VOICELANE_STORAGE__BACKEND"),
        (ApiSettings, "VOICELANE_STORAGE_S3__BUCKET", "VOICELANE_STORAGE__S3__BUCKET"),
    ],
)
def test_an_old_name_stops_the_process_naming_the_new_one(
    monkeypatch: pytest.MonkeyPatch, root: type[Root], old: str, new: str
) -> None:
    monkeypatch.setenv(old, "1")
    with pytest.raises(ConfigError, match=f"^{old} is now {new}: rename it"):
        root()


def test_old_names_only_matter_where_their_section_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker reads no LLM settings, a front no ChatTTS ones; ``up`` reads them all. A
    variable that only looks like an old name (the stand-in's port) is not one."""
    monkeypatch.setenv("VOICELANE_LLM_MODEL", "x")
    monkeypatch.setenv("VOICELANE_CHATTTS_DEVICE", "cpu")
    with pytest.raises(ConfigError, match="VOICELANE_CHATTTS_DEVICE is no longer read"):
        WorkerSettings()
    with pytest.raises(ConfigError, match="VOICELANE_LLM_MODEL is now"):
        ApiSettings()
    monkeypatch.delenv("VOICELANE_LLM_MODEL")
    assert ApiSettings().llm.model == "qwen2.5:7b"
    with pytest.raises(ConfigError):
        StackSettings()
    monkeypatch.delenv("VOICELANE_CHATTTS_DEVICE")
    monkeypatch.setenv("VOICELANE_LLM_STANDIN_PORT", "11500")
    assert StackSettings().llm_standin_port == 11500


def test_a_flag_wins_over_its_variable_and_is_validated_like_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("VOICELANE_DEVICE", "cuda:1")
    assert WorkerSettings().device == "cuda:1"
    assert WorkerSettings(device="cpu").device == "cpu"
    with pytest.raises(ValueError, match="device"):
        WorkerSettings(device="gpu")


def test_variable_names_are_paths_in_the_tree() -> None:
    assert variable_name(("llm", "model")) == "VOICELANE_LLM__MODEL"
    assert variable_name(("storage", "s3", "bucket")) == "VOICELANE_STORAGE__S3__BUCKET"
    assert variable_name(("redis_url",)) == "VOICELANE_REDIS_URL"


# ---- derived values ----------------------------------------------------------------------------


def cores() -> int:
    return len(os.sched_getaffinity(0))


def test_a_cpu_engine_gets_one_render_worker_per_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VOICELANE_RENDER_WORKERS", raising=False)
    monkeypatch.setenv("VOICELANE_ENGINE", "espeak")
    assert StackSettings().render_worker_count() == cores()


def test_a_gpu_engine_gets_one_render_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VOICELANE_RENDER_WORKERS", raising=False)
    monkeypatch.setenv("VOICELANE_ENGINE", "chattts")
    assert StackSettings().render_worker_count() == 1


def test_cpu_engines_served_together_share_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VOICELANE_RENDER_WORKERS", raising=False)
    stack = StackSettings(engines="piper,espeak,chattts")
    assert stack.render_worker_count("piper") == max(1, cores() // 2)
    assert stack.render_worker_count("espeak") == max(1, cores() // 2)
    assert stack.render_worker_count("chattts") == 1


def test_the_operator_picks_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICELANE_RENDER_WORKERS", "3")
    assert StackSettings(engine="espeak").render_worker_count() == 3
    assert StackSettings(engine="chattts").render_worker_count() == 3


# ---- docs/configuration.md ---------------------------------------------------------------------

DOC = ROOT / "docs" / "configuration.md"
ROW = re.compile(r"^\| `(VOICELANE_[A-Z0-9_]+)` \| ([^|]*) \|")


def own_fields(cls: type[BaseModel]) -> list[str]:
    inherited: set[str] = set()
    for base in cls.__bases__:
        if issubclass(base, BaseModel):
            inherited |= set(base.model_fields)
    return [name for name in cls.model_fields if name not in inherited]


def is_model(annotation: object) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def documented_classes() -> dict[type[BaseModel], tuple[str, ...]]:
    """Every class that declares settings, with its path in the trees."""
    found: dict[type[BaseModel], tuple[str, ...]] = {}

    def visit(model: type[BaseModel], path: tuple[str, ...]) -> None:
        for cls in model.__mro__:
            if is_model(cls) and cls.__module__.startswith("voicelane.") and own_fields(cls):
                found.setdefault(cls, path)
        for name, field in model.model_fields.items():
            if is_model(field.annotation):
                visit(field.annotation, (*path, name))  # type: ignore[arg-type]

    for root in ROOTS:
        visit(root, ())
    return found


def rendered(field: FieldInfo) -> str | None:
    """A default as the table writes it (None: a nested section, documented on its own)."""
    if field.default_factory is not None:
        return None
    value = field.default
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if value == "":
        return "empty"
    return str(value)


def doc_sections() -> dict[str, list[str]]:
    """The page's ``##``/``###`` sections: heading → its lines."""
    sections: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in DOC.read_text().splitlines():
        if line.startswith("#"):
            lines = sections.setdefault(line, [])
        else:
            lines.append(line)
    return sections


def test_the_configuration_page_documents_every_variable_with_its_default() -> None:
    sections = doc_sections()
    problems = []
    for cls, path in documented_classes().items():
        headings = [h for h in sections if f"`{cls.__name__}`" in h]
        if len(headings) != 1:
            problems.append(f"{cls.__name__}: {len(headings)} sections name it")
            continue
        rows = {
            m.group(1): m.group(2).strip()
            for line in sections[headings[0]]
            if (m := ROW.match(line))
        }
        for name in own_fields(cls):
            default = rendered(cls.model_fields[name])
            if default is None:
                continue
            variable = variable_name((*path, name))
            if variable not in rows:
                problems.append(f"{variable} ({cls.__name__}): no row")
            elif not rows[variable].startswith(f"`{default}`"):
                problems.append(f"{variable}: documented {rows[variable]!r}, is `{default}`")
    assert not problems, "docs/configuration.md is out of step:\n" + "\n".join(problems)


def test_every_variable_the_configuration_page_names_exists() -> None:
    """...and it names no variable that is not read (old names only as old names)."""
    real = {variable_name((*path, name)) for cls, path in documented_classes().items()
            for name in own_fields(cls)}  # fmt: skip
    old = set(RETIRED) | {
        prefix + variable.removeprefix(f"VOICELANE_{section.upper()}__")
        for section, prefix in RENAMED_SECTIONS.items()
        for variable in real
        if variable.startswith(f"VOICELANE_{section.upper()}__")
    }
    named = set(re.findall(r"`(VOICELANE_[A-Z0-9_]*[A-Z0-9])`", DOC.read_text()))
    unknown = sorted(named - real - old)
    assert not unknown, f"docs/configuration.md names variables that are not read: {unknown}"


def test_openai_voices_read_as_json_or_one_name_a_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICELANE_OPENAI_VOICES", '{"Ash": "espeak:en-gb", "narrator": "seed:7"}')
    monkeypatch.setenv("VOICELANE_OPENAI_VOICES__MARIN", "piper:en_US-joe-medium")
    voices = ApiSettings(dev_mode=True).openai_voices
    assert voices == {
        "ash": "espeak:en-gb",
        "narrator": "seed:7",
        "marin": "piper:en_US-joe-medium",
    }
    monkeypatch.setenv("VOICELANE_OPENAI_VOICES", '{"ash": " "}')
    with pytest.raises(ValidationError, match="openai_voices"):
        ApiSettings(dev_mode=True)
