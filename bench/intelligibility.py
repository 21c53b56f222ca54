"""The intelligibility check: rendered English transcribed by pocketsphinx, scored by WER.

A machine listener (pocketsphinx 5, its English acoustic model, language model and dictionary
from its wheel) transcribes what an engine says; the word error rate (WER) against the text
tells how intelligible it is. The check guards against regressions — a broken resampler or
codec makes the WER jump — and compares engines; it is not an absolute quality bar
(pocketsphinx is a weak listener: a human understands espeak's 0.8).

The audio is measured where users hear it: each sentence rendered by
:class:`~voicelane.workers.render.EmbeddedRenderer` (what ``voicelane render`` runs) to a file
at the default delivery rate, in every format asked for (WAV: the project's resampler; Ogg
Opus: the resampler and the codec), plus the engine's own PCM from the same batcher (the
floor: no project resampling, no codec).

What reads the audio back is deliberately independent of what is under test: files are
decoded with PyAV directly (FFmpeg's decoders, not ``voicelane.common.audio``), and the
resampling to pocketsphinx's 16 kHz is :func:`resample_fft` here (exact band-limited
resampling of the whole signal through numpy's FFT), not the project's polyphase
:class:`~voicelane.common.audio.StreamResampler` — a bug there must show in the WER, not be
undone by the same code on the way back.

**The listener's noise floor.** Before recognition, :func:`transcribe` adds Gaussian noise at
:data:`NOISE_FLOOR_DBFS` (-60 dBFS, seeded: the same audio always gives the same text), the
floor of any microphone recording. Without it pocketsphinx is thrown by *digital* silence:
espeak's pauses are exact zeros, and its WER on the sentence set through the WAV path was
0.85 (the issue's "espeak 0.82") — a broken pipeline then scored no worse than a working one
(WAV, no floor: intact 0.85; clipped 0.78; half the 20 ms packets zeroed 0.83). With the
floor, espeak measures 0.27-0.41 (WAV) and the broken pipelines stand out (WAV / Ogg Opus:
intact 0.27-0.41 / 0.17-0.30; a resampler given the wrong source rate 1.01 / 1.01; resampling
skipped 0.57; audio at 2/3 of its rate 0.99 / 1.07; half the 20 ms packets zeroed 0.57 / 0.44;
+30 dB and clipped 0.85 / 0.75; white noise 1.0). The ranges are espeak's own: libespeak-ng
keeps state between utterances, so the same sentence renders slightly differently depending
on what the process rendered before.

Words are compared after :func:`normalize_words` (lower case, punctuation dropped,
contractions spelled out on both sides: pocketsphinx writes "we're" for "we are"). Keep the
sentences free of digits and possessives: a number has several spoken forms.
"""

from __future__ import annotations

import functools
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import numpy as np
import numpy.typing as npt

from voicelane.common.audio import AudioFormat
from voicelane.core.settings import EmbeddedSettings
from voicelane.workers.engines import Engine, PcmF32, Utterance
from voicelane.workers.render import EmbeddedRenderer

ROOT = Path(__file__).resolve().parents[1]
SENTENCES_PATH = ROOT / "tests" / "data" / "intelligibility_en.txt"
"""The English sentence set: one sentence a line; ``#`` starts a comment line."""

RECOGNIZER_RATE_HZ = 16000
"""pocketsphinx's English acoustic model is trained on 16 kHz audio."""

NOISE_FLOOR_DBFS = -60.0
"""The listener's noise floor (module docstring): RMS of the Gaussian noise added to the audio
before recognition, in dB relative to full scale."""

_NOISE_SEED = 21

ENGINE_PATH = "engine"
"""The engine's own PCM (through the renderer's batcher), resampled by this module only."""

PATHS: tuple[str, ...] = (ENGINE_PATH, AudioFormat.WAV.value, AudioFormat.OGG.value)
"""Every path :func:`engine_wer` measures by default: the engine's PCM, then files."""


# ---- reading audio back (independent of voicelane.common.audio) ------------------------------


def resample_fft(pcm: npt.ArrayLike, src_hz: int, dst_hz: int) -> PcmF32:
    """``pcm`` at ``dst_hz``: the whole signal's spectrum cut (or zero-padded) to the new
    Nyquist frequency, ``round(n * dst / src)`` samples. Exact for a band-limited periodic
    signal; rendered speech starts and ends in silence, so the wrap-around is inaudible."""
    signal = np.asarray(pcm, dtype=np.float64)
    if src_hz == dst_hz or not len(signal):
        return signal.astype(np.float32)
    n_out = max(1, round(len(signal) * dst_hz / src_hz))
    spectrum = np.fft.rfft(signal)
    bins = n_out // 2 + 1
    kept = np.zeros(bins, dtype=np.complex128)
    common = min(bins, len(spectrum))
    kept[:common] = spectrum[:common]
    if n_out % 2 == 0 and common == bins:
        kept[-1] = kept[-1].real  # the new Nyquist bin of an even length is real
    out = np.fft.irfft(kept, n_out) * (n_out / len(signal))
    return out.astype(np.float32)


