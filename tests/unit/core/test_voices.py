"""Tenant voices (voicelane.core.voices): the record and its JSON, names, the mix grammar
(text and JSON), flattening mixes of voices into speakers, and resolving a request's voice."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from voicelane.common.errors import InvalidInputError, UnknownVoiceError
from voicelane.core.speaker_embedding import encode_spk_emb
from voicelane.core.speakers import SpeakerDef, SpeakerPart
from voicelane.core.voices import (
    MAX_MIX_PARTS,
    MAX_MIX_SOURCES,
    MixPart,
    TenantVoice,
    VoiceClip,
    check_description,
    check_spk_emb,
    check_transcript,
    check_voice_name,
    flatten_mix,
    format_mix,
    is_mix,
    mix_from_json,
    parse_clip_ref,
    parse_mix,
    resolve_voice,
    to_speaker,
)

EMB = encode_spk_emb([(n % 7 - 3) / 10 for n in range(768)])
"""A real ChatTTS spk_emb string (768 values: the official weights' size)."""
SHA = "ab" * 32
CLIP = VoiceClip(SHA, "Hello there.", 5.0, 30_000)


def seed(name: str, n: int, engine: str = "chattts") -> TenantVoice:
    return TenantVoice(name, engine, "seed", seed=n)


ALICE = seed("alice", 42)
BOB = TenantVoice("bob", "chattts", "embedding", spk_emb=EMB)
CLARA = TenantVoice("clara", "chattts", "clip", clip=CLIP)
DUO = TenantVoice(
    "duo",
    "chattts",
    "mix",
    mix=(MixPart("alice", 3), MixPart("seed:7")),
    mix_sources=(("seed:42", 0.75), ("seed:7", 0.25)),
)
PIPER = TenantVoice("pia", "piper", "mix", mix=(MixPart("x"),), mix_sources=(("x", 1.0),))
VOICES = {v.name: v for v in (ALICE, BOB, CLARA, DUO, PIPER)}


# ---- the mix grammar ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("alice(2)+bob(1)", [("alice", 2.0), ("bob", 1.0)]),
        ("alice+bob", [("alice", 1.0), ("bob", 1.0)]),
        ("seed:42(2)+alice", [("seed:42", 2.0), ("alice", 1.0)]),
        ("chattts:seed:7(0.5)", [("chattts:seed:7", 0.5)]),
        (" alice ( 1.5 ) + bob ", [("alice", 1.5), ("bob", 1.0)]),
        ("a(.25)+b(100)+c(0.01)", [("a", 0.25), ("b", 100.0), ("c", 0.01)]),
        ("en_US-joe-medium(3)+gmw/en-us", [("en_US-joe-medium", 3.0), ("gmw/en-us", 1.0)]),
    ],
)
def test_mixes_parse(text: str, parts: list[tuple[str, float]]) -> None:
    assert [(p.voice, p.weight) for p in parse_mix(text)] == parts
    assert is_mix(text) or len(parts) == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "at least one voice"),
        ("   ", "at least one voice"),
        ("a++b", "part 2 of the mix is empty"),
        ("a+", "part 2 of the mix is empty"),
        ("+a", "part 1 of the mix is empty"),
        ("a(2", "part 1 'a(2' is not voice or voice(weight)"),
        ("a2)", "is not voice or voice(weight)"),
        ("a(2)(3)", "is not voice or voice(weight)"),
        ("a b+c", "part 1 'a b' is not voice"),
        ("(2)+a", "part 1 '(2)' is not voice"),
        ("a(x)", "the weight of 'a' is 'x', not a decimal number"),
        ("a(-1)", "not a decimal number"),
        ("a(1e3)", "not a decimal number"),
        ("a()", "the weight of 'a' is '', not a decimal number"),
        ("a(0)", "the weight of 'a' is 0; weights go from 0.01 to 100"),
        ("a(100.5)", "weights go from 0.01 to 100"),
        ("a+b+a", "'a' is named twice in the mix"),
        ("+".join(f"v{n}" for n in range(MAX_MIX_PARTS + 1)), "a mix of 9 voices; at most 8"),
        ("a" * 1025, "at most 1,024"),
    ],
)
def test_malformed_mixes_are_refused_naming_the_voice(text: str, message: str) -> None:
    with pytest.raises(InvalidInputError) as error:
        parse_mix(text)
    assert error.value.field == "voice"
    assert error.value.message.startswith("voice")
    assert message in error.value.message


