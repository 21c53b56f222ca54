"""voicelane.api.voice_options: a request's voice resolved at submission — engine voices
without a lookup, tenant voices and mixes through it, kept for a second."""

from __future__ import annotations

import asyncio

import pytest

from voicelane.api.voice_options import VoiceResolver
from voicelane.common.errors import InvalidInputError
from voicelane.core.speakers import SpeakerDef
from voicelane.core.voices import ResolvedVoice

ALICE = ResolvedVoice("chattts", SpeakerDef.mix([("seed:42", 1)]))


class Lookup:
    """A stand-in for the ledger's ``voices.resolve`` that counts its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str | None]] = []

    def __call__(self, tenant: str, voice: str, engine: str | None) -> ResolvedVoice | None:
        self.calls.append((tenant, voice, engine))
        if voice == "broken+":
            raise InvalidInputError("voice: part 2 of the mix is empty", field="voice")
        return ALICE if (tenant, voice) == ("acme", "alice") else None


def test_engine_voices_are_answered_without_a_lookup() -> None:
    lookup = Lookup()
    resolver = VoiceResolver(lookup)
    for voice in [None, "", "auto", "seed:42", "chattts:seed:7", "Not A Name", "custom"]:
        assert asyncio.run(resolver.resolve("acme", voice)) is None
    assert lookup.calls == []


def test_tenant_voices_and_mixes_are_looked_up_and_kept_a_while() -> None:
    lookup = Lookup()
    resolver = VoiceResolver(lookup, ttl_s=60)

    async def run() -> None:
        assert await resolver.resolve("acme", "alice", engine="chattts") == ALICE
        assert await resolver.resolve("acme", "alice", engine="chattts") == ALICE
        assert await resolver.resolve("other", "alice") is None
        assert await resolver.resolve("acme", "en-us") is None  # voice-name shaped: asked
        assert await resolver.resolve("acme", "alice(2)+seed:1") is None

    asyncio.run(run())
    assert lookup.calls == [
        ("acme", "alice", "chattts"),
        ("other", "alice", None),
        ("acme", "en-us", None),
        ("acme", "alice(2)+seed:1", None),
    ]


def test_an_expired_answer_is_asked_again() -> None:
    lookup = Lookup()
    resolver = VoiceResolver(lookup, ttl_s=0)
    asyncio.run(resolver.resolve("acme", "alice"))
    asyncio.run(resolver.resolve("acme", "alice"))
    assert len(lookup.calls) == 2


def test_a_malformed_mix_is_the_lookups_error() -> None:
    with pytest.raises(InvalidInputError, match="part 2 of the mix is empty"):
        asyncio.run(VoiceResolver(Lookup()).resolve("acme", "broken+"))


def test_a_front_without_a_voice_store_resolves_nothing() -> None:
    assert asyncio.run(VoiceResolver(None).resolve("acme", "alice")) is None
