"""What the ChatTTS decoders use of a loaded ``ChatTTS.Chat``: the model and values computed
once (:class:`LoadedModel`), one utterance as the decoders see it (:class:`Row`), prompt
embeddings with the speaker in place, and the audio decode (hidden states → waveform).

Shared by the static decoder (:mod:`.chattts_loop`) and the running batch
(:mod:`.chattts_steps`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 - torch's own convention

SAMPLES_PER_STEP = 512
"""One GPT step = 2 mel frames x 256 samples at 24 kHz (21.3 ms)."""
EDGE_SAMPLES = 256
"""A decode of N steps yields N x 512 - 256 samples (centred ISTFT)."""


@dataclass(frozen=True, slots=True)
class Row:
    """One utterance as the loop sees it."""

    prompt: str
    """The decorated prompt: ``[Stts][spk_emb][speed_5]text[Ptts]``."""
    speaker: torch.Tensor | None
    """Speaker embedding (hidden size, float16, CPU), or None for ChatTTS's empty speaker."""
    seed: int | None
    min_new_tokens: int
    max_new_tokens: int
    audio_prompt: torch.Tensor | None = None
    """A reference clip's audio tokens (num_vq, clip steps), after the text of the prompt:
    ChatTTS's ``spk_smp`` (zero-shot; the prompt then holds the clip's transcript)."""


_PROMPT_TAGS = ("[Stts]", "[spk_emb]", "[empty_spk]")


def _untagged(text: str) -> str:
    for tag in _PROMPT_TAGS:
        text = text.replace(tag, "")
    return text.strip()


def decorate_prompt(text: str, speed_level: int, with_speaker: bool, sample_text: str = "") -> str:
    """ChatTTS's code prompt (``Speaker.decorate_code_prompts`` with ``[speed_N]``); with a
    reference clip, its transcript (``txt_smp``) before the speed."""
    speaker = "[spk_emb]" if with_speaker else "[empty_spk]"
    sample = _untagged(sample_text)
    return f"[Stts]{speaker}{sample}[speed_{speed_level}]{_untagged(text)}[Ptts]"


class LoadedModel:
    """What the loop uses of a loaded ``ChatTTS.Chat``, plus values computed once."""

    def __init__(self, chat: Any, device: torch.device) -> None:
        self.chat = chat
        self.device = device
        self.gpt: torch.nn.Module = chat.gpt.gpt
        self.hidden_size = int(chat.config.gpt.hidden_size)
        self.num_vq = int(chat.config.gpt.num_vq)
        self.num_audio_tokens = int(chat.config.gpt.num_audio_tokens)
        self.eos_token = self.num_audio_tokens - 1
        self.spk_emb_id = int(chat.tokenizer.spk_emb_ids)
        self.code_head = _code_head_weight(chat.embed)
        parameters = inspect.signature(type(self.gpt).forward).parameters
        # transformers 5.x renamed `past_key_values` to `cache` (the old name warns per call).
        self.cache_keyword = "cache" if "cache" in parameters else "past_key_values"

    @property
    def gpt_dtype(self) -> torch.dtype:
        return next(self.gpt.parameters()).dtype


@torch.inference_mode()
def _code_head_weight(embed: Any) -> torch.Tensor:
    """The num_vq weight-normalised code heads as one (num_vq x tokens, hidden) matrix."""
    return torch.cat([head.weight.detach() for head in embed.head_code]).clone()


@torch.inference_mode()
def embed_prompts(model: LoadedModel, rows: Sequence[Row]) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows' prompts as the GPT's input, padded to the longest: ``(embeds (rows, tokens,
    hidden), attention mask (rows, tokens))``, each row's speaker embedding in place of its
    ``[spk_emb]`` token (ChatTTS's own way of embedding a batch)."""
    chat = model.chat
    if all(row.audio_prompt is None for row in rows):
        input_ids, attention_mask, text_mask = chat.tokenizer.encode(
            [row.prompt for row in rows], model.num_vq, device=model.device
        )
    else:
        input_ids, attention_mask, text_mask = _encode_each(model, rows)
    embeds = chat.embed(input_ids, text_mask)
    for index, row in enumerate(rows):
        if row.speaker is None:
            continue
        speaker = F.normalize(row.speaker, p=2.0, dim=0, eps=1e-12).to(model.device)
        where = input_ids[index, :, 0].eq(model.spk_emb_id) & text_mask[index]
        embeds[index, where] = speaker.to(embeds.dtype)
    return embeds, attention_mask


def _encode_each(
    model: LoadedModel, rows: Sequence[Row]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ChatTTS's tokenizer takes one audio prompt per call: each row alone (its clip's
    tokens after its text), then left-padded as the tokenizer pads a batch."""
    encoded = [
        model.chat.tokenizer.encode(
            [row.prompt], model.num_vq, prompt=row.audio_prompt, device=model.device
        )
        for row in rows
    ]
    width = max(int(ids.shape[1]) for ids, _mask, _text in encoded)
    input_ids = torch.zeros(
        (len(rows), width, model.num_vq), dtype=encoded[0][0].dtype, device=model.device
    )
    attention_mask = torch.zeros((len(rows), width), dtype=encoded[0][1].dtype, device=model.device)
    text_mask = torch.zeros((len(rows), width), dtype=torch.bool, device=model.device)
    for index, (ids, mask, text) in enumerate(encoded):
        length = int(ids.shape[1])
        input_ids[index, width - length :] = ids[0]
        attention_mask[index, width - length :] = mask[0]
        text_mask[index, width - length :] = text[0]
    return input_ids, attention_mask, text_mask


def prompt_embeddings(model: LoadedModel, row: Row) -> torch.Tensor:
    """One row's prompt as the GPT's input: (prompt tokens, hidden)."""
    embeds, _mask = embed_prompts(model, [row])
    embedded: torch.Tensor = embeds[0]
    return embedded


@torch.inference_mode()
def encode_clip(model: LoadedModel, pcm: np.ndarray) -> torch.Tensor:
    """A reference clip (mono float32 at 24 kHz) → its audio tokens (num_vq, steps), long,
    on the CPU: ChatTTS's ``sample_audio_speaker`` (DVAE encoder, then its quantizer)
    without the string round trip. ValueError when the checkpoint's DVAE has no encoder."""
    dvae = model.chat.dvae
    if getattr(dvae, "encoder", None) is None or dvae.vq_layer is None:
        raise ValueError("the checkpoint's DVAE has no encoder")
    wav = torch.from_numpy(np.array(pcm, dtype=np.float32))  # a copy: the store's is read-only
    tokens: torch.Tensor = dvae.sample_audio(wav)
    return tokens.to(device="cpu", dtype=torch.long)


@torch.inference_mode()
def decode(model: LoadedModel, hiddens: torch.Tensor) -> np.ndarray:
    """GPT hidden states (rows, steps, hidden) → audio (rows, steps x 512 - 256), float32.

    ChatTTS's decoder (hidden → mel) then Vocos (mel → waveform), as ``Chat._decode_to_wavs``
    does, without padding: every row here has the same real length.
    """
    mel = model.chat.decoder(hiddens.transpose(1, 2).contiguous())
    wavs: torch.Tensor = model.chat.vocos.decode(mel)
    return wavs.float().cpu().numpy()
