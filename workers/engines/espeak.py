"""The espeak engine: libespeak-ng 1.52 (from the PyPI package ``espeakng-loader``) via ctypes.

CPU only, no downloads, real speech at several hundred times real time: the engine of the
embedded default and of most tests. Debian's own espeak-ng (1.51) reads Chinese tone digits
aloud, so the library and data bundled in ``espeakng-loader`` are used instead.

libespeak-ng keeps its state in process globals and must be initialised once per process;
:class:`_Library` is that one handle. The engine is only called from the batcher's scheduler
thread, so calls never interleave. ctypes releases the GIL while the library synthesises, so
other threads (encoding, I/O) keep running meanwhile.

Voices are named by their espeak-ng file name, lower-cased (``en-us``, ``en-gb``, ``cmn``,
``yue``, ``fr-fr``...). The extra voice ``auto`` picks Mandarin (``cmn``, which reads Latin
words as English) for text that holds Chinese characters and American English otherwise:
the default, since mixed Chinese/English text is our common input.

**Word events.** libespeak-ng hands its synth callback, with each buffer of audio, the events
of that buffer; an ``espeakEVENT_WORD`` gives the word's 1-based character position and
length in the text (code points: the text is passed as UTF-8 with ``espeakCHARS_UTF8``) and
its ``sample``: the sample at which the word starts, counted from the start of the message
(the library counts the samples of every earlier buffer, ``count_samples``, plus the offset
in this one), so it is an offset into the utterance's whole audio, whatever buffer it came
with. That sample is where the word's first phoneme starts, and for a stop consonant
("two", "today") that is its silent closure, some 40-50 ms before anything is heard: a word
event that falls in silence is moved to the first audible sample after it (-45 dBFS, within
150 ms and before the next word), so a word starts when it is heard.
:meth:`EspeakEngine.synthesize_timed` returns them as
:class:`~voicelane.workers.engines.base.WordEvent` values.

**Pitch.** ``Utterance.params`` may hold ``("pitch_semitones", x)`` (SSML ``prosody
pitch``). espeak's ``espeakPITCH`` parameter (0-100, 50 the voice's normal) scales the
voice's base pitch by ``pitch_adjust_tab[value] / 128``, a table that doubles every 50 steps
(0: x0.5, 50: x1, 100: x2); so ``value = 50 + x * 50 / 12``, rounded, within 0-100: one
semitone is ~4.17 steps and the range is +-12 semitones (beyond it, clamped). The base alone
would leave the intonation's swing as it was (-7 semitones measured as x0.78 of the median
pitch, not x0.67): ``espeakRANGE`` (linear, 50 the voice's normal) is scaled by the same
factor, ``50 * 2 ** (x / 12)``, so the whole contour moves.

**Phonemes.** Text between ``[[`` and ``]]`` is read as espeak phoneme mnemonics (SSML
``phoneme``, which the text pipeline writes that way): the ``espeakPHONEMES`` synth flag is
set on every call (without it espeak spells the brackets' content out letter by letter).
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import ClassVar

import numpy as np

from voicelane.common.audio import SILENCE_THRESHOLD
from voicelane.common.errors import EngineError, UnknownVoiceError
from voicelane.core.rules import DEFAULT_VOICE
from voicelane.core.text import contains_cjk

from .base import Engine, PcmF32, TimedAudio, Utterance, VoiceInfo, WordEvent

log = logging.getLogger(__name__)

_AUTO_CJK_VOICE = "cmn"
_AUTO_LATIN_VOICE = "en-us"

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_PHONEMES = 0x100
_END_PAUSE = 0x1000
_PARAM_RATE = 1
_PARAM_PITCH = 3
_PARAM_RANGE = 4
_EVENT_LIST_TERMINATED = 0
_EVENT_WORD = 1
_EE_OK = 0
# Audio handed to our callback per call. Each callback needs the GIL; long buffers mean few
# callbacks, so synthesis on the scheduler thread overlaps with encoding on another thread
# instead of queueing for the GIL tens of thousands of times (bench/render.py).
_CALLBACK_BUFFER_MS = 2000

DEFAULT_RATE_WPM = 175
MIN_RATE_WPM = 80
MAX_RATE_WPM = 450
MIN_SPEED = 0.5
MAX_SPEED = 2.5
DEFAULT_PITCH = 50
MAX_PITCH = 100
PITCH_STEPS_PER_SEMITONE = 50 / 12
"""espeak's pitch table doubles every 50 steps: 12 semitones."""


