"""The ChatTTS engine's speakers: seed voices, named voices, and tenant voices made from an
embedding, a mix of voices, or a reference clip (zero-shot).

ChatTTS conditions the GPT on a speaker embedding placed, L2-normalised, at the prompt's
``[spk_emb]`` token; a random speaker is ``mean + std x N(0, 1)`` with the checkpoint's
``spk_stat``. Tenant voices, from :attr:`Utterance.speaker
<voicelane.workers.engines.base.Utterance.speaker>`:

* **parts** (one or several of ``seed:N``, a named voice, ``emb:<spk_emb string>``, with
  weights): :func:`mix_embeddings`. One part is that part's embedding, unchanged. Several
  are mixed in the speaker distribution's own coordinates, ``z = (e - mean) / std``: the
  mix's ``z`` points along the weighted sum of the parts' ``z`` and has the weighted mean of
  their lengths. A plain weighted average would shrink the mix towards the mean speaker (two
  independent speakers averaged lose 30% of their spread), a voice duller than either; this
  keeps it as far from the mean as its parts, a speaker of the same distribution that
  resembles each by its weight.
* **a reference clip** with its transcript: ChatTTS's zero-shot speaker sample
  (``sample_audio_speaker`` + ``txt_smp``): the clip's audio tokens (DVAE encoder) follow the
  prompt's text, the transcript precedes it, and no embedding is used (``[empty_spk]``).

Everything but :meth:`SpeakerBank.clip_steps` runs on the engine's thread; what is computed
is cached (bounded) until the model is unloaded.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from voicelane.common.errors import ConfigError, InvalidInputError, UnknownVoiceError
from voicelane.core.rules import seed_of
from voicelane.core.speakers import EMBEDDING_PREFIX, SpeakerDef
from voicelane.core.voice_clips import CLIP_SAMPLE_RATE_HZ

from .chattts_config import decoded_embedding
from .chattts_model import SAMPLES_PER_STEP, LoadedModel, encode_clip
from .speaker_clips import CLIPS, MAX_CLIP_S, SpeakerClips

SEEDS_KEPT = 1024
"""Seed voices' embeddings kept (a draw is cheap, but every row needs one)."""
CUSTOM_KEPT = 256
"""Tenant voices kept (mixes' embeddings, clips' audio tokens)."""
MAX_CLIP_STEPS = (int(MAX_CLIP_S * CLIP_SAMPLE_RATE_HZ) // (SAMPLES_PER_STEP // 2) - 1) // 2 + 1
"""Audio tokens of the longest reference clip (1406)."""


@dataclass(frozen=True, slots=True)
class Voice:
    """What a row takes of its speaker."""

    embedding: torch.Tensor | None
    """Speaker embedding (hidden size, float16, CPU); None for a clip (``[empty_spk]``)."""
    audio_prompt: torch.Tensor | None = None
    """A reference clip's audio tokens (num_vq, steps), long, CPU."""
    sample_text: str = ""
    """The clip's transcript (normalised as the texts are)."""
    clip_ref: str = ""


def clip_steps_of(samples: int) -> int:
    """Audio tokens of a clip of ``samples`` samples, as the DVAE encoder makes them: one
    mel frame per 256 samples (centred, so one more), halved by a stride-2 convolution."""
    frames = samples // (SAMPLES_PER_STEP // 2) + 1
    return max(0, (frames - 2) // 2 + 1)


@torch.inference_mode()
def mix_embeddings(
    parts: Sequence[tuple[torch.Tensor, float]], std: torch.Tensor, mean: torch.Tensor
) -> torch.Tensor:
    """The weighted mix of speaker embeddings (float16; see the module docstring): one part
    is returned unchanged; otherwise ``mean + std x z``, where ``z`` has the direction of
    ``sum(w_i z_i)`` and the length ``sum(w_i |z_i|)`` (weights normalised to sum 1)."""
    if not parts:
        raise ValueError("a mix needs at least one part")
    if len(parts) == 1:
        return parts[0][0].to(torch.float16)
    total = sum(weight for _embedding, weight in parts)
    scale = std.float().abs().clamp_min(1e-6)
    center = mean.float()
    direction = torch.zeros_like(center)
    length = 0.0
    for embedding, weight in parts:
        z = (embedding.float() - center) / scale
        direction += (weight / total) * z
        length += (weight / total) * float(z.norm())
    norm = float(direction.norm())
    if norm <= 1e-2 * length:  # parts that (nearly) cancel out: the mean speaker
        return center.to(torch.float16)
    return (center + scale * direction * (length / norm)).to(torch.float16)


class SpeakerBank:
    """The speakers of one loaded model (dropped with it)."""

    def __init__(
        self,
        model: LoadedModel,
        named: dict[str, torch.Tensor],
        *,
        normalize: Callable[[str], str],
        clips: SpeakerClips = CLIPS,
    ) -> None:
        chat = model.chat
        self.model = model
        self.hidden_size = model.hidden_size
        self.std: torch.Tensor = chat.speaker.std.detach().cpu()
        self.mean: torch.Tensor = chat.speaker.mean.detach().cpu()
        self.named = named
        self.clips = clips
        self._normalize = normalize
        self._seeds: OrderedDict[int, torch.Tensor] = OrderedDict()
        self._custom: OrderedDict[str, Voice] = OrderedDict()
        self._clip_steps: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()  # _clip_steps is read from any thread

    @property
    def encodes_clips(self) -> bool:
        """The checkpoint's DVAE has an encoder (zero-shot voices need it)."""
        dvae = self.model.chat.dvae
        return getattr(dvae, "encoder", None) is not None and dvae.vq_layer is not None

    # ---- the engine's own voices ------------------------------------------------------------

    def embedding(self, voice: str) -> torch.Tensor:
        """A named voice's embedding, or ``seed:N``'s: ChatTTS's ``sample_random_speaker``
        with torch's CPU generator seeded N (the same on every device and machine).
        ``voice`` is resolved (no ``auto``)."""
        seed = seed_of(voice)
        if seed is None:
            return self.named[voice]
        speaker = self._seeds.get(seed)
        if speaker is None:
            generator = torch.Generator().manual_seed(seed)
            noise = torch.randn(self.std.shape, generator=generator, dtype=self.std.dtype)
            speaker = noise.mul_(self.std).add_(self.mean)
            self._seeds[seed] = speaker
            if len(self._seeds) > SEEDS_KEPT:
                self._seeds.popitem(last=False)
        self._seeds.move_to_end(seed)
        return speaker

    def voice(self, voice: str, speaker: SpeakerDef | None) -> Voice:
        """What a row of this (resolved) voice or speaker takes. Permanent errors for a
        speaker that cannot be made (an embedding of the wrong size, a missing clip)."""
        if speaker is None:
            return Voice(self.embedding(voice))
        key = speaker.digest
        made = self._custom.get(key)
        if made is None:
            made = self._clip_voice(speaker) if speaker.clip_ref else self._mix_voice(speaker)
            self._custom[key] = made
            if len(self._custom) > CUSTOM_KEPT:
                _key, evicted = self._custom.popitem(last=False)
                if evicted.clip_ref:
                    with self._lock:
                        self._clip_steps.pop(evicted.clip_ref, None)
        self._custom.move_to_end(key)
        return made

    # ---- tenant voices ------------------------------------------------------------------------

    def check_embedding(self, spk_emb: str) -> torch.Tensor:
        """An ``emb:`` part's values as a float16 tensor; InvalidInputError when malformed or
        not of this checkpoint's size."""
        values = decoded_embedding(spk_emb)
        if values.size != self.hidden_size:
            raise InvalidInputError(
                f"voice: a speaker embedding of {values.size} values; this engine's speakers "
                f"have {self.hidden_size}",
                field="voice",
            )
        return torch.from_numpy(values.copy()).to(torch.float16)

    def _mix_voice(self, speaker: SpeakerDef) -> Voice:
        parts = []
        for part in speaker.parts:
            if part.source.startswith(EMBEDDING_PREFIX):
                embedding = self.check_embedding(part.source.removeprefix(EMBEDDING_PREFIX))
            else:
                embedding = self.embedding(part.source)
            parts.append((embedding, part.weight))
        return Voice(mix_embeddings(parts, self.std, self.mean))

    def _clip_voice(self, speaker: SpeakerDef) -> Voice:
        self.require_encoder()
        pcm = self.clips.get(speaker.clip_ref)
        if pcm is None:
            raise missing_clip(speaker.clip_ref)
        tokens = encode_clip(self.model, pcm)
        sample_text = self._normalize(speaker.clip_transcript.strip())
        with self._lock:
            self._clip_steps[speaker.clip_ref] = int(tokens.shape[1])
        return Voice(None, tokens, sample_text, speaker.clip_ref)

    def require_encoder(self) -> None:
        if not self.encodes_clips:
            raise ConfigError(
                "this ChatTTS checkpoint's DVAE has no encoder: voices from a reference clip "
                "are not available"
            )

    def clip_steps(self, ref: str) -> int | None:
        """Audio tokens of a clip whose voice this bank holds, or None (any thread)."""
        with self._lock:
            return self._clip_steps.get(ref)


def missing_clip(ref: str) -> UnknownVoiceError:
    return UnknownVoiceError(
        f"voice: the reference clip {ref} is not on this worker (the worker puts a voice's "
        "clip into the engine's clip store before it submits)",
        field="voice",
    )
