"""The book benchmark's own arithmetic: the generated book's size and chapters, the commit
log's duplicates, the expected lane duration and the tables (no stack, no pandoc)."""

from __future__ import annotations

import random
import re

import pytest

from bench.books import (
    Book,
    EmbeddedRun,
    LaneRun,
    build_book,
    chapter_pauses,
    commit_counts,
    expected_lane_audio_s,
    memory_table,
    overhead,
    process_kind,
    results_table,
    sentence,
)


def blocks(book: Book) -> list[str]:
    """The Markdown's blocks as the reader extracts them (headings without their ``#``)."""
    body = book.markdown.split("---\n", 2)[2]
    return [b.strip().lstrip("#").strip() for b in body.split("\n\n") if b.strip()]


@pytest.mark.parametrize(("characters", "chapters"), [(300_000, 20), (30_000, 5), (5_000, 3)])
def test_the_book_has_its_size_and_chapters(characters: int, chapters: int) -> None:
    book = build_book(characters, chapters)
    assert book.chapters == chapters
    assert re.findall(r"^# (.+)$", book.markdown, flags=re.M) == [
        f"Chapter {n}" for n in range(1, chapters + 1)
    ]
    assert (
        len(re.findall(r"^## ", book.markdown, flags=re.M)) == book.sections == 2 * (chapters // 3)
    )
    prose = "\n\n".join(blocks(book))
    assert len(prose) == book.prose_chars
    assert abs(book.prose_chars / characters - 1) <= 0.02


def test_the_book_is_the_same_every_time() -> None:
    assert build_book(20_000, 4) == build_book(20_000, 4)
    assert build_book(20_000, 4, seed=1) != build_book(20_000, 4, seed=2)


def test_too_few_characters_for_the_chapters_is_refused() -> None:
    with pytest.raises(ValueError, match="too few"):
        build_book(1_000, 20)


def test_sentences_carry_what_normalization_reads_and_no_markdown() -> None:
    rng = random.Random(1)
    text = " ".join(sentence(rng) for _ in range(400))
    assert re.search(r"\d{4}-\d\d-\d\d", text)  # ISO dates
    assert re.search(r"\d+:\d\d", text)  # times
    assert re.search(r"[€£]\d+\.\d\d", text)  # money
    assert "%" in text
    assert not set(text) & set("*_#[]<>`$@^~\\")  # nothing pandoc would read as markup


def test_commit_counts_find_duplicates_and_gaps() -> None:
    assert commit_counts([0, 1, 2, 3], 4) == (0, 0)
    assert commit_counts([0, 1, 1, 3, 3, 3], 4) == (3, 1)  # 1 twice, 3 thrice, 2 missing
    assert commit_counts([], 2) == (0, 2)


def test_expected_lane_audio_adds_a_pause_before_each_chapter_that_does_not_start_it() -> None:
    assert chapter_pauses([0.0, 12.5, 30.0]) == 2
    assert chapter_pauses([3.2, 12.5, 30.0]) == 3  # a title page before chapter 1
    assert chapter_pauses([]) == 0
    assert expected_lane_audio_s(100.0, 31, 1.5) == pytest.approx(146.5)
    assert expected_lane_audio_s(100.0, 0, 1.5) == pytest.approx(100.0)
    assert overhead(110.0, 100.0) == pytest.approx(0.10)


def lane(wall_s: float, **changes: object) -> LaneRun:
    run = LaneRun(
        wall_s=wall_s,
        audio_s=146.5,
        chunks=10,
        commits=10,
        duplicated=0,
        missing=0,
        chapters=32,
        pauses=31,
        sentences=40,
        sentence_texts=["One."] * 40,
        phases_s={"chunk renders": wall_s - 1, "assembly": 1.0},
        peaks_kib={"redis": 10 * 1024, "espeak-worker-1": 200 * 1024, "api": 100 * 1024},
    )
    for name, value in changes.items():
        setattr(run, name, value)
    return run


def test_the_tables_show_overhead_duplicates_and_peaks() -> None:
    base = EmbeddedRun(wall_s=10.0, audio_s=100.0, segments=40, peak_kib=300 * 1024)
    killed = lane(
        12.0, killed="espeak-worker-1", killed_at_chunks=4, killed_peak_kib=150 * 1024, commits=11
    )
    table = results_table("espeak", base, lane(10.5), killed, 1.5)
    assert table[0].count("|") == table[1].count("|") == table[2].count("|")
    assert "| embedded render (baseline) | espeak | 10.0 | 100.0 | 10 |" in table[2]
    assert "| +5.0% |" in table[3] and "| +0.000 |" in table[3]
    assert "SIGKILLed at 4/10 chunks" in table[4] and "| +20.0% | 10 | 11 | 0 | 0 |" in table[4]
    memory = memory_table(base, lane(10.5), killed)
    row = "| espeak-worker-1 | render worker (espeak) | 200 | 150 at the kill; 200 restarted |"
    assert row in memory
    assert memory[-1].startswith("| bench process | embedded render | 300 ")


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("espeak-worker-1", "render worker (espeak)"),
        ("piper-worker-2", "render worker (piper)"),
        ("gpu-worker", "render worker"),
        ("cpu-worker", "cpu-worker"),
        ("flower", "flower"),
    ],
)
def test_process_kinds(name: str, kind: str) -> None:
    assert process_kind(name) == kind
