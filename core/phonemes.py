"""Phoneme strings: X-SAMPA to IPA, and IPA to espeak-ng's phoneme mnemonics.

SSML ``<phoneme>`` gives a pronunciation in IPA or X-SAMPA. :func:`xsampa_to_ipa` converts
X-SAMPA (the standard table: ASCII for every IPA symbol, ``@`` ə, ``{`` æ, ``tS`` tʃ, ``r\\``
ɹ, ``"`` primary stress...) to IPA, so the rest of the system sees IPA only.

:func:`ipa_to_espeak` writes IPA as espeak-ng's phoneme mnemonics for its ``[[...]]`` phoneme
input, for espeak-ng's English voices (``en``, ``en-us``, ``en-gb``...; other languages name
some phonemes differently). The table was checked against libespeak-ng 1.52 itself: each
mnemonic it writes is a phoneme of the English phoneme tables, and espeak reads it back as
the IPA it came from (``tests/unit/core/test_phonemes.py`` does this for every entry and for
English words). Some choices:

* English r-coloured and centring vowels become espeak's own phonemes where the ``ɹ``/``ə``
  ends the syllable: ``ɪɹ`` ``i@3``, ``ɛɹ`` ``e@``, ``ʊɹ`` ``U@``, ``ɑːɹ`` ``A@``,
  ``ɔːɹ`` ``o@``, ``ɪə`` ``i@``, ``eə`` ``e@``, ``ʊə`` ``U@``, ``əl`` ``@L``; before a vowel
  the ``ɹ`` stays a consonant (``vɛɹi`` → ``vEri``);
* ``əʊ`` and ``oʊ`` are both ``oU`` (espeak's goat vowel: ``əʊ`` in British voices, ``oʊ``
  in American ones); ``æ`` and ``a`` are both ``a``; ``ɑ`` is ``A:``; ``ɾ`` is ``*``;
* stress marks ``ˈ ˌ`` become ``' ,`` where they are (espeak moves them to the vowel);
  a length mark lengthens a vowel (``:``) and is dropped after a consonant; syllable
  dots, tie bars, aspiration and the non-syllabic mark are dropped; spaces separate words.

A symbol outside the table (``y``, ``ø``, a click...: sounds espeak's English voices do not
have) is refused: :class:`~voicelane.common.errors.InvalidInputError` naming the symbol.
"""

from __future__ import annotations

import unicodedata

from voicelane.common.errors import InvalidInputError

__all__ = ["IPA_TO_ESPEAK", "XSAMPA_TO_IPA", "ipa_to_espeak", "validate_ipa", "xsampa_to_ipa"]

