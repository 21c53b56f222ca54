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
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar

import numpy as np

from voicelane.common.errors import EngineError, UnknownVoiceError
from voicelane.core.rules import DEFAULT_VOICE
from voicelane.core.text import contains_cjk

from .base import Engine, PcmF32, Utterance, VoiceInfo

log = logging.getLogger(__name__)

_AUTO_CJK_VOICE = "cmn"
_AUTO_LATIN_VOICE = "en-us"

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_END_PAUSE = 0x1000
_PARAM_RATE = 1
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
        # Keep a reference: ctypes must not collect the callback while the library holds it.
        self._callback = _SynthCallback(self._on_audio)
        self._lib.espeak_SetSynthCallback(self._callback)
        self.voices: dict[str, tuple[bytes, VoiceInfo]] = self._list_voices()
        self._current: tuple[str, int] | None = None

    @classmethod
    def get(cls) -> _Library:
        with cls._instance_lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def _on_audio(self, wav: ctypes._Pointer[ctypes.c_short], count: int, _events: int) -> int:
        if count > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, shape=(count,)).copy())
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

    def synthesize(self, text: str, voice_id: str, rate_wpm: int) -> PcmF32:
        identifier, _ = self.voices[voice_id]
        if self._current != (voice_id, rate_wpm):
            if self._lib.espeak_SetVoiceByName(identifier) != _EE_OK:
                raise EngineError(f"espeak could not select voice {voice_id!r}")
            self._lib.espeak_SetParameter(_PARAM_RATE, rate_wpm, 0)
            self._current = (voice_id, rate_wpm)
        self._chunks = []
        data = text.encode("utf-8")
        status = self._lib.espeak_Synth(
            data, len(data) + 1, 0, _POS_CHARACTER, 0, _CHARS_UTF8 | _END_PAUSE, None, None
        )
        self._lib.espeak_Synchronize()
        if status != _EE_OK:
            raise EngineError(f"espeak failed to synthesise (status {status})")
        if not self._chunks:
            return np.zeros(0, dtype=np.float32)
        pcm = np.concatenate(self._chunks).astype(np.float32)
        pcm *= np.float32(1.0 / 32768.0)
        self._chunks = []
        return pcm


class EspeakEngine(Engine):
    """espeak-ng voices, ``auto`` (Mandarin or English by script) as the default."""

    name = "espeak"
    max_batch = 1  # libespeak-ng renders one utterance at a time: batching only adds waiting
    min_speed = MIN_SPEED
    max_speed = MAX_SPEED

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

    def _resolve(self, utterance: Utterance) -> tuple[str, int]:
        voice = utterance.voice
        if voice == DEFAULT_VOICE:
            voice = _AUTO_CJK_VOICE if contains_cjk(utterance.text) else _AUTO_LATIN_VOICE
        rate = round(DEFAULT_RATE_WPM * utterance.speed)
        return voice, max(MIN_RATE_WPM, min(MAX_RATE_WPM, rate))

    def synthesize(self, batch: Sequence[Utterance]) -> list[PcmF32]:
        out: list[PcmF32] = []
        for utterance in batch:
            voice, rate = self._resolve(utterance)
            out.append(self._library.synthesize(utterance.text, voice, rate))
        return out
