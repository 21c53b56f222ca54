"""The ChatTTS step loop and decoders: our own generation loop over ChatTTS's modules.

Why our own loop instead of ``Chat.infer``:

* **Per-row budgets and lengths.** ChatTTS takes one ``min_new_token``/``max_new_token`` for the
  whole batch and pads short items to the longest. Here every row has its own budget, stops
  at its own end, leaves the running batch (its KV-cache rows are dropped) and is decoded at
  its own length.
* **Per-row sampling.** A seeded row draws its sampling noise from its own generator, seeded
  exactly as ChatTTS's ``manual_seed`` does (reseeded at every step), so a row is the same
  whatever else shares its batch; at batch 1 the tokens equal ChatTTS's own.
* **No process-wide interrupt.** Nothing here reads ChatTTS's ``Chat.interrupt`` flag; a
  streamed batch is stopped by closing its generator.
* **Incremental streaming decode** (:class:`StreamDecoder`): each chunk decodes only its new
  steps plus a bounded left context and a right holdback, so its cost stays flat however long
  the utterance grows, where ChatTTS re-decodes the whole prefix for every chunk.

Everything here runs on the batcher's scheduler thread. Sampling follows ChatTTS 0.2.5's
``GPT.generate`` step for step (temperature, repetition penalty over the last 16 tokens, top-p,
top-k, end-of-utterance masking before ``min_new_tokens``, ``multinomial``), which the tests pin
against ChatTTS itself.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 - torch's own convention

from .base import PcmF32
from .chattts_config import Sampling

SAMPLES_PER_STEP = 512
"""One GPT step = 2 mel frames x 256 samples at 24 kHz (21.3 ms)."""
EDGE_SAMPLES = 256
"""A decode of N steps yields N x 512 - 256 samples (centred ISTFT)."""
REPETITION_WINDOW_STEPS = 16
"""ChatTTS's repetition penalty looks at the last 16 tokens only (``gen_logits``): the
processors get that window, not the whole history (which would cost O(steps) per step)."""
_EMPTY: PcmF32 = np.zeros(0, dtype=np.float32)

Processor = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


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


def decorate_prompt(text: str, speed_level: int, with_speaker: bool) -> str:
    """ChatTTS's code prompt (``Speaker.decorate_code_prompts`` with ``[speed_N]``)."""
    for tag in ("[Stts]", "[spk_emb]", "[empty_spk]"):
        text = text.replace(tag, "")
    speaker = "[spk_emb]" if with_speaker else "[empty_spk]"
    return f"[Stts]{speaker}[speed_{speed_level}]{text.strip()}[Ptts]"


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


def logits_processors(model: LoadedModel, sampling: Sampling) -> list[Processor]:
    """ChatTTS's own processors (repetition penalty, then top-p, then top-k), fresh per call."""
    from ChatTTS.model import gen_logits

    warpers, processors = gen_logits(
        num_code=model.eos_token,
        top_P=sampling.top_p,
        top_K=sampling.top_k,
        repetition_penalty=sampling.repetition_penalty,
    )
    return [*processors, *warpers]


@torch.inference_mode()
def prompt_embeddings(model: LoadedModel, row: Row) -> torch.Tensor:
    """One row's prompt as the GPT's input: (prompt tokens, hidden), with its speaker
    embedding in place of ``[spk_emb]`` (as :class:`Generation` embeds a batch)."""
    chat = model.chat
    input_ids, _mask, text_mask = chat.tokenizer.encode(
        [row.prompt], model.num_vq, device=model.device
    )
    embeds = chat.embed(input_ids, text_mask)
    if row.speaker is not None:
        speaker = F.normalize(row.speaker, p=2.0, dim=0, eps=1e-12).to(model.device)
        where = input_ids[0, :, 0].eq(model.spk_emb_id)
        embeds[0, where] = speaker.to(embeds.dtype)
    embedded: torch.Tensor = embeds[0]
    return embedded


def _output_cache(outputs: Any) -> Any:
    cache = getattr(outputs, "cache", None)
    return cache if cache is not None else outputs.past_key_values


