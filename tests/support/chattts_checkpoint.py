"""Build a random-weight ChatTTS checkpoint in ChatTTS's ``asset/`` layout, with its manifest.

The tests and benchmarks run the real ChatTTS code path (loading, tokenizer, GPT, decoder,
Vocos) on weights made here, since no real weights can be downloaded. Two sizes:

* :data:`TINY` — hidden size 64, 2 GPT layers, 1 layer elsewhere: about 3 MB, built in a
  second or two, a batch of three short texts renders in well under a second on a CPU;
* :data:`FULL` — the official release's architecture (hidden 768, 20 layers): about 1.1 GB,
  for benchmarks only.

Constraints (measured, see shared notes): the GPT hidden size equals the embedding's and
``config.gpt.hidden_size``; the decoder's ``idim`` is half of it; the DVAE's decoder
``idim``/``odim`` and encoder ``idim`` are half the VQ dimension; Vocos takes 100 input
channels; ``spk_stat`` is float16 of length 2H (std then mean) encoded with pybase16384;
``num_text_tokens`` is at least the tokenizer's length; 626 audio tokens.

The tokenizer is built with the ``tokenizers`` library directly (transformers' own save format
differs between 4.x and 5.x) and holds ChatTTS's control tokens.

Everything is seeded: the same seed builds byte-identical files (on one torch version).

Run as a script to build one: ``python -m tests.support.chattts_checkpoint DIR [--full]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_NAME = "voicelane-chattts.json"
NUM_AUDIO_TOKENS = 626
NUM_VQ = 4

_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_CONTROL_TOKENS = (
    "[spk_emb]",
    "[empty_spk]",
    "[Stts]",
    "[Ptts]",
    "[Sbreak]",
    "[Pbreak]",
    "[Ebreak]",
    "[uv_break]",
    "[v_break]",
    "[lbreak]",
    "[laugh]",
    *(f"[laugh_{i}]" for i in range(3)),
    *(f"[break_{i}]" for i in range(8)),
    *(f"[oral_{i}]" for i in range(10)),
    *(f"[speed_{i}]" for i in range(10)),
)
_LATIN = "abcdefghijklmnopqrstuvwxyz0123456789"
_PUNCTUATION = ".,!?;:'\"-()，。！？、；：“”‘’（）…"
# A sample of Han characters: the start of the CJK block plus those of common test phrases.
_HAN_SAMPLE = "".join(chr(0x4E00 + i) for i in range(256)) + (
    "你好世界今天天气很好我们去公园散步这是一个测试语音合成的句子早上好大家中文英文混合"
)


@dataclass(frozen=True, slots=True)
class CheckpointSize:
    """Every size that differs between checkpoints (the rest is ChatTTS's fixed layout)."""

    hidden: int
    gpt_layers: int
    gpt_heads: int
    gpt_intermediate: int
    num_text_tokens: int | None
    """None: the tokenizer's own length."""
    decoder_hidden: int
    decoder_layers: int
    decoder_bn_dim: int
    dvae_dim: int
    """The DVAE's decoder idim (half its VQ dimension)."""
    dvae_hidden: int
    dvae_layers: int
    dvae_bn_dim: int
    vocos_dim: int
    vocos_intermediate: int
    vocos_layers: int


TINY = CheckpointSize(
    hidden=64,
    gpt_layers=2,
    gpt_heads=4,
    gpt_intermediate=128,
    num_text_tokens=None,
    decoder_hidden=32,
    decoder_layers=1,
    decoder_bn_dim=16,
    dvae_dim=16,
    dvae_hidden=32,
    dvae_layers=1,
    dvae_bn_dim=16,
    vocos_dim=32,
    vocos_intermediate=64,
    vocos_layers=1,
)

FULL = CheckpointSize(
    hidden=768,
    gpt_layers=20,
    gpt_heads=12,
    gpt_intermediate=3072,
    num_text_tokens=21178,
    decoder_hidden=512,
    decoder_layers=12,
    decoder_bn_dim=128,
    dvae_dim=512,
    dvae_hidden=256,
    dvae_layers=12,
    dvae_bn_dim=128,
    vocos_dim=512,
    vocos_intermediate=1536,
    vocos_layers=8,
)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    directory: Path
    size: CheckpointSize
    manifest: dict[str, Any]
    files: tuple[str, ...] = field(default=())
    """Paths relative to ``directory``, as in the manifest's hash map."""

    @property
    def hidden(self) -> int:
        return self.size.hidden

    def path(self, relative: str) -> Path:
        return self.directory / relative


def tokenizer_tokens() -> list[str]:
    """The vocabulary, in id order."""
    pieces = [*_LATIN, *_PUNCTUATION, *(f"##{c}" for c in _LATIN), *_HAN_SAMPLE]
    seen: dict[str, None] = dict.fromkeys([*_SPECIAL_TOKENS, *_CONTROL_TOKENS])
    for piece in pieces:
        seen.setdefault(piece, None)
    return list(seen)


def _write_tokenizer(directory: Path) -> int:
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers

    tokens = tokenizer_tokens()
    vocab = {token: index for index, token in enumerate(tokens)}
    tokenizer = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True) for t in (*_SPECIAL_TOKENS, *_CONTROL_TOKENS)]
    )
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    specials = {
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "mask_token": "[MASK]",
    }
    config = {
        "tokenizer_class": "BertTokenizerFast",
        "do_lower_case": True,
        "model_max_length": 4096,
        **specials,
    }
    _write_json(directory / "tokenizer_config.json", config)
    _write_json(directory / "special_tokens_map.json", specials)
    return len(tokens)


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def _config_sections(size: CheckpointSize, num_text_tokens: int) -> dict[str, Any]:
    """The manifest's ``config``: ChatTTS config sections, field names as its dataclasses."""
    return {
        "gpt": {
            "hidden_size": size.hidden,
            "intermediate_size": size.gpt_intermediate,
            "num_attention_heads": size.gpt_heads,
            "num_hidden_layers": size.gpt_layers,
            "use_cache": False,
            "max_position_embeddings": 4096,
            "spk_emb_dim": 192,
            "spk_KL": False,
            "num_audio_tokens": NUM_AUDIO_TOKENS,
            "num_text_tokens": num_text_tokens,
            "num_vq": NUM_VQ,
        },
        "embed": {
            "hidden_size": size.hidden,
            "num_audio_tokens": NUM_AUDIO_TOKENS,
            "num_text_tokens": num_text_tokens,
            "num_vq": NUM_VQ,
        },
        "decoder": {
            "idim": size.hidden // 2,
            "odim": size.hidden // 2,
            "hidden": size.decoder_hidden,
            "n_layer": size.decoder_layers,
            "bn_dim": size.decoder_bn_dim,
        },
        "dvae": {
            "encoder": {
                "idim": size.dvae_dim,
                "odim": size.dvae_dim * 2,
                "hidden": size.dvae_hidden,
                "n_layer": size.dvae_layers,
                "bn_dim": size.dvae_bn_dim,
            },
            "decoder": {
                "idim": size.dvae_dim,
                "odim": size.dvae_dim,
                "hidden": size.dvae_hidden,
                "n_layer": size.dvae_layers,
                "bn_dim": size.dvae_bn_dim,
            },
            "vq": {"dim": size.dvae_dim * 2, "levels": [5, 5, 5, 5], "G": 2, "R": 2},
        },
        "vocos": {
            "backbone": {
                "init_args": {
                    "input_channels": 100,
                    "dim": size.vocos_dim,
                    "intermediate_dim": size.vocos_intermediate,
                    "num_layers": size.vocos_layers,
                }
            },
            "head": {"init_args": {"dim": size.vocos_dim, "n_fft": 1024, "hop_length": 256}},
        },
    }


