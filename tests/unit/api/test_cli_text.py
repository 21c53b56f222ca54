"""``voicelane text``: what the engine will be given, printed by the function the engines'
callers use (not a copy of it)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from voicelane.api.cli import main
from voicelane.core.speech_text import TextOptions, prepare_text
from voicelane.core.text_profiles import CHATTTS, ESPEAK

TEXT = "I paid $3.5M on 2024-05-06 at 14:30. Call +1 (555) 010-9999!\n\n我在2024年花了35.5元。"


def test_one_line_per_segment_exactly_as_the_engine_gets_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["text", TEXT]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [s.text for s in prepare_text(TEXT, profile=ESPEAK).segments]
    assert lines[0].startswith("I paid three point five million dollars")
    assert not any(c.isdigit() for line in lines for c in line)


def test_json_gives_each_segment_s_span_in_the_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["text", "--json", "--engine", "chattts", TEXT + " 🎉"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["engine"] == "chattts" and view["ssml"] is False
    prepared = prepare_text(TEXT + " 🎉", profile=CHATTTS)
    assert [s["text"] for s in view["segments"]] == [s.text for s in prepared.segments]
    for segment in view["segments"]:
        assert segment["source"] == (TEXT + " 🎉")[segment["start"] : segment["end"]]
    assert view["segments"][0]["source"].startswith("I paid $3.5M")
    (warning,) = view["warnings"]
    assert warning["code"] == "unspeakable" and warning["char"] == "🎉"


def test_warnings_go_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["text", "--engine", "chattts", "Hello 🎉 there."]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["Hello there."]
    assert "U+1F389" in captured.err


def test_no_normalize_hands_the_text_over_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["text", "--no-normalize", "Room 101."]) == 0
    assert capsys.readouterr().out.splitlines() == ["Room 101."]
    expected = prepare_text("Room 101.", profile=ESPEAK, options=TextOptions(normalize=False))
    assert [s.text for s in expected.segments] == ["Room 101."]


def test_reads_standard_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"It costs $5.")))
    assert main(["text"]) == 0
    assert capsys.readouterr().out.splitlines() == ["It costs five dollars."]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["text", "--engine", "nope", "Hi."], "engine 'nope' is unknown"),
        (["text", "--engine", "chattts", "--no-normalize", "123 456"], "nothing to speak"),
        (["text", "..."], "nothing to speak"),
        (["text", "--lexicon", "/no/such/file.pls", "Hi."], "No such file"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("flags", "fields"),
    [
        ([], {}),
        (["--no-normalize", "--ssml"], {"normalize": False, "ssml": True}),
        (["--lexicons", "house, names"], {"lexicons": ["house", "names"]}),
        (["--lexicons", ""], {"lexicons": []}),
    ],
)
def test_jobs_submit_sends_the_text_options(
    flags: list[str],
    fields: dict[str, object],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """What the REST body's ``normalize``, ``ssml`` and ``lexicons`` get from the flags (unset
    flags send nothing: the server's defaults, the tenant's default lexicon)."""
    import voicelane.client
    from voicelane.common.errors import UnavailableError

    sent: list[dict[str, object]] = []

    class Jobs:
        def __init__(self, *_: object) -> None:
            pass

        def submit_file(self, _path: Path, **options: object) -> dict[str, object]:
            sent.append({k: v for k, v in options.items() if v is not None})
            raise UnavailableError("stand-in: no server")

        def close(self) -> None:
            pass

    monkeypatch.setattr(voicelane.client, "JobsClient", Jobs)
    source = tmp_path / "in.txt"
    source.write_text("Hello.")
    assert main(["jobs", "submit", str(source), "--key", "k", *flags]) != 0
    (body,) = sent
    assert {k: v for k, v in body.items() if k not in ("voice", "format")} == fields