def range_value(semitones: float) -> int:
    """``espeakRANGE`` for a shift of ``semitones``: the contour's swing scaled as its base
    (module docstring), within 0-100."""
    return max(0, min(MAX_PITCH, round(DEFAULT_PITCH * 2 ** (semitones / 12))))


def pitch_value(semitones: float) -> int:
    """``espeakPITCH`` for a shift of ``semitones`` from the voice's normal pitch (module
    docstring), within 0-100."""
    value = round(DEFAULT_PITCH + semitones * PITCH_STEPS_PER_SEMITONE)
    return max(0, min(MAX_PITCH, value))


class _EspeakEvent(ctypes.Structure):
    """``espeak_EVENT`` of speak_lib.h (espeak-ng 1.52)."""

    _fields_: ClassVar[list[tuple[str, type]]] = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", ctypes.c_char * 8),  # union { int number; const char *name; char string[8]; }
    ]


_SynthCallback = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)


class _EspeakVoice(ctypes.Structure):
    _fields_: ClassVar[list[tuple[str, type]]] = [
        ("name", ctypes.c_char_p),
        ("languages", ctypes.c_char_p),
        ("identifier", ctypes.c_char_p),
        ("gender", ctypes.c_ubyte),
        ("age", ctypes.c_ubyte),
        ("variant", ctypes.c_ubyte),
        ("xx1", ctypes.c_ubyte),
        ("score", ctypes.c_int),
        ("spare", ctypes.c_void_p),
    ]


