"""The tenants' voices: created, listed, read, deleted, resolved for a request, and a clip
voice's reference clip read back as PCM.

Every key is the tenant's own (``vl:tenant:{tenant}:voices``, a hash of the records, and
``vl:tenant:{tenant}:voice_clip:{sha256}``, each reference clip's audio: :mod:`.keys`), and
every method takes the tenant: one tenant can never list, read, delete or use another's voice
— a name it does not own is unknown (404 over REST). The keys live until the tenant deletes
the voices (:attr:`.keys.Lifetime.KEPT`); Redis keeps them durably (AOF).

A voice is created once under its name (a second create of the name is
:class:`~voicelane.common.errors.VoiceExistsError`, 409: delete it first); the record and its
clip are written together, after the tenant's count is checked, in one step
(``voice_create.lua``): past ``max_voices`` nothing is written and
:class:`~voicelane.common.errors.TextTooLargeError` says so (413, permanent: deleting a voice
lifts it). Deleting a voice deletes its clip, unless another of the tenant's voices was made
from the very same stored clip (``voice_delete.lua``).

A job or stream already submitted with a clip voice names the clip (``{tenant}/{sha256}``);
deleting the voice before the worker reads the clip leaves :meth:`Voices.clip_pcm` None for
it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import redis

from voicelane.common.errors import NotFoundError, TextTooLargeError, VoiceExistsError
from voicelane.core.ledger.keys import VOICE_CLIP, VOICES
from voicelane.core.ledger.lua import register
from voicelane.core.voices import (
    ResolvedVoice,
    TenantVoice,
    check_voice_name,
    is_mix,
    is_voice_name,
    parse_clip_ref,
    parse_mix,
    resolve_voice,
)

if TYPE_CHECKING:
    from voicelane.common.audio.pcm import PcmF32

__all__ = ["Voices"]


class Voices:
    """The tenants' voices in Redis. Safe to share between threads."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._create = register(client, "voice_create")
        self._delete = register(client, "voice_delete")

    # ---------------------------------------------------------------- writing
    def create(
        self,
        tenant: str,
        voice: TenantVoice,
        *,
        max_voices: int,
        clip_audio: bytes | None = None,
    ) -> int:
        """Store a new voice (and a clip voice's audio, ``clip_audio``, whose SHA-256 its
        record holds); the tenant's voices held now. VoiceExistsError when the tenant has a
        voice of that name; TextTooLargeError when it holds ``max_voices`` already."""
        check_voice_name(voice.name)
        if (voice.clip is None) != (clip_audio is None):
            raise ValueError("a clip voice is created with its clip, and only a clip voice")
        keys = [VOICES.key(tenant)]
        args: list[str | bytes | int] = [voice.name, voice.to_json(), max_voices]
        if voice.clip is not None and clip_audio is not None:
            keys.append(VOICE_CLIP.key(tenant, voice.clip.sha256))
            args.append(clip_audio)
        outcome, held = cast(list[Any], self._create(keys=keys, args=args))
        outcome = outcome.decode() if isinstance(outcome, bytes) else str(outcome)
        if outcome == "created":
            return int(held)
        if outcome == "exists":
            raise VoiceExistsError(
                f"name: the tenant has a voice named {voice.name!r} already (delete it first)",
                field="name",
            )
        raise TextTooLargeError(
            f"the tenant has {int(held)} voices; a tenant keeps at most {max_voices} "
            "(delete a voice first)"
        )

    def delete(self, tenant: str, name: str) -> None:
        """Delete the tenant's voice ``name`` (and its clip); NotFoundError if it has none of
        that name."""
        check_voice_name(name)
        done = self._delete(keys=[VOICES.key(tenant)], args=[name, VOICE_CLIP.key(tenant, "")])
        if not int(cast(int, done)):
            raise _unknown(name)

    # ---------------------------------------------------------------- reading
    def get(self, tenant: str, name: str) -> TenantVoice:
        """The tenant's voice ``name``; NotFoundError if it has none of that name."""
        check_voice_name(name)
        raw = cast(bytes | None, self.redis.hget(VOICES.key(tenant), name))
        if raw is None:
            raise _unknown(name)
        return TenantVoice.from_json(raw)

    def list(self, tenant: str) -> tuple[TenantVoice, ...]:
        """The tenant's voices, by name."""
        raw = cast(dict[bytes, bytes], self.redis.hgetall(VOICES.key(tenant)))
        return tuple(sorted((TenantVoice.from_json(r) for r in raw.values()), key=_by_name))

    def count(self, tenant: str) -> int:
        return int(self.redis.hlen(VOICES.key(tenant)))

    def find(self, tenant: str, names: Sequence[str]) -> dict[str, TenantVoice]:
        """Those of ``names`` the tenant has a voice of (one round trip)."""
        wanted = [name for name in dict.fromkeys(names) if is_voice_name(name)]
        if not wanted:
            return {}
        found = cast(list[bytes | None], self.redis.hmget(VOICES.key(tenant), wanted))
        return {
            name: TenantVoice.from_json(raw)
            for name, raw in zip(wanted, found, strict=True)
            if raw is not None
        }

    def resolve(
        self, tenant: str, voice: str, *, engine: str | None = None, field: str = "voice"
    ) -> ResolvedVoice | None:
        """A request's ``voice`` as the speaker it stands for — one of the tenant's voices or
        a mix (:func:`voicelane.core.voices.resolve_voice`) — read in one round trip; None
        for anything else (an engine's own voice id): the request goes on as it is."""
        if is_mix(voice):
            names = [part.voice for part in parse_mix(voice, field=field)]
        elif is_voice_name(voice):
            names = [voice]
        else:
            return None
        found = self.find(tenant, names)
        return resolve_voice(voice, tenant=tenant, lookup=found, engine=engine, field=field)

    # ---------------------------------------------------------------- clips
    def clip_audio(self, ref: str) -> bytes | None:
        """A stored clip (Ogg Opus) by its reference ``{tenant}/{sha256}``; None when it is
        gone (its voice deleted). ValueError for a malformed reference."""
        tenant, sha256 = parse_clip_ref(ref)
        return cast(bytes | None, self.redis.get(VOICE_CLIP.key(tenant, sha256)))

    def clip_pcm(self, ref: str) -> PcmF32 | None:
        """A stored clip as float32 mono PCM at 24 kHz (what ChatTTS's zero-shot encoder
        takes); None when it is gone. ValueError for a malformed reference."""
        from voicelane.core.voice_clips import decode_clip

        audio = self.clip_audio(ref)
        return decode_clip(audio) if audio is not None else None


def _by_name(voice: TenantVoice) -> str:
    return voice.name


def _unknown(name: str) -> NotFoundError:
    return NotFoundError(f"no voice named {name!r}")
