"""What the ledger returns: typed records of jobs and chunk plans (no Redis here).

How a record is shown to users (the API's field names) is :mod:`voicelane.core.job_view`'s.
"""

from __future__ import annotations

import enum
import json
import time
from dataclasses import asdict, dataclass

from voicelane.core.speakers import SpeakerDef
from voicelane.core.speech_text import TextOptions


class JobState(enum.StrEnum):
    """queued → planning → rendering → assembling → done | failed | cancelled."""

    QUEUED = "queued"
    PLANNING = "planning"
    RENDERING = "rendering"
    ASSEMBLING = "assembling"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)


@dataclass(frozen=True, slots=True)
class ChunkPlan:
    """One chunk: consecutive segments, with what the renderer needs to reproduce pauses."""

    texts: tuple[str, ...]
    paragraph_ends: tuple[bool, ...]
    start: int
    end: int
    last: bool
    """The job's last chunk: no pause after its final segment."""
    pauses_ms: tuple[int | None, ...] = ()
    """Per segment, an SSML break's exact silence after it (None: the usual pauses); empty
    when no segment of the chunk has one."""
    voicings: tuple[tuple[str | None, float, float, float] | None, ...] = ()
    """Per segment, SSML's ``(voice, rate, volume_db, pitch_semitones)`` (None: plain);
    empty when every segment of the chunk is plain."""
    after_break: bool = False
    """The previous chunk ended on an SSML break: this chunk's leading silence is cut."""
    spans: tuple[tuple[int, int], ...] = ()
    """Per segment, the span ``[start, end)`` of the input it speaks (for its timings);
    empty in plans stored before subtitles."""
    maps: tuple[tuple[tuple[int, int, int, int, int], ...], ...] = ()
    """Per segment, its map back to the input: ``(out_start, out_end, src_start, src_end,
    exact)`` pieces (:class:`voicelane.core.text_map.Piece`)."""
    source: str = ""
    """The input's characters ``[start, end)``: what the chunk's timings quote."""
    chapter: int | None = None
    """The chapter its segments belong to (an index into the job's chapters); None: no
    chapters, or the text before the first one. A chunk never spans two chapters."""

    def to_json(self) -> str:
        data = asdict(self)
        for name in ("pauses_ms", "voicings", "after_break", "spans", "maps", "source"):
            if not data[name]:
                del data[name]  # plans without SSML stay as they were
        if data["chapter"] is None:
            del data["chapter"]
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> ChunkPlan:
        """The inverse of :meth:`to_json`; plans stored before SSML (no ``pauses_ms``,
        ``voicings``, ``after_break``) read as plain."""
        data = json.loads(raw)
        return cls(
            texts=tuple(data["texts"]),
            paragraph_ends=tuple(data["paragraph_ends"]),
            start=data["start"],
            end=data["end"],
            last=data["last"],
            pauses_ms=tuple(None if p is None else int(p) for p in data.get("pauses_ms", ())),
            voicings=tuple(
                None if v is None else (v[0], float(v[1]), float(v[2]), float(v[3]))
                for v in data.get("voicings", ())
            ),
            after_break=bool(data.get("after_break", False)),
            spans=tuple((int(a), int(b)) for a, b in data.get("spans", ())),
            maps=tuple(
                tuple((int(p[0]), int(p[1]), int(p[2]), int(p[3]), int(p[4])) for p in pieces)
                for pieces in data.get("maps", ())
            ),
            source=str(data.get("source", "")),
            chapter=None if data.get("chapter") is None else int(data["chapter"]),
        )


@dataclass(frozen=True, slots=True)
class ChapterInfo:
    """A chapter of a job's document: its title and where its reading starts in the text."""

    title: str
    start: int
    """Code-point offset into the job's text."""
    level: int = 1
    """Depth in the table of contents (1: top)."""