def test_eight_parts_are_allowed() -> None:
    assert len(parse_mix("+".join(f"v{n}" for n in range(MAX_MIX_PARTS)))) == MAX_MIX_PARTS


def test_the_text_form_reads_back() -> None:
    parts = parse_mix("alice(2)+seed:7+bob(0.5)")
    assert format_mix(parts) == "alice(2)+seed:7+bob(0.5)"
    assert parse_mix(format_mix(parts)) == parts


def test_the_json_form() -> None:
    parts = mix_from_json([{"voice": "alice", "weight": 2}, {"voice": "seed:7"}])
    assert parts == (MixPart("alice", 2.0), MixPart("seed:7", 1.0))
    assert mix_from_json("alice(2)+seed:7") == parts  # the text form, in a JSON string


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "a mix is a list"),
        ({"voice": "a"}, "a mix is a list"),
        (3, "a mix is a list"),
        (["alice"], "mix.0: a part is an object"),
        ([{"voice": "a", "wieght": 2}], "mix.0: a part is an object"),
        ([{"weight": 2}], "mix.0: 'voice' must name one voice"),
        ([{"voice": "a(2)"}], "mix.0: 'voice' must name one voice"),
        ([{"voice": "a b"}], "mix.0: 'voice' must name one voice"),
        ([{"voice": 7}], "mix.0: 'voice' must name one voice"),
        ([{"voice": "a", "weight": True}], "mix.0: 'weight' must be a number"),
        ([{"voice": "a", "weight": "2"}], "mix.0: 'weight' must be a number"),
        ([{"voice": "a", "weight": 0}], "weights go from"),
        ([{"voice": "a", "weight": float("inf")}], "weights go from"),
        ([{"voice": "a"}, {"voice": "a"}], "'a' is named twice"),
        ([{"voice": f"v{n}"} for n in range(9)], "at most 8"),
    ],
)
def test_malformed_json_mixes_are_refused_naming_the_mix(data: object, message: str) -> None:
    with pytest.raises(InvalidInputError) as error:
        mix_from_json(data)
    assert error.value.field == "mix"
    assert message in error.value.message


# ---- names and fields -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["alice", "a", "0", "my-voice_2", "x" * 64])
def test_voice_names(name: str) -> None:
    assert check_voice_name(name) == name


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Alice", "is not a voice name"),
        ("seed:42", "is not a voice name"),
        ("-a", "is not a voice name"),
        ("_a", "is not a voice name"),
        ("", "is not a voice name"),
        ("x" * 65, "is not a voice name"),
        ("a b", "is not a voice name"),
        ("auto", "'auto' is reserved"),
        ("custom", "'custom' is reserved"),
    ],
)
def test_bad_voice_names(name: str, message: str) -> None:
    with pytest.raises(InvalidInputError) as error:
        check_voice_name(name)
    assert error.value.field == "name" and message in error.value.message


def test_spk_emb_must_look_like_an_embedding() -> None:
    assert check_spk_emb(f"  {EMB}\n") == EMB
    for bad, message in [
        ("", "non-empty"),
        (None, "non-empty"),
        ("hello", "not a ChatTTS speaker embedding"),
        ("\u3d02" + EMB, "not a ChatTTS speaker embedding"),  # the end marker, first
        ("\u4e00" * 300, "not a ChatTTS speaker embedding"),  # base16384 text, no embedding
        (EMB + "x", "not a ChatTTS speaker embedding"),
        ("\u4e00" * 16_385, "at most 16,384"),
    ]:
        with pytest.raises(InvalidInputError) as error:
            check_spk_emb(bad)
        assert error.value.field == "spk_emb" and message in error.value.message, bad


