"""The ChatTTS engine: the production GPU engine, behind the shared batcher.

Install with ``scripts/install-chattts.sh`` (the ``chattts`` extra). Weights come from
``VOICELANE_CHATTTS__DIR`` only (ChatTTS's ``asset/`` layout, ``source="custom"``); nothing is
downloaded. Settings, the manifest, voices and per-utterance options are in
:mod:`voicelane.workers.engines.chattts_config`; the step loop and the decoders in
:mod:`voicelane.workers.engines.chattts_loop`; the design in docs/chattts.md.

* ``batch_key``: voice, speed, seed and sampling parameters (what one ChatTTS call shares);
  token budgets are per item. A tenant's voice (``Utterance.speaker``: an embedding, a mix,
  a reference clip; :mod:`.chattts_speakers`) is the voice ``custom:<digest>``.
* ``synthesize``: every item decoded at its own length (no padding to the longest).
* ``synthesize_stream``: a chunk per step group, decoded incrementally (flat cost per chunk).
* Out of device memory → :class:`~voicelane.common.errors.EngineOutOfMemoryError` (the batcher
splits).
* ``unload`` drops every reference to the model; ``load`` again hot-swaps it.

Like every engine, it is driven from one thread (the batcher's scheduler thread); ``voices``,
``validate`` and ``batch_key`` touch no model and may be called from any thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from voicelane.common.errors import (
    EngineError,
    EngineOutOfMemoryError,
    InvalidInputError,
    ModelLoadError,
)
from voicelane.core.rules import DEFAULT_VOICE
from voicelane.core.settings import ChatTTSSettings
from voicelane.core.speakers import EMBEDDING_PREFIX, VOICE_KINDS, SpeakerDef
from voicelane.core.voice_clips import CLIP_SAMPLE_RATE_HZ

from .base import Engine, PcmF32, StepEvent, Utterance, VoiceInfo
from .chattts_config import (
    MAX_SPEED,
    MIN_SPEED,
    VOICE_LANGUAGES,
    Manifest,
    NamedVoice,
    Sampling,
    UtteranceOptions,
    UtteranceParser,
    checkpoint_dir,
    read_manifest,
    read_voices_file,
    seed_voice_info,
    verify_checkpoint,
)
from .chattts_loop import Generation, StreamDecoder, StreamWindows, decode_rows
from .chattts_model import LoadedModel, Row, decorate_prompt, encode_clip
from .chattts_speakers import (
    MAX_CLIP_STEPS,
    SpeakerBank,
    clip_steps_of,
    missing_clip,
)
from .chattts_steps import ChatTTSSteps, StepLimits
from .speaker_clips import CLIPS, MIN_CLIP_S, SpeakerClips

log = logging.getLogger(__name__)
_UPSTREAM_LOG = logging.getLogger(f"{__name__}.upstream")
"""ChatTTS's own logger. At ERROR: its warnings quote the user's text."""
T = TypeVar("T")


def is_out_of_memory(error: BaseException) -> bool:
    """torch's OutOfMemoryError, or a RuntimeError saying so (cuDNN, cuBLAS, older torch)."""
    if isinstance(error, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(error, RuntimeError) and "out of memory" in str(error).lower()


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def _import_chattts() -> Any:
    try:
        import ChatTTS
    except Exception as error:  # ImportError, or OSError from a CUDA torchaudio on a CPU box
        raise ModelLoadError(
            f"cannot import ChatTTS ({_one_line(error)}); run scripts/install-chattts.sh "
            "(on machines without CUDA it also applies the torchaudio workaround)"
        ) from None
    return ChatTTS


# ---- the manifest's config sections -> ChatTTS's config dataclasses -----------------------


def _field_value(default: object, value: object, where: str, path: Path) -> object:
    if dataclasses.is_dataclass(default) and not isinstance(default, type):
        return _dataclass_from(type(default), value, where, path)
    expected: tuple[type, ...]
    if isinstance(default, tuple):
        if not isinstance(value, list | tuple):
            raise ModelLoadError(f"{path}: {where} must be a list")
        return tuple(value)
    if isinstance(default, bool):
        expected = (bool,)
    elif isinstance(default, int):
        expected = (int,)
    elif isinstance(default, float):
        expected = (int, float)
    elif isinstance(default, str):
        expected = (str,)
    else:
        return value
    if not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
        raise ModelLoadError(f"{path}: {where} must be a {expected[-1].__name__}")
    return value


def _dataclass_from(cls: type, data: object, where: str, path: Path) -> object:
    """A new ``cls`` from ``data``; fields not given keep ChatTTS's defaults."""
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path}: {where} must be an object")
    defaults = cls()
    names = {f.name for f in dataclasses.fields(cls)}
    values: dict[str, object] = {}
    for key, value in data.items():
        if key not in names:
            raise ModelLoadError(f"{path}: unknown field {where}.{key}")
        values[key] = _field_value(getattr(defaults, key), value, f"{where}.{key}", path)
    return cls(**values)


