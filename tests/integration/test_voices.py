"""The tenants' voices on a real redis-server (voicelane.core.ledger.voices): create, read,
list, delete; the bound per tenant, checked atomically; clips stored and deleted with their
last voice; resolving a request's voice; and that no tenant can reach another's."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from voicelane.common.audio import AudioFormat, open_writer, resample
from voicelane.common.errors import (
    InvalidInputError,
    NotFoundError,
    TextTooLargeError,
    VoiceExistsError,
)
from voicelane.core.ledger import Ledger
from voicelane.core.ledger.keys import FAMILIES, VOICE_CLIP, VOICES
from voicelane.core.ledger.voices import Voices
from voicelane.core.speaker_embedding import encode_spk_emb
from voicelane.core.speakers import SpeakerDef
from voicelane.core.voice_clips import StoredClip, prepare_clip
from voicelane.core.voices import MixPart, TenantVoice, VoiceClip

pytestmark = pytest.mark.integration

EMB = encode_spk_emb([(n % 7 - 3) / 10 for n in range(768)])
"""A real ChatTTS spk_emb string (768 values: the official weights' size)."""


@pytest.fixture
def voices(redis_url: str) -> Iterator[Voices]:
    ledger = Ledger.from_url(redis_url)
    yield ledger.voices
    ledger.redis.close()


def clip(duration_s: float = 4.0, pitch_hz: float = 150.0) -> tuple[StoredClip, np.ndarray]:
    """A stored clip of a voice-like tone (from 16 kHz WAV), and that tone at 24 kHz."""
    t = np.arange(int(duration_s * 16_000)) / 16_000
    pcm = (0.3 * np.sin(2 * np.pi * pitch_hz * t) * (0.6 + 0.4 * np.sin(6 * t))).astype(np.float32)
    target = io.BytesIO()
    with open_writer(target, AudioFormat.WAV, 16_000) as writer:
        writer.write(pcm)
    stored = prepare_clip(target.getvalue(), min_s=3, max_s=30, max_bytes=512 * 1024)
    return stored, resample(pcm, 16_000, 24_000)


def clip_voice(name: str, stored: StoredClip) -> TenantVoice:
    return TenantVoice(
        name,
        "chattts",
        "clip",
        clip=VoiceClip(stored.sha256, "Hello there.", stored.duration_s, len(stored.audio)),
    )


def seed_voice(name: str, seed: int = 1) -> TenantVoice:
    return TenantVoice(name, "chattts", "seed", seed=seed, created_at=100.0)


def test_create_read_list_delete(voices: Voices) -> None:
    alice = seed_voice("alice", 42)
    bob = TenantVoice("bob", "chattts", "embedding", spk_emb=EMB, description="calm")
    assert voices.create("acme", alice, max_voices=4) == 1
    assert voices.create("acme", bob, max_voices=4) == 2
    assert voices.get("acme", "alice") == alice and voices.get("acme", "bob") == bob
    assert voices.list("acme") == (alice, bob) and voices.count("acme") == 2
    assert voices.find("acme", ["bob", "nobody", "alice", "Not:A:Name"]) == {
        "bob": bob,
        "alice": alice,
    }

    voices.delete("acme", "alice")
    with pytest.raises(NotFoundError, match="no voice named 'alice'"):
        voices.get("acme", "alice")
    with pytest.raises(NotFoundError):
        voices.delete("acme", "alice")
    assert voices.list("acme") == (bob,)
    voices.delete("acme", "bob")
    assert not voices.redis.exists(VOICES.key("acme"))  # an empty hash is gone


def test_a_name_is_created_once(voices: Voices) -> None:
    voices.create("acme", seed_voice("alice", 1), max_voices=4)
    with pytest.raises(VoiceExistsError) as error:
        voices.create("acme", seed_voice("alice", 2), max_voices=4)
    assert error.value.http_status == 409 and error.value.field == "name"
    assert voices.get("acme", "alice").seed == 1


def test_a_tenant_keeps_a_bounded_number_of_voices(voices: Voices) -> None:
    for n in range(3):
        voices.create("acme", seed_voice(f"v{n}", n), max_voices=3)
    stored, _ = clip()
    with pytest.raises(TextTooLargeError) as error:
        voices.create("acme", clip_voice("one-more", stored), max_voices=3, clip_audio=stored.audio)
    assert error.value.message == (
        "the tenant has 3 voices; a tenant keeps at most 3 (delete a voice first)"
    )
    assert voices.count("acme") == 3
    assert not voices.redis.exists(VOICE_CLIP.key("acme", stored.sha256))  # nor its clip
    voices.create("other", seed_voice("v0"), max_voices=3)  # each tenant its own bound


def test_the_bound_holds_under_concurrent_creates(voices: Voices) -> None:
    created: list[str] = []
    refused: list[str] = []

    def create(name: str) -> None:
        try:
            voices.create("acme", seed_voice(name), max_voices=5)
            created.append(name)
        except TextTooLargeError:
            refused.append(name)

    threads = [threading.Thread(target=create, args=(f"v{n}",)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(created) == 5 and len(refused) == 15
    assert sorted(v.name for v in voices.list("acme")) == sorted(created)


def test_a_clip_round_trips_and_goes_with_its_last_voice(voices: Voices) -> None:
    stored, tone = clip()
    clara = clip_voice("clara", stored)
    voices.create("acme", clara, max_voices=4, clip_audio=stored.audio)
    ref = f"acme/{stored.sha256}"
    assert voices.clip_audio(ref) == stored.audio
    pcm = voices.clip_pcm(ref)
    assert pcm is not None and pcm.dtype == np.float32
    assert len(pcm) == pytest.approx(len(tone), abs=240)  # 24 kHz, within 10 ms
    n = min(len(pcm), len(tone))
    assert float(np.corrcoef(pcm[:n], tone[:n])[0, 1]) > 0.98

    twin = clip_voice("twin", stored)  # another voice of the very same stored clip
    voices.create("acme", twin, max_voices=4, clip_audio=stored.audio)
    voices.delete("acme", "clara")
    assert voices.clip_audio(ref) == stored.audio  # twin still uses it
    voices.delete("acme", "twin")
    assert voices.clip_audio(ref) is None and voices.clip_pcm(ref) is None
    assert voices.redis.keys("vl:tenant:acme:*") == []


def test_a_clip_voice_is_created_with_its_clip_only(voices: Voices) -> None:
    stored, _ = clip()
    with pytest.raises(ValueError):
        voices.create("acme", clip_voice("c", stored), max_voices=4)
    with pytest.raises(ValueError):
        voices.create("acme", seed_voice("s"), max_voices=4, clip_audio=stored.audio)
    with pytest.raises(ValueError, match="not a clip reference"):
        voices.clip_pcm("acme:" + stored.sha256)


def test_a_request_voice_resolves_in_one_read(voices: Voices) -> None:
    stored, _ = clip()
    voices.create("acme", seed_voice("alice", 42), max_voices=8)
    voices.create("acme", clip_voice("clara", stored), max_voices=8, clip_audio=stored.audio)
    duo = TenantVoice(
        "duo",
        "chattts",
        "mix",
        mix=(MixPart("alice", 3), MixPart("seed:7")),
        mix_sources=(("seed:42", 0.75), ("seed:7", 0.25)),
    )
    voices.create("acme", duo, max_voices=8)

    assert voices.resolve("acme", "auto") is None
    assert voices.resolve("acme", "seed:42") is None
    assert voices.resolve("acme", "en-us") is None
    alice = voices.resolve("acme", "alice", engine="chattts")
    assert alice is not None and alice.speaker == SpeakerDef.mix([("seed:42", 1)])
    clara = voices.resolve("acme", "clara")
    assert clara is not None
    assert clara.speaker == SpeakerDef(
        clip_ref=f"acme/{stored.sha256}", clip_transcript="Hello there."
    )
    mixed = voices.resolve("acme", "duo(2)+seed:9(2)")
    assert mixed is not None and mixed.engine == "chattts" and mixed.engine_voices == ("seed:9",)
    assert mixed.speaker == SpeakerDef.mix([("seed:42", 1.5), ("seed:7", 0.5), ("seed:9", 2)])
    with pytest.raises(InvalidInputError, match="'clara' is a clip voice"):
        voices.resolve("acme", "alice+clara")

    # another tenant: none of these are its voices
    assert voices.resolve("other", "alice") is None
    assert voices.resolve("other", "clara") is None
    other_mix = voices.resolve("other", "alice(2)+bob")
    assert other_mix is not None and other_mix.engine is None
    assert other_mix.engine_voices == ("alice", "bob")  # unknown to the engine: refused there


def test_one_tenant_never_reaches_anothers_voices(voices: Voices) -> None:
    stored, _ = clip()
    voices.create("acme", clip_voice("secret", stored), max_voices=4, clip_audio=stored.audio)
    with pytest.raises(NotFoundError):
        voices.get("other", "secret")
    with pytest.raises(NotFoundError):
        voices.delete("other", "secret")
    assert voices.list("other") == () and voices.find("other", ["secret"]) == {}
    assert voices.clip_audio(f"other/{stored.sha256}") is None
    voices.create("other", seed_voice("secret"), max_voices=4)  # the same name: its own
    voices.delete("other", "secret")
    assert voices.get("acme", "secret").kind == "clip"
    assert voices.clip_audio(f"acme/{stored.sha256}") == stored.audio


def test_every_key_is_the_key_tables(voices: Voices) -> None:
    stored, _ = clip()
    voices.create("acme", clip_voice("c", stored), max_voices=4, clip_audio=stored.audio)
    voices.create("acme", seed_voice("s"), max_voices=4)
    keys = [bytes(key).decode() for key in voices.redis.scan_iter()]
    assert sorted(keys) == sorted([VOICES.key("acme"), VOICE_CLIP.key("acme", stored.sha256)])
    for key in keys:
        assert [f for f in FAMILIES if f.matches(key)] in ([VOICES], [VOICE_CLIP])
        assert voices.redis.ttl(key) == -1  # kept: no TTL
