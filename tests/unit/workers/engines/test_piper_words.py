"""Words of a Piper utterance matched to espeak-ng's phonemes (no model)."""

from __future__ import annotations

from voicelane.workers.engines.piper_words import align_words, phoneme_groups, text_words


def phonemes(text: str) -> list[str]:
    """A phoneme list as piper makes it: one entry per character."""
    return list(text)


def test_words_are_letter_runs_with_inner_apostrophes_and_han_characters_alone() -> None:
    text = "Isn't it 42? 你好, ok_go"
    assert [text[s:e] for s, e in text_words(text)] == ["Isn't", "it", "42", "你", "好", "ok", "go"]


def test_groups_start_after_spaces_and_clause_marks() -> None:
    assert phoneme_groups(phonemes("ab cd,ef. g")) == [0, 3, 6, 10]
    assert phoneme_groups(phonemes(" , .")) == []


def test_as_many_words_as_groups_map_one_to_one() -> None:
    spans = align_words("Hello big world.", phonemes("həlˈoʊ bˈɪɡ wˈɜːld."), lambda _: 99)
    assert [(s.char_start, s.char_end, s.phoneme) for s in spans] == [
        (0, 5, 0),
        (6, 9, 7),
        (10, 15, 12),
    ]


def test_joined_words_are_placed_inside_their_group_by_their_own_length() -> None:
    # "of the people": espeak joins "of the" into one group (ʌvðə).
    said = phonemes("ʌvðə pˈiːpəl")
    counts = {"of": 2, "the": 2, "people": 6}
    spans = align_words("of the people", said, lambda word: counts[word])
    starts = [s.phoneme for s in spans]
    assert starts == [0, 2, 5]  # "the" inside the joined group, "people" snapped to its group
    assert [said[i] for i in starts] == ["ʌ", "ð", "p"]


def test_a_token_read_as_several_words_keeps_later_words_on_their_groups() -> None:
    # "42 things": espeak says "forty two things" (three groups for two words).
    said = phonemes("fˈɔːɹɾi tˈuː θˈɪŋz")
    counts = {"42": 9, "things": 5}
    spans = align_words("42 things", said, lambda word: counts[word])
    assert [s.phoneme for s in spans] == [0, 13]


def test_starts_strictly_increase_and_nothing_is_placed_past_the_end() -> None:
    spans = align_words("a b c d e f", phonemes("ab"), lambda _: 1)
    starts = [s.phoneme for s in spans]
    assert starts == sorted(set(starts))
    assert all(0 <= at < 2 for at in starts)


def test_nothing_to_align() -> None:
    assert align_words("...", phonemes("."), lambda _: 1) == []
    assert align_words("", [], lambda _: 1) == []