def build_config(manifest: Manifest) -> Any:
    """ChatTTS's ``Config`` with the manifest's sections replaced — whole new objects: the
    defaults are shared by every ``Chat`` in the process and are never mutated."""
    from ChatTTS.config import Config

    config = Config()
    for section, value in manifest.config.items():
        default = getattr(config, section)
        setattr(config, section, _field_value(default, value, f"config.{section}", manifest.path))
    return config


# ---- the engine ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Loaded:
    model: LoadedModel
    speakers: SpeakerBank


class ChatTTSEngine(Engine):
    """ChatTTS 0.2.5 on one device, from a local checkpoint."""

    name = "chattts"
    sample_rate_hz = 24000
    min_speed = MIN_SPEED
    max_speed = MAX_SPEED
    seed_voices = True
    steps = True
    voice_kinds = VOICE_KINDS

    def __init__(
        self, settings: ChatTTSSettings, *, device: str = "cpu", clips: SpeakerClips = CLIPS
    ) -> None:
        """``settings``: the process's ``chattts`` section; ``device``: the process's device
        (a worker's ``--device``, ``VOICELANE_DEVICE``), ``cpu`` or ``cuda:N``; ``clips``:
        where tenant voices' reference clips are found (the process's store)."""
        if settings.half and not device.startswith("cuda"):
            raise ModelLoadError(
                f"VOICELANE_CHATTTS__HALF: half needs a CUDA device (the device is {device})"
            )
        self.settings = settings
        self.device = device
        self.limits = StepLimits(
            block_tokens=settings.kv_block_tokens,
            prefill_chunk_tokens=settings.prefill_chunk_tokens,
            kv_budget_tokens=settings.kv_budget_tokens,
        )
        self.windows = StreamWindows(
            first_chunk_steps=settings.first_chunk_steps,
            stream_chunk_steps=settings.stream_chunk_steps,
            context_steps=settings.context_steps,
            holdback_steps=settings.holdback_steps,
        )
        self._named: dict[str, NamedVoice] = (
            read_voices_file(settings.voices_file) if settings.voices_file else {}
        )
        self._parser = UtteranceParser(settings, self._named)
        try:
            self._parser.resolve_voice(settings.default_voice)
        except InvalidInputError as error:
            raise ModelLoadError(
                f"VOICELANE_CHATTTS__DEFAULT_VOICE={settings.default_voice}: {error}"
            ) from None
        self._voices = self._list_voices()
        self._clips = clips
        self._loaded: _Loaded | None = None
        if _UPSTREAM_LOG.level == logging.NOTSET:
            _UPSTREAM_LOG.setLevel(logging.ERROR)

    def check_device(self) -> None:
        """Raise :class:`ModelLoadError` now if the configured device is not usable here."""
        self._device()

    # ---- voices and validation (any thread; no model) -------------------------------------

    def _list_voices(self) -> list[VoiceInfo]:
        default = self.settings.default_voice
        auto = VoiceInfo(
            id=DEFAULT_VOICE, name=f"Default voice ({default})", languages=VOICE_LANGUAGES
        )
        named = [voice.info for voice in self._named.values()]
        seeded = [seed_voice_info(seed) for seed in range(self.settings.listed_seed_voices)]
        return [auto, *named, *seeded]

    def voices(self) -> list[VoiceInfo]:
        return list(self._voices)

    def validate(self, utterance: Utterance) -> None:
        self._check_speaker(self._parser.parse(utterance))

    def _check_speaker(self, option: UtteranceOptions) -> None:
        """What of a tenant's voice can be checked off the engine's thread: an embedding's
        size (once loaded), the reference clip's presence, an encoder for it."""
        speaker = option.speaker
        loaded = self._loaded  # read once: the engine's thread may swap it
        if speaker is None or loaded is None:
            if speaker is not None and speaker.clip_ref:
                self._require_clip(None, speaker.clip_ref)
            return
        if speaker.clip_ref:
            loaded.speakers.require_encoder()
            self._require_clip(loaded, speaker.clip_ref)
            return
        for part in speaker.parts:
            if part.source.startswith(EMBEDDING_PREFIX):
                loaded.speakers.check_embedding(part.source.removeprefix(EMBEDDING_PREFIX))

    def _require_clip(self, loaded: _Loaded | None, ref: str) -> None:
        if self._clip_steps(loaded, ref) is None:
            raise missing_clip(ref)

    def _clip_steps(self, loaded: _Loaded | None, ref: str) -> int | None:
        """A reference clip's audio tokens: known once encoded, else from its samples in
        the store; None when it is in neither."""
        steps = loaded.speakers.clip_steps(ref) if loaded is not None else None
        if steps is not None:
            return steps
        pcm = self._clips.get(ref)
        return None if pcm is None else clip_steps_of(pcm.size)

    def batch_key(self, utterance: Utterance) -> Hashable:
        return self._parser.parse(utterance).batch_key

    # ---- loading ---------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self._loaded is not None

    @property
    def model(self) -> LoadedModel:
        """The loaded model (for tests and benchmarks)."""
        return self._require().model

    def memory_in_use_bytes(self) -> int:
        """The CUDA allocator's bytes on a GPU; the process's resident memory on the CPU."""
        device = torch.device(self.device)
        if device.type == "cuda" and torch.cuda.is_available():
            return int(torch.cuda.memory_allocated(device))
        return super().memory_in_use_bytes()

    def load(self) -> None:
        """Verify the checkpoint, load it on the device; again after ``unload`` (hot-swap)."""
        if self._loaded is not None:
            self.unload()
        # The first `import ChatTTS` in a process leaves a garbage cycle that holds this
        # frame (and so its locals) until the cycle collector runs: keep the model out of it.
        chattts = _import_chattts()
        self._loaded = self._load(chattts)
        self._warm_up(self._loaded)

    def _warm_up(self, loaded: _Loaded) -> None:
        """What the first utterance of a process would otherwise pay, paid at load: the text
        normaliser's numba compilation (~3 s on a CPU) and the first pass through the GPT,
        decoder and vocoder (and the DVAE encoder, for the first zero-shot voice). The
        batcher's readiness (``start``) waits for it."""
        row = Row(
            prompt=decorate_prompt(self._normalize(loaded, "Hello. 你好。"), 5, True),
            speaker=loaded.speakers.embedding(self._parser.resolve_voice("auto")),
            seed=0,
            min_new_tokens=2,
            max_new_tokens=2,
        )
        sampling = Sampling(
            temperature=self.settings.temperature,
            top_p=self.settings.top_p,
            top_k=self.settings.top_k,
            repetition_penalty=self.settings.repetition_penalty,
        )
        self._guarded(lambda: _render_whole(loaded.model, [row], sampling))
        if loaded.speakers.encodes_clips:  # the DVAE encoder's first pass (zero-shot voices)
            silence = np.zeros(int(MIN_CLIP_S * CLIP_SAMPLE_RATE_HZ), dtype=np.float32)
            self._guarded(lambda: encode_clip(loaded.model, silence))

    def _load(self, chattts: Any) -> _Loaded:
        settings = self.settings
        directory = checkpoint_dir(settings)
        manifest = read_manifest(directory)
        device = self._device()
        chat = chattts.Chat(_UPSTREAM_LOG)
        if manifest is None:
            sha256_map = dict(chat.sha256_map)
            source = "the official ChatTTS release's hashes (no voicelane-chattts.json)"
        else:
            sha256_map, source = dict(manifest.sha256), str(manifest.path)
            chat.config = build_config(manifest)
        verify_checkpoint(directory, sha256_map, source)
        chat.sha256_map = sha256_map
        if device.type == "cuda" and settings.memory_fraction is not None:
            torch.cuda.set_per_process_memory_fraction(settings.memory_fraction, device)
        _load_chat(chat, directory, device)
        if settings.half:
            chat.gpt.gpt.half()
        model = LoadedModel(chat, device)
        log.info("ChatTTS loaded from %s on %s", directory, device)
        speakers = SpeakerBank(
            model,
            self._named_speakers(chat, model.hidden_size),
            normalize=lambda text: self._normalize_with(model, text),
            clips=self._clips,
        )
        if not speakers.encodes_clips:
            log.warning("%s: the DVAE has no encoder: no voices from reference clips", directory)
        return _Loaded(model=model, speakers=speakers)

    def unload(self) -> None:
        """Drop every reference to the model and give its memory back.

        Reference counting frees it at once: the one cycle inside a loaded ChatTTS (the
        weight-normalised heads' parametrisation) is broken first. On CUDA the cycle
        collector runs too, then the allocator's cache goes back to the driver, so
        ``torch.cuda.memory_allocated`` returns to where it was before ``load``.
        """
        loaded, self._loaded = self._loaded, None
        if loaded is None:
            return
        device = loaded.model.device
        _break_cycles(loaded.model.chat)
        del loaded
        if device.type == "cuda":
            gc.collect()
            torch.cuda.empty_cache()

    def _device(self) -> torch.device:
        device = torch.device(self.device)
        if device.type != "cuda":
            return device
        if not torch.cuda.is_available():
            raise ModelLoadError(
                f"device {self.device}: CUDA is not available here (torch "
                f"{torch.__version__} without CUDA, or no GPU visible); use --device cpu"
            )
        if (device.index or 0) >= torch.cuda.device_count():
            raise ModelLoadError(
                f"device {self.device}: only {torch.cuda.device_count()} CUDA device(s)"
            )
        return device

    def _named_speakers(self, chat: Any, hidden_size: int) -> dict[str, torch.Tensor]:
        path = self.settings.voices_file
        speakers: dict[str, torch.Tensor] = {}
        for name, voice in self._named.items():
            try:
                if voice.spk_emb is not None:
                    values = torch.from_numpy(chat.speaker._decode(voice.spk_emb))
                else:
                    values = torch.tensor(voice.embedding, dtype=torch.float16)
            except Exception as error:
                raise ModelLoadError(
                    f"{path}: voice {name!r}: not a ChatTTS speaker ({_one_line(error)})"
                ) from None
            if values.numel() != hidden_size:
                raise ModelLoadError(
                    f"{path}: voice {name!r}: {values.numel()} values, "
                    f"this checkpoint's speakers have {hidden_size}"
                )
            speakers[name] = values.to(torch.float16)
        return speakers

    def _require(self) -> _Loaded:
        if self._loaded is None:
            raise EngineError("the chattts engine is not loaded")
        return self._loaded

    # ---- inference (the batcher's thread) ---------------------------------------------------

    def speaker_embedding(self, voice: str | SpeakerDef) -> torch.Tensor:
        """The speaker embedding (float16, CPU) a voice id, or a tenant's voice made of parts
        (a mix), stands for, e.g. to save a seed voice into a voices file or a mix as an
        ``emb:`` string (:func:`voicelane.core.speaker_embedding.encode_spk_emb`). Needs
        the model loaded; a clip voice has none (InvalidInputError)."""
        loaded = self._require()
        if isinstance(voice, str):
            return loaded.speakers.embedding(self._parser.resolve_voice(voice)).clone()
        if voice.clip_ref:
            raise InvalidInputError("voice: a voice from a reference clip has no embedding")
        made = loaded.speakers.voice("", self._parser.resolve_speaker(voice))
        assert made.embedding is not None  # parts make an embedding
        return made.embedding.clone()

    def _normalize(self, loaded: _Loaded, text: str) -> str:
        return self._normalize_with(loaded.model, text)

    def _normalize_with(self, model: LoadedModel, text: str) -> str:
        settings = self.settings
        if not (settings.normalize_text or settings.homophone_replacement):
            return text
        normalized: str = model.chat.normalizer(
            text, settings.normalize_text, settings.homophone_replacement
        )
        return normalized

    def _plan(self, loaded: _Loaded, batch: Sequence[Utterance]) -> tuple[list[Row], Sampling]:
        planned = [self._plan_row(loaded, utterance) for utterance in batch]
        samplings = {sampling for _row, sampling in planned}
        if len(samplings) != 1:
            raise EngineError("one ChatTTS call takes one set of sampling parameters")
        (sampling,) = samplings
        return [row for row, _sampling in planned], sampling

    def _plan_row(self, loaded: _Loaded, utterance: Utterance) -> tuple[Row, Sampling]:
        """The row of an utterance: its voice made (a tenant's voice: mixed, or its clip
        encoded; cached), its text normalised, its budgets. Permanent errors for a voice
        that cannot be made; out of memory (encoding a clip) as EngineOutOfMemoryError."""
        option = self._parser.parse(utterance)
        voice = self._guarded(lambda: loaded.speakers.voice(option.voice, option.speaker))
        row = Row(
            prompt=decorate_prompt(
                self._normalize(loaded, utterance.text),
                option.speed_level,
                voice.embedding is not None,
                voice.sample_text,
            ),
            speaker=voice.embedding,
            seed=option.seed,
            min_new_tokens=option.min_new_tokens,
            max_new_tokens=option.max_new_tokens,
            audio_prompt=voice.audio_prompt,
        )
        return row, option.sampling

    def reserved_tokens(self, utterance: Utterance) -> int:
        """What a row reserves of ``kv_budget_tokens``: its token budget plus its prompt
        (estimated as its characters plus ChatTTS's control tokens; with a reference clip,
        its transcript and audio tokens: the longest clip's when the clip is not known)."""
        option = self._parser.parse(utterance)
        tokens = option.max_new_tokens + len(utterance.text) + 16
        speaker = option.speaker
        if speaker is not None and speaker.clip_ref:
            steps = self._clip_steps(self._loaded, speaker.clip_ref)
            tokens += len(speaker.clip_transcript) + (MAX_CLIP_STEPS if steps is None else steps)
        return tokens

    def open_steps(self) -> ChatTTSSteps:
        """A new running batch on the loaded model (continuous batching)."""
        loaded = self._require()
        return ChatTTSSteps(
            loaded.model,
            plan=lambda utterance: self._plan_row(loaded, utterance),
            windows=self.windows,
            limits=self.limits,
            guard=self._guard_steps,
            estimate_tokens=self.reserved_tokens,
        )

    def _guard_steps(self, step: Callable[[], list[StepEvent]]) -> list[StepEvent]:
        return self._guarded(step)

    def synthesize(self, batch: Sequence[Utterance]) -> list[PcmF32]:
        if not batch:
            return []
        loaded = self._require()
        rows, sampling = self._plan(loaded, batch)
        return self._guarded(lambda: _render_whole(loaded.model, rows, sampling))

    def synthesize_stream(self, batch: Sequence[Utterance]) -> Iterator[list[PcmF32]]:
        """Yields, per step group, one array per utterance (empty: nothing new for it).

        Closing the generator (the batcher does, when every item is gone) stops the batch
        and frees its cache at once; nothing else is interrupted.
        """
        if not batch:
            return iter(())
        loaded = self._require()
        rows, sampling = self._plan(loaded, batch)
        return self._stream(loaded.model, rows, sampling)

    def _stream(
        self, model: LoadedModel, rows: list[Row], sampling: Sampling
    ) -> Iterator[list[PcmF32]]:
        generation: Generation | None = None
        failure: str | None = None
        try:
            generation = Generation(model, rows, sampling)
            decoder = StreamDecoder(model, generation, self.windows)
            while not generation.done:
                generation.step()
                chunk = decoder.pending()
                if chunk is not None:
                    yield chunk
        except RuntimeError as error:
            if not is_out_of_memory(error):
                raise
            failure = _one_line(error)
        finally:
            if generation is not None:
                generation.release()
            generation = None
        if failure is not None:
            raise self._out_of_memory(model.device, failure)

    def _guarded(self, render: Callable[[], T]) -> T:
        """Run ``render``; out of device memory becomes EngineOutOfMemoryError.

        The error is raised outside the ``except`` block, so nothing keeps the failed call's
        frames (and the tensors in them) alive once it is handled.
        """
        failure: str | None = None
        try:
            return render()
        except RuntimeError as error:
            if not is_out_of_memory(error):
                raise
            failure = _one_line(error)
        raise self._out_of_memory(self._require().model.device, failure)

    @staticmethod
    def _out_of_memory(device: torch.device, failure: str) -> EngineOutOfMemoryError:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return EngineOutOfMemoryError(f"ChatTTS ran out of memory on {device}: {failure}")


