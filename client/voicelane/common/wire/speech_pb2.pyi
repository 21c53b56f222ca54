from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SynthesizeRequest(_message.Message):
    __slots__ = ("text", "voice", "sample_rate_hz", "request_id", "client_ts_ms", "speed", "resume_after_seq", "pace", "normalize", "ssml", "lexicons", "seed")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_TS_MS_FIELD_NUMBER: _ClassVar[int]
    SPEED_FIELD_NUMBER: _ClassVar[int]
    RESUME_AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    PACE_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    SSML_FIELD_NUMBER: _ClassVar[int]
    LEXICONS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    text: str
    voice: str
    sample_rate_hz: int
    request_id: str
    client_ts_ms: int
    speed: float
    resume_after_seq: int
    pace: bool
    normalize: bool
    ssml: bool
    lexicons: Lexicons
    seed: int
    def __init__(self, text: _Optional[str] = ..., voice: _Optional[str] = ..., sample_rate_hz: _Optional[int] = ..., request_id: _Optional[str] = ..., client_ts_ms: _Optional[int] = ..., speed: _Optional[float] = ..., resume_after_seq: _Optional[int] = ..., pace: _Optional[bool] = ..., normalize: _Optional[bool] = ..., ssml: _Optional[bool] = ..., lexicons: _Optional[_Union[Lexicons, _Mapping]] = ..., seed: _Optional[int] = ...) -> None: ...

