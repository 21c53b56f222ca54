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

    def to_json(self) -> str:
        data = asdict(self)
        for name in ("pauses_ms", "voicings", "after_break"):
            if not data[name]:
                del data[name]  # plans without SSML stay as they were
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
