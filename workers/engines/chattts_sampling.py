"""ChatTTS's sampling, once, for both decoders (the static :class:`~.chattts_loop.Generation`
and the running batch :class:`~.chattts_steps.ChatTTSSteps`).

It follows ChatTTS 0.2.5's ``GPT.generate`` step for step: temperature, repetition penalty
over the last 16 tokens, top-p, top-k (ChatTTS's own processors), end of utterance masked
before a row's ``min_new_tokens``, then one token per codebook drawn as ``multinomial`` does
— ``argmax(p / q)`` with ``q ~ Exp(1)``. A seeded row's ``q`` comes from its own generator,
seeded as ChatTTS's ``manual_seed`` does; since ChatTTS reseeds before every step, the same
``q`` is drawn at every step, so it is drawn once (:func:`seeded_noise`). A row's tokens
therefore depend on nothing else in its batch; at batch 1 they equal ChatTTS's own (the
tests pin both decoders against ChatTTS).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F  # noqa: N812 - torch's own convention

from .chattts_config import Sampling
from .chattts_model import LoadedModel

REPETITION_WINDOW_STEPS = 16
"""ChatTTS's repetition penalty looks at the last 16 tokens only (``gen_logits``): the
processors get that window, not the whole history (which would cost O(steps) per step)."""

Processor = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


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
def seeded_noise(model: LoadedModel, seed: int) -> torch.Tensor:
    """The Exp(1) noise of a row seeded with ``seed``: (num_vq, vocabulary)."""
    generator = torch.Generator(device=model.device).manual_seed(seed)
    shape = (model.num_vq, model.num_audio_tokens)
    return torch.empty(shape, device=model.device).exponential_(1.0, generator=generator)


@torch.inference_mode()
def sample_tokens(
    model: LoadedModel,
    hidden: torch.Tensor,
    *,
    temperature: float,
    processors: Sequence[Processor],
    history: torch.Tensor,
    too_early: Sequence[bool],
    noise: Sequence[torch.Tensor | None],
) -> torch.Tensor:
    """One token per codebook for each of the rows, which share one sampling.

    ``hidden`` is (rows, hidden size), the GPT's last hidden state per row; ``history`` is
    (rows, window, num_vq), each row's last tokens (at most :data:`REPETITION_WINDOW_STEPS`);
    ``too_early[r]``: row ``r`` is before its ``min_new_tokens`` (no end of utterance yet);
    ``noise[r]``: its :func:`seeded_noise`, or None for fresh noise. Returns (rows, num_vq).
    """
    rows = int(hidden.shape[0])
    vocabulary = model.num_audio_tokens
    logits = F.linear(hidden, model.code_head).view(rows * model.num_vq, vocabulary)
    logits = logits / temperature
    past = history.permute(0, 2, 1).reshape(rows * model.num_vq, int(history.shape[1]))
    for processor in processors:
        logits = processor(past, logits)
    if any(too_early):
        mask = torch.tensor(list(too_early), device=model.device)
        logits[mask.repeat_interleave(model.num_vq), model.eos_token] = -torch.inf
    scores = F.softmax(logits, dim=-1)
    if all(q is None for q in noise):
        drawn = torch.empty_like(scores).exponential_(1.0)
    else:
        drawn = torch.stack(
            [
                q
                if q is not None
                else torch.empty((model.num_vq, vocabulary), device=model.device).exponential_(1.0)
                for q in noise
            ]
        ).view(scores.shape)
    tokens: torch.Tensor = (scores / drawn).argmax(dim=-1).view(rows, model.num_vq)
    return tokens