class Lexicons(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...

class Caption(_message.Message):
    __slots__ = ("text", "start", "end", "pts_ms", "sentence")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    PTS_MS_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_FIELD_NUMBER: _ClassVar[int]
    text: str
    start: int
    end: int
    pts_ms: int
    sentence: int
    def __init__(self, text: _Optional[str] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., pts_ms: _Optional[int] = ..., sentence: _Optional[int] = ...) -> None: ...

class Word(_message.Message):
    __slots__ = ("text", "char_start", "char_end", "start_ms", "end_ms")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CHAR_START_FIELD_NUMBER: _ClassVar[int]
    CHAR_END_FIELD_NUMBER: _ClassVar[int]
    START_MS_FIELD_NUMBER: _ClassVar[int]
    END_MS_FIELD_NUMBER: _ClassVar[int]
    text: str
    char_start: int
    char_end: int
    start_ms: int
    end_ms: int
    def __init__(self, text: _Optional[str] = ..., char_start: _Optional[int] = ..., char_end: _Optional[int] = ..., start_ms: _Optional[int] = ..., end_ms: _Optional[int] = ...) -> None: ...

class MarkReached(_message.Message):
    __slots__ = ("name", "time_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    time_ms: int
    def __init__(self, name: _Optional[str] = ..., time_ms: _Optional[int] = ...) -> None: ...

class AudioChunk(_message.Message):
    __slots__ = ("request_id", "seq", "opus_packets", "pts_ms", "sample_rate_hz", "server_ts_ms", "client_ts_ms", "final", "captions", "words", "marks")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    OPUS_PACKETS_FIELD_NUMBER: _ClassVar[int]
    PTS_MS_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    SERVER_TS_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_TS_MS_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    CAPTIONS_FIELD_NUMBER: _ClassVar[int]
    WORDS_FIELD_NUMBER: _ClassVar[int]
    MARKS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    seq: int
    opus_packets: _containers.RepeatedScalarFieldContainer[bytes]
    pts_ms: int
    sample_rate_hz: int
    server_ts_ms: int
    client_ts_ms: int
    final: bool
    captions: _containers.RepeatedCompositeFieldContainer[Caption]
    words: _containers.RepeatedCompositeFieldContainer[Word]
    marks: _containers.RepeatedCompositeFieldContainer[MarkReached]
    def __init__(self, request_id: _Optional[str] = ..., seq: _Optional[int] = ..., opus_packets: _Optional[_Iterable[bytes]] = ..., pts_ms: _Optional[int] = ..., sample_rate_hz: _Optional[int] = ..., server_ts_ms: _Optional[int] = ..., client_ts_ms: _Optional[int] = ..., final: _Optional[bool] = ..., captions: _Optional[_Iterable[_Union[Caption, _Mapping]]] = ..., words: _Optional[_Iterable[_Union[Word, _Mapping]]] = ..., marks: _Optional[_Iterable[_Union[MarkReached, _Mapping]]] = ...) -> None: ...

class ConverseStart(_message.Message):
    __slots__ = ("voice", "sample_rate_hz", "speed", "client_ts_ms", "normalize", "lexicons")
    VOICE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    SPEED_FIELD_NUMBER: _ClassVar[int]
    CLIENT_TS_MS_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    LEXICONS_FIELD_NUMBER: _ClassVar[int]
    voice: str
    sample_rate_hz: int
    speed: float
    client_ts_ms: int
    normalize: bool
    lexicons: Lexicons
    def __init__(self, voice: _Optional[str] = ..., sample_rate_hz: _Optional[int] = ..., speed: _Optional[float] = ..., client_ts_ms: _Optional[int] = ..., normalize: _Optional[bool] = ..., lexicons: _Optional[_Union[Lexicons, _Mapping]] = ...) -> None: ...

class Flush(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class End(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ConverseRequest(_message.Message):
    __slots__ = ("start", "text_delta", "flush", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    FLUSH_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: ConverseStart
    text_delta: str
    flush: Flush
    end: End
    def __init__(self, start: _Optional[_Union[ConverseStart, _Mapping]] = ..., text_delta: _Optional[str] = ..., flush: _Optional[_Union[Flush, _Mapping]] = ..., end: _Optional[_Union[End, _Mapping]] = ...) -> None: ...

class ConverseResponse(_message.Message):
    __slots__ = ("audio",)
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    audio: AudioChunk
    def __init__(self, audio: _Optional[_Union[AudioChunk, _Mapping]] = ...) -> None: ...

class ListVoicesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Voice(_message.Message):
    __slots__ = ("id", "name", "languages", "engine")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LANGUAGES_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    languages: _containers.RepeatedScalarFieldContainer[str]
    engine: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., languages: _Optional[_Iterable[str]] = ..., engine: _Optional[str] = ...) -> None: ...

class ListVoicesResponse(_message.Message):
    __slots__ = ("engine", "voices")
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    VOICES_FIELD_NUMBER: _ClassVar[int]
    engine: str
    voices: _containers.RepeatedCompositeFieldContainer[Voice]
    def __init__(self, engine: _Optional[str] = ..., voices: _Optional[_Iterable[_Union[Voice, _Mapping]]] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class ChatRequest(_message.Message):
    __slots__ = ("messages", "model", "voice", "sample_rate_hz", "client_ts_ms", "system", "speed", "normalize", "lexicons")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    CLIENT_TS_MS_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    SPEED_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_FIELD_NUMBER: _ClassVar[int]
    LEXICONS_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    model: str
    voice: str
    sample_rate_hz: int
    client_ts_ms: int
    system: str
    speed: float
    normalize: bool
    lexicons: Lexicons
    def __init__(self, messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., model: _Optional[str] = ..., voice: _Optional[str] = ..., sample_rate_hz: _Optional[int] = ..., client_ts_ms: _Optional[int] = ..., system: _Optional[str] = ..., speed: _Optional[float] = ..., normalize: _Optional[bool] = ..., lexicons: _Optional[_Union[Lexicons, _Mapping]] = ...) -> None: ...

class ChatStats(_message.Message):
    __slots__ = ("prompt_tokens", "reply_tokens", "prompt_eval_ms", "eval_ms", "total_ms", "load_ms", "time_to_first_token_ms", "time_to_first_audio_ms", "done_reason", "model", "trimmed_messages", "spoken_text")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REPLY_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_EVAL_MS_FIELD_NUMBER: _ClassVar[int]
    EVAL_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    LOAD_MS_FIELD_NUMBER: _ClassVar[int]
    TIME_TO_FIRST_TOKEN_MS_FIELD_NUMBER: _ClassVar[int]
    TIME_TO_FIRST_AUDIO_MS_FIELD_NUMBER: _ClassVar[int]
    DONE_REASON_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TRIMMED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SPOKEN_TEXT_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    reply_tokens: int
    prompt_eval_ms: float
    eval_ms: float
    total_ms: float
    load_ms: float
    time_to_first_token_ms: float
    time_to_first_audio_ms: float
    done_reason: str
    model: str
    trimmed_messages: int
    spoken_text: str
    def __init__(self, prompt_tokens: _Optional[int] = ..., reply_tokens: _Optional[int] = ..., prompt_eval_ms: _Optional[float] = ..., eval_ms: _Optional[float] = ..., total_ms: _Optional[float] = ..., load_ms: _Optional[float] = ..., time_to_first_token_ms: _Optional[float] = ..., time_to_first_audio_ms: _Optional[float] = ..., done_reason: _Optional[str] = ..., model: _Optional[str] = ..., trimmed_messages: _Optional[int] = ..., spoken_text: _Optional[str] = ...) -> None: ...

class ChatResponse(_message.Message):
    __slots__ = ("audio", "text_delta", "stats")
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    audio: AudioChunk
    text_delta: str
    stats: ChatStats
    def __init__(self, audio: _Optional[_Union[AudioChunk, _Mapping]] = ..., text_delta: _Optional[str] = ..., stats: _Optional[_Union[ChatStats, _Mapping]] = ...) -> None: ...

class ClockRequest(_message.Message):
    __slots__ = ("client_ts_ms",)
    CLIENT_TS_MS_FIELD_NUMBER: _ClassVar[int]
    client_ts_ms: int
    def __init__(self, client_ts_ms: _Optional[int] = ...) -> None: ...

class ClockResponse(_message.Message):
    __slots__ = ("client_ts_ms", "server_ts_us")
    CLIENT_TS_MS_FIELD_NUMBER: _ClassVar[int]
    SERVER_TS_US_FIELD_NUMBER: _ClassVar[int]
    client_ts_ms: int
    server_ts_us: int
    def __init__(self, client_ts_ms: _Optional[int] = ..., server_ts_us: _Optional[int] = ...) -> None: ...