class _Library:
    """The process-wide libespeak-ng handle: initialised once, used from one thread at a time."""

    _instance: ClassVar[_Library | None] = None
    _instance_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        import espeakng_loader

        self._lib = ctypes.CDLL(espeakng_loader.get_library_path())
        self._lib.espeak_Initialize.argtypes = [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_int,
        ]
        self._lib.espeak_Initialize.restype = ctypes.c_int
        self._lib.espeak_Synth.argtypes = [
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        self._lib.espeak_Synth.restype = ctypes.c_int
        self._lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        self._lib.espeak_SetVoiceByName.restype = ctypes.c_int
        self._lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self._lib.espeak_SetParameter.restype = ctypes.c_int
        self._lib.espeak_ListVoices.argtypes = [ctypes.c_void_p]
        self._lib.espeak_ListVoices.restype = ctypes.POINTER(ctypes.POINTER(_EspeakVoice))
        self._lib.espeak_Synchronize.restype = ctypes.c_int

        data_path = espeakng_loader.get_data_path().encode()
        rate = self._lib.espeak_Initialize(
            _AUDIO_OUTPUT_SYNCHRONOUS, _CALLBACK_BUFFER_MS, data_path, 0
        )
        if rate <= 0:
            raise EngineError(f"libespeak-ng failed to initialise (status {rate})")
        self.sample_rate_hz: int = rate
        self._chunks: list[np.ndarray] = []
        self._words: list[tuple[int, int, int]] = []
        """(1-based character position, length, sample) of each word event."""
        # Keep a reference: ctypes must not collect the callback while the library holds it.
        self._callback = _SynthCallback(self._on_audio)
        self._lib.espeak_SetSynthCallback(self._callback)
        self.voices: dict[str, tuple[bytes, VoiceInfo]] = self._list_voices()
        self._current: tuple[str, int, int, int] | None = None

    @classmethod
    def get(cls) -> _Library:
        with cls._instance_lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def _on_audio(self, wav: ctypes._Pointer[ctypes.c_short], count: int, events: int) -> int:
        if count > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, shape=(count,)).copy())
        if events:
            table = ctypes.cast(events, ctypes.POINTER(_EspeakEvent))
            index = 0
            while (event := table[index]).type != _EVENT_LIST_TERMINATED:
                if event.type == _EVENT_WORD:
                    self._words.append((event.text_position, event.length, event.sample))
                index += 1
        return 0

    def _list_voices(self) -> dict[str, tuple[bytes, VoiceInfo]]:
        """Voices by id: the voice's language code (``en-gb``, ``cmn``), or, where several
        voices share a language, each one's file name (``yue``, ``yue-latn-jyutping``)."""
        table = self._lib.espeak_ListVoices(None)
        raw_voices: list[tuple[bytes, str, VoiceInfo]] = []
        index = 0
        while table[index]:
            raw = table[index].contents
            index += 1
            identifier: bytes = raw.identifier or b""
            # `languages` is a list of (priority byte, NUL-terminated name); we take the first.
            language = (raw.languages or b"\x05")[1:].decode(errors="replace").lower()
            info = VoiceInfo(
                id="",
                name=(raw.name or b"").decode(errors="replace"),
                languages=(language,) if language else (),
                gender={1: "male", 2: "female"}.get(raw.gender, "unknown"),
            )
            raw_voices.append((identifier, language, info))
        per_language = Counter(language for _, language, _ in raw_voices)
        voices: dict[str, tuple[bytes, VoiceInfo]] = {}
        for identifier, language, info in raw_voices:
            file_name = identifier.decode().rsplit("/", 1)[-1].lower()
            voice_id = language if language and per_language[language] == 1 else file_name
            if voice_id and voice_id not in voices:
                voices[voice_id] = (identifier, replace(info, id=voice_id))
        return voices

    def synthesize(
        self, text: str, voice_id: str, rate_wpm: int, pitch: int, pitch_range: int
    ) -> TimedAudio:
        """``text`` spoken, with its word events."""
        identifier, _ = self.voices[voice_id]
        if self._current != (voice_id, rate_wpm, pitch, pitch_range):
            if self._lib.espeak_SetVoiceByName(identifier) != _EE_OK:
                raise EngineError(f"espeak could not select voice {voice_id!r}")
            self._lib.espeak_SetParameter(_PARAM_RATE, rate_wpm, 0)
            self._lib.espeak_SetParameter(_PARAM_PITCH, pitch, 0)
            self._lib.espeak_SetParameter(_PARAM_RANGE, pitch_range, 0)
            self._current = (voice_id, rate_wpm, pitch, pitch_range)
        self._chunks = []
        self._words = []
        data = text.encode("utf-8")
        flags = _CHARS_UTF8 | _PHONEMES | _END_PAUSE
        status = self._lib.espeak_Synth(
            data, len(data) + 1, 0, _POS_CHARACTER, 0, flags, None, None
        )
        self._lib.espeak_Synchronize()
        if status != _EE_OK:
            raise EngineError(f"espeak failed to synthesise (status {status})")
        chunks, raw_words = self._chunks, self._words
        self._chunks, self._words = [], []
        if not chunks:
            return TimedAudio(np.zeros(0, dtype=np.float32))
        pcm = np.concatenate(chunks).astype(np.float32)
        pcm *= np.float32(1.0 / 32768.0)
        events = word_events(raw_words, text, len(pcm))
        return TimedAudio(pcm, audible_starts(events, pcm, self.sample_rate_hz))


def word_events(
    raw: Sequence[tuple[int, int, int]], text: str, samples: int
) -> tuple[WordEvent, ...]:
    """espeak's ``(1-based position, length, sample)`` word events as :class:`WordEvent`
    values: 0-based spans within ``text``, samples within the audio, in order.

    espeak may announce one word twice (a Han character read by a Latin voice is spoken as
    several words from one position): only the first event of a position is kept. A word of
    espeak's dictionary may span several Han characters (``第一句``) while its event's
    length says one: a span grows over the letters that follow it up to the next word."""
    events: list[tuple[int, int, int]] = []
    for position, length, sample in raw:
        start = max(0, min(len(text), position - 1))
        end = max(start, min(len(text), start + max(1, length)))
        at = max(0, min(samples, sample))
        if events and (start <= events[-1][0] or at < events[-1][2]):
            continue  # a repeat of the same word, or out of order: the first report stands
        events.append((start, end, at))
    out: list[WordEvent] = []
    for index, (start, reported_end, at) in enumerate(events):
        limit = events[index + 1][0] if index + 1 < len(events) else len(text)
        end = reported_end
        while end < limit and text[end].isalnum():
            end += 1
        out.append(WordEvent(start, end, at))
    return tuple(out)


