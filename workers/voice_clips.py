"""Reference clips of tenant voices, brought to this worker before their utterances.

A clip voice (zero-shot) travels with its job or stream as a
:class:`~voicelane.core.speakers.SpeakerDef` naming its clip (``{tenant}/{sha256}``); the clip
itself stays in the voice store (:class:`voicelane.core.ledger.voices.Voices`). Before the
first utterance of such a voice, the worker fetches the clip into the engines' clip store
(:data:`voicelane.workers.engines.speaker_clips.CLIPS`), once per worker while it is kept there;
the engine encodes it on its own thread.
"""

from __future__ import annotations

from voicelane.common.errors import UnknownVoiceError
from voicelane.core.ledger.voices import Voices
from voicelane.core.speakers import SpeakerDef
from voicelane.workers.engines.speaker_clips import CLIPS, SpeakerClips


def fetch_clip(speaker: SpeakerDef | None, voices: Voices, clips: SpeakerClips = CLIPS) -> None:
    """Put ``speaker``'s reference clip in ``clips`` unless it is there (or it has none).
    A clip that is gone (its voice was deleted after submission) is a permanent
    :class:`UnknownVoiceError`: the job fails, the stream ends with INVALID_ARGUMENT."""
    if speaker is None or not speaker.clip_ref or speaker.clip_ref in clips:
        return
    pcm = voices.clip_pcm(speaker.clip_ref)
    if pcm is None:
        raise UnknownVoiceError(
            "voice: its reference clip is gone (the voice was deleted)", field="voice"
        )
    clips.put(speaker.clip_ref, pcm)
