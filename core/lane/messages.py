"""What goes through the real-time lane's Redis streams: the wire format both sides agree on.

* :class:`StreamRequest` — an entry of ``vl:rt:requests`` (a front asks for a stream);
* :class:`InputPiece` — an entry of ``vl:rt:in:{id}`` (the request's text, in pieces);
* :class:`OutputEvent` — an entry of ``vl:rt:out:{id}`` (audio, a caption, the end, or an
  error that carries the typed error whole: :class:`~voicelane.common.errors.WireError`);
  audio and the end may carry word timings and SSML marks with their times;
* :class:`CapacityReport` — a worker's value in the ``vl:rt:workers`` hash.

Every field is a string (or bytes, for audio) in Redis; readers take missing fields as their
defaults, so an entry written by the previous release still reads.
"""

from __future__ import annotations

import enum
import json
import struct
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from voicelane.common.audio.stream import StreamEncoding
from voicelane.common.errors import VoicelaneError, WireError
from voicelane.core.speakers import SpeakerDef
from voicelane.core.speech_text import TextOptions
from voicelane.core.word_timings import MarkTiming, WordTiming


def now_ms() -> int:
    return int(time.time() * 1000)


def new_request_id() -> str:
    return uuid.uuid4().hex


def lane_request_id(tenant: str, request_id: str) -> str:
    """The id of a tenant's stream in the lane: its own id in the tenant's namespace (both are
    letters, digits, ``_`` and ``-``, so the ``.`` between them is unambiguous)."""
    return f"{tenant}.{request_id}"


class Mode(enum.StrEnum):
    SYNTHESIZE = "synthesize"
    CONVERSE = "converse"


class InputKind(enum.StrEnum):
    TEXT = "text"
    FLUSH = "flush"
    END = "end"


class EventKind(enum.StrEnum):
    AUDIO = "audio"
    CAPTION = "caption"
    END = "end"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class StreamRequest:
    request_id: str
    tenant: str
    voice: str
    sample_rate_hz: int
    deadline_ms: int
    """Absolute (unix ms): workers drop the request once it has passed."""
    mode: Mode = Mode.SYNTHESIZE
    speed: float = 1.0
    client_ts_ms: int = 0
    encoding: StreamEncoding = StreamEncoding.OPUS
    """What the front needs: Opus packets, or the bytes of a file / raw PCM."""
    paced: bool = True
    """Live (True): synthesised just ahead of playback. File-style (False): as fast as the
    worker can, for a client that stores the audio rather than plays it as it comes."""
    submitted_ms: int = field(default_factory=now_ms)
    text_options: TextOptions = TextOptions()  # noqa: RUF009 - frozen, shared default
    """How the text is read (whether it is normalized)."""
    engine: str = "espeak"
    """The engine whose workers serve it (the front resolved the voice to it): the request
    went to that engine's stream."""
    speaker: SpeakerDef | None = None
    """A tenant's voice or a mix, resolved at submission (``voice`` is then
    ``custom:<digest>``)."""
    seed: int | None = None
    """The sampling seed of every sentence (engines that sample); None: a fresh draw."""
    tempo: float = 1.0
    """The time-stretch factor the worker applies to the engine's audio (``speed`` is what the
    engine renders at; the speed asked was ``speed x tempo``): 2 gives half as long. Its times
    (pts, captions, words, marks) are those of the stretched audio. An entry without it (the
    previous release's) reads as 1; a worker of the previous release ignores it."""

    def to_fields(self) -> dict[str, str]:
        speaker = {} if self.speaker is None else {"speaker": self.speaker.to_json()}
        seed = {} if self.seed is None else {"seed": str(self.seed)}
        return {
            **self.text_options.to_fields(),
            **speaker,
            **seed,
            "engine": self.engine,
            "request_id": self.request_id,
            "tenant": self.tenant,
            "voice": self.voice,
            "sample_rate_hz": str(self.sample_rate_hz),
            "deadline_ms": str(self.deadline_ms),
            "mode": self.mode.value,
            "speed": repr(self.speed),
            "tempo": repr(self.tempo),
            "client_ts_ms": str(self.client_ts_ms),
            "encoding": self.encoding.value,
            "paced": "1" if self.paced else "0",
            "submitted_ms": str(self.submitted_ms),
        }

    @classmethod
    def from_fields(cls, raw: Mapping[bytes, bytes]) -> StreamRequest:
        f = {k.decode(): v.decode() for k, v in raw.items()}
        return cls(
            request_id=f["request_id"],
            tenant=f["tenant"],
            voice=f["voice"],
            sample_rate_hz=int(f["sample_rate_hz"]),
            deadline_ms=int(f["deadline_ms"]),
            mode=Mode(f.get("mode", Mode.SYNTHESIZE.value)),
            speed=float(f.get("speed", "1.0")),
            tempo=float(f.get("tempo", "1.0")),
            client_ts_ms=int(f.get("client_ts_ms", "0")),
            encoding=StreamEncoding(f.get("encoding", StreamEncoding.OPUS.value)),
            paced=f.get("paced", "1") != "0",
            submitted_ms=int(f.get("submitted_ms", "0")),
            text_options=TextOptions.from_fields(f),
            engine=f.get("engine", "espeak"),
            speaker=SpeakerDef.from_json(f["speaker"]) if "speaker" in f else None,
            seed=int(f["seed"]) if "seed" in f else None,
        )

    @property
    def expired(self) -> bool:
        return now_ms() >= self.deadline_ms


