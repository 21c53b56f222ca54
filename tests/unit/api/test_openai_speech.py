"""voicelane.api.routes.openai_speech: OpenAI's speech body, formats and stream formats."""

from __future__ import annotations

import pytest

from voicelane.api.routes.openai_speech import (
    SPEECH_FORMATS,
    SpeechRequest,
    speech_encoding,
    stream_format,
)
from voicelane.common.audio.stream import StreamEncoding
from voicelane.common.errors import InvalidInputError


def test_openais_six_formats_map_to_the_workers_encodings() -> None:
    assert list(SPEECH_FORMATS) == ["mp3", "opus", "aac", "flac", "wav", "pcm"]
    assert speech_encoding("mp3") is StreamEncoding.MP3
    assert speech_encoding("OPUS") is StreamEncoding.OGG  # OpenAI's opus is Ogg Opus
    assert speech_encoding("pcm") is StreamEncoding.PCM
    assert speech_encoding("wav") is StreamEncoding.WAV
    assert speech_encoding("flac") is StreamEncoding.FLAC


def test_aac_is_the_adts_stream_encoding() -> None:
    """``StreamEncoding.AAC`` comes with the audio branch (issue 24): passes once it is merged."""
    encoding = speech_encoding("aac")
    assert encoding.name == "AAC" and encoding.media_type == "audio/aac"


def test_another_format_is_refused_naming_the_field_and_the_formats() -> None:
    with pytest.raises(InvalidInputError) as caught:
        speech_encoding("ogg")
    assert caught.value.field == "response_format"
    assert "mp3, opus, aac, flac, wav, pcm" in caught.value.message


def test_stream_formats_are_audio_and_sse() -> None:
    assert stream_format("SSE") == "sse" and stream_format("audio") == "audio"
    with pytest.raises(InvalidInputError) as caught:
        stream_format("chunks")
    assert caught.value.field == "stream_format"


def test_a_voice_is_a_string_or_openais_voice_object() -> None:
    assert SpeechRequest.model_validate({"input": "Hi.", "voice": "marin"}).voice_id() == "marin"
    body = SpeechRequest.model_validate({"input": "Hi.", "voice": {"id": "espeak:en-gb"}})
    assert body.voice_id() == "espeak:en-gb"
    assert SpeechRequest.model_validate({"input": "Hi."}).voice_id() == "auto"
    defaults = SpeechRequest.model_validate({"input": "Hi."})
    assert (defaults.response_format, defaults.stream_format) == ("mp3", "audio")
    assert defaults.instructions is None and defaults.pace is False