class Generation:
    """One static batch through the GPT, one :meth:`step` at a time.

    After each step, ``lengths[r]`` is how many audio tokens row ``r`` has (its hidden states
    are ``hiddens[r, :lengths[r]]``) and ``finished[r]`` whether it ended (end-of-utterance
    token or its ``max_new_tokens``). Finished rows leave the running batch.
    """

    def __init__(self, model: LoadedModel, rows: Sequence[Row], sampling: Sampling):
        if not rows:
            raise ValueError("a generation needs at least one row")
        self.model = model
        self.rows = list(rows)
        count = len(rows)
        self.max_steps = max(row.max_new_tokens for row in rows)
        self.lengths = [0] * count
        self.finished = [False] * count
        self.steps_done = 0
        self.active = list(range(count))
        """Original indices of the rows still running, in batch order."""
        device = model.device
        self.hiddens = torch.zeros((count, self.max_steps, model.hidden_size), device=device)
        self.tokens = torch.zeros(
            (count, self.max_steps, model.num_vq), dtype=torch.long, device=device
        )
        self._temperature = sampling.temperature
        self._processors = logits_processors(model, sampling)
        self._fixed_noise = self._seeded_noise()
        self._cache: Any = None
        self._embeds, self._mask, self._positions = self._prefill_inputs()

    @property
    def done(self) -> bool:
        return not self.active

    def release(self) -> None:
        """Drop the KV cache and buffers now (an abandoned or failed generation)."""
        self._cache = None
        self.active = []
        nothing = torch.empty(0)
        self.hiddens = self.tokens = self._embeds = self._mask = self._positions = nothing
        self._fixed_noise = None

    # ---- preparation ----------------------------------------------------------------------

    @torch.inference_mode()
    def _prefill_inputs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        model = self.model
        chat = model.chat
        input_ids, attention_mask, text_mask = chat.tokenizer.encode(
            [row.prompt for row in self.rows], model.num_vq, device=model.device
        )
        embeds = chat.embed(input_ids, text_mask)
        for index, row in enumerate(self.rows):
            if row.speaker is None:
                continue
            speaker = F.normalize(row.speaker, p=2.0, dim=0, eps=1e-12).to(model.device)
            where = input_ids[index, :, 0].eq(model.spk_emb_id)
            embeds[index, where] = speaker.to(embeds.dtype)
        positions = attention_mask.long().cumsum(-1) - 1
        positions.masked_fill_(attention_mask.eq(0), 1)
        return embeds, attention_mask, positions

    @torch.inference_mode()
    def _seeded_noise(self) -> torch.Tensor | None:
        """Exponential noise per seeded row: ``multinomial`` with a generator reseeded every
        step (ChatTTS's ``manual_seed``) draws the same noise at every step, so it is drawn
        once. ``argmax(p / q)`` with ``q ~ Exp(1)`` is how torch samples one token."""
        model = self.model
        if all(row.seed is None for row in self.rows):
            return None
        shape = (model.num_vq, model.num_audio_tokens)
        by_seed: dict[int, torch.Tensor] = {}
        noise = torch.ones((len(self.rows), *shape), device=model.device)
        for index, row in enumerate(self.rows):
            if row.seed is None:
                continue
            if row.seed not in by_seed:
                generator = torch.Generator(device=model.device).manual_seed(row.seed)
                by_seed[row.seed] = torch.empty(shape, device=model.device).exponential_(
                    1.0, generator=generator
                )
            noise[index] = by_seed[row.seed]
        return noise

    # ---- one step -------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self) -> None:
        """One decoding step for every running row."""
        if self.done:
            return
        hidden = self._forward()
        tokens = self._sample(hidden)
        self._accept(hidden, tokens)
        self.steps_done += 1

    def _forward(self) -> torch.Tensor:
        model = self.model
        outputs = model.gpt(
            inputs_embeds=self._embeds.to(model.gpt_dtype),
            attention_mask=self._mask,
            position_ids=self._positions,
            use_cache=True,
            **{model.cache_keyword: self._cache},
        )
        if self._cache is None:
            self._cache = _output_cache(outputs)
        hidden: torch.Tensor = outputs.last_hidden_state[:, -1].float()
        return hidden

    def _sample(self, hidden: torch.Tensor) -> torch.Tensor:
        model = self.model
        rows = len(self.active)
        vocabulary = model.num_audio_tokens
        logits = F.linear(hidden, model.code_head).view(rows * model.num_vq, vocabulary)
        logits = logits / self._temperature
        step = self.steps_done
        active = torch.tensor(self.active, device=model.device)
        first = max(0, step - REPETITION_WINDOW_STEPS)
        history = self.tokens[active, first:step].permute(0, 2, 1)
        history = history.reshape(rows * model.num_vq, step - first)
        for processor in self._processors:
            logits = processor(history, logits)
        too_early = [step < self.rows[r].min_new_tokens for r in self.active]
        if any(too_early):
            mask = torch.tensor(too_early, device=model.device).repeat_interleave(model.num_vq)
            logits[mask, model.eos_token] = -torch.inf
        scores = F.softmax(logits, dim=-1)
        noise = self._noise(active, scores)
        return (scores / noise).argmax(dim=-1).view(rows, model.num_vq)

    def _noise(self, active: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """Exp(1) noise per (row, codebook): fixed for seeded rows, fresh for the others."""
        seeded = [self.rows[r].seed is not None for r in self.active]
        if self._fixed_noise is None or not any(seeded):
            return torch.empty_like(scores).exponential_(1.0)
        fixed = self._fixed_noise[active].reshape(scores.shape)
        if all(seeded):
            return fixed
        fresh = torch.empty_like(scores).exponential_(1.0)
        where = torch.tensor(seeded, device=scores.device)
        where = where.repeat_interleave(self.model.num_vq).unsqueeze(1)
        return torch.where(where, fixed, fresh)

    def _accept(self, hidden: torch.Tensor, tokens: torch.Tensor) -> None:
        model = self.model
        step = self.steps_done
        ended = tokens.eq(model.eos_token).any(dim=1).tolist()
        keep: list[int] = []
        for position, row_index in enumerate(self.active):
            if ended[position]:
                self.finished[row_index] = True
                continue
            self.lengths[row_index] = step + 1
            if step + 1 >= self.rows[row_index].max_new_tokens:
                self.finished[row_index] = True
            else:
                keep.append(position)
        accepted = [p for p, e in enumerate(ended) if not e]
        if accepted:
            where = torch.tensor(accepted, device=model.device)
            rows = torch.tensor([self.active[p] for p in accepted], device=model.device)
            self.hiddens[rows, step] = hidden[where]
            self.tokens[rows, step] = tokens[where]
        self._advance(keep, tokens)

    def _advance(self, keep: list[int], tokens: torch.Tensor) -> None:
        """Inputs of the next step for the rows that go on; finished rows leave the cache."""
        model = self.model
        if not keep:
            self.active = []
            self._cache = None
            return
        if len(keep) < len(self.active):
            index = torch.tensor(keep, device=model.device)
            self._cache.batch_select_indices(index)
            tokens = tokens[index]
            self._mask = self._mask[index]
            self._positions = self._positions[index]
            self.active = [self.active[p] for p in keep]
        code_embeds = [
            model.chat.embed.emb_code[q](tokens[:, q]).unsqueeze(1) for q in range(model.num_vq)
        ]
        self._embeds = torch.stack(code_embeds, 3).sum(3)
        ones = torch.ones((len(keep), 1), dtype=self._mask.dtype, device=model.device)
        self._mask = torch.cat([self._mask, ones], dim=1)
        self._positions = self._positions[:, -1:] + 1

    def run(self) -> None:
        """Step until every row has finished."""
        while not self.done:
            self.step()


# ---- decoding ---------------------------------------------------------------------------


@torch.inference_mode()
def decode(model: LoadedModel, hiddens: torch.Tensor) -> np.ndarray:
    """GPT hidden states (rows, steps, hidden) → audio (rows, steps x 512 - 256), float32.

    ChatTTS's decoder (hidden → mel) then Vocos (mel → waveform), as ``Chat._decode_to_wavs``
    does, without padding: every row here has the same real length.
    """
    mel = model.chat.decoder(hiddens.transpose(1, 2).contiguous())
    wavs: torch.Tensor = model.chat.vocos.decode(mel)
    return wavs.float().cpu().numpy()


def decode_rows(model: LoadedModel, generation: Generation) -> list[PcmF32]:
    """Each row's whole audio, decoded at its own length (rows of equal length together)."""
    outputs: list[PcmF32] = [_EMPTY] * len(generation.rows)
    by_length: dict[int, list[int]] = {}
    for row_index, length in enumerate(generation.lengths):
        if length > 0:
            by_length.setdefault(length, []).append(row_index)
    for length, row_indices in by_length.items():
        index = torch.tensor(row_indices, device=model.device)
        audio = decode(model, generation.hiddens[index, :length])
        for position, row_index in enumerate(row_indices):
            outputs[row_index] = np.ascontiguousarray(audio[position], dtype=np.float32)
    return outputs


@dataclass(frozen=True, slots=True)
class StreamWindows:
    """The streaming schedule, in steps (one step = 512 samples = 21.3 ms)."""

    first_chunk_steps: int = 24
    stream_chunk_steps: int = 24
    context_steps: int = 32
    holdback_steps: int = 16

    def __post_init__(self) -> None:
        if self.holdback_steps < 1 or self.holdback_steps >= self.first_chunk_steps:
            raise ValueError("holdback_steps must be >= 1 and < first_chunk_steps")
        if self.stream_chunk_steps < 1 or self.context_steps < 0:
            raise ValueError("stream_chunk_steps must be >= 1 and context_steps >= 0")


class StreamDecoder:
    """Incremental decoding of a running :class:`Generation`.

    A row's audio for steps ``[a, b)`` is decoded from the window ``[a - context, b +
    holdback)`` and only the samples of ``[a, b)`` are kept; at the row's end the window
    runs to its last step. The window has a fixed size, so a chunk costs the same at step 50
    as at step 2000; with 32 steps of context and 16 of holdback the chunks, concatenated,
    equal the whole-utterance decode to about 1e-4 (docs/chattts.md).
    """

    def __init__(self, model: LoadedModel, generation: Generation, windows: StreamWindows):
        self.model = model
        self.generation = generation
        self.windows = windows
        self.emitted = [0] * len(generation.rows)
        """Steps of each row already sent out."""

    def pending(self) -> list[PcmF32] | None:
        """After a step: the new audio of each row, or None when nothing is due yet."""
        generation = self.generation
        outputs: list[PcmF32] = [_EMPTY] * len(generation.rows)
        produced = self._finish_rows(outputs)
        produced = self._running_rows(outputs) or produced
        return outputs if produced else None

    def _finish_rows(self, outputs: list[PcmF32]) -> bool:
        """The tail of every row that has finished and still has audio to send."""
        generation = self.generation
        produced = False
        for row_index, finished in enumerate(generation.finished):
            length = generation.lengths[row_index]
            start = self.emitted[row_index]
            if not finished or start >= length:
                continue
            outputs[row_index] = self._window([row_index], start, length, final=True)[0]
            self.emitted[row_index] = length
            produced = True
        return produced

    def _running_rows(self, outputs: list[PcmF32]) -> bool:
        """One batched window for the running rows when their next chunk is due."""
        generation = self.generation
        if generation.done:
            return False
        windows = self.windows
        steps = generation.steps_done  # every running row has exactly this many steps
        start = self.emitted[generation.active[0]]
        end = steps - windows.holdback_steps
        due = windows.first_chunk_steps if start == 0 else windows.stream_chunk_steps
        if (steps if start == 0 else end - start) < due or end <= start:
            return False
        chunks = self._window(generation.active, start, end, final=False)
        for row_index, chunk in zip(generation.active, chunks, strict=True):
            outputs[row_index] = chunk
            self.emitted[row_index] = end
        return True

    def _window(self, row_indices: list[int], start: int, end: int, final: bool) -> list[PcmF32]:
        """Audio of steps ``[start, end)`` of these rows, decoded with context."""
        window_start = max(0, start - self.windows.context_steps)
        window_end = (
            end if final else min(self.generation.steps_done, end + self.windows.holdback_steps)
        )
        index = torch.tensor(row_indices, device=self.model.device)
        audio = decode(self.model, self.generation.hiddens[index, window_start:window_end])
        first = (start - window_start) * SAMPLES_PER_STEP
        last = audio.shape[1] if final else (end - window_start) * SAMPLES_PER_STEP
        return [np.ascontiguousarray(a[first:last], dtype=np.float32) for a in audio]