def test_transcripts_and_descriptions() -> None:
    assert check_transcript("  Hello,\n  world. ") == "Hello, world."
    assert check_description(None) == "" and check_description(" a  b ") == "a b"
    calls: list[tuple[Callable[[], str], str]] = [
        (lambda: check_transcript(""), "transcript"),
        (lambda: check_transcript("a\x00b"), "transcript"),
        (lambda: check_transcript("x" * 1001), "transcript"),
        (lambda: check_description(5), "description"),
        (lambda: check_description("x" * 257), "description"),
    ]
    for call, field in calls:
        with pytest.raises(InvalidInputError) as error:
            call()
        assert error.value.field == field


def test_clip_references() -> None:
    assert parse_clip_ref(f"acme/{SHA}") == ("acme", SHA)
    for bad in [SHA, f"/{SHA}", "acme/abc", f"a:b/{SHA}", f"acme/{SHA.upper()}"]:
        with pytest.raises(ValueError):
            parse_clip_ref(bad)


# ---- the record -----------------------------------------------------------------------------


@pytest.mark.parametrize("voice", [ALICE, BOB, CLARA, DUO])
def test_every_kind_round_trips_through_json(voice: TenantVoice) -> None:
    stored = dataclasses.replace(voice, description="a b", created_at=12.5)
    assert TenantVoice.from_json(stored.to_json()) == stored
    assert stored.view()["kind"] == voice.kind and stored.view()["name"] == voice.name