XSAMPA_TO_IPA: dict[str, str] = {
    # Lower case
    "a": "a",
    "b": "b",
    "b_<": "ɓ",
    "c": "c",
    "d": "d",
    "d`": "ɖ",
    "d_<": "ɗ",
    "e": "e",
    "f": "f",
    "g": "ɡ",
    "g_<": "ɠ",
    "h": "h",
    "h\\": "ɦ",
    "i": "i",
    "j": "j",
    "j\\": "ʝ",
    "k": "k",
    "l": "l",
    "l`": "ɭ",
    "l\\": "ɺ",
    "m": "m",
    "n": "n",
    "n`": "ɳ",
    "o": "o",
    "p": "p",
    "p\\": "ɸ",
    "q": "q",
    "r": "r",
    "r`": "ɽ",
    "r\\": "ɹ",
    "r\\`": "ɻ",
    "s": "s",
    "s`": "ʂ",
    "s\\": "ɕ",
    "t": "t",
    "t`": "ʈ",
    "u": "u",
    "v": "v",
    "v\\": "ʋ",
    "w": "w",
    "x": "x",
    "x\\": "ɧ",
    "y": "y",
    "z": "z",
    "z`": "ʐ",
    "z\\": "ʑ",
    # Upper case
    "A": "ɑ",
    "B": "β",
    "B\\": "ʙ",
    "C": "ç",
    "D": "ð",
    "E": "ɛ",
    "F": "ɱ",
    "G": "ɣ",
    "G\\": "ɢ",
    "G\\_<": "ʛ",
    "H": "ɥ",
    "H\\": "ʜ",
    "I": "ɪ",
    "I\\": "ᵻ",
    "J": "ɲ",
    "J\\": "ɟ",
    "J\\_<": "ʄ",
    "K": "ɬ",
    "K\\": "ɮ",
    "L": "ʎ",
    "L\\": "ʟ",
    "M": "ɯ",
    "M\\": "ɰ",
    "N": "ŋ",
    "N\\": "ɴ",
    "O": "ɔ",
    "O\\": "ʘ",
    "P": "ʋ",
    "Q": "ɒ",
    "R": "ʁ",
    "R\\": "ʀ",
    "S": "ʃ",
    "T": "θ",
    "U": "ʊ",
    "U\\": "ᵿ",
    "V": "ʌ",
    "W": "ʍ",
    "X": "χ",
    "X\\": "ħ",
    "Y": "ʏ",
    "Z": "ʒ",
    # Other symbols
    ".": ".",
    '"': "ˈ",
    "%": "ˌ",
    "'": "ʲ",
    ":": "ː",
    ":\\": "ˑ",
    "@": "ə",
    "@\\": "ɘ",
    "@`": "ɚ",
    "{": "æ",
    "}": "ʉ",
    "1": "ɨ",
    "2": "ø",
    "3": "ɜ",
    "3\\": "ɞ",
    "3`": "ɝ",
    "4": "ɾ",
    "5": "ɫ",
    "6": "ɐ",
    "7": "ɤ",
    "8": "ɵ",
    "9": "œ",
    "&": "ɶ",
    "?": "ʔ",
    "?\\": "ʕ",
    "<\\": "ʢ",
    ">\\": "ʡ",
    "^": "ꜛ",
    "!": "ꜜ",
    "!\\": "ǃ",
    "|": "|",
    "|\\": "ǀ",
    "||": "‖",
    "|\\|\\": "ǁ",
    "=\\": "ǂ",
    "-\\": "‿",
    # Diacritics
    '_"': "\u0308",
    "_+": "\u031f",
    "_-": "\u0320",
    "_/": "\u030c",
    "_0": "\u0325",
    "=": "\u0329",
    "_=": "\u0329",
    "_>": "ʼ",
    "_?\\": "ˤ",
    "_\\": "\u0302",
    "_^": "\u032f",
    "_}": "\u031a",
    "`": "\u02de",
    "~": "\u0303",
    "_~": "\u0303",
    "_A": "\u0318",
    "_a": "\u033a",
    "_B": "\u030f",
    "_c": "\u031c",
    "_d": "\u032a",
    "_e": "\u0334",
    "_F": "\u0302",
    "_G": "ˠ",
    "_H": "\u0301",
    "_h": "ʰ",
    "_j": "ʲ",
    "_k": "\u0330",
    "_L": "\u0300",
    "_l": "ˡ",
    "_M": "\u0304",
    "_m": "\u033b",
    "_N": "\u033c",
    "_n": "ⁿ",
    "_O": "\u0339",
    "_o": "\u031e",
    "_q": "\u0319",
    "_R": "\u030c",
    "_r": "\u031d",
    "_T": "\u030b",
    "_t": "\u0324",
    "_v": "\u032c",
    "_w": "ʷ",
    "_X": "\u0306",
    "_x": "\u033d",
}
"""The X-SAMPA table (John Wells' standard); the longest symbol wins (``r\\``` before
``r\\`` before ``r``)."""

_XSAMPA_LONGEST = max(len(symbol) for symbol in XSAMPA_TO_IPA)


def xsampa_to_ipa(text: str) -> str:
    """``text`` in X-SAMPA as IPA (``t@"meItoU`` → ``təˈmeɪtoʊ``); whitespace is kept.
    :class:`InvalidInputError` (``field="text"``) names a symbol X-SAMPA does not have."""
    out: list[str] = []
    position = 0
    while position < len(text):
        char = text[position]
        if char.isspace():
            out.append(" ")
            position += 1
            continue
        for size in range(min(_XSAMPA_LONGEST, len(text) - position), 0, -1):
            ipa = XSAMPA_TO_IPA.get(text[position : position + size])
            if ipa is not None:
                out.append(ipa)
                position += size
                break
        else:
            raise InvalidInputError(
                f"text: {char!r} (at {position + 1} of the phonemes) is not an X-SAMPA symbol",
                field="text",
            )
    return "".join(out)