def _spk_stat(hidden: int, seed: int) -> str:
    import numpy as np
    import pybase16384 as b14  # type: ignore[import-untyped]

    rng = np.random.default_rng(seed)
    std = rng.uniform(0.5, 1.5, hidden)
    mean = rng.normal(0.0, 0.2, hidden)
    raw = np.concatenate([std, mean]).astype(np.float16).tobytes()
    text: str = b14.encode_to_string(raw)
    return text


def _save(path: Path, state: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in state.items()}, str(path))


def _trained_layer_scales(module: Any) -> None:
    """ChatTTS's ConvNeXt blocks start with layer scales of 1e-6: random weights with them
    make the decoder an identity, with no receptive field to speak of, and streaming windows
    would look exact whatever their size. Trained weights have scales of order 1/layers."""
    import torch
    from ChatTTS.model.dvae import ConvNeXtBlock

    blocks = [m for m in module.modules() if isinstance(m, ConvNeXtBlock)]
    with torch.no_grad():
        for block in blocks:
            if block.weight is not None:
                block.weight.fill_(1.0 / max(1, len(blocks)))


def _build_weights(asset: Path, sections: dict[str, Any], size: CheckpointSize) -> None:
    """Instantiate ChatTTS's own modules with these sizes (seeded init) and save them."""
    from ChatTTS.model.dvae import DVAE
    from ChatTTS.model.embed import Embed
    from transformers import LlamaConfig, LlamaModel
    from vocos import Vocos  # type: ignore[import-untyped]
    from vocos.feature_extractors import MelSpectrogramFeatures  # type: ignore[import-untyped]
    from vocos.heads import ISTFTHead  # type: ignore[import-untyped]
    from vocos.models import VocosBackbone  # type: ignore[import-untyped]

    gpt = sections["gpt"]
    llama_config: dict[str, Any] = {
        "hidden_size": size.hidden,
        "intermediate_size": size.gpt_intermediate,
        "num_attention_heads": size.gpt_heads,
        "num_key_value_heads": size.gpt_heads,
        "num_hidden_layers": size.gpt_layers,
        "max_position_embeddings": 4096,
        "vocab_size": 32,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "model_type": "llama",
        "architectures": ["LlamaModel"],
        "torch_dtype": "float32",
    }
    model = LlamaModel(LlamaConfig(**llama_config))
    _save(asset / "gpt" / "model.safetensors", model.state_dict())
    _write_json(asset / "gpt" / "config.json", llama_config)
    del model

    embed = Embed(size.hidden, NUM_AUDIO_TOKENS, gpt["num_text_tokens"], NUM_VQ)
    _save(asset / "Embed.safetensors", embed.state_dict())

    decoder = DVAE(decoder_config=sections["decoder"], dim=sections["decoder"]["idim"])
    _trained_layer_scales(decoder)
    _save(asset / "Decoder.safetensors", decoder.state_dict())

    dvae_sections = sections["dvae"]
    dvae = DVAE(
        decoder_config=dvae_sections["decoder"],
        encoder_config=dvae_sections["encoder"],
        vq_config=dvae_sections["vq"],
        dim=dvae_sections["decoder"]["idim"],
    )
    _trained_layer_scales(dvae)
    _save(asset / "DVAE.safetensors", dvae.state_dict())

    vocos_sections = sections["vocos"]
    vocos = Vocos(
        feature_extractor=MelSpectrogramFeatures(),
        backbone=VocosBackbone(**vocos_sections["backbone"]["init_args"]),
        head=ISTFTHead(**vocos_sections["head"]["init_args"]),
    )
    _save(asset / "Vocos.safetensors", vocos.state_dict())


