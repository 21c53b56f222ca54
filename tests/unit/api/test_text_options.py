"""Every front's text options: the lexicons a request names (or its tenant's default),
resolved once per request and briefly cached."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from voicelane.api.text_options import TextOptionsResolver
from voicelane.common.errors import InvalidInputError
from voicelane.core.lexicon import Lexicon, LexiconEntry

ENTRY = LexiconEntry(("W3C",), alias="World Wide Web Consortium")


class Lookup:
    """The ledger's ``lexicons.resolve``, recorded: tenant acme has a default lexicon."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[str, ...] | None]] = []

    def __call__(self, tenant: str, names: Sequence[str] | None) -> tuple[Lexicon, tuple[str, ...]]:
        self.calls.append((tenant, None if names is None else tuple(names)))
        if names is None:
            return (Lexicon((ENTRY,)), ("house",)) if tenant == "acme" else (Lexicon(), ())
        for name in names:
            if name != "house":
                raise InvalidInputError(f"unknown lexicon {name!r}", field="lexicons")
        return Lexicon((ENTRY,)), tuple(names)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_unset_lexicons_mean_the_tenant_s_default() -> None:
    lookup = Lookup()
    options = await TextOptionsResolver(lookup).resolve("acme")
    assert options.lexicon.entries == (ENTRY,) and options.lexicon_names == ("house",)
    assert options.normalize and options.ssml is None
    other = await TextOptionsResolver(lookup).resolve("globex")
    assert not other.lexicon and other.lexicon_names == ()


@pytest.mark.anyio
async def test_an_empty_list_means_none_without_a_lookup() -> None:
    lookup = Lookup()
    options = await TextOptionsResolver(lookup).resolve("acme", lexicons=[], normalize=False)
    assert not options.lexicon and not options.normalize
    assert lookup.calls == []


@pytest.mark.anyio
async def test_named_lexicons_are_resolved_and_an_unknown_one_refused() -> None:
    resolver = TextOptionsResolver(Lookup())
    options = await resolver.resolve("acme", lexicons=["house"], ssml=True)
    assert options.lexicon_names == ("house",) and options.ssml is True
    with pytest.raises(InvalidInputError) as refused:
        await resolver.resolve("acme", lexicons=["nope"])
    assert refused.value.field == "lexicons"


@pytest.mark.anyio
async def test_a_resolution_is_cached_briefly_per_tenant_and_names() -> None:
    lookup = Lookup()
    resolver = TextOptionsResolver(lookup, ttl_s=60)
    for _ in range(3):
        await resolver.resolve("acme")
    await resolver.resolve("globex")
    assert lookup.calls == [("acme", None), ("globex", None)]
    expired = TextOptionsResolver(lookup := Lookup(), ttl_s=0)
    await expired.resolve("acme")
    await expired.resolve("acme")
    assert len(lookup.calls) == 2


@pytest.mark.anyio
async def test_without_a_lexicon_store_a_named_lexicon_is_refused() -> None:
    assert not (await TextOptionsResolver(None).resolve("acme")).lexicon
    with pytest.raises(InvalidInputError) as refused:
        await TextOptionsResolver(None).resolve("acme", lexicons=["house"])
    assert refused.value.field == "lexicons"