ONSET_SEARCH_S = 0.150
"""How far after its event a word's first audible sample is looked for (a stop's closure is
shorter)."""


def audible_starts(
    events: Sequence[WordEvent], pcm: PcmF32, sample_rate_hz: int
) -> tuple[WordEvent, ...]:
    """Each word event moved to the first sample at or above -45 dBFS at or after it (within
    :data:`ONSET_SEARCH_S` and before the next word's event): when the word is heard."""
    reach = round(ONSET_SEARCH_S * sample_rate_hz)
    out: list[WordEvent] = []
    for index, event in enumerate(events):
        limit = event.sample + reach
        if index + 1 < len(events):
            limit = min(limit, events[index + 1].sample)
        # Only the word's own window is looked at (at most ONSET_SEARCH_S): the whole
        # utterance's loud samples were a tenth of the engine's time in a long render.
        loud = np.abs(pcm[event.sample : limit]) >= SILENCE_THRESHOLD  # empty if limit <= sample
        out.append(
            replace(event, sample=event.sample + int(loud.argmax())) if loud.any() else event
        )
    return tuple(out)


class EspeakEngine(Engine):
    """espeak-ng voices, ``auto`` (Mandarin or English by script) as the default."""

    name = "espeak"
    max_batch = 1  # libespeak-ng renders one utterance at a time: batching only adds waiting
    unload_frees_memory = False
    """No idle unload: libespeak-ng's data (phonemes, the dictionaries of the voices used: 1.4
    MiB after initialising, ~4 MiB after six languages, measured) are process globals shared
    by every espeak engine of the process, and initialised once per process (``_Library``)."""
    min_speed = MIN_SPEED
    max_speed = MAX_SPEED
    word_timings = True

    def __init__(self, default_voice: str = DEFAULT_VOICE) -> None:
        self._library = _Library.get()
        self.sample_rate_hz = self._library.sample_rate_hz
        self.default_voice = default_voice
        self._voices = [
            VoiceInfo(
                id=DEFAULT_VOICE,
                name="Automatic (Mandarin for Chinese text, American English otherwise)",
                languages=("cmn", "en-us"),
            ),
            *(info for _, info in self._library.voices.values()),
        ]
        self._voice_ids = frozenset(v.id for v in self._voices)
        if default_voice not in self._voice_ids:
            raise UnknownVoiceError(f"unknown default voice {default_voice!r}")

    def voices(self) -> list[VoiceInfo]:
        return list(self._voices)

    def _resolve(self, utterance: Utterance) -> tuple[str, int, int, int]:
        """The espeak voice, rate (words per minute), pitch and pitch range (0-100 each) of
        an utterance."""
        voice = utterance.voice
        if voice == DEFAULT_VOICE:
            voice = _AUTO_CJK_VOICE if contains_cjk(utterance.text) else _AUTO_LATIN_VOICE
        rate = round(DEFAULT_RATE_WPM * utterance.speed)
        semitones = 0.0
        for name, value in utterance.params:
            if name == "pitch_semitones" and isinstance(value, int | float):
                semitones = float(value)
        rate = max(MIN_RATE_WPM, min(MAX_RATE_WPM, rate))
        return voice, rate, pitch_value(semitones), range_value(semitones)

    def synthesize_timed(self, batch: Sequence[Utterance]) -> list[TimedAudio]:
        return [self._library.synthesize(u.text, *self._resolve(u)) for u in batch]

    def synthesize(self, batch: Sequence[Utterance]) -> list[PcmF32]:
        return [timed.pcm for timed in self.synthesize_timed(batch)]

    def synthesize_stream_timed(self, batch: Sequence[Utterance]) -> Iterator[list[TimedAudio]]:
        """Each utterance whole, one step each (espeak renders one utterance per call)."""
        empty = TimedAudio(np.zeros(0, dtype=np.float32))
        for index, utterance in enumerate(batch):
            (timed,) = self.synthesize_timed([utterance])
            yield [timed if i == index else empty for i in range(len(batch))]
