"""Continuous batching for ChatTTS: one running batch that steps; rows join and leave between
steps.

:class:`ChatTTSSteps` is the engine's :class:`~voicelane.workers.engines.base.StepSession`. Every
:meth:`~ChatTTSSteps.step` runs, for the rows the batcher gives it (in priority order):

1. **bounded prefill**: rows that joined are prefilled in chunks of ``prefill_chunk_tokens``
   prompt tokens, at most that many tokens per step in all (the first chunk of a step always
   runs), so a long prompt never stalls the running rows for more than one chunk;
2. **one decoding step** for every row that was already decoding, in one batched forward;
3. **per-row sampling** (temperature, repetition penalty over the row's last 16 tokens, top-p,
   top-k, end of utterance masked before its ``min_new_tokens``; a seeded row's noise drawn
   once from its own seed), so a row's tokens do not depend on what shares its batch;
4. **audio**: a streamed row's next window when due (:class:`~.chattts_loop.StreamWindows`,
   the same schedule as the static streams), a whole row's audio at its end.

**The KV cache is paged** (:class:`PagedKV`): one pool of ``block_tokens``-token blocks per
layer, each row owning the blocks of its own tokens, so memory follows the sum of the rows'
lengths (each rounded up to a block), not rows x the longest one, and a finished or removed
row's blocks are reused at once. The GPT's layers run here, over ChatTTS's own modules
(norms, projections, rotary embedding, MLP): each layer writes the new keys/values into the
rows' slots and gathers each row's keys into a padded view for attention, one layer at a
time (that view is transient). Positions are each row's own (0 from its first prompt token),
so a row sees exactly the keys it would see alone.

Nothing of a step is committed before all of it has succeeded (new keys go into slots past
each row's committed length; counters move at the end), so after an out-of-memory error the
batcher can remove rows and step again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 - torch's own convention

from . import chattts_model
from .base import PcmF32, StepEvent, StepSession, Utterance
from .chattts_config import Sampling
from .chattts_loop import StreamWindows
from .chattts_model import SAMPLES_PER_STEP, LoadedModel, Row, prompt_embeddings
from .chattts_sampling import (
    REPETITION_WINDOW_STEPS,
    Processor,
    logits_processors,
    sample_tokens,
    seeded_noise,
)

T = TypeVar("T")
Guard = Callable[[Callable[[], T]], T]
"""Runs a step; maps the device's out-of-memory error to ``EngineOutOfMemoryError``."""
Planner = Callable[[Utterance], tuple[Row, Sampling]]
"""An utterance → its loop row and sampling (the engine's parser, normaliser and voices)."""

_EMPTY: PcmF32 = np.zeros(0, dtype=np.float32)
_FIRST_HIDDEN_CAPACITY = 64


@dataclass(frozen=True, slots=True)
class StepLimits:
    """The running batch's bounds (``VOICELANE_CHATTTS__*`` settings)."""

    block_tokens: int = 16
    """Tokens per KV-cache block (a row's memory is rounded up to this)."""
    prefill_chunk_tokens: int = 256
    """Prompt tokens per prefill chunk, and the most prefill work in one step."""
    kv_budget_tokens: int | None = None
    """Most KV tokens the session reserves for its rows (prompt + token budget each);
    None: no budget but ``max_batch`` and out-of-memory backoff."""