@dataclass(frozen=True, slots=True)
class InputPiece:
    kind: InputKind
    text: str = ""

    def to_fields(self) -> dict[str, str]:
        fields = {"kind": self.kind.value}
        if self.text:
            fields["text"] = self.text
        return fields

    @classmethod
    def from_fields(cls, raw: Mapping[bytes, bytes]) -> InputPiece:
        return cls(InputKind(raw[b"kind"].decode()), raw.get(b"text", b"").decode())


NO_DETAIL = WireError(code=VoicelaneError.code, message="the worker failed", status="INTERNAL")
"""The error of an ``error`` event that carries none (only a hand-made event can)."""


@dataclass(frozen=True, slots=True)
class OutputEvent:
    """One entry of a request's output stream.

    An ``error`` event carries the worker's typed error whole (:attr:`error`). In Redis its
    fields are ``code`` (the gRPC status name — the field's name from before errors carried
    more; a reader of that release still finds the status there), ``text`` (the message),
    ``error_code`` (:attr:`~voicelane.common.errors.VoicelaneError.code`), ``field`` and
    ``retry_after_s`` (when set). An event with no ``error_code`` (written by a worker of the
    previous release) reads as an error known only by its status.
    """

    kind: EventKind
    seq: int = 0
    """Audio: contiguous from 0 per request. Other kinds: the seq of the next audio entry."""
    data: tuple[bytes, ...] = ()
    """Audio: 20 ms Opus packets, or (byte-stream encodings) consecutive pieces of the file."""
    pts_ms: int = 0
    sample_rate_hz: int = 0
    server_ts_ms: int = 0
    client_ts_ms: int = 0
    sentence: int = -1
    """Which sentence (0-based) this belongs to; -1 when none."""
    text: str = ""
    """Caption: its text."""
    start: int = 0
    end: int = 0
    """Caption: the sentence's character span in the request's text."""
    error: WireError | None = None
    """Error: what the worker raised (code, message, gRPC status, field, retry hint)."""
    details: str = ""
    """JSON, when there is something to tell: the end's ``warnings`` (what of the text is
    not spoken as written)."""
    words: tuple[WordTiming, ...] = ()
    """Audio, caption or end: words of the request's text (spans in the whole text) with
    their times on the stream's clock (``pts_ms``), sent as soon as the worker knows them
    (for espeak: with the first audio of their sentence). In Redis: the field ``words``,
    a JSON list of ``{text, start_ms, end_ms, char_start, char_end}``, only when there are
    some (entries without it, the previous release's, read as none)."""
    marks: tuple[MarkTiming, ...] = ()
    """Audio, caption or end: SSML marks reached, with their times on the stream's clock.
    In Redis: ``marks``, a JSON list of ``{name, time_ms}``, only when there are some."""

    @classmethod
    def failure(cls, error: VoicelaneError) -> OutputEvent:
        """The ``error`` event that reports ``error`` to the front, whole."""
        return cls(EventKind.ERROR, error=error.to_wire())

    def to_fields(self) -> dict[str, bytes | str]:
        fields: dict[str, bytes | str] = {"kind": self.kind.value, "seq": str(self.seq)}
        if self.kind is EventKind.ERROR:
            error = self.error or NO_DETAIL
            fields.update(code=error.status, text=error.message, error_code=error.code)
            if error.field is not None:
                fields["field"] = error.field
            if error.retry_after_s is not None:
                fields["retry_after_s"] = repr(error.retry_after_s)
            return fields
        if self.kind is EventKind.AUDIO:
            fields.update(
                data=pack_packets(self.data),
                pts_ms=str(self.pts_ms),
                sample_rate_hz=str(self.sample_rate_hz),
                server_ts_ms=str(self.server_ts_ms),
                client_ts_ms=str(self.client_ts_ms),
                sentence=str(self.sentence),
            )
        elif self.kind is EventKind.CAPTION:
            fields.update(
                text=self.text,
                start=str(self.start),
                end=str(self.end),
                pts_ms=str(self.pts_ms),
                sentence=str(self.sentence),
            )
        else:
            fields.update(pts_ms=str(self.pts_ms), sentence=str(self.sentence))
        if self.details and self.kind is not EventKind.AUDIO:
            fields["details"] = self.details
        if self.words:
            fields["words"] = json.dumps([w.to_json() for w in self.words], ensure_ascii=False)
        if self.marks:
            fields["marks"] = json.dumps([m.to_json() for m in self.marks], ensure_ascii=False)
        return fields

    @classmethod
    def from_fields(cls, raw: Mapping[bytes, bytes]) -> OutputEvent:
        def num(name: str, default: int = 0) -> int:
            value = raw.get(name.encode())
            return int(value) if value is not None else default

        def text(name: str) -> str:
            value = raw.get(name.encode())
            return value.decode() if value is not None else ""

        kind = EventKind(text("kind"))
        data = raw.get(b"data")
        error = None
        if kind is EventKind.ERROR:
            retry = raw.get(b"retry_after_s")
            error = WireError(
                code=text("error_code"),
                message=text("text"),
                status=text("code") or NO_DETAIL.status,
                field=text("field") or None,
                retry_after_s=float(retry) if retry is not None else None,
            )
        return cls(
            kind=kind,
            seq=num("seq"),
            data=unpack_packets(data) if data else (),
            pts_ms=num("pts_ms"),
            sample_rate_hz=num("sample_rate_hz"),
            server_ts_ms=num("server_ts_ms"),
            client_ts_ms=num("client_ts_ms"),
            sentence=num("sentence", -1),
            text="" if error is not None else text("text"),
            start=num("start"),
            end=num("end"),
            error=error,
            details=text("details"),
            words=_words(raw.get(b"words")),
            marks=_marks(raw.get(b"marks")),
        )


