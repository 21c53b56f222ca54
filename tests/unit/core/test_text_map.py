"""The rewrite maps: spans of the output point back into the source, through every step."""

from __future__ import annotations

import pytest

from voicelane.core.text_map import (
    MapBuilder,
    Mapped,
    concat,
    identity,
    replacement,
    sliced,
    translate,
)


def test_a_replacement_maps_every_part_of_its_output_to_the_whole_source() -> None:
    source = "I paid $3.5M now"
    builder = MapBuilder(source)
    builder.keep(0, 7)
    builder.replace(7, 12, "three point five million dollars")
    builder.keep(12, 16)
    mapped = builder.build()
    assert mapped.text == "I paid three point five million dollars now"
    assert mapped.source_span(7, 12) == (7, 12)  # "three"
    assert mapped.source_span(24, 31) == (7, 12)  # "million"
    start, end = mapped.source_span(0, 6)
    assert source[start:end] == "I paid"
    start, end = mapped.source_span(len(mapped.text) - 3, len(mapped.text))
    assert source[start:end] == "now"


def test_maps_compose_through_two_rewrites() -> None:
    first = MapBuilder("a  b $5")
    first.keep(0, 1)
    first.replace(1, 3, " ")
    first.keep(3, 5)
    first.replace(5, 7, "five dollars")
    later = MapBuilder("a b five dollars")
    later.replace(0, 1, "Ay")
    later.keep(1, 16)
    both = first.build().then(later.build())
    assert both.text == "Ay b five dollars"
    assert both.source_span(0, 2) == (0, 1)
    assert both.source_span(3, 4) == (3, 4)  # "b", one to one through both
    assert both.source_span(5, 9) == (5, 7)  # "five" → "$5"


def test_out_of_order_ranges_are_refused() -> None:
    builder = MapBuilder("abc")
    builder.keep(1, 2)
    with pytest.raises(ValueError, match="out of order"):
        builder.keep(0, 1)


def test_identity_maps_one_to_one() -> None:
    mapped = identity("hello")
    assert mapped.source_span(1, 4) == (1, 4)


def test_a_slice_keeps_its_map_to_the_source() -> None:
    normalized = normalize_like("I paid $3 today")
    part = sliced(normalized, 7, len(normalized.text))
    assert part.text == "three dollars today"
    assert part.source_span(0, 5) == (7, 9)  # "three" came from "$3"
    assert part.source_span(14, 19) == (10, 15)  # "today" is exact


def test_concatenated_rewrites_keep_each_part_s_map() -> None:
    source = "hello $3 world"
    parts = [
        sliced(identity(source), 0, 6),
        replacement("three dollars", 6, 8, len(source)),
        sliced(identity(source), 8, len(source)),
    ]
    joined = concat(parts, len(source))
    assert joined.text == "hello three dollars world"
    assert joined.source_span(6, 19) == (6, 8)
    assert joined.source_span(20, 25) == (9, 14)
    assert joined.source_span(0, 5) == (0, 5)


def test_an_empty_replacement_is_nothing() -> None:
    assert replacement("", 3, 5, 10).text == ""
    assert concat([replacement("", 3, 5, 10)], 10).pieces == ()


def normalize_like(source: str) -> Mapped:
    """``$3`` → ``three dollars``, the rest kept (what normalization does, by hand)."""
    builder = MapBuilder(source)
    start = source.index("$3")
    builder.keep(0, start)
    builder.replace(start, start + 2, "three dollars")
    builder.keep(start + 2, len(source))
    return builder.build()


def test_translate_replaces_listed_characters_one_by_one() -> None:
    mapped = translate("a[b]\nc", {"[": "(", "]": ")", "\n": " "})
    assert mapped.text == "a(b) c"
    assert mapped.source_span(1, 2) == (1, 2) and mapped.source_span(5, 6) == (5, 6)