IPA_TO_ESPEAK: dict[str, str] = {
    # Vowels and diphthongs (English voices)
    "i": "i",
    "iː": "i:",
    "ɪ": "I",
    "ᵻ": "I#",
    "ɨ": "I#",
    "e": "e",
    "eː": "e:",
    "eɪ": "eI",
    "ɛ": "E",
    "ɛː": "E:",
    "æ": "a",
    "a": "a",
    "aː": "a:",
    "aɪ": "aI",
    "aʊ": "aU",
    "aɪə": "aI@",
    "aɪɚ": "aI3",
    "aʊə": "aU@",
    "ɑ": "A:",
    "ɑː": "A:",
    "ɒ": "0",
    "ɔ": "O",
    "ɔː": "O:",
    "ɔɪ": "OI",
    "o": "o",
    "oː": "o:",
    "oʊ": "oU",
    "əʊ": "oU",
    "u": "u",
    "uː": "u:",
    "ʊ": "U",
    "ʌ": "V",
    "ə": "@",
    "əː": "3:",
    "ɐ": "a#",
    "ɚ": "3",
    "ɜ": "3:",
    "ɜː": "3:",
    "ɝ": "3:",
    "ɝː": "3:",
    "ɪə": "i@",
    "iə": "i@",
    "eə": "e@",
    "ɛə": "e@",
    "ʊə": "U@",
    "ɑ̃": "A~",
    "ɔ̃": "O~",
    # r-coloured vowels and a syllabic l (only where the r / l ends the syllable)
    "ɪɹ": "i@3",
    "ɪr": "i@3",
    "ɛɹ": "e@",
    "ɛr": "e@",
    "eɹ": "e@",
    "ʊɹ": "U@",
    "ʊr": "U@",
    "ɑːɹ": "A@",
    "ɑːr": "A@",
    "ɑɹ": "A@",
    "ɑr": "A@",
    "ɔːɹ": "o@",
    "ɔːr": "o@",
    "ɔɹ": "o@",
    "ɔr": "o@",
    "oɹ": "o@",
    "əl": "@L",
    # Consonants
    "p": "p",
    "b": "b",
    "t": "t",
    "d": "d",
    "k": "k",
    "g": "g",
    "ɡ": "g",
    "q": "q",
    "c": "c",
    "ɟ": "J",
    "ʔ": "?",
    "f": "f",
    "v": "v",
    "θ": "T",
    "ð": "D",
    "s": "s",
    "z": "z",
    "ʃ": "S",
    "ʒ": "Z",
    "ɕ": "S;",
    "ʑ": "Z;",
    "ʂ": "s;",
    "ç": "C",
    "ʝ": "J^",
    "x": "x",
    "ɣ": "Q",
    "χ": "X",
    "ʁ": 'Q"',
    "β": "B",
    "h": "h",
    "tʃ": "tS",
    "dʒ": "dZ",
    "tɕ": "tS;",
    "dʑ": "dZ;",
    "m": "m",
    "n": "n",
    "ɲ": "n^",
    "ŋ": "N",
    "m̩": "m-",
    "n̩": "n-",
    "ŋ̍": "N-",
    "ŋ̩": "N-",
    "l": "l",
    "ɫ": "l",
    "l̩": "l-",
    "ɫ̩": "l-",
    "ʎ": "l^",
    "ɬ": "l#",
    "ɹ": "r",
    "r": "r",
    "ɾ": "*",
    "ʀ": 'r"',
    "ʋ": "v#",
    "w": "w",
    "ʍ": "w#",
    "j": "j",
    # Secondary articulations, as the sound they colour the consonant with
    "ʲ": "j",
    "ʷ": "w",
    # Suprasegmentals
    "ˈ": "'",
    "ˌ": ",",
}
"""IPA → espeak-ng mnemonic (English voices); the longest IPA sequence wins."""

_DROPPED = frozenset(".\u0361\u035c\u032fʰ|‖ˑ")
"""Syllable breaks, tie bars, the non-syllabic mark, aspiration, phrase bars, half-long."""
_LENGTH = "ː"
_VOWEL_STARTS = frozenset("iɪᵻɨeɛæaɑɒɔoʊuʌəɐɚɜɝ")
_ESPEAK_VOWELS = frozenset("iIeEaA0OoUuV@3")
_IPA_LONGEST = max(len(symbol) for symbol in IPA_TO_ESPEAK)


def _at_vowel(text: str, position: int) -> bool:
    """A vowel follows at ``position`` (stress and length marks skipped)."""
    while position < len(text) and text[position] in "ˈˌː.":
        position += 1
    return position < len(text) and text[position] in _VOWEL_STARTS


def ipa_to_espeak(ipa: str) -> str:
    """``ipa`` as espeak-ng phoneme mnemonics for ``[[...]]`` input (``həˈloʊ`` →
    ``h@'loU``). :class:`InvalidInputError` (``field="text"``) names a symbol it cannot
    write (see the module docstring)."""
    text = unicodedata.normalize("NFC", ipa.strip().strip("/[]"))
    out: list[str] = []
    position = 0
    while position < len(text):
        char = text[position]
        if char.isspace():
            if out and out[-1] != " ":
                out.append(" ")
            position += 1
            continue
        if char in _DROPPED:
            position += 1
            continue
        if char == _LENGTH:
            # A length mark the table did not take with its vowel: lengthen a vowel, drop it
            # after a consonant (espeak has no long consonants in English).
            if out and out[-1][-1] in _ESPEAK_VOWELS and not out[-1].endswith(":"):
                out[-1] += ":"
            position += 1
            continue
        for size in range(min(_IPA_LONGEST, len(text) - position), 0, -1):
            symbol = text[position : position + size]
            mnemonic = IPA_TO_ESPEAK.get(symbol)
            if mnemonic is None:
                continue
            if size > 1 and symbol[-1] in "ɹrl" and _at_vowel(text, position + size):
                continue  # "vɛɹi": the r starts the next syllable, it is a consonant
            out.append(mnemonic)
            position += size
            break
        else:
            name = unicodedata.name(char, f"U+{ord(char):04X}").lower()
            raise InvalidInputError(
                f"text: the IPA symbol {char!r} ({name}) has no espeak-ng English phoneme",
                field="text",
            )
    return "".join(out).strip()


def validate_ipa(ipa: str) -> None:
    """Refuse (:class:`InvalidInputError`) IPA that :func:`ipa_to_espeak` cannot write."""
    ipa_to_espeak(ipa)
