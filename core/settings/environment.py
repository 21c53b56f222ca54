"""How a process kind's settings are read: :class:`Root`, the one reading of the environment.

Every process kind has one root settings class (:mod:`voicelane.core.settings.processes`),
built once when the process starts (the CLI command that runs it) and handed down; the
sections it holds (the batcher, the real-time lane, storage, the LLM, ChatTTS) are plain
models, nested, that read nothing themselves. A variable's name is its path in that tree:
prefix ``VOICELANE_``, one ``__`` per level (``VOICELANE_LLM__MODEL`` is ``settings.llm.model``,
``VOICELANE_STORAGE__S3__BUCKET`` is ``settings.storage.s3.bucket``).

Reading the environment once, :class:`Environment` also

* takes Ollama's own ``OLLAMA_HOST`` and ``OLLAMA_NUM_PARALLEL`` (which operators already set
  for Ollama and its client) as the defaults of ``llm.host`` and ``llm.max_parallel``: a
  ``VOICELANE_LLM__HOST`` / ``VOICELANE_LLM__MAX_PARALLEL`` wins over them;
* refuses a variable under a name it no longer has (:data:`RENAMED_SECTIONS`,
  :data:`RETIRED`) with one line saying what to set instead — the process stops at start
  (exit status 2) rather than silently ignoring a setting the operator made.

Nothing outside the settings reads the environment for configuration
(``tests/unit/core/test_settings.py`` checks the code for it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from voicelane.common.errors import ConfigError

PREFIX = "VOICELANE_"
DELIMITER = "__"

RENAMED_SECTIONS = {
    "llm": "VOICELANE_LLM_",
    "chattts": "VOICELANE_CHATTTS_",
    "storage": "VOICELANE_STORAGE_",
}
"""Sections that had settings classes of their own, read with a single ``_`` after the
section's name (``VOICELANE_LLM_MODEL``, ``VOICELANE_STORAGE_S3__BUCKET``); now they are part
of their process's tree (``VOICELANE_LLM__MODEL``, ``VOICELANE_STORAGE__S3__BUCKET``)."""

_ONE_DEVICE = (
    "the engine runs on the process's device: set VOICELANE_DEVICE (a worker's --device) instead"
)
RETIRED = {
    "VOICELANE_CHATTTS_DEVICE": ("chattts", _ONE_DEVICE),
    "VOICELANE_CHATTTS__DEVICE": ("chattts", _ONE_DEVICE),
}
"""Variables that are gone: the section whose readers refuse them, and what to set instead."""

OLLAMA_DEFAULTS = {"OLLAMA_HOST": "host", "OLLAMA_NUM_PARALLEL": "max_parallel"}
"""Ollama's own variables → the ``llm`` field they are the default of."""


def variable_name(location: Sequence[str | int]) -> str:
    """A field's variable, from its path: ``("llm", "model")`` → ``VOICELANE_LLM__MODEL``."""
    return PREFIX + DELIMITER.join(str(part) for part in location).upper()


def _renamed(section: type[BaseModel], old_prefix: str, name: str) -> str | None:
    """The new name of ``name`` if it is a variable of ``section`` under its old prefix."""
    if not name.startswith(old_prefix) or name.startswith(old_prefix + "_"):
        return None
    rest = name[len(old_prefix) :]
    if rest.split(DELIMITER)[0].lower() not in section.model_fields:
        return None
    return old_prefix + "_" + rest


def _ollama_default(variable: str, raw: str) -> object | None:
    """The value an Ollama variable gives its field, or None when it gives none (unset, empty,
    or an ``OLLAMA_NUM_PARALLEL`` that is not a count: Ollama's own 0 means "choose")."""
    if not raw:
        return None
    if variable != "OLLAMA_NUM_PARALLEL":
        return raw
    try:
        count = int(raw)
    except ValueError:
        return None
    return count if count >= 1 else None


class Environment(PydanticBaseSettingsSource):
    """pydantic-settings' own environment source (read once, when the root is built), plus
    Ollama's variables and the refusal of renamed and retired names."""

    def __init__(self, settings_cls: type[BaseSettings], env: EnvSettingsSource) -> None:
        super().__init__(settings_cls)
        self.env = env

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self.env.get_field_value(field, field_name)  # the values come from __call__

    def variables(self) -> Iterator[tuple[str, str]]:
        """Every variable read, its name as the operator spelled it in upper case."""
        for name, value in self.env.env_vars.items():
            if value is not None:
                yield name.upper(), value

    def refuse_old_names(self) -> None:
        fields = self.settings_cls.model_fields
        sections = {
            name: (model, prefix)
            for name, prefix in RENAMED_SECTIONS.items()
            if name in fields
            and isinstance(model := fields[name].annotation, type)
            and issubclass(model, BaseModel)
        }
        for name in sorted(name for name, _ in self.variables()):
            section, instead = RETIRED.get(name, ("", ""))
            if section in sections:
                raise ConfigError(f"{name} is no longer read: {instead}")
            for section, (model, prefix) in sections.items():
                new = _renamed(model, prefix, name)
                if new is not None:
                    raise ConfigError(
                        f"{name} is now {new}: rename it (the {section} settings are part of "
                        "the process's settings tree; docs/configuration.md)"
                    )

    def __call__(self) -> dict[str, Any]:
        self.refuse_old_names()
        data = self.env()
        if "llm" in self.settings_cls.model_fields:
            llm = data.setdefault("llm", {})
            if isinstance(llm, dict):
                values = dict(self.variables())
                for variable, field in OLLAMA_DEFAULTS.items():
                    value = _ollama_default(variable, values.get(variable, ""))
                    if value is not None:
                        llm.setdefault(field, value)
                if not llm:
                    del data["llm"]
        return data


class Root(BaseSettings):
    """A process kind's settings: the one place its process reads configuration from.

    Built once at process start; keyword arguments (the command's flags) win over the
    environment and are validated like it. Only the environment is read (no ``.env`` file, no
    secrets directory)."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX, env_nested_delimiter=DELIMITER, extra="ignore", hide_input_in_errors=True
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        assert isinstance(env_settings, EnvSettingsSource)
        return (init_settings, Environment(settings_cls, env_settings))


def variables(model: type[BaseModel], location: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    """Every variable of a settings tree with its field (nested models walked): what
    docs/configuration.md documents."""
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from variables(annotation, (*location, name))
        else:
            yield variable_name((*location, name)), field
