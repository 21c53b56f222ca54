"""Phoneme conversions: X-SAMPA → IPA, and IPA → espeak-ng mnemonics checked against
libespeak-ng itself (its own IPA and mnemonics for English words, and how it reads back what
:func:`ipa_to_espeak` writes)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from voicelane.common.errors import InvalidInputError
from voicelane.core.phonemes import IPA_TO_ESPEAK, ipa_to_espeak, xsampa_to_ipa

# ---- X-SAMPA ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("xsampa", "ipa"),
    [
        ('t@"meItoU', "təˈmeɪtoʊ"),
        ('pi.k"{n', "pi.kˈæn"),  # Polly's pecan
        ('"bA.t@l', "ˈbɑ.təl"),  # Polly's bottle
        ("tSVrtS", "tʃʌrtʃ"),
        ("dZ", "dʒ"),
        ("D@ T", "ðə θ"),
        ("r\\`", "ɻ"),  # the longest symbol wins over r\ and r
        ("r\\", "ɹ"),
        ("%fo@", "ˌfoə"),
        ("n=", "n\u0329"),
        ("3`", "ɝ"),
        ("{I", "æɪ"),
        ("I\\", "ᵻ"),
        ("p_h", "pʰ"),
        ("i:", "iː"),
        ("?", "ʔ"),
        ("4", "ɾ"),
        ("y2 9", "yø œ"),
    ],
)
def test_xsampa_converts_to_ipa(xsampa: str, ipa: str) -> None:
    assert xsampa_to_ipa(xsampa) == ipa


def test_a_character_that_is_no_xsampa_symbol_is_refused_by_name() -> None:
    with pytest.raises(InvalidInputError, match=r"'\*' \(at 3 of the phonemes\)") as caught:
        xsampa_to_ipa("ab*")
    assert caught.value.field == "text"


# ---- IPA → espeak ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ipa", "mnemonics"),
    [
        ("həˈloʊ", "h@'loU"),
        ("/həˈləʊ/", "h@'loU"),  # slashes dropped; British goat is the same phoneme
        ("ˈbɑ.təl", "'bA:t@L"),  # syllable dot dropped, syllabic l
        ("t͡ʃɜːtʃ", "tS3:tS"),  # a tie bar dropped
        ("ˈvɛɹi", "'vEri"),  # r before a vowel is a consonant
        ("kɑːɹ", "kA@"),  # r-coloured vowel at a syllable's end
        ("nɪɹ", "ni@3"),
        ("skwɛɹ", "skwe@"),
        ("θɪŋk", "TINk"),
        ("ðə ˌʒɑ̃ɹ", "D@ ,ZA~r"),
        ("bʌʔn̩", "bV?n-"),
        ("ˈwɔːɾɚ", "'wO:*3"),
        ("ɡʊd", "gUd"),
        ("eːt", "e:t"),  # a length mark lengthens a vowel
        ("sː", "s"),  # and is dropped after a consonant
        ("ɐˈbaʊt", "a#'baUt"),
        ("ˈrəʊzᵻz", "'roUzI#z"),
    ],
)
def test_ipa_converts_to_espeak_mnemonics(ipa: str, mnemonics: str) -> None:
    assert ipa_to_espeak(ipa) == mnemonics


@pytest.mark.parametrize("symbol", ["y", "ø", "ʘ", "ɮ", "Q"])
def test_a_symbol_espeak_english_cannot_say_is_refused_by_name(symbol: str) -> None:
    with pytest.raises(InvalidInputError, match=f"IPA symbol '{symbol}'") as caught:
        ipa_to_espeak(f"tə{symbol}")
    assert caught.value.field == "text"


def test_xsampa_then_espeak() -> None:
    assert ipa_to_espeak(xsampa_to_ipa('t@"meItoU')) == "t@'meItoU"


# ---- against libespeak-ng ------------------------------------------------------------------------

# The library keeps global state (its synthesis callback, the engine's singleton), so it is
# probed in a child process: for each word its own IPA and mnemonics; for each mnemonic
# string, the IPA it reads back from [[...]] phoneme input (through its phoneme trace).
PROBE = r"""
import ctypes, json, os, sys, tempfile
import espeakng_loader

request = json.load(sys.stdin)
lib = ctypes.CDLL(espeakng_loader.get_library_path())
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.fclose.argtypes = [ctypes.c_void_p]
lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
lib.espeak_SetPhonemeTrace.argtypes = [ctypes.c_int, ctypes.c_void_p]
lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
                             ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                                      ctypes.c_int]
lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)
callback = CALLBACK(lambda wav, count, events: 0)
# AUDIO_OUTPUT_SYNCHRONOUS
assert lib.espeak_Initialize(2, 0, espeakng_loader.get_data_path().encode(), 0) > 0
lib.espeak_SetSynthCallback(callback)

def text_to_phonemes(text, mode):
    buffer = ctypes.create_string_buffer(text.encode())
    pointer = ctypes.c_void_p(ctypes.addressof(buffer))
    out = []
    while pointer.value:
        out.append(lib.espeak_TextToPhonemes(ctypes.byref(pointer), 1, mode).decode())
    return " ".join(out)