def decode_file(path: str | Path) -> tuple[PcmF32, int]:
    """The first audio stream of a file as mono float32 at its decoded rate, read with PyAV
    (FFmpeg's own decoders: libopus for Ogg Opus, at 48 kHz)."""
    chunks: list[PcmF32] = []
    rate_hz = 0
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        for frame in container.decode(stream):
            rate_hz = frame.sample_rate
            data: npt.NDArray[Any] = frame.to_ndarray()
            channels = frame.layout.nb_channels
            if not frame.format.is_planar:
                data = data.reshape(-1, channels).T
            if np.issubdtype(data.dtype, np.integer):
                scale = float(np.iinfo(data.dtype).max)
                data = data.astype(np.float64) / scale
            chunks.append(np.asarray(data.mean(axis=0), dtype=np.float32))
    if not rate_hz:
        raise ValueError(f"{path}: no audio decoded")
    return np.concatenate(chunks), rate_hz


# ---- the listener -----------------------------------------------------------------------------


@functools.cache
def _decoder() -> Any:
    """One pocketsphinx decoder per process (loading its models takes about half a second)."""
    from pocketsphinx import Decoder

    return Decoder(samprate=RECOGNIZER_RATE_HZ, loglevel="FATAL")


def transcribe(
    pcm: npt.ArrayLike, sample_rate_hz: int, *, noise_floor_dbfs: float | None = NOISE_FLOOR_DBFS
) -> str:
    """What pocketsphinx hears in ``pcm`` (float32 mono in [-1, 1] at ``sample_rate_hz``):
    its best hypothesis, lower case, words separated by spaces ("" when it hears nothing).

    ``noise_floor_dbfs``: the seeded noise added first (module docstring; None: none). The
    audio goes in as one whole utterance (``full_utt``), so the result depends on nothing
    transcribed before: the same audio always gives the same text."""
    audio = resample_fft(pcm, sample_rate_hz, RECOGNIZER_RATE_HZ)
    if noise_floor_dbfs is not None:
        noise = np.random.default_rng(_NOISE_SEED).standard_normal(len(audio))
        audio = (audio + noise * 10 ** (noise_floor_dbfs / 20)).astype(np.float32)
    samples = (np.clip(audio, -1.0, 1.0) * 32767.0).round().astype("<i2")
    decoder = _decoder()
    decoder.start_utt()
    decoder.process_raw(samples.tobytes(), no_search=False, full_utt=True)
    decoder.end_utt()
    hypothesis = decoder.hyp()
    return str(hypothesis.hypstr) if hypothesis is not None else ""


# ---- scoring ----------------------------------------------------------------------------------

_CONTRACTIONS: tuple[tuple[str, str], ...] = (
    ("won't", "will not"),
    ("can't", "can not"),
    ("cannot", "can not"),
    ("n't", " not"),
    ("'re", " are"),
    ("'m", " am"),
    ("'ll", " will"),
    ("'ve", " have"),
    ("'d", " would"),
    ("'s", " is"),
)
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def normalize_words(text: str) -> list[str]:
    """``text`` as the words compared: lower case, punctuation dropped, contractions spelled
    out ("we're" → "we are", "weather's" → "weather is": on both sides, so a possessive in
    the reference would match its own transcription too, but keep the set free of them)."""
    lowered = text.lower().replace("\u2019", "'")
    words: list[str] = []
    for token in _WORD.findall(lowered):
        spelled = token
        for short, long in _CONTRACTIONS:
            if token.endswith(short):
                spelled = token[: -len(short)] + long
                break
        words.extend(spelled.split())
    return words


def word_errors(reference: Sequence[str], hypothesis: Sequence[str]) -> int:
    """Substitutions + deletions + insertions turning ``reference`` into ``hypothesis``
    (the Levenshtein distance over words)."""
    previous = list(range(len(hypothesis) + 1))
    for i, ref_word in enumerate(reference, start=1):
        current = [i]
        for j, hyp_word in enumerate(hypothesis, start=1):
            current.append(
                min(
                    previous[j] + 1,  # deletion
                    current[j - 1] + 1,  # insertion
                    previous[j - 1] + (ref_word != hyp_word),  # substitution or match
                )
            )
        previous = current
    return previous[-1]