def _render_whole(model: LoadedModel, rows: list[Row], sampling: Sampling) -> list[PcmF32]:
    generation = Generation(model, rows, sampling)
    try:
        generation.run()
        return decode_rows(model, generation)
    finally:
        generation.release()


def _break_cycles(chat: Any) -> None:
    """Un-parametrise the weight-normalised heads (their parametrisation is a reference
    cycle), so that dropping the last reference frees the model without the collector."""
    from torch.nn.utils import parametrize

    embed = getattr(chat, "embed", None)
    heads = [getattr(embed, "head_text", None), *getattr(embed, "head_code", [])]
    for head in heads:
        if head is not None and parametrize.is_parametrized(head, "weight"):
            parametrize.remove_parametrizations(head, "weight", leave_parametrized=True)


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """No progress bar per load (transformers 5 prints one for every weights file)."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


def _load_chat(chat: Any, directory: Path, device: torch.device) -> None:
    try:
        with _quiet_transformers():
            loaded = chat.load(source="custom", custom_path=str(directory), device=device)
    except Exception as error:
        what = "out of memory" if is_out_of_memory(error) else "cannot load it"
        raise ModelLoadError(
            f"{directory}: ChatTTS {what} on {device}: {_one_line(error)}"
        ) from None
    if not loaded:
        raise ModelLoadError(f"{directory}: ChatTTS refused the checkpoint (see its log)")


__all__ = ["ChatTTSEngine", "ModelLoadError", "is_out_of_memory"]