def read_back(mnemonics, mode):
    handle, path = tempfile.mkstemp()
    os.close(handle)
    stream = libc.fopen(path.encode(), b"w")
    lib.espeak_SetPhonemeTrace(mode, stream)
    data = f"[[{mnemonics}]]".encode() + b"\0"
    # espeakCHARS_UTF8 | espeakPHONEMES: [[...]] is phoneme input
    lib.espeak_Synth(data, len(data), 0, 0, 0, 1 | 0x100, None, None)
    lib.espeak_Synchronize()
    lib.espeak_SetPhonemeTrace(0, None)
    libc.fclose(stream)
    with open(path, encoding="utf-8") as trace:
        out = trace.read().strip()
    os.unlink(path)
    return out

result = {}
for voice in request["voices"]:
    assert lib.espeak_SetVoiceByName(voice.encode()) == 0, voice
    result[voice] = {
        "words": {w: [text_to_phonemes(w, 2), text_to_phonemes(w, 0)] for w in request["words"]},
        # IPA (mode 2) and mnemonics (mode 1), phonemes separated by "_"
        "read": {m: [read_back(m, 2 | (95 << 8)), read_back(m, 1 | (95 << 8))]
                 for m in request["mnemonics"]},
    }
json.dump(result, sys.stdout, ensure_ascii=False)
"""

VOICES = ("en-us", "en")
WORDS = (  # noqa: SIM905 - a word list
    "hello world thought father cat about boy house go bird measure church judge sing "
    "yes red nurse thing butter city roses near square cure fire bottle button water "
    "nation thirty car north start hour bath lot cloth strut foot goose kit dress fleece "
    "face price choice mouth goat palm comma letter village education usual ahead loch "
    "very tomato"
).split()
EXACT = (  # noqa: SIM905 - a word list
    "hello world thought cat boy house go bird church judge sing yes red nurse thing "
    "square cure nation strut foot goose kit dress fleece face price choice mouth goat "
    "palm education usual ahead very"
).split()
"""Words whose mnemonics ipa_to_espeak writes exactly as espeak's own, in both voices; the
rest are equivalent (espeak reads them back as the same IPA) — espeak's IPA does not say
which of two mnemonics with the same sound it used (``0`` and ``A:`` are both ``ɑː`` in
en-us; ``t#`` is written ``ɾ``)."""


def _probe(words: list[str], mnemonics: list[str]) -> dict[str, Any]:
    pytest.importorskip("espeakng_loader")
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        input=json.dumps({"voices": VOICES, "words": words, "mnemonics": mnemonics}),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _without_stress(phonemes: str) -> str:
    for mark in "ˈˌ',_":
        phonemes = phonemes.replace(mark, "")
    return phonemes.replace("ɹ", "r")


@pytest.fixture(scope="module")
def espeak_words() -> dict[str, Any]:
    """espeak's IPA for each word, and how it reads back what ipa_to_espeak makes of it."""
    words = _probe(WORDS, [])
    mnemonics = sorted({ipa_to_espeak(words[v]["words"][w][0]) for v in VOICES for w in WORDS})
    read = _probe([], mnemonics)
    for voice in VOICES:
        words[voice]["read"] = read[voice]["read"]
    return words


@pytest.mark.parametrize("voice", VOICES)
def test_espeak_reads_back_what_its_own_ipa_becomes(
    espeak_words: dict[str, Any], voice: str
) -> None:
    """For each English word: espeak's IPA → ipa_to_espeak → espeak's [[...]] input reads
    back as the same IPA (stress marks aside; r and ɹ are the same phoneme's labels)."""
    for word in WORDS:
        ipa, _ = espeak_words[voice]["words"][word]
        mnemonics = ipa_to_espeak(ipa)
        back_ipa, _ = espeak_words[voice]["read"][mnemonics]
        assert _without_stress(back_ipa) == _without_stress(ipa), (word, ipa, mnemonics)


@pytest.mark.parametrize("voice", VOICES)
def test_espeak_ipa_becomes_espeak_own_mnemonics(espeak_words: dict[str, Any], voice: str) -> None:
    assert len(EXACT) >= 12
    for word in EXACT:
        ipa, own = espeak_words[voice]["words"][word]
        assert _without_stress(ipa_to_espeak(ipa)) == _without_stress(own), (word, ipa)


def test_every_mnemonic_of_the_table_is_an_english_phoneme_of_espeak() -> None:
    """Each mnemonic the table writes, between two consonants, is read by espeak's English
    voices as the phoneme(s) it names: none is unknown, none silently skipped."""
    table = sorted(set(IPA_TO_ESPEAK.values()) - {"'", ","})
    read = _probe([], [f"b{mnemonic}d" for mnemonic in table])
    for voice in VOICES:
        for mnemonic in table:
            ipa, names = read[voice]["read"][f"b{mnemonic}d"]
            middle = [name.lstrip("',") for name in names.split("_")][1:-1]
            assert len(ipa.split("_")) == len(middle) + 2, (voice, mnemonic, ipa)
            # espeak may pick a variant of the same phoneme by context (I# is I2 in en).
            assert middle and middle[0][:1] == mnemonic[:1], (voice, mnemonic, names)
