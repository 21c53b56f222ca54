"""The committed generated code matches proto/ (regenerate with `make proto`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WIRE = Path("voicelane") / "common" / "wire"
GENERATED = ROOT / "client" / WIRE


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    subprocess.run(
        [str(ROOT / "scripts" / "gen-proto.sh"), str(tmp_path)],
        check=True,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
    )
    fresh = tmp_path / WIRE
    names = sorted(p.name for p in fresh.iterdir())
    assert names == sorted(p.name for p in GENERATED.iterdir() if p.name != "__pycache__")
    for name in names:
        assert (fresh / name).read_bytes() == (GENERATED / name).read_bytes(), (
            f"client/{WIRE}/{name} is stale: run `make proto`"
        )


def test_the_service_is_voicelane_v1_speech() -> None:
    from voicelane.common.wire import speech_pb2

    service = speech_pb2.DESCRIPTOR.services_by_name["Speech"]
    assert service.full_name == "voicelane.v1.Speech"
    assert {m.name for m in service.methods} == {
        "Synthesize",
        "Converse",
        "ListVoices",
        "Chat",
        "Clock",
    }