def word_error_rate(reference: Sequence[str], hypothesis: Sequence[str]) -> float:
    """Word errors / reference words (may exceed 1 with insertions)."""
    if not reference:
        raise ValueError("the reference has no words")
    return word_errors(reference, hypothesis) / len(reference)


@dataclass(frozen=True, slots=True)
class SentenceScore:
    text: str
    heard: str
    """pocketsphinx's transcription."""
    errors: int
    words: int
    """Words of the reference."""

    @property
    def wer(self) -> float:
        return self.errors / self.words


@dataclass(frozen=True, slots=True)
class WerReport:
    """One engine's WER on a sentence set through one path (:data:`PATHS`)."""

    engine: str
    path: str
    sentences: tuple[SentenceScore, ...]

    @property
    def wer(self) -> float:
        """Errors over all sentences / reference words over all sentences."""
        return sum(s.errors for s in self.sentences) / sum(s.words for s in self.sentences)


def score(text: str, heard: str) -> SentenceScore:
    reference = normalize_words(text)
    errors = word_errors(reference, normalize_words(heard))
    return SentenceScore(text, heard, errors, len(reference))


def load_sentences(path: Path = SENTENCES_PATH) -> list[str]:
    """The sentence set: non-empty lines that are not ``#`` comments."""
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("#")]


# ---- one engine, every path ------------------------------------------------------------------


def english_voice(engine: Engine) -> str:
    """``auto`` where the engine takes it (it picks English for English text), else the first
    voice listed for an English language."""
    try:
        engine.validate(Utterance("check", "auto"))
        return "auto"
    except Exception:  # any refusal: look for an English voice instead
        pass
    for voice in engine.voices():
        if any(language.lower().startswith("en") for language in voice.languages):
            return voice.id
    raise ValueError(f"engine {engine.name} has no English voice")


def renderer_for(engine_name: str, *, settings: EmbeddedSettings | None = None) -> EmbeddedRenderer:
    """The embedded renderer ``voicelane render`` would use for ``engine_name`` (the
    process's settings, that engine): the caller closes it."""
    base = settings or EmbeddedSettings()
    return EmbeddedRenderer(base.model_copy(update={"engine": engine_name}))


def render_sentences(
    renderer: EmbeddedRenderer,
    sentences: Sequence[str],
    directory: Path,
    *,
    paths: Iterable[str] = PATHS,
    voice: str | None = None,
) -> dict[str, list[tuple[PcmF32, int]]]:
    """Each sentence's audio through each path: ``{path: [(pcm, rate), ...]}``, sentences in
    order. Files are written by :meth:`EmbeddedRenderer.render` at the settings' delivery
    rate and read back with :func:`decode_file`. ``voice``: default :func:`english_voice`."""
    voice = voice or english_voice(renderer.engine)
    out: dict[str, list[tuple[PcmF32, int]]] = {}
    for path in paths:
        audio: list[tuple[PcmF32, int]] = []
        for index, text in enumerate(sentences):
            if path == ENGINE_PATH:
                utterance = Utterance(text, voice)
                pcm = renderer.batcher.submit(utterance).result()
                audio.append((pcm, renderer.engine.sample_rate_hz))
                continue
            fmt = AudioFormat(path)
            target = directory / f"{index:02d}.{fmt.extension}"
            renderer.render(text, target, fmt=fmt, voice=voice)
            audio.append(decode_file(target))
        out[path] = audio
    return out


def engine_wer(
    engine_name: str,
    sentences: Sequence[str],
    *,
    paths: Iterable[str] = PATHS,
    voice: str | None = None,
    renderer: EmbeddedRenderer | None = None,
) -> dict[str, WerReport]:
    """``engine_name``'s WER on ``sentences`` through each path, as pocketsphinx hears it.

    ``renderer``: an open renderer of that engine to use (else one is made and closed);
    ``voice``: the voice asked for (else :func:`english_voice`)."""
    owned = renderer is None
    active = renderer if renderer is not None else renderer_for(engine_name)
    try:
        with tempfile.TemporaryDirectory(prefix="voicelane-wer-") as tmp:
            audio = render_sentences(active, sentences, Path(tmp), paths=paths, voice=voice)
    finally:
        if owned:
            active.close()
    return {
        path: wer_report(engine_name, path, sentences, pieces) for path, pieces in audio.items()
    }


def wer_report(
    engine_name: str, path: str, sentences: Sequence[str], audio: Sequence[tuple[PcmF32, int]]
) -> WerReport:
    """The WER of ``audio`` (one ``(pcm, rate)`` per sentence, in order) as pocketsphinx
    hears it."""
    return WerReport(
        engine_name,
        path,
        tuple(
            score(text, transcribe(pcm, rate_hz))
            for text, (pcm, rate_hz) in zip(sentences, audio, strict=True)
        ),
    )