class PagedKV:
    """The running batch's KV cache: per layer one pool of token slots, in blocks.

    A row owns a list of blocks; token ``t`` of the row lives in slot ``blocks[t // B] * B +
    t % B``. The pool grows (doubling, copied once) when no block is free and is dropped
    when the session empties.
    """

    def __init__(
        self,
        layers: int,
        kv_heads: int,
        head_dim: int,
        *,
        dtype: torch.dtype,
        device: torch.device,
        block_tokens: int,
    ) -> None:
        self.block_tokens = block_tokens
        self._layers, self._kv_heads, self._head_dim = layers, kv_heads, head_dim
        self._dtype, self._device = dtype, device
        self.keys = self._empty(0)
        self.values = self._empty(0)
        self.blocks_total = 0
        self._free: list[int] = []

    @property
    def bytes_per_token(self) -> int:
        """Keys and values of one token in every layer."""
        element = torch.empty(0, dtype=self._dtype).element_size()
        return 2 * self._layers * self._kv_heads * self._head_dim * element

    @property
    def blocks_used(self) -> int:
        return self.blocks_total - len(self._free)

    @property
    def bytes_allocated(self) -> int:
        return self.blocks_total * self.block_tokens * self.bytes_per_token

    def _empty(self, slots: int) -> torch.Tensor:
        # Zeros, not empty: attention multiplies the hidden (masked) slots' values by 0, and
        # uninitialised memory can hold NaN (0 x NaN = NaN).
        shape = (self._layers, slots, self._kv_heads, self._head_dim)
        return torch.zeros(shape, dtype=self._dtype, device=self._device)

    def ensure(self, blocks: list[int], tokens: int) -> None:
        """Give a row's block list room for ``tokens`` tokens (growing the pool if needed)."""
        needed = -(-tokens // self.block_tokens) - len(blocks)
        if needed <= 0:
            return
        if needed > len(self._free):
            self._grow(needed - len(self._free))
        for _ in range(needed):
            blocks.append(self._free.pop())

    def _grow(self, at_least: int) -> None:
        added = max(at_least, self.blocks_total, 16)
        total = self.blocks_total + added
        slots = total * self.block_tokens
        keys, values = self._empty(slots), self._empty(slots)
        used = self.blocks_total * self.block_tokens
        if used:
            keys[:, :used] = self.keys
            values[:, :used] = self.values
        self.keys, self.values = keys, values
        self._free.extend(range(total - 1, self.blocks_total - 1, -1))
        self.blocks_total = total

    def release(self, blocks: list[int]) -> None:
        self._free.extend(reversed(blocks))
        blocks.clear()

    def reset(self) -> None:
        """Drop the pool (no row holds a block)."""
        self.keys = self._empty(0)
        self.values = self._empty(0)
        self.blocks_total = 0
        self._free = []

    def slot_table(self, rows: Sequence[list[int]], tokens: int) -> torch.Tensor:
        """(rows, tokens) slot indices of each row's first ``tokens`` tokens (rows shorter
        than that point at their own last block's slots or slot 0: the mask hides them)."""
        width = max(1, -(-tokens // self.block_tokens))
        table = torch.tensor(
            [blocks[:width] + [0] * (width - len(blocks[:width])) for blocks in rows],
            dtype=torch.long,
            device=self._device,
        )
        offsets = torch.arange(self.block_tokens, device=self._device)
        slots = table.unsqueeze(-1) * self.block_tokens + offsets
        return slots.view(len(rows), -1)[:, :tokens]


@dataclass(eq=False, slots=True)
class _RowState:
    handle: int
    utterance: Utterance
    stream: bool
    row: Row | None = None
    sampling: Sampling | None = None
    embeds: torch.Tensor | None = None
    """Prompt embeddings (prompt tokens, hidden) until the prompt is prefilled."""
    prompt_tokens: int = 0
    prefilled: int = 0
    blocks: list[int] = field(default_factory=list)
    steps: int = 0
    """Audio tokens accepted (its hidden states are ``hiddens[:steps]``)."""
    hiddens: torch.Tensor | None = None
    tokens: torch.Tensor | None = None
    noise: torch.Tensor | None = None
    emitted: int = 0
    """Steps already sent out (streamed rows)."""
    reserved_tokens: int = 0

    @property
    def decoding(self) -> bool:
        return self.row is not None and self.prefilled == self.prompt_tokens and self.steps > 0

    @property
    def cache_tokens(self) -> int:
        """Tokens whose keys/values are committed: the prompt, then one per accepted token
        but the newest (its keys are written by the step that feeds it back)."""
        return self.prefilled + max(0, self.steps - 1)


@dataclass(slots=True)
class _Sampled:
    """One row's new token, not yet committed."""

    state: _RowState
    hidden: torch.Tensor
    token: torch.Tensor | None = None
    ended: bool = False


class ChatTTSSteps(StepSession):
    """The running batch of one ChatTTS engine (see the module docstring)."""

    def __init__(
        self,
        model: LoadedModel,
        *,
        plan: Planner,
        windows: StreamWindows,
        limits: StepLimits,
        guard: Guard[list[StepEvent]],
        estimate_tokens: Callable[[Utterance], int],
    ) -> None:
        self.model = model
        self.windows = windows
        self.limits = limits
        self._plan = plan
        self._guard = guard
        self._estimate = estimate_tokens
        gpt: Any = model.gpt
        attention = gpt.layers[0].self_attn
        config = gpt.config
        self._layers = list(gpt.layers[: config.num_hidden_layers])
        self._head_dim = int(attention.head_dim)
        self._kv_heads = int(config.num_key_value_heads)
        self._groups = int(config.num_attention_heads) // self._kv_heads
        self.kv = PagedKV(
            len(self._layers),
            self._kv_heads,
            self._head_dim,
            dtype=model.gpt_dtype,
            device=model.device,
            block_tokens=limits.block_tokens,
        )
        self._rows: dict[int, _RowState] = {}
        self._processors: dict[Sampling, list[Processor]] = {}
        self._reserved = 0
        self.steps_done = 0
        self._pending: list[_Finished] = []
        """Whole rows that ended, waiting for their decode (see :meth:`_decode_finished`)."""
        self.record_tokens = False
        """Tests: keep each finished row's tokens in :attr:`finished_tokens`."""
        self.finished_tokens: dict[int, torch.Tensor] = {}

    # ---- membership -----------------------------------------------------------------------

    @property
    def handles(self) -> list[int]:
        """Running rows, then whole rows that ended and wait for their decode."""
        return [*self._rows, *(finished.handle for finished in self._pending)]

    def progress(self, handle: int) -> tuple[int, int, int]:
        """A row's (prompt tokens prefilled, prompt tokens, audio tokens): for tests and
        benchmarks. The prompt length is 0 until the row's first step embeds it."""
        state = self._rows[handle]
        return state.prefilled, state.prompt_tokens, state.steps

    def fits(self, utterance: Utterance) -> bool:
        budget = self.limits.kv_budget_tokens
        return budget is None or self._reserved + self._estimate(utterance) <= budget

    def admit(self, handle: int, utterance: Utterance, *, stream: bool) -> None:
        """Plan the row now (voice, normalised prompt, budgets): a voice that cannot be made
        (a tenant's missing clip, an embedding of the wrong size) fails this row alone."""
        if handle in self._rows:
            raise ValueError(f"row {handle} is already in the running batch")
        row, sampling = self._plan(utterance)
        state = _RowState(
            handle,
            utterance,
            stream,
            row=row,
            sampling=sampling,
            reserved_tokens=self._estimate(utterance),
        )
        self._rows[handle] = state
        self._reserved += state.reserved_tokens

    def remove(self, handle: int) -> None:
        self._pending = [finished for finished in self._pending if finished.handle != handle]
        self._release(handle)

    def _release(self, handle: int) -> None:
        """Drop a running row's state and give its KV blocks back."""
        state = self._rows.pop(handle, None)
        if state is None:
            return
        self._reserved -= state.reserved_tokens
        self.kv.release(state.blocks)
        state.embeds = state.hiddens = state.tokens = state.noise = None
        if not self._rows:
            self.kv.reset()

    def close(self) -> None:
        for handle in self.handles:
            self.remove(handle)

    # ---- one step -------------------------------------------------------------------------

    def step(self, handles: Sequence[int]) -> list[StepEvent]:
        states = [self._rows[h] for h in handles if h in self._rows]
        if not states and not self._pending:
            return []
        return self._guard(lambda: self._step(states))

    @torch.inference_mode()
    def _step(self, states: list[_RowState]) -> list[StepEvent]:
        decoded, done = self._decode_finished(states)
        decoding = [state for state in states if state.decoding]
        prefill = self._prefill(states)
        sampled = [*prefill.completed]
        if decoding:
            hidden = self._decode_forward(decoding)
            sampled.extend(_Sampled(s, hidden[i]) for i, s in enumerate(decoding))
        if sampled:
            self._sample(sampled)
        events = [*decoded, *self._audio(sampled)]
        self._pending = [finished for finished in self._pending if finished not in done]
        self._commit(prefill, sampled)
        if states:
            self.steps_done += 1
        return events

    def _decode_finished(self, states: list[_RowState]) -> tuple[list[StepEvent], list[_Finished]]:
        """The audio of whole rows that ended: the oldest one's, with every other of the same
        length (one batched decode) — one length per step, so a step never stalls on several
        whole-utterance decodes, and none while a streamed row of this step waits for its
        first audio (a live voice's first chunk goes first; the finished rows' callers only
        want the whole file)."""
        if not self._pending or any(s.stream and s.emitted == 0 for s in states):
            return [], []
        length = self._pending[0].length
        group = [finished for finished in self._pending if finished.length == length]
        if length == 0:
            return [StepEvent(finished.handle, _EMPTY, True) for finished in group], group
        audio = chattts_model.decode(
            self.model, torch.stack([finished.hiddens for finished in group])
        )
        events = [
            StepEvent(finished.handle, np.ascontiguousarray(samples, dtype=np.float32), True)
            for finished, samples in zip(group, audio, strict=True)
        ]
        return events, group

    # ---- prefill --------------------------------------------------------------------------

    def _prefill(self, states: list[_RowState]) -> _Prefill:
        """Prompt chunks for the rows still prefilling, in order, within the step's budget."""
        result = _Prefill()
        budget = self.limits.prefill_chunk_tokens
        spent = 0
        for state in states:
            if state.decoding or state.steps > 0:
                continue
            if state.embeds is None:
                self._prepare(state)
            assert state.embeds is not None
            done = state.prefilled
            while done < state.prompt_tokens:
                chunk = min(self.limits.prefill_chunk_tokens, state.prompt_tokens - done)
                if spent and spent + chunk > budget:
                    break
                self.kv.ensure(state.blocks, done + chunk)
                hidden = self._forward(
                    state.embeds[done : done + chunk].unsqueeze(0), [done], [state.blocks]
                )
                done += chunk
                spent += chunk
                if done == state.prompt_tokens:
                    result.completed.append(_Sampled(state, hidden[0]))
            if done > state.prefilled:
                result.progress[state.handle] = done
            if done < state.prompt_tokens:
                break  # the step's prefill budget is spent
        return result

    def _prepare(self, state: _RowState) -> None:
        """Embed the row's prompt (planned at admission), make its buffers, draw its noise."""
        model = self.model
        row = _row(state)
        embeds = prompt_embeddings(model, row)
        state.embeds = embeds
        state.prompt_tokens = int(embeds.shape[0])
        capacity = min(row.max_new_tokens, _FIRST_HIDDEN_CAPACITY)
        state.hiddens = torch.zeros((capacity, model.hidden_size), device=model.device)
        state.tokens = torch.zeros((capacity, model.num_vq), dtype=torch.long, device=model.device)
        if row.seed is not None:
            state.noise = seeded_noise(model, row.seed)

    # ---- forward --------------------------------------------------------------------------

    def _decode_forward(self, states: list[_RowState]) -> torch.Tensor:
        """One batched forward of every decoding row's newest token."""
        model = self.model
        last = torch.stack([_buffer(s.tokens)[s.steps - 1] for s in states])
        code_embeds = [
            model.chat.embed.emb_code[q](last[:, q]).unsqueeze(1) for q in range(model.num_vq)
        ]
        embeds = torch.stack(code_embeds, 3).sum(3)
        past = [state.cache_tokens for state in states]
        for state, tokens in zip(states, past, strict=True):
            self.kv.ensure(state.blocks, tokens + 1)
        return self._forward(embeds, past, [state.blocks for state in states])

    def _forward(
        self, embeds: torch.Tensor, past: list[int], blocks: list[list[int]]
    ) -> torch.Tensor:
        """The GPT over ``embeds`` (rows, new tokens, hidden): row ``r``'s new tokens sit at
        positions ``past[r]...`` of its own sequence, attending to its cached keys and to
        each other causally. Returns the last new token's hidden state per row (float32)."""
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        model = self.model
        gpt: Any = model.gpt
        device = model.device
        rows, new = int(embeds.shape[0]), int(embeds.shape[1])
        positions = torch.tensor(past, device=device).unsqueeze(1) + torch.arange(
            new, device=device
        )
        total = max(past) + new
        slots = self.kv.slot_table(blocks, total)
        new_slots = slots.gather(1, positions).reshape(-1)
        visible = torch.arange(total, device=device).view(1, 1, total) <= positions.unsqueeze(-1)
        mask = visible.unsqueeze(1)  # (rows, 1, new, total): own keys, causal
        hidden = embeds.to(model.gpt_dtype)
        cos, sin = gpt.rotary_emb(hidden, position_ids=positions)
        shape = (rows, new, -1, self._head_dim)
        for index, layer in enumerate(self._layers):
            attention = layer.self_attn
            normed = layer.input_layernorm(hidden)
            query = attention.q_proj(normed).view(shape).transpose(1, 2)
            key = attention.k_proj(normed).view(shape).transpose(1, 2)
            value = attention.v_proj(normed).view(shape).transpose(1, 2)
            query, key = apply_rotary_pos_emb(query, key, cos, sin)
            flat = (rows * new, self._kv_heads, self._head_dim)
            self.kv.keys[index].index_copy_(0, new_slots, key.transpose(1, 2).reshape(flat))
            self.kv.values[index].index_copy_(0, new_slots, value.transpose(1, 2).reshape(flat))
            keys = self.kv.keys[index][slots].transpose(1, 2)
            values = self.kv.values[index][slots].transpose(1, 2)
            if self._groups > 1:
                keys = keys.repeat_interleave(self._groups, dim=1)
                values = values.repeat_interleave(self._groups, dim=1)
            attended = F.scaled_dot_product_attention(
                query, keys, values, attn_mask=mask, scale=attention.scaling
            )
            attended = attended.transpose(1, 2).reshape(rows, new, -1)
            hidden = hidden + attention.o_proj(attended)
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        hidden = gpt.norm(hidden)
        last: torch.Tensor = hidden[:, -1].float()
        return last

    # ---- sampling -------------------------------------------------------------------------

    def _sample(self, sampled: list[_Sampled]) -> None:
        """A token per row, ChatTTS's way, with each row's own sampling and history: one
        :func:`~.chattts_sampling.sample_tokens` per (sampling, history length) group."""
        model = self.model
        hidden = torch.stack([item.hidden for item in sampled])
        groups: dict[tuple[Sampling, int], list[int]] = {}
        for position, item in enumerate(sampled):
            sampling = item.state.sampling
            assert sampling is not None
            history = min(item.state.steps, REPETITION_WINDOW_STEPS)
            groups.setdefault((sampling, history), []).append(position)
        for (sampling, history), positions in groups.items():
            states = [sampled[p].state for p in positions]
            where = torch.tensor(positions, device=model.device)
            tokens = sample_tokens(
                model,
                hidden[where],
                temperature=sampling.temperature,
                processors=self._processors_for(sampling),
                history=torch.stack(
                    [_buffer(s.tokens)[s.steps - history : s.steps] for s in states]
                ),
                too_early=[s.steps < _row(s).min_new_tokens for s in states],
                noise=[s.noise for s in states],
            )
            ended = tokens.eq(model.eos_token).any(dim=1).tolist()
            for offset, position in enumerate(positions):
                sampled[position].token = tokens[offset]
                sampled[position].ended = bool(ended[offset])

    def _processors_for(self, sampling: Sampling) -> list[Processor]:
        processors = self._processors.get(sampling)
        if processors is None:
            processors = self._processors[sampling] = logits_processors(self.model, sampling)
        return processors

    # ---- audio ----------------------------------------------------------------------------

    def _audio(self, sampled: list[_Sampled]) -> list[StepEvent]:
        """The audio this step makes due, computed from the step's (uncommitted) tokens."""
        lengths: dict[int, int] = {}
        finished: set[int] = set()
        for item in sampled:
            state = item.state
            if not item.ended:
                _store(state, item)
            lengths[state.handle] = state.steps + (0 if item.ended else 1)
            if item.ended or lengths[state.handle] >= _row(state).max_new_tokens:
                finished.add(state.handle)
        windows: list[tuple[_RowState, int, int, bool]] = []
        for handle, length in lengths.items():
            state = self._rows[handle]
            window = self._due_window(state, length, handle in finished)
            if window is not None:
                windows.append((state, *window, handle in finished))
        audio = self._decode_windows(windows)
        return [
            StepEvent(handle, audio.get(handle, _EMPTY), handle in finished)
            for handle in lengths
            if self._rows[handle].stream
        ]

    def _due_window(self, state: _RowState, length: int, finished: bool) -> tuple[int, int] | None:
        """Steps ``[start, end)`` of this streamed row to send now, or None (whole rows are
        decoded once they ended: :meth:`_decode_finished`)."""
        if not state.stream:
            return None
        start = state.emitted
        if finished:
            return (start, length) if length > start else None
        windows = self.windows
        end = length - windows.holdback_steps
        due = windows.first_chunk_steps if start == 0 else windows.stream_chunk_steps
        if (length if start == 0 else end - start) < due or end <= start:
            return None
        return start, end

    def _decode_windows(self, windows: list[tuple[_RowState, int, int, bool]]) -> dict[int, PcmF32]:
        """Decode the due windows, batching the ones of the same shape."""
        context = self.windows.context_steps
        holdback = self.windows.holdback_steps
        shapes: dict[tuple[int, int, int], list[tuple[_RowState, int]]] = {}
        for state, start, end, final in windows:
            first = max(0, start - context) if state.stream else 0
            last = end if final or not state.stream else end + holdback
            shapes.setdefault((last - first, start - first, end - first), []).append((state, first))
        audio: dict[int, PcmF32] = {}
        for (size, keep_from, keep_to), members in shapes.items():
            stacked = torch.stack(
                [_buffer(state.hiddens)[first : first + size] for state, first in members]
            )
            decoded = chattts_model.decode(self.model, stacked)
            for (state, _first), samples in zip(members, decoded, strict=True):
                final = keep_to == size
                begin = keep_from * SAMPLES_PER_STEP
                stop = samples.shape[0] if final else keep_to * SAMPLES_PER_STEP
                audio[state.handle] = np.ascontiguousarray(samples[begin:stop], dtype=np.float32)
        return audio

    # ---- commit ---------------------------------------------------------------------------

    def _commit(self, prefill: _Prefill, sampled: list[_Sampled]) -> None:
        for handle, done in prefill.progress.items():
            state = self._rows[handle]
            state.prefilled = done
            if done == state.prompt_tokens:
                state.embeds = None
        ended: list[int] = []
        for item in sampled:
            state = item.state
            if item.ended:
                ended.append(state.handle)
                continue
            state.steps += 1
            if state.steps >= _row(state).max_new_tokens:
                ended.append(state.handle)
        for item in sampled:
            state = item.state
            if state.stream and state.handle not in ended:
                window = self._due_window(state, state.steps, False)
                if window is not None:
                    state.emitted = window[1]
        for handle in ended:
            state = self._rows[handle]
            if self.record_tokens:
                self.finished_tokens[handle] = _buffer(state.tokens)[: state.steps].clone()
            if not state.stream:
                hiddens = _buffer(state.hiddens)[: state.steps]
                self._pending.append(_Finished(handle, state.steps, hiddens))
            self._release(handle)


@dataclass(eq=False, slots=True)
class _Finished:
    """A whole row that ended: its hidden states, until they are decoded."""

    handle: int
    length: int
    hiddens: torch.Tensor


@dataclass(slots=True)
class _Prefill:
    progress: dict[int, int] = field(default_factory=dict)
    """Row → prompt tokens prefilled once the step commits."""
    completed: list[_Sampled] = field(default_factory=list)
    """Rows whose prompt completed this step, with their last prompt hidden state."""


def _row(state: _RowState) -> Row:
    assert state.row is not None
    return state.row


def _buffer(tensor: torch.Tensor | None) -> torch.Tensor:
    assert tensor is not None
    return tensor


def _store(state: _RowState, item: _Sampled) -> None:
    """Write the step's hidden state and token at index ``steps`` (not yet committed),
    doubling the row's buffers when full."""
    hiddens, tokens = _buffer(state.hiddens), _buffer(state.tokens)
    if state.steps >= hiddens.shape[0]:
        grown = min(_row(state).max_new_tokens, 2 * hiddens.shape[0])
        hiddens = torch.cat([hiddens, torch.zeros_like(hiddens[: grown - hiddens.shape[0]])])
        tokens = torch.cat([tokens, torch.zeros_like(tokens[: grown - tokens.shape[0]])])
        state.hiddens, state.tokens = hiddens, tokens
    hiddens[state.steps] = item.hidden
    assert item.token is not None
    tokens[state.steps] = item.token
