"""The voicelane command line: embedded render/say/voices, and bad input → exit 2, one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from voicelane.api.cli import main
from voicelane.common.audio import probe

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "examples" / "sample.txt"


def run_cli(
    *args: str, stdin: bytes | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The real command in a child process, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("VOICELANE_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "voicelane.api.cli", *args],
        input=stdin.decode("utf-8", "surrogateescape") if stdin is not None else None,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )


def test_render_writes_a_valid_ogg_and_prints_a_summary(tmp_path: Path) -> None:
    out = tmp_path / "sample.ogg"
    done = run_cli("render", str(SAMPLE), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no progress bar when stderr is not a terminal
    summary = done.stdout.strip().splitlines()
    assert len(summary) == 1
    assert summary[0].startswith(f"{out}: ") and "x real time" in summary[0]
    info = probe(out)
    assert info.codec == "opus" and info.sample_rate_hz == 24000
    assert info.duration_s > 30


def test_render_reads_stdin_and_takes_format_and_rate(tmp_path: Path) -> None:
    out = tmp_path / "speech.audio"
    done = run_cli(
        "render",
        "-",
        "-o",
        str(out),
        "--format",
        "flac",
        "--sample-rate",
        "16000",
        stdin="Hello from standard input. 你好。".encode(),
    )
    assert done.returncode == 0, done.stderr
    info = probe(out)
    assert info.codec == "flac" and info.sample_rate_hz == 16000


def test_say_and_voice(tmp_path: Path) -> None:
    out = tmp_path / "hi.mp3"
    assert main(["say", "Hi there.", "-o", str(out), "--voice", "en-gb"]) == 0
    assert probe(out).codec == "mp3"


def test_voices_lists_auto_english_and_mandarin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["voices"]) == 0
    ids = {line.split()[0] for line in capsys.readouterr().out.splitlines()}
    assert {"auto", "en-us", "cmn"} <= ids
    assert main(["voices", "--language", "cmn"]) == 0
    ids = {line.split()[0] for line in capsys.readouterr().out.splitlines()}
    assert "cmn" in ids and "en-us" not in ids


BAD_INPUTS: list[tuple[str, bytes | None, list[str], str]] = [
    ("empty", b"", [], "is empty"),
    ("whitespace", b"  \n\n\t ", [], "no text to speak"),
    ("invalid-utf8", b"na\xefve text \xff", [], "not valid UTF-8"),
    ("binary", bytes(range(256)) * 4, [], "looks binary"),
    ("missing-file", None, [], "no such file"),
    ("unknown-voice", b"Hello.", ["--voice", "klingon"], "voice 'klingon' is unknown"),
    ("unknown-format", b"Hello.", ["--format", "aiff"], "unsupported"),
    ("bad-rate", b"Hello.", ["--sample-rate", "44100"], "44100"),
    ("bad-speed", b"Hello.", ["--speed", "10"], "speed"),
]


@pytest.mark.parametrize(
    ("name", "data", "extra", "message"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS]
)
def test_bad_input_exits_2_with_one_line_and_no_output(
    tmp_path: Path, name: str, data: bytes | None, extra: list[str], message: str
) -> None:
    source = tmp_path / "in.txt"
    if data is not None:
        source.write_bytes(data)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    done = run_cli("render", str(source), "-o", str(out_dir / "o.ogg"), *extra)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("voicelane: error: ")
    assert message.lower() in lines[0].lower()
    assert "Traceback" not in done.stderr
    assert list(out_dir.iterdir()) == []


@pytest.mark.parametrize(
    ("output", "message"),
    [("speech.xyz", "unsupported"), ("no/such/dir/o.ogg", "no such file or directory")],
)
def test_bad_output_exits_2(tmp_path: Path, output: str, message: str) -> None:
    done = run_cli("render", str(SAMPLE), "-o", str(tmp_path / output))
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert message in done.stderr.lower()
    assert list(tmp_path.iterdir()) == [] or not (tmp_path / output).exists()


def test_unwritable_directory_exits_2(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        target = "/proc/voicelane.ogg"  # root can write anywhere on disk, not in /proc
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        target = str(locked / "o.ogg")
    done = run_cli("render", str(SAMPLE), "-o", target)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith("voicelane: error: cannot write")


def test_usage_errors_are_one_line_and_exit_2() -> None:
    done = run_cli("render", str(SAMPLE))  # no -o
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "voicelane: error: the following arguments are required: -o/--output "
        "(see voicelane render --help)"
    ]


def test_a_bad_setting_exits_2_with_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VOICELANE_DEV_MODE", "1")
    monkeypatch.setenv("VOICELANE_CALLBACK_ALLOW", "not a host!")
    monkeypatch.delenv("VOICELANE_DEBUG", raising=False)
    assert main(["api", "--port", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "VOICELANE_CALLBACK_ALLOW" in err[0], err


def test_up_without_a_flower_login_says_what_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Production mode (API keys set) needs a Flower login: ``up`` stops before starting
    anything, naming the variable (not "internal error: flower exited with 2")."""
    monkeypatch.setenv("VOICELANE_API_KEYS", "acme:placeholder-key-0123456789")
    monkeypatch.delenv("VOICELANE_FLOWER_BASIC_AUTH", raising=False)
    monkeypatch.delenv("VOICELANE_DEV_MODE", raising=False)
    done = run_cli("up", "--state-dir", str(tmp_path / "state"))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "voicelane: error: set VOICELANE_FLOWER_BASIC_AUTH=user:password (or VOICELANE_DEV_MODE=1)"
    )
    assert not (tmp_path / "state" / "children.json").exists()


