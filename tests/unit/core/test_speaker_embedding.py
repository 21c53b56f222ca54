"""ChatTTS's ``spk_emb`` strings, read and written without torch (core/speaker_embedding.py)."""

from __future__ import annotations

import importlib.util
import lzma
import os

import numpy as np
import pytest

from voicelane.common.errors import InvalidInputError, is_permanent
from voicelane.core.speaker_embedding import (
    MAX_SPK_EMB_CHARS,
    MAX_SPK_EMB_VALUES,
    b14_decode,
    b14_encode,
    decode_spk_emb,
    encode_spk_emb,
)

HAS_PYBASE16384 = importlib.util.find_spec("pybase16384") is not None
HAS_CHATTTS = importlib.util.find_spec("ChatTTS") is not None and (
    importlib.util.find_spec("torch") is not None
)
_LZMA_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME}]


def test_base16384_of_known_bytes() -> None:
    """Every 7 bytes are 4 characters from U+4E00; a last group of n bytes ends with
    U+3D00 + n (the values pybase16384 writes)."""
    assert b14_encode(b"") == ""
    assert b14_encode(b"\x01") == "\u4e40\u3d01"
    assert b14_encode(bytes(range(1, 8))) == "\u4e40\u6e30\u5e14\u5407"
    assert b14_encode(bytes(range(1, 9))) == "\u4e40\u6e30\u5e14\u5407\u5000\u3d01"
    for size in range(40):
        data = os.urandom(size)
        assert b14_decode(b14_encode(data)) == data


@pytest.mark.skipif(not HAS_PYBASE16384, reason="pybase16384 (the chattts extra) not installed")
def test_base16384_agrees_with_pybase16384() -> None:
    import pybase16384 as b14  # type: ignore[import-untyped]

    for size in [*range(30), 1000, 1001, 1536]:
        data = os.urandom(size)
        assert b14_encode(data) == b14.encode_to_string(data), size
        assert b14_decode(b14.encode_to_string(data)) == data, size


@pytest.mark.parametrize(
    "text",
    ["\u4e40\u6e30\u5e14", "abcd", "\u4e40\u3d07", "\u3d01"],
    ids=["3 of 4 characters", "out of range", "not a marker", "marker alone"],
)
def test_base16384_refuses_what_it_cannot_be(text: str) -> None:
    with pytest.raises(ValueError, match="not base16384"):
        b14_decode(text)


def test_an_embedding_round_trips_through_its_string() -> None:
    values = np.random.default_rng(1).normal(0, 1, 768).astype(np.float32)
    text = encode_spk_emb(values)
    decoded = decode_spk_emb(text)
    assert decoded.dtype == np.float32
    assert np.array_equal(decoded, values.astype(np.float16).astype(np.float32))
    assert len(text) < 1200  # compressed: 768 float16 values are 1536 bytes
    assert decode_spk_emb(f"  {text}\n").shape == (768,)


@pytest.mark.skipif(not HAS_CHATTTS, reason="the chattts extra is not installed")
def test_chattts_reads_our_strings_and_we_read_its() -> None:
    import torch
    from ChatTTS.model.speaker import Speaker

    embedding = torch.randn(768, generator=torch.Generator().manual_seed(3)).half()
    theirs = Speaker._encode(embedding)
    assert np.array_equal(decode_spk_emb(theirs), embedding.float().numpy())
    assert encode_spk_emb(embedding.float().numpy()) == theirs
    assert np.array_equal(Speaker._decode(encode_spk_emb(embedding.numpy())), embedding.numpy())


def _raw(data: bytes) -> str:
    return b14_encode(lzma.compress(data, format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "hello",
        b14_encode(b"not lzma at all"),
        _raw(b"\x00\x3c\x01"),  # 3 bytes: not float16 values
        _raw(np.array([1.0, np.inf], dtype=np.float16).tobytes()),
        _raw(bytes(2 * MAX_SPK_EMB_VALUES + 2)),  # one value too many (a bomb is cut short)
        _raw(np.ones(8, dtype=np.float16).tobytes())[:-3],  # cut
    ],
    ids=["empty", "blank", "latin", "not lzma", "odd bytes", "inf", "too many", "cut"],
)
def test_malformed_strings_are_permanent_input_errors_on_the_voice(text: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        decode_spk_emb(text)
    assert caught.value.field == "voice"
    assert is_permanent(caught.value)
    assert str(caught.value).startswith("voice:")


def test_a_string_longer_than_any_embedding_is_refused_before_decoding() -> None:
    with pytest.raises(InvalidInputError, match="at most"):
        decode_spk_emb("\u4e00" * (MAX_SPK_EMB_CHARS + 4))


@pytest.mark.parametrize(
    "values",
    [np.zeros(0), np.zeros((2, 3)), np.zeros(MAX_SPK_EMB_VALUES + 1), np.array([1e6])],
    ids=["empty", "2-D", "too many", "not finite in float16"],
)
def test_encoding_refuses_what_is_not_an_embedding(values: np.ndarray) -> None:
    with pytest.raises(ValueError):
        encode_spk_emb(values)


def test_the_longest_embedding_fits_the_longest_string() -> None:
    """8192 values that do not compress still make a string within the bound (and the
    front's: core/voices.py's MAX_SPK_EMB_CHARS is the same)."""
    from voicelane.core import voices

    noisy = np.random.default_rng(0).normal(0, 1, MAX_SPK_EMB_VALUES)
    text = encode_spk_emb(noisy)
    assert len(text) <= MAX_SPK_EMB_CHARS == voices.MAX_SPK_EMB_CHARS
    assert decode_spk_emb(text).size == MAX_SPK_EMB_VALUES
