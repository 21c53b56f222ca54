"""Where each word of a Piper utterance starts, in its phonemes.

Piper's model gives the frames of every phoneme id (its durations); to know when a *word*
starts, each word of the text needs the index of its first phoneme. espeak-ng's phonemes come
in groups separated by spaces (and clause punctuation), about one group per word, but not
exactly: it joins short words (``of the`` → ``ʌvðə``, ``well I`` → ``wˈɛlaɪ``) and a token may
become several words (``42`` → ``fˈɔːɹɾi tˈuː``, ``$5`` → ``dˈɑːlɚ fˈaɪv``).

:func:`align_words`: when the text has as many words as the phonemes have groups, word *k*
starts at group *k*. Otherwise every word's own phoneme count (the word phonemized alone) places
it proportionally along the utterance's phonemes, and a word that lands within a third of its
length of a group's start is snapped to it; inside a joined group the proportional place
stands. Starts are strictly increasing; a word that cannot get a later phoneme is left out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["PUNCTUATION", "WordSpan", "align_words", "phoneme_groups", "text_words"]

PUNCTUATION = frozenset(",.!?;:")
"""The clause marks espeak-ng leaves in Piper's phonemes (not spoken sounds)."""

_HAN = "\u3400-\u9fff\uf900-\ufaff"
_WORD = re.compile(f"[{_HAN}]|[^\\W_{_HAN}]+(?:['’][^\\W_]+)*")
"""A word: a Han character alone (each is read as one), else a run of letters and digits with
inner apostrophes (``isn't``)."""


@dataclass(frozen=True, slots=True)
class WordSpan:
    """A word ``[char_start, char_end)`` of the text that starts at phoneme ``phoneme``."""

    char_start: int
    char_end: int
    phoneme: int


def text_words(text: str) -> list[tuple[int, int]]:
    """The words of ``text`` as ``[start, end)`` character spans, in order."""
    return [match.span() for match in _WORD.finditer(text)]


def phoneme_groups(phonemes: Sequence[str]) -> list[int]:
    """The index of the first phoneme of every group (a run of phonemes between spaces and
    clause punctuation)."""
    starts: list[int] = []
    inside = False
    for index, phoneme in enumerate(phonemes):
        boundary = phoneme.isspace() or phoneme in PUNCTUATION
        if not boundary and not inside:
            starts.append(index)
        inside = not boundary
    return starts


def align_words(
    text: str, phonemes: Sequence[str], count_phonemes: Callable[[str], int]
) -> list[WordSpan]:
    """Each word of ``text`` with the index (into ``phonemes``) where it starts (module
    docstring). ``count_phonemes(word)`` is how many phonemes the word has alone; it is only
    called when words and groups disagree."""
    words = text_words(text)
    groups = phoneme_groups(phonemes)
    if not words or not groups:
        return []
    if len(words) == len(groups):
        return [WordSpan(s, e, at) for (s, e), at in zip(words, groups, strict=True)]
    # Ordinals: the position of each phoneme among the groups' phonemes (boundaries left out).
    spoken = [i for i, p in enumerate(phonemes) if not (p.isspace() or p in PUNCTUATION)]
    ordinal_of = {index: ordinal for ordinal, index in enumerate(spoken)}
    group_ordinals = [ordinal_of[g] for g in groups]
    expected = [max(1, count_phonemes(text[s:e])) for s, e in words]
    total = sum(expected)
    out: list[WordSpan] = []
    before = 0
    last = -1
    for (start, end), own in zip(words, expected, strict=True):
        place = len(spoken) * before / total
        before += own
        nearest = min(group_ordinals, key=lambda g: abs(g - place))
        ordinal = nearest if abs(nearest - place) <= max(1.0, own / 3) else round(place)
        if ordinal <= last:
            ordinal = last + 1
        if ordinal >= len(spoken):
            break
        out.append(WordSpan(start, end, spoken[ordinal]))
        last = ordinal
    return out
