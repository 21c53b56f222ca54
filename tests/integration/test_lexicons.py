"""The tenants' lexicons on a real redis-server (voicelane.core.ledger.lexicons): create,
replace, list, read, delete; the default; the bounds per tenant; resolving what a request
applies; and that no tenant can reach another's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from voicelane.common.errors import InvalidInputError, NotFoundError, TextTooLargeError
from voicelane.core.ledger import Ledger
from voicelane.core.ledger.keys import FAMILIES, LEXICON_DEFAULT, LEXICON_INFO, LEXICONS
from voicelane.core.ledger.lexicons import (
    MAX_TENANT_BYTES,
    MAX_TENANT_ENTRIES,
    MAX_TENANT_LEXICONS,
    Lexicons,
)
from voicelane.core.lexicon import Lexicon, LexiconEntry

pytestmark = pytest.mark.integration


@pytest.fixture
def lexicons(redis_url: str) -> Iterator[Lexicons]:
    ledger = Ledger.from_url(redis_url)
    yield ledger.lexicons
    ledger.redis.close()


def lexicon(*pairs: tuple[str, str]) -> Lexicon:
    return Lexicon(tuple(LexiconEntry((grapheme,), alias=said) for grapheme, said in pairs))


def words(count: int, prefix: str = "w", alias: str = "x") -> Lexicon:
    return Lexicon(tuple(LexiconEntry((f"{prefix}{n}",), alias=alias) for n in range(count)))


def test_create_read_replace_list_delete(lexicons: Lexicons) -> None:
    brands = lexicon(("GIF", "jif"), ("SQL", "sequel"))
    info, created = lexicons.put("acme", "brands", brands, now=100.0)
    assert created and (info.name, info.entries, info.updated_at) == ("brands", 2, 100.0)
    assert info.size_bytes == len(brands.to_json().encode())
    stored = lexicons.get("acme", "brands")
    assert stored.lexicon == brands and stored.info == info and not stored.default

    replacement = lexicon(("GIF", "gif"))
    info, created = lexicons.put("acme", "brands", replacement, now=200.0)
    assert not created and info.entries == 1
    assert lexicons.get("acme", "brands").lexicon == replacement
    lexicons.put("acme", "names", lexicon(("Nguyen", "win")), now=150.0)

    listing = lexicons.list("acme")
    assert [(i.name, i.entries, i.updated_at) for i in listing.lexicons] == [
        ("brands", 1, 200.0),
        ("names", 1, 150.0),
    ]
    assert listing.default is None and listing.entries == 2

    assert lexicons.delete("acme", "brands") is False
    with pytest.raises(NotFoundError):
        lexicons.get("acme", "brands")
    with pytest.raises(NotFoundError):
        lexicons.delete("acme", "brands")
    assert [i.name for i in lexicons.list("acme").lexicons] == ["names"]


def test_the_default_is_set_cleared_and_dropped_with_its_lexicon(lexicons: Lexicons) -> None:
    lexicons.put("acme", "names", lexicon(("Nguyen", "win")))
    lexicons.put("acme", "brands", lexicon(("GIF", "jif")))
    with pytest.raises(NotFoundError):
        lexicons.set_default("acme", "nope")
    assert lexicons.default("acme") is None

    lexicons.set_default("acme", "names")
    assert lexicons.default("acme") == "names" == lexicons.list("acme").default
    assert lexicons.get("acme", "names").default
    assert not lexicons.clear_default("acme", "brands")  # not the default: unchanged
    assert lexicons.default("acme") == "names"
    assert lexicons.clear_default("acme", "names") and lexicons.default("acme") is None
    assert not lexicons.clear_default("acme")

    lexicons.set_default("acme", "brands")
    assert lexicons.delete("acme", "names") is False and lexicons.default("acme") == "brands"
    assert lexicons.delete("acme", "brands") is True
    assert lexicons.default("acme") is None
    assert lexicons.redis.keys("*") == []  # nothing left behind


def test_names_are_checked(lexicons: Lexicons) -> None:
    for bad in ("", "a b", "a:b", "x" * 65, "naïve", "../etc"):
        with pytest.raises(InvalidInputError) as caught:
            lexicons.put("acme", bad, lexicon(("a", "b")))
        assert caught.value.field == "name"
    lexicons.put("acme", "A-z_09" + "x" * 58, lexicon(("a", "b")))


def test_a_tenant_keeps_at_most_so_many_lexicons(lexicons: Lexicons) -> None:
    for n in range(MAX_TENANT_LEXICONS):
        lexicons.put("acme", f"l{n}", lexicon(("a", "b")))
    with pytest.raises(TextTooLargeError, match="21 lexicons; a tenant keeps at most 20") as caught:
        lexicons.put("acme", "one-more", lexicon(("a", "b")))
    assert caught.value.http_status == 413 and caught.value.field == "lexicon"
    lexicons.put("acme", "l0", lexicon(("c", "d")))  # replacing one is still fine
    lexicons.put("other", "l0", lexicon(("a", "b")))  # another tenant has its own bound
    assert len(lexicons.list("acme").lexicons) == MAX_TENANT_LEXICONS


def test_a_tenant_keeps_at_most_so_many_entries_in_all(lexicons: Lexicons) -> None:
    lexicons.put("acme", "big", words(MAX_TENANT_ENTRIES - 10))
    before = lexicons.list("acme")
    with pytest.raises(TextTooLargeError, match="5,001 entries in all; the limit is 5,000"):
        lexicons.put("acme", "small", words(11, "v"))
    assert lexicons.list("acme") == before  # nothing written
    lexicons.put("acme", "small", words(10, "v"))
    # a replacement counts its new size, not old + new
    lexicons.put("acme", "big", words(MAX_TENANT_ENTRIES - 10, "u"))


def test_a_tenant_keeps_at_most_so_many_bytes_in_all(lexicons: Lexicons) -> None:
    long_alias = "y" * 190
    first = words(2000, alias=long_alias)  # about 400 KB of entries
    assert len(first.to_json().encode()) < MAX_TENANT_BYTES
    lexicons.put("acme", "first", first)
    with pytest.raises(TextTooLargeError, match="bytes of entries in all; the limit is 524,288"):
        lexicons.put("acme", "second", words(1000, "v", alias=long_alias))
    assert [i.name for i in lexicons.list("acme").lexicons] == ["first"]
    assert lexicons.list("acme").size_bytes <= MAX_TENANT_BYTES


def test_resolve_merges_named_lexicons_in_order(lexicons: Lexicons) -> None:
    lexicons.put("acme", "base", lexicon(("GIF", "gif"), ("SQL", "sequel")))
    lexicons.put("acme", "house", lexicon(("GIF", "jif")))
    merged, names = lexicons.resolve("acme", ["base", "house"])
    assert names == ("base", "house")
    assert {lexicons_said(merged, w) for w in ("GIF", "SQL")} == {"jif", "sequel"}
    reversed_order, _ = lexicons.resolve("acme", ("house", "base"))
    assert lexicons_said(reversed_order, "GIF") == "gif"  # the later one wins

    assert lexicons.resolve("acme", []) == (Lexicon(), ())
    assert lexicons.resolve("acme", None) == (Lexicon(), ())  # no default set
    lexicons.set_default("acme", "house")
    assert lexicons.resolve("acme", None) == (lexicon(("GIF", "jif")), ("house",))
    assert lexicons.resolve("acme", []) == (Lexicon(), ())  # [] is none, even with a default


def lexicons_said(lexicon: Lexicon, word: str) -> str | None:
    [hit] = lexicon.find(word)
    return hit.entry.alias


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["base", "nope"], "lexicons: unknown lexicon 'nope'"),
        (["bad name"], "unknown lexicon 'bad name'"),
        (["base", "base"], "'base' is named twice"),
        ([f"l{n}" for n in range(MAX_TENANT_LEXICONS + 1)], "21 named; at most 20"),
    ],
)
def test_resolve_refuses_what_the_tenant_does_not_have(
    lexicons: Lexicons, names: list[str], message: str
) -> None:
    lexicons.put("acme", "base", lexicon(("a", "b")))
    with pytest.raises(InvalidInputError) as caught:
        lexicons.resolve("acme", names)
    assert caught.value.field == "lexicons" and message in caught.value.message
    with pytest.raises(TypeError):
        lexicons.resolve("acme", "base")


def test_one_tenant_never_reaches_anothers_lexicons(lexicons: Lexicons) -> None:
    lexicons.put("acme", "secret", lexicon(("Project X", "the project")))
    lexicons.set_default("acme", "secret")

    assert lexicons.list("other").lexicons == () and lexicons.list("other").default is None
    with pytest.raises(NotFoundError):
        lexicons.get("other", "secret")
    with pytest.raises(NotFoundError):
        lexicons.delete("other", "secret")
    with pytest.raises(NotFoundError):
        lexicons.set_default("other", "secret")
    assert not lexicons.clear_default("other", "secret")
    with pytest.raises(InvalidInputError, match="unknown lexicon 'secret'"):
        lexicons.resolve("other", ["secret"])
    assert lexicons.resolve("other", None) == (Lexicon(), ())  # acme's default is acme's

    # the same name is two lexicons: each tenant gets its own
    lexicons.put("other", "secret", lexicon(("Project X", "something else")))
    assert lexicons_said(lexicons.resolve("acme", ["secret"])[0], "Project X") == "the project"
    assert lexicons_said(lexicons.resolve("other", ["secret"])[0], "Project X") == "something else"
    lexicons.delete("other", "secret")
    assert lexicons.get("acme", "secret").default  # untouched


def test_the_keys_are_the_tenants_own_families(lexicons: Lexicons) -> None:
    lexicons.put("acme", "names", lexicon(("a", "b")))
    lexicons.set_default("acme", "names")
    keys = sorted(bytes(key).decode() for key in lexicons.redis.scan_iter())
    assert keys == sorted(
        [LEXICONS.key("acme"), LEXICON_INFO.key("acme"), LEXICON_DEFAULT.key("acme")]
    )
    for key in keys:
        assert [f for f in FAMILIES if f.matches(key)] != []
        assert lexicons.redis.ttl(key) == -1  # kept until deleted