def sha256_key(relative: str) -> str:
    """ChatTTS's ``sha256_map`` key of a file: ``asset/gpt/config.json`` →
    ``sha256_asset_gpt_config_json``."""
    return "sha256_" + relative.replace("/", "_").replace(".", "_")


ASSET_FILES = (
    "asset/Decoder.safetensors",
    "asset/DVAE.safetensors",
    "asset/Embed.safetensors",
    "asset/Vocos.safetensors",
    "asset/gpt/config.json",
    "asset/gpt/model.safetensors",
    "asset/tokenizer/special_tokens_map.json",
    "asset/tokenizer/tokenizer_config.json",
    "asset/tokenizer/tokenizer.json",
)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build_checkpoint(directory: Path, size: CheckpointSize = TINY, seed: int = 0) -> Checkpoint:
    """Write a random-weight checkpoint and its manifest into ``directory``."""
    import torch

    directory = Path(directory)
    asset = directory / "asset"
    vocabulary = _write_tokenizer(asset / "tokenizer")
    num_text_tokens = size.num_text_tokens or vocabulary
    if num_text_tokens < vocabulary:
        raise ValueError(f"num_text_tokens {num_text_tokens} < tokenizer length {vocabulary}")
    sections = _config_sections(size, num_text_tokens)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        _build_weights(asset, sections, size)
    config = dict(sections)
    config["spk_stat"] = _spk_stat(size.hidden, seed)
    manifest = {
        "format": "voicelane-chattts",
        "version": 1,
        "description": f"random weights (seed {seed}), hidden {size.hidden}",
        "sha256": {sha256_key(f): _sha256(directory / f) for f in ASSET_FILES},
        "config": config,
    }
    _write_json(directory / MANIFEST_NAME, manifest)
    return Checkpoint(directory=directory, size=size, manifest=manifest, files=ASSET_FILES)


def size_bytes(checkpoint: Checkpoint) -> int:
    return sum(checkpoint.path(f).stat().st_size for f in checkpoint.files)


def main() -> None:
    parser = argparse.ArgumentParser(description="Build a random-weight ChatTTS checkpoint.")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--full", action="store_true", help="the official architecture (1.1 GB)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    checkpoint = build_checkpoint(args.directory, FULL if args.full else TINY, args.seed)
    print(f"{checkpoint.directory}: {size_bytes(checkpoint) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
