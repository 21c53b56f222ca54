"""The embedded pipeline: text → segments → the shared batcher → PCM → an audio file.

``voicelane render`` and ``voicelane say`` run this in-process, with no Redis and no
servers. The same batcher and engine serve the worker processes of both lanes.

The renderer keeps a bounded window of segments in flight (``render_window``): the batcher's
scheduler thread synthesises ahead while this thread resamples and encodes the segments
already done, so synthesis and encoding overlap on two cores and memory stays flat however
long the text is. The output is written to a temporary file beside the target and renamed
into place only when complete: a failed or interrupted render leaves no partial file.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from voicelane.common.atomic import atomic_output
from voicelane.common.audio import (
    AudioFormat,
    StreamResampler,
    open_writer,
    silence,
    validate_sample_rate,
)
from voicelane.common.errors import DeadlineExceededError
from voicelane.core.settings import EmbeddedSettings
from voicelane.core.speech_text import PreparedText, TextOptions, prepare_text
from voicelane.core.text_profiles import profile_for
from voicelane.workers.batching import Batcher, Priority
from voicelane.workers.engines import Engine, PcmF32, Utterance, create_engine

Progress = Callable[[int, int, float], None]
"""Called after each segment: (segments done, segments total, audio seconds so far)."""


@dataclass(frozen=True, slots=True)
class RenderResult:
    path: Path
    format: AudioFormat
    sample_rate_hz: int
    duration_s: float
    elapsed_s: float
    segments: int
    characters: int
    warnings: list[dict[str, object]]
    """What of the text is not spoken as written (``TextWarning`` as JSON)."""

    @property
    def speed_x(self) -> float:
        """Audio seconds per wall-clock second (x real time)."""
        return self.duration_s / self.elapsed_s if self.elapsed_s > 0 else float("inf")


class Speakable(Protocol):
    """What the renderer needs of a segment (``voicelane.core.speech_text.SpokenSegment``
    has it)."""

    @property
    def text(self) -> str: ...
    @property
    def paragraph_end(self) -> bool: ...


def synthesize_segments(
    batcher: Batcher,
    segments: Sequence[Speakable],
    *,
    voice: str,
    speed: float = 1.0,
    window: int = 256,
    priority: Priority = Priority.BATCH,
    deadline_s: float | None = None,
    group: str = "",
) -> Iterator[PcmF32]:
    """Each segment's audio at the engine's rate, in order, at most ``window`` in flight.

    ``deadline_s`` (on the batcher's clock) is handed to the batcher with every segment and
    also bounds how long this waits for each result; ``group`` (the tenant) keeps the
    batcher fair between tenants.
    """
    pending: deque[Future[PcmF32]] = deque()

    def result(future: Future[PcmF32]) -> PcmF32:
        timeout_s = None if deadline_s is None else max(0.0, deadline_s - batcher.clock())
        try:
            return future.result(timeout_s)
        except FutureTimeout:
            raise DeadlineExceededError("segment not rendered before the deadline") from None

    try:
        for segment in segments:
            utterance = Utterance(segment.text, voice, speed)
            pending.append(
                batcher.submit(utterance, priority=priority, deadline_s=deadline_s, group=group)
            )
            if len(pending) >= window:
                yield result(pending.popleft())
        while pending:
            yield result(pending.popleft())
    finally:
        for future in pending:  # abandoned (error, Ctrl-C): free the batcher
            future.cancel()


def speech_at_rate(
    batcher: Batcher,
    segments: Sequence[Speakable],
    *,
    voice: str,
    speed: float,
    sample_rate_hz: int,
    pause_s: float,
    pause_after_last: bool = False,
    window: int = 256,
    priority: Priority = Priority.BATCH,
    deadline_s: float | None = None,
    group: str = "",
) -> Iterator[tuple[int, PcmF32]]:
    """PCM at ``sample_rate_hz`` with ``pause_s`` of silence after each paragraph.

    Yields ``(segments done, pcm)`` pieces in order. No pause follows the last segment unless
    ``pause_after_last`` (a chunk in the middle of a job ending on a paragraph).
    """
    resampler = StreamResampler(batcher.engine.sample_rate_hz, sample_rate_hz)
    pause = silence(pause_s, sample_rate_hz)
    produced = synthesize_segments(
        batcher,
        segments,
        voice=voice,
        speed=speed,
        window=window,
        priority=priority,
        deadline_s=deadline_s,
        group=group,
    )
    last = len(segments) - 1
    for index, (segment, pcm) in enumerate(zip(segments, produced, strict=True)):
        yield index + 1, resampler.process(pcm)
        if segment.paragraph_end and (index < last or pause_after_last):
            yield index + 1, np.concatenate([resampler.flush(), pause])
    yield len(segments), resampler.flush()


class EmbeddedRenderer:
    """One engine + one batcher in this process; renders text to files."""

    def __init__(self, settings: EmbeddedSettings, engine: Engine | None = None):
        self.settings = settings
        self.engine = engine or create_engine(
            settings.engine, device=settings.device, chattts=settings.chattts
        )
        self.batcher = Batcher(self.engine, self.settings.batcher, name="embedded")
        self.batcher.start()

    def close(self) -> None:
        self.batcher.close(drain=False)

    def __enter__(self) -> EmbeddedRenderer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def prepare(self, text: str, options: TextOptions = TextOptions()) -> PreparedText:  # noqa: B008
        """``text`` as this renderer's engine will be given it."""
        return prepare_text(
            text,
            profile=profile_for(self.engine.name),
            options=options,
            max_segment_chars=self.settings.max_segment_chars,
        )

    def check(self, *, voice: str, speed: float = 1.0) -> None:
        """Raise the permanent error a render with these options would hit, before any work."""
        self.engine.validate(Utterance("check", voice, speed))

    def render(
        self,
        text: str,
        output: str | os.PathLike[str],
        *,
        fmt: AudioFormat,
        voice: str | None = None,
        sample_rate_hz: int | None = None,
        speed: float = 1.0,
        progress: Progress | None = None,
        text_options: TextOptions = TextOptions(),  # noqa: B008 - frozen, shared default
    ) -> RenderResult:
        started = time.perf_counter()
        settings = self.settings
        voice = voice or settings.voice
        rate_hz = sample_rate_hz or settings.sample_rate_hz
        validate_sample_rate(fmt, rate_hz)
        self.check(voice=voice, speed=speed)
        prepared = self.prepare(text, text_options)
        prepared.check_speakable()
        segments = prepared.segments
        target = Path(output)
        with atomic_output(target) as part:
            writer = open_writer(part, fmt, rate_hz, bitrate_bps=settings.opus_bitrate_bps)
            try:
                pieces = speech_at_rate(
                    self.batcher,
                    segments,
                    voice=voice,
                    speed=speed,
                    sample_rate_hz=rate_hz,
                    pause_s=settings.paragraph_pause_s,
                    window=settings.render_window,
                )
                reported = 0
                for done, pcm in pieces:
                    writer.write(pcm)
                    if progress is not None and done > reported:
                        reported = done
                        progress(done, len(segments), writer.duration_s)
            finally:
                writer.close()
            duration_s = writer.duration_s
        return RenderResult(
            path=target,
            format=fmt,
            sample_rate_hz=rate_hz,
            duration_s=duration_s,
            elapsed_s=time.perf_counter() - started,
            segments=len(segments),
            characters=len(text),
            warnings=prepared.warnings_json(),
        )