@dataclass(frozen=True, slots=True)
class BookInfo:
    """What a job knows of the document its text came from (``voicelane.core.documents``):
    chapters, metadata and cover, and whether it wants one file per chapter."""

    kind: str = "text"
    """``text``, ``markdown``, ``html``, ``epub`` or ``ssml``."""
    title: str | None = None
    author: str | None = None
    language: str | None = None
    chapters: tuple[ChapterInfo, ...] = ()
    cover_key: str | None = None
    """Where the document's cover is kept in storage until the job is assembled."""
    cover_media_type: str | None = None
    split_chapters: bool = False
    """Also one audio file per chapter."""

    @property
    def plain(self) -> bool:
        """Nothing to record: a text job as before documents."""
        return self == BookInfo()

    def to_json(self) -> str:
        data = asdict(self)
        data["chapters"] = [[c.title, c.start, c.level] for c in self.chapters]
        return json.dumps(
            {k: v for k, v in data.items() if v not in (None, False, [])},
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, raw: str) -> BookInfo:
        data = json.loads(raw)
        return cls(
            kind=str(data.get("kind", "text")),
            title=data.get("title"),
            author=data.get("author"),
            language=data.get("language"),
            chapters=tuple(
                ChapterInfo(str(t), int(s), int(lv)) for t, s, lv in data.get("chapters", ())
            ),
            cover_key=data.get("cover_key"),
            cover_media_type=data.get("cover_media_type"),
            split_chapters=bool(data.get("split_chapters", False)),
        )


@dataclass(frozen=True, slots=True)
class JobOptions:
    voice: str
    format: str
    sample_rate_hz: int
    speed: float = 1.0
    callback_url: str | None = None
    text_options: TextOptions = TextOptions()  # noqa: RUF009 - frozen, shared default
    """How the text is read (whether it is normalized)."""
    engine: str = "espeak"
    """The engine the voice resolved to at submission: its workers render the chunks."""
    speaker: SpeakerDef | None = None
    """A tenant's voice or a mix, resolved at submission (``voice`` is then ``custom:...``)."""
    requested_voice: str = ""
    """The voice as the client named it (shown); "" when it is ``voice``."""
    seed: int | None = None
    """The sampling seed of every sentence (engines that sample); None: a fresh draw."""
    book: BookInfo = BookInfo()
    """The document the text came from: chapters, metadata, cover."""

    @property
    def shown_voice(self) -> str:
        return self.requested_voice or self.voice


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    tenant: str
    state: JobState
    options: JobOptions
    characters: int
    created_at: float
    updated_at: float
    started_at: float | None
    finished_at: float | None
    chunks_total: int
    chunks_done: int
    audio_s: float
    attempts: int
    output_key: str | None
    size_bytes: int | None
    duration_s: float | None
    sha256: str | None
    error: str | None
    warnings: tuple[dict[str, object], ...] = ()
    """What of the text is not spoken as written (:class:`voicelane.core.speech_text.TextWarning`
    as JSON), found when the job was planned."""

    @property
    def progress(self) -> float:
        if self.state is JobState.DONE:
            return 1.0
        return self.chunks_done / self.chunks_total if self.chunks_total else 0.0

    def eta_s(self, now: float | None = None) -> float | None:
        """Remaining seconds at the pace so far; None until a chunk is done or when final."""
        if self.state.final or self.started_at is None or self.chunks_done == 0:
            return None
        elapsed = (now or time.time()) - self.started_at
        remaining = self.chunks_total - self.chunks_done
        return max(0.0, elapsed / self.chunks_done * remaining)


def text_of(value: bytes | str | None) -> str | None:
    """A Redis reply as text (None stays None)."""
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else value


def number_of(value: bytes | str | None) -> float | None:
    """A Redis reply as a number (None and "" are None)."""
    text = text_of(value)
    return float(text) if text not in (None, "") else None


def one_line(text: str, limit: int) -> str:
    """``text`` on one line (whitespace runs → one space), at most ``limit`` characters: what
    the ledger stores of an error."""
    return " ".join(text.split())[:limit]
