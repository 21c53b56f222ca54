"""The Wyoming server's tenant (``wyoming_api_key``) and its refusals to start
(``voicelane.api.wyoming_front``)."""

from __future__ import annotations

import pytest

from voicelane.api.cli import main
from voicelane.api.wyoming_front import wyoming_tenant
from voicelane.common.errors import ConfigError
from voicelane.core.settings import WyomingSettings

KEYS = "acme:acme-key-0001,other:other-key-0002"


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("VOICELANE_API_KEYS", "VOICELANE_DEV_MODE", "VOICELANE_WYOMING_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def test_clients_act_as_the_tenant_of_the_wyoming_key() -> None:
    settings = WyomingSettings(api_keys=KEYS, wyoming_api_key="other-key-0002")
    assert wyoming_tenant(settings) == "other"


def test_dev_mode_without_keys_acts_as_the_dev_tenant() -> None:
    assert wyoming_tenant(WyomingSettings(dev_mode=True)) == "demo"


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"api_keys": KEYS}, "set VOICELANE_WYOMING_API_KEY"),
        ({"api_keys": KEYS, "dev_mode": True}, "set VOICELANE_WYOMING_API_KEY"),
        ({"api_keys": KEYS, "wyoming_api_key": "nobodys-key"}, "not one of VOICELANE_API_KEYS"),
        ({"dev_mode": True, "wyoming_api_key": "nobodys-key"}, "not one of VOICELANE_API_KEYS"),
        ({"wyoming_api_key": "acme-key-0001"}, "set VOICELANE_API_KEYS"),
    ],
    ids=["keys-no-wyoming-key", "dev-mode-with-keys", "unknown-key", "dev-unknown-key", "no-keys"],
)
def test_without_a_tenant_the_server_does_not_start(fields: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        wyoming_tenant(WyomingSettings.model_validate(fields))


def test_the_command_refuses_to_start_with_one_line_saying_what_to_set(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VOICELANE_API_KEYS", KEYS)
    assert main(["wyoming", "--port", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "set VOICELANE_WYOMING_API_KEY" in err[0], err


def test_up_runs_the_server_when_it_has_a_tenant_and_refuses_a_key_that_is_nobodys() -> None:
    from voicelane.api.stack import _wyoming_tenant
    from voicelane.core.settings import StackSettings

    assert _wyoming_tenant(StackSettings(dev_mode=True)) == "demo"
    assert _wyoming_tenant(StackSettings(api_keys=KEYS, wyoming_api_key="acme-key-0001")) == "acme"
    assert _wyoming_tenant(StackSettings(api_keys=KEYS)) is None, "runs the rest without it"
    with pytest.raises(ConfigError, match="not one of VOICELANE_API_KEYS"):
        _wyoming_tenant(StackSettings(api_keys=KEYS, wyoming_api_key="nobodys-key"))
