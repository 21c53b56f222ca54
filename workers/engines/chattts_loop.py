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

Everything here runs on the batcher's scheduler thread. Sampling is ChatTTS 0.2.5's
``GPT.generate``, step for step (:mod:`.chattts_sampling`, shared with the running batch of
:mod:`.chattts_steps`), which the tests pin against ChatTTS itself; the model, rows, prompt
embeddings and the audio decode are in :mod:`.chattts_model`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from . import chattts_model
from .base import PcmF32
from .chattts_config import Sampling
from .chattts_model import SAMPLES_PER_STEP, LoadedModel, Row, embed_prompts
from .chattts_sampling import (
    REPETITION_WINDOW_STEPS,
    logits_processors,
    sample_tokens,
    seeded_noise,
)

_EMPTY: PcmF32 = np.zeros(0, dtype=np.float32)


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
        self._noise = [None if row.seed is None else seeded_noise(model, row.seed) for row in rows]
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
        self._noise = []

    # ---- preparation ----------------------------------------------------------------------

    @torch.inference_mode()
    def _prefill_inputs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        embeds, attention_mask = embed_prompts(self.model, self.rows)
        positions = attention_mask.long().cumsum(-1) - 1
        positions.masked_fill_(attention_mask.eq(0), 1)
        return embeds, attention_mask, positions

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
        step = self.steps_done
        active = torch.tensor(self.active, device=self.model.device)
        first = max(0, step - REPETITION_WINDOW_STEPS)
        return sample_tokens(
            self.model,
            hidden,
            temperature=self._temperature,
            processors=self._processors,
            history=self.tokens[active, first:step],
            too_early=[step < self.rows[r].min_new_tokens for r in self.active],
            noise=[self._noise[r] for r in self.active],
        )

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


def decode_rows(model: LoadedModel, generation: Generation) -> list[PcmF32]:
    """Each row's whole audio, decoded at its own length (rows of equal length together)."""
    outputs: list[PcmF32] = [_EMPTY] * len(generation.rows)
    by_length: dict[int, list[int]] = {}
    for row_index, length in enumerate(generation.lengths):
        if length > 0:
            by_length.setdefault(length, []).append(row_index)
    for length, row_indices in by_length.items():
        index = torch.tensor(row_indices, device=model.device)
        audio = chattts_model.decode(model, generation.hiddens[index, :length])
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
        audio = chattts_model.decode(
            self.model, self.generation.hiddens[index, window_start:window_end]
        )
        first = (start - window_start) * SAMPLES_PER_STEP
        last = audio.shape[1] if final else (end - window_start) * SAMPLES_PER_STEP
        return [np.ascontiguousarray(a[first:last], dtype=np.float32) for a in audio]