def test_the_view_shows_a_mix_as_written() -> None:
    view = DUO.view()
    assert view["mix"] == [{"voice": "alice", "weight": 3}, {"voice": "seed:7", "weight": 1.0}]
    assert view["mix_text"] == "alice(3)+seed:7"
    assert "mix_sources" not in view
    assert CLARA.view()["clip"] == {
        "sha256": SHA,
        "transcript": "Hello there.",
        "duration_s": 5.0,
        "size_bytes": 30_000,
    }


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": "seed"},
        {"kind": "seed", "seed": 1, "spk_emb": EMB},
        {"kind": "embedding", "seed": 1},
        {"kind": "clip", "spk_emb": EMB},
        {"kind": "mix", "mix": (MixPart("a"),)},
        {"kind": "seed", "seed": 1, "mix_sources": (("seed:1", 1.0),)},
        {"kind": "voice", "seed": 1},
    ],
)
def test_a_record_holds_exactly_its_kind(fields: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        TenantVoice("v", "chattts", **fields)  # type: ignore[arg-type]


# ---- flattening and resolution --------------------------------------------------------------


def test_tenant_voices_become_their_speakers() -> None:
    assert to_speaker(ALICE, tenant="acme") == SpeakerDef(parts=(SpeakerPart("seed:42", 1.0),))
    assert to_speaker(BOB, tenant="acme") == SpeakerDef(parts=(SpeakerPart("emb:" + EMB, 1.0),))
    assert to_speaker(CLARA, tenant="acme") == SpeakerDef(
        clip_ref=f"acme/{SHA}", clip_transcript="Hello there."
    )
    assert to_speaker(DUO, tenant="acme") == SpeakerDef.mix([("seed:42", 3), ("seed:7", 1)])


def test_a_mix_flattens_with_weights_multiplied() -> None:
    parts = parse_mix("duo(2)+bob+seed:42(2)+chattts:seed:9")
    flat = flatten_mix(parts, lookup=VOICES, engine="chattts")
    # duo (2) = alice's seed:42 x 0.75 + seed:7 x 0.25; seed:42 again (2); bob; seed:9
    total = 2 + 1 + 2 + 1
    assert dict(flat.sources) == pytest.approx(
        {
            "seed:42": (1.5 + 2) / total,
            "seed:7": 0.5 / total,
            "emb:" + EMB: 1 / total,
            "seed:9": 1 / total,
        },
        abs=1e-6,  # weights are kept to 6 decimals
    )
    assert flat.engine == "chattts"
    assert flat.engine_voices == ("seed:42", "seed:9")  # the prefix taken off


def test_a_clip_voice_cannot_be_mixed() -> None:
    with pytest.raises(InvalidInputError) as error:
        flatten_mix(parse_mix("alice+clara"), lookup=VOICES, engine="chattts")
    assert error.value.field == "voice" and "'clara' is a clip voice" in error.value.message


def test_a_mix_is_of_one_engine() -> None:
    with pytest.raises(InvalidInputError, match="'pia' is a voice of the piper engine"):
        flatten_mix(parse_mix("alice+pia"), lookup=VOICES, engine="chattts")
    with pytest.raises(InvalidInputError, match="'alice' is a chattts voice and 'pia' a piper"):
        flatten_mix(parse_mix("alice+pia"), lookup=VOICES)


def test_auto_and_inline_embeddings_are_not_mixed() -> None:
    for text, message in [("alice+auto", "'auto' picks"), ("alice+emb:x", "embedding is mixed")]:
        with pytest.raises(InvalidInputError, match=message):
            flatten_mix(parse_mix(text), lookup=VOICES, engine="chattts")


def test_a_mix_flattens_to_a_bounded_number_of_speakers() -> None:
    wide = {
        f"m{n}": TenantVoice(
            f"m{n}",
            "chattts",
            "mix",
            mix=(MixPart("x"),),
            mix_sources=tuple((f"seed:{n * 100 + k}", 0.125) for k in range(8)),
        )
        for n in range(5)
    }
    assert len(flatten_mix(parse_mix("m0+m1+m2+m3"), lookup=wide).sources) == MAX_MIX_SOURCES
    with pytest.raises(InvalidInputError, match="flattens to 40 speakers; at most 32"):
        flatten_mix(parse_mix("m0+m1+m2+m3+m4"), lookup=wide)


def test_a_request_voice_resolves() -> None:
    lookup = VOICES.get
    assert resolve_voice("auto", tenant="acme", lookup=lookup) is None
    assert resolve_voice("seed:42", tenant="acme", lookup=lookup) is None
    assert resolve_voice("en-us", tenant="acme", lookup=lookup) is None  # no such tenant voice
    own = resolve_voice("alice", tenant="acme", lookup=lookup, engine="chattts")
    assert own is not None and own.engine == "chattts" and own.engine_voices == ()
    assert own.speaker == to_speaker(ALICE, tenant="acme")
    clip = resolve_voice("clara", tenant="acme", lookup=lookup)
    assert clip is not None and clip.speaker.clip_ref == f"acme/{SHA}"

    mixed = resolve_voice("alice(2)+bob(1)", tenant="acme", lookup=lookup)
    assert mixed is not None and mixed.engine == "chattts"
    assert mixed.speaker == SpeakerDef.mix([("seed:42", 2), ("emb:" + EMB, 1)])

    engine_only = resolve_voice("seed:1(3)+seed:2", tenant="acme", lookup=lookup)
    assert engine_only is not None and engine_only.engine is None
    assert engine_only.engine_voices == ("seed:1", "seed:2")
    assert engine_only.speaker == SpeakerDef.mix([("seed:1", 3), ("seed:2", 1)])


def test_a_tenant_voice_of_another_engine_is_unknown_to_this_one() -> None:
    with pytest.raises(UnknownVoiceError) as error:
        resolve_voice("alice", tenant="acme", lookup=VOICES, engine="piper")
    assert error.value.field == "voice" and "chattts engine, not of piper" in error.value.message