# ---- each command builds its process's settings once and hands them down -----------------------


class Captured:
    """What a stand-in for a process's entry point was handed."""

    def __init__(self) -> None:
        self.settings: list[Any] = []

    def __call__(self, settings: object, *_: object, **__: object) -> int:
        self.settings.append(settings)
        return 0


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The settings roots that read the environment during a command, in order."""
    from voicelane.core.settings.environment import Environment

    seen: list[str] = []
    original = Environment.__call__

    def counting(self: Environment) -> dict[str, object]:
        seen.append(self.settings_cls.__name__)
        return original(self)

    monkeypatch.setattr(Environment, "__call__", counting)
    return seen


def test_each_server_command_hands_its_one_settings_tree_down(
    monkeypatch: pytest.MonkeyPatch, reads: list[str]
) -> None:
    import uvicorn

    from voicelane.api import flower, grpc_front, rest, stack, wyoming_front
    from voicelane.core.settings import (
        ApiSettings,
        FlowerSettings,
        GrpcSettings,
        Root,
        StackSettings,
        WorkerSettings,
        WyomingSettings,
    )
    from voicelane.workers import runtime

    monkeypatch.setenv("VOICELANE_LLM__MODEL", "llama3:8b")
    monkeypatch.setenv("VOICELANE_BATCHER__MAX_BATCH", "7")
    monkeypatch.setenv("VOICELANE_DEV_MODE", "1")
    entry: dict[str, tuple[Any, str, type[Root]]] = {
        "worker": (runtime, "run_worker", WorkerSettings),
        "api": (rest, "create_app", ApiSettings),
        "grpc": (grpc_front, "run_grpc", GrpcSettings),
        "wyoming": (wyoming_front, "run_wyoming", WyomingSettings),
        "flower": (flower, "run_flower", FlowerSettings),
        "up": (stack, "run_stack", StackSettings),
    }
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)
    for command, (module, name, root) in entry.items():
        captured = Captured()
        monkeypatch.setattr(module, name, captured)
        reads.clear()
        flags = ["--port", "9999"] if command in ("api", "grpc", "wyoming", "flower") else []
        assert main([command, *flags]) == 0, command
        assert len(captured.settings) == 1 and type(captured.settings[0]) is root, command
        settings: Any = captured.settings[0]
        assert reads == ["CliSettings", root.__name__], command  # the environment, once each
        if command in ("api", "grpc", "wyoming", "up"):
            assert settings.llm.model == "llama3:8b"
        if command in ("worker", "up"):
            assert settings.batcher.max_batch == 7
        if flags:  # a flag is a keyword of the root: it wins over the environment
            port = {
                "api": "port",
                "grpc": "grpc_port",
                "wyoming": "wyoming_port",
                "flower": "flower_port",
            }[command]
            assert getattr(settings, port) == 9999


def test_the_client_commands_take_key_and_server_from_the_cli_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import voicelane.client
    from voicelane.common.errors import UnavailableError

    asked: list[tuple[str, str]] = []

    class Jobs:
        def __init__(self, server: str, key: str) -> None:
            asked.append((server, key))

        def submit(self, *_: object, **__: object) -> dict[str, object]:
            raise UnavailableError("stand-in: no server")

        def close(self) -> None:
            pass

    monkeypatch.setattr(voicelane.client, "JobsClient", Jobs)
    text = tmp_path / "in.txt"
    text.write_text("Hello.")
    monkeypatch.delenv("VOICELANE_API_KEY", raising=False)
    assert main(["jobs", "submit", str(text)]) == 2
    assert "give --key or set VOICELANE_API_KEY" in capsys.readouterr().err
    monkeypatch.setenv("VOICELANE_API_KEY", "env-key-0123")
    monkeypatch.setenv("VOICELANE_SERVER", "http://api.example:8000")
    assert main(["jobs", "submit", str(text)]) != 0
    assert main(["jobs", "submit", str(text), "--key", "flag-key", "--server", "http://x"]) != 0
    assert asked == [("http://api.example:8000", "env-key-0123"), ("http://x", "flag-key")]


def test_debug_shows_the_traceback_and_a_bad_value_is_a_bad_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from voicelane.api import rest

    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(rest, "create_app", broken)
    monkeypatch.setenv("VOICELANE_DEV_MODE", "1")
    monkeypatch.delenv("VOICELANE_DEBUG", raising=False)
    assert main(["api"]) == 1
    assert capsys.readouterr().err == "voicelane: error: internal error: RuntimeError: boom\n"
    monkeypatch.setenv("VOICELANE_DEBUG", "1")
    with pytest.raises(RuntimeError, match="boom"):
        main(["api"])
    monkeypatch.setenv("VOICELANE_DEBUG", "sometimes")
    assert main(["api"]) == 2
    assert capsys.readouterr().err.startswith("voicelane: error: bad setting VOICELANE_DEBUG: ")
