"""The embedded pipeline: text → segments → the shared batcher → PCM → an audio file.

``voicelane render`` and ``voicelane say`` run this in-process, with no Redis and no
servers. The same batcher and engine serve the worker processes of both lanes.

The renderer keeps a bounded window of segments in flight (``render_window``): the batcher's
scheduler thread synthesises ahead while this thread resamples and encodes the segments
already done, so synthesis and encoding overlap on two cores and memory stays flat however
long the text is. The output is written to a temporary file beside the target and renamed
into place only when complete: a failed or interrupted render leaves no partial file.

What SSML asks of the audio (the segments' fields, :class:`SpokenSegment`) is done here, for
the embedded renderer and the batch lane alike (:func:`speech_at_rate`):

* ``pause_after_ms`` (``break``): exactly that much silence between the segment's last word
  and the next one's first: the engine's own trailing silence before it and the next
  segment's leading silence are cut (:func:`voicelane.common.audio.silence_edges`, whole 5 ms
  frames below -45 dBFS), then the break's silence goes in. It replaces the paragraph pause
  there; a break after the last segment is kept too (the user asked for that silence).
* ``voicing``: its voice is the utterance's; its rate multiplies the request's speed (within
  the engine's range); its pitch goes to the engine as ``("pitch_semitones", x)`` where the
  engine's text profile says it renders pitch (else it is ignored); ``volume_db`` is a gain
  on the segment's audio (:func:`voicelane.common.audio.apply_gain_db`).
* Word timings (:mod:`voicelane.core.word_timings`) and ``marks``, in the clock of the audio
  as delivered: resampled, with every pause, break and trimmed edge counted
  (:class:`Timeline`).
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from voicelane.common.atomic import atomic_output
from voicelane.common.audio import (
    AudioFormat,
    StreamResampler,
    apply_gain_db,
    open_writer,
    silence,
    silence_edges,
    validate_sample_rate,
)
from voicelane.common.errors import DeadlineExceededError
from voicelane.core.engines import engine_installed, split_voice
from voicelane.core.rules import DEFAULT_VOICE
from voicelane.core.settings import EmbeddedSettings
from voicelane.core.speakers import SpeakerDef
from voicelane.core.speech_text import PreparedText, SpokenSegment, TextOptions, prepare_text
from voicelane.core.text import contains_cjk
from voicelane.core.text_profiles import profile_for
from voicelane.core.word_timings import (
    MarkTiming,
    SentenceTiming,
    WordTiming,
    mark_times_ms,
    segment_word_timings,
    trimmed_span,
)
from voicelane.workers.batching import Batcher, Priority
from voicelane.workers.engines import (
    Engine,
    PcmF32,
    TimedAudio,
    Utterance,
    WordEvent,
    create_engine,
)

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
    words: list[WordTiming] = field(default_factory=list)
    """Each word of the input and when it is heard (sentence timings on an engine that does
    not know its words)."""
    marks: list[MarkTiming] = field(default_factory=list)
    """SSML marks and when they are reached."""

    @property
    def speed_x(self) -> float:
        """Audio seconds per wall-clock second (x real time)."""
        return self.duration_s / self.elapsed_s if self.elapsed_s > 0 else float("inf")


def utterance_of(
    engine: Engine,
    segment: SpokenSegment,
    *,
    voice: str,
    speed: float,
    speaker: SpeakerDef | None = None,
    seed: int | None = None,
) -> Utterance:
    """The engine's utterance for a prepared segment: its SSML voice over the request's, its
    rate times the request's speed (within the engine's range), its pitch where the engine
    renders pitch (``TextProfile.pitch``). ``speaker``: the request's voice is a tenant's
    voice or a mix (an SSML voice replaces it)."""
    voicing = segment.voicing
    if voicing.plain:
        return Utterance(segment.text, voice, speed, seed=seed, speaker=speaker)
    caps = engine.capabilities()
    rate = min(caps.max_speed, max(caps.min_speed, speed * voicing.rate))
    params: tuple[tuple[str, float | int | str], ...] = ()
    if voicing.pitch_semitones and profile_for(engine.name).pitch:
        params = (("pitch_semitones", float(voicing.pitch_semitones)),)
    if voicing.voice:
        return Utterance(segment.text, voicing.voice, round(rate, 4), seed=seed, params=params)
    return Utterance(segment.text, voice, round(rate, 4), seed=seed, params=params, speaker=speaker)


def synthesize_segments(
    batcher: Batcher,
    segments: Sequence[SpokenSegment],
    *,
    voice: str,
    speed: float = 1.0,
    window: int = 256,
    priority: Priority = Priority.BATCH,
    deadline_s: float | None = None,
    group: str = "",
    speaker: SpeakerDef | None = None,
    seed: int | None = None,
) -> Iterator[TimedAudio]:
    """Each segment's audio at the engine's rate, with its word events, in order, at most
    ``window`` in flight.

    ``deadline_s`` (on the batcher's clock) is handed to the batcher with every segment and
    also bounds how long this waits for each result; ``group`` (the tenant) keeps the
    batcher fair between tenants.
    """
    pending: deque[Future[TimedAudio]] = deque()
    engine = batcher.engine

    def result(future: Future[TimedAudio]) -> TimedAudio:
        timeout_s = None if deadline_s is None else max(0.0, deadline_s - batcher.clock())
        try:
            return future.result(timeout_s)
        except FutureTimeout:
            raise DeadlineExceededError("segment not rendered before the deadline") from None

    try:
        for segment in segments:
            utterance = utterance_of(
                engine, segment, voice=voice, speed=speed, speaker=speaker, seed=seed
            )
            pending.append(
                batcher.submit_timed(
                    utterance, priority=priority, deadline_s=deadline_s, group=group
                )
            )
            if len(pending) >= window:
                yield result(pending.popleft())
        while pending:
            yield result(pending.popleft())
    finally:
        for future in pending:  # abandoned (error, Ctrl-C): free the batcher
            future.cancel()


@dataclass
class Timeline:
    """Word timings and marks of a render, in the delivered audio's clock, filled in by
    :func:`speech_at_rate` as it goes."""

    source: str
    """The original input (the timings' spans slice it), from ``source_offset`` on."""
    source_offset: int = 0
    """Where ``source`` starts in the input (a job's chunk holds its own part)."""
    words: list[WordTiming] = field(default_factory=list)
    marks: list[MarkTiming] = field(default_factory=list)
    sentences: list[SentenceTiming] = field(default_factory=list)
    """Each segment, from its voiced onset to its voiced end, with its words where the
    engine times them (``word_timings``)."""
    word_timings: bool = True
    """The engine reports word times (else ``words`` holds one timing per segment)."""
    end_ms: int = 0
    """The end of the audio, once rendered."""

    def add(
        self,
        segment: SpokenSegment,
        words: Sequence[WordEvent],
        *,
        rate_hz: int,
        start_ms: float,
        voiced_ms: float,
        onset_ms: float = 0.0,
    ) -> None:
        """``onset_ms``: where the segment's speech starts after ``start_ms`` (its leading
        silence)."""
        timed = segment_word_timings(
            segment, words, rate_hz=rate_hz, start_ms=start_ms, voiced_ms=voiced_ms,
            source=self.source, source_offset=self.source_offset,
        )  # fmt: skip
        self.words += timed
        char_start, char_end = trimmed_span(
            self.source, segment.start, segment.end, self.source_offset
        )
        begin = round(start_ms + min(max(0.0, onset_ms), max(0.0, voiced_ms)))
        self.sentences.append(
            SentenceTiming(
                self.source[char_start - self.source_offset : char_end - self.source_offset],
                begin,
                max(begin, round(start_ms + max(0.0, voiced_ms))),
                char_start,
                char_end,
                tuple(timed) if self.word_timings and words else (),
            )
        )
        if segment.marks:
            self.marks += mark_times_ms(
                segment.marks, words, rate_hz=rate_hz, start_ms=start_ms, voiced_ms=voiced_ms
            )


class _OutputClock:
    """Where the next engine sample lands in the delivered audio: output samples up to the
    last flush of the resampler (or silence), plus engine samples fed since, at their rate.
    Exact: the resampler has no delay and a flush ends its output at ``ceil(n * out / in)``
    (``voicelane.common.audio.pcm``)."""

    def __init__(self, in_hz: int, out_hz: int) -> None:
        self.in_hz = in_hz
        self.out_hz = out_hz
        self.out_samples = 0
        self.fed_since = 0

    def now_ms(self) -> float:
        return (self.out_samples / self.out_hz + self.fed_since / self.in_hz) * 1000.0

    def fed(self, engine_samples: int) -> None:
        self.fed_since += engine_samples

    def settled(self, out_samples_since: int) -> None:
        """The resampler was flushed (or nothing was pending) and ``out_samples_since``
        output samples went out since the last settling (including any silence)."""
        self.out_samples += out_samples_since
        self.fed_since = 0


def speech_at_rate(
    batcher: Batcher,
    segments: Sequence[SpokenSegment],
    *,
    voice: str,
    speed: float,
    sample_rate_hz: int,
    pause_s: float,
    speaker: SpeakerDef | None = None,
    seed: int | None = None,
    pause_after_last: bool = False,
    after_break: bool = False,
    window: int = 256,
    priority: Priority = Priority.BATCH,
    deadline_s: float | None = None,
    group: str = "",
    timeline: Timeline | None = None,
) -> Iterator[tuple[int, PcmF32]]:
    """PCM at ``sample_rate_hz`` with ``pause_s`` of silence after each paragraph and each
    SSML break's exact silence (module docstring).

    Yields ``(segments done, pcm)`` pieces in order. No paragraph pause follows the last
    segment unless ``pause_after_last`` (a chunk in the middle of a job ending on a
    paragraph); a break does. ``after_break``: a break came just before the first segment
    (the previous chunk of a job ended on one), so its leading silence is cut. ``timeline``
    collects word timings and marks.
    """
    engine_hz = batcher.engine.sample_rate_hz
    resampler = StreamResampler(engine_hz, sample_rate_hz)
    clock = _OutputClock(engine_hz, sample_rate_hz)
    produced = synthesize_segments(
        batcher,
        segments,
        voice=voice,
        speaker=speaker,
        seed=seed,
        speed=speed,
        window=window,
        priority=priority,
        deadline_s=deadline_s,
        group=group,
    )
    last = len(segments) - 1
    pending_out = 0  # output samples since the clock last settled
    for index, (segment, timed) in enumerate(zip(segments, produced, strict=True)):
        pcm, words = timed.pcm, timed.words
        gap_ms = segment.pause_after_ms
        # The engine's own silence at the edges: cut around a break, and the end of the
        # voiced audio for the timings; not looked for when neither needs it.
        if after_break or gap_ms is not None or timeline is not None:
            lead, tail = silence_edges(pcm, engine_hz)
        else:
            lead, tail = 0, 0
        cut_lead = lead if after_break else 0
        cut_tail = tail if gap_ms is not None and lead < len(pcm) else 0
        if cut_lead or cut_tail:
            pcm = pcm[cut_lead : len(pcm) - cut_tail]
        if cut_lead:
            words = tuple(replace(w, sample=max(0, w.sample - cut_lead)) for w in words)
        if segment.voicing.volume_db:
            pcm = apply_gain_db(pcm, segment.voicing.volume_db)
        if timeline is not None:
            voiced = max(0, len(pcm) - (tail - cut_tail)) if lead < len(timed.pcm) else 0
            timeline.add(
                segment,
                words,
                rate_hz=engine_hz,
                start_ms=clock.now_ms(),
                voiced_ms=voiced * 1000.0 / engine_hz,
                onset_ms=(lead - cut_lead) * 1000.0 / engine_hz if lead < len(timed.pcm) else 0.0,
            )
        out = resampler.process(pcm)
        clock.fed(len(pcm))
        pending_out += len(out)
        yield index + 1, out
        more = index < last or pause_after_last
        gap = None
        if gap_ms is not None:
            gap = silence(gap_ms / 1000, sample_rate_hz)
        elif segment.paragraph_end and more:
            gap = silence(pause_s, sample_rate_hz)
        if gap is not None:
            flushed = resampler.flush()
            clock.settled(pending_out + len(flushed) + len(gap))
            pending_out = 0
            yield index + 1, np.concatenate([flushed, gap])
        after_break = gap_ms is not None
    final = resampler.flush()
    clock.settled(pending_out + len(final))
    if timeline is not None:
        timeline.end_ms = round(clock.now_ms())
    yield len(segments), final


AUTO_ENGINE = "auto"
"""The embedded default engine: chosen per text (:func:`embedded_engine`)."""
ENGLISH_ENGINE_PREFERENCE = ("piper", "espeak")
"""Which engine ``auto`` picks for a text without Chinese characters, first installed first:
Piper's neural voice is intelligible where espeak is barely (docs/benchmarks.md, "issue 21:
engines": word error rate 0.1 against 0.8 on the same sentences)."""
CJK_ENGINE = "espeak"
"""...and for a text with Chinese characters (the CPU engine with a Mandarin voice)."""


def embedded_engine(
    engine: str, voice: str | None, text: str, settings: EmbeddedSettings | None = None
) -> tuple[str, str | None]:
    """The engine an embedded render uses, and the voice for it: a voice that names its
    engine (``piper:en_US-joe-medium``) picks it; else ``engine``, where ``auto`` means the
    installed engine of :data:`ENGLISH_ENGINE_PREFERENCE` that has the voice (``en-gb``:
    espeak), and for ``auto`` voices Piper for a text without Chinese characters when it is
    installed, espeak otherwise."""
    named, local = split_voice(voice) if voice else (None, None)
    if named is not None:
        return named, local
    if engine != AUTO_ENGINE:
        return engine, voice
    installed = [name for name in ENGLISH_ENGINE_PREFERENCE if engine_installed(name)]
    if voice and voice != DEFAULT_VOICE:
        for name in installed:
            built = create_engine(name, piper=settings.piper if settings else None)
            if voice in built.capabilities().voice_ids:
                return name, voice
        return installed[0], voice  # unknown to all: refused by the first, naming it
    if contains_cjk(text):
        return CJK_ENGINE, voice
    return installed[0], voice


class EmbeddedRenderer:
    """One engine + one batcher in this process; renders text to files."""

    def __init__(self, settings: EmbeddedSettings, engine: Engine | None = None):
        """``settings.engine`` ``auto``: the engine ``auto`` picks for English text (the
        command line picks by the text: :func:`embedded_engine`)."""
        self.settings = settings
        name, _ = embedded_engine(settings.engine, None, "")
        self.engine = engine or create_engine(
            name, device=settings.device, chattts=settings.chattts, piper=settings.piper
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

    def check_segments(self, prepared: PreparedText, *, voice: str, speed: float) -> None:
        """Raise the permanent error a segment would hit (an SSML voice the engine does not
        have), before any work."""
        seen: set[tuple[str | None, float]] = set()
        for segment in prepared.segments:
            key = (segment.voicing.voice, segment.voicing.rate)
            if key not in seen:
                seen.add(key)
                utterance = utterance_of(self.engine, segment, voice=voice, speed=speed)
                self.engine.validate(replace(utterance, text="check"))

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
        timings: bool = False,
    ) -> RenderResult:
        """Render ``text`` to ``output``; ``timings``: also time its words and marks
        (``RenderResult.words`` and ``marks``; empty without), at a small cost per segment."""
        started = time.perf_counter()
        settings = self.settings
        voice = voice or settings.voice
        rate_hz = sample_rate_hz or settings.sample_rate_hz
        validate_sample_rate(fmt, rate_hz)
        self.check(voice=voice, speed=speed)
        prepared = self.prepare(text, text_options)
        prepared.check_speakable()
        self.check_segments(prepared, voice=voice, speed=speed)
        segments = prepared.segments
        timeline = Timeline(text) if timings else None
        target = Path(output)
        with atomic_output(target) as part:
            writer = open_writer(
                part,
                fmt,
                rate_hz,
                bitrate_bps=settings.opus_bitrate_bps,
                encode_threads=settings.encode_threads,
            )
            try:
                pieces = speech_at_rate(
                    self.batcher,
                    segments,
                    voice=voice,
                    speed=speed,
                    sample_rate_hz=rate_hz,
                    pause_s=settings.paragraph_pause_s,
                    window=settings.render_window,
                    timeline=timeline,
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
        marks = (
            timeline.marks + [MarkTiming(name, timeline.end_ms) for name in prepared.trailing_marks]
            if timeline is not None
            else []
        )
        return RenderResult(
            path=target,
            format=fmt,
            sample_rate_hz=rate_hz,
            duration_s=duration_s,
            elapsed_s=time.perf_counter() - started,
            segments=len(segments),
            characters=len(text),
            warnings=prepared.warnings_json(),
            words=timeline.words if timeline is not None else [],
            marks=marks,
        )
