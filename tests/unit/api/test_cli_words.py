"""``--words`` and ``--marks`` of ``voicelane say`` and ``voicelane render``: the JSON the
docs show, spans that slice the input, and nothing written when anything fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from voicelane.api.cli import main
from voicelane.common.audio import probe

KEYS = ["text", "start_ms", "end_ms", "char_start", "char_end"]


def test_say_writes_the_word_timings(tmp_path: Path) -> None:
    text = "I paid $3.5M, today."
    out, words = tmp_path / "x.wav", tmp_path / "x.json"
    assert main(["say", text, "-o", str(out), "--words", str(words)]) == 0
    timings = json.loads(words.read_text(encoding="utf-8"))
    assert [list(t) for t in timings] == [KEYS] * len(timings)
    assert [t["text"] for t in timings] == ["I", "paid", "$3.5M", "today"]
    assert all(t["text"] == text[t["char_start"] : t["char_end"]] for t in timings)
    starts = [t["start_ms"] for t in timings]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    assert timings[-1]["end_ms"] <= probe(out).duration_s * 1000 + 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json", "x.wav"]


def test_render_writes_words_and_marks(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    text = "第一句话。Second sentence, in English."
    source.write_text(text, encoding="utf-8")
    out, words, marks = tmp_path / "o.ogg", tmp_path / "w.json", tmp_path / "m.json"
    code = main(
        ["render", str(source), "-o", str(out), "--words", str(words), "--marks", str(marks)]
    )
    assert code == 0
    timings = json.loads(words.read_text(encoding="utf-8"))
    assert timings and all(t["text"] == text[t["char_start"] : t["char_end"]] for t in timings)
    assert timings[-1]["text"] == "English"
    assert json.loads(marks.read_text(encoding="utf-8")) == []  # plain text has no marks


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--voice", "nobody"], "nobody"),
        (["--words", "{dir}/missing/w.json"], "cannot write"),
    ],
)
def test_a_failure_leaves_no_file_at_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    extra = [e.format(dir=out_dir) for e in extra]
    args = ["say", "Some words.", "-o", str(out_dir / "a.wav"), "--marks", str(out_dir / "m.json")]
    if "--words" not in extra:
        args += ["--words", str(out_dir / "w.json")]
    assert main([*args, *extra]) == 2
    assert message in capsys.readouterr().err
    assert list(out_dir.iterdir()) == []


def test_words_through_an_unreachable_server_leave_no_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--server`` writes them too (tests/integration/test_stream_words.py); a stream that
    fails leaves neither the audio nor them."""
    args = ["say", "Hi.", "-o", str(tmp_path / "a.wav"), "--words", str(tmp_path / "w.json")]
    code = main(
        [*args, "--marks", str(tmp_path / "m.json"), "--server", "127.0.0.1:1", "--key", "k"]
    )
    assert code != 0
    assert "failed to connect" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_local_lexicon_file_is_refused_through_a_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["say", "Hi.", "-o", str(tmp_path / "a.wav"), "--lexicon", str(tmp_path / "x.pls")]
    assert main([*args, "--server", "127.0.0.1:1", "--key", "k"]) == 2
    assert "--lexicon" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