def _words(raw: bytes | None) -> tuple[WordTiming, ...]:
    if not raw:
        return ()
    return tuple(
        WordTiming(
            text=str(w["text"]),
            start_ms=int(w["start_ms"]),
            end_ms=int(w["end_ms"]),
            char_start=int(w["char_start"]),
            char_end=int(w["char_end"]),
        )
        for w in json.loads(raw)
    )


def _marks(raw: bytes | None) -> tuple[MarkTiming, ...]:
    if not raw:
        return ()
    return tuple(MarkTiming(str(m["name"]), int(m["time_ms"])) for m in json.loads(raw))


def pack_packets(packets: Sequence[bytes]) -> bytes:
    """Pieces of audio, each behind a 4-byte big-endian length."""
    return b"".join(struct.pack(">I", len(p)) + p for p in packets)


def unpack_packets(data: bytes) -> tuple[bytes, ...]:
    packets: list[bytes] = []
    offset = 0
    while offset < len(data):
        (length,) = struct.unpack_from(">I", data, offset)
        offset += 4
        packets.append(data[offset : offset + length])
        offset += length
    return tuple(packets)


@dataclass(frozen=True, slots=True)
class CapacityReport:
    """A worker's free real-time slots, as of ``ts`` (unix seconds)."""

    free: int
    ts: float = field(default_factory=time.time)

    def to_json(self) -> str:
        return json.dumps({"free": self.free, "ts": self.ts})

    @classmethod
    def from_json(cls, raw: bytes | str) -> CapacityReport:
        report = json.loads(raw)
        return cls(int(report["free"]), float(report["ts"]))


def stream_entries(reply: Any) -> list[tuple[str, dict[bytes, bytes]]]:
    """An XREAD/XREADGROUP reply of one stream → ``[(entry id, fields)]`` (entries deleted
    meanwhile left out)."""
    if not reply:
        return []
    _, entries = reply[0]
    return [(entry_id.decode(), fields) for entry_id, fields in entries if fields is not None]
