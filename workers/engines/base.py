"""The engine interface: utterances in, float32 mono PCM out at the engine's sample rate.

An engine is owned by exactly one thread (the batcher's scheduler thread): ``load``,
``synthesize``, ``synthesize_stream`` and ``unload`` are only ever called from it, so an
engine needs no locks. ``voices``, ``validate`` and ``batch_key`` may be called from any
thread and must not touch the model.

Streaming is expressed in *steps*: ``synthesize_stream`` yields, per step, one array per
utterance of the batch (empty when that utterance produced nothing new in that step). An
engine that cannot stream inside an utterance yields each utterance whole, one step each;
an engine with a decoding loop (ChatTTS) yields every few decoding steps. This keeps room
for iteration-level scheduling later, where items join a running batch between steps.

An engine that can step a running batch (ChatTTS) sets ``steps = True`` and implements
:meth:`Engine.open_steps`: the batcher then schedules it per decoding step (continuous
batching, :class:`StepSession`) instead of static batches.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from voicelane.common.errors import UnknownVoiceError
from voicelane.core.rules import EngineCapabilities, VoiceInfo, check_speed, check_voice
from voicelane.core.speakers import SpeakerDef

__all__ = [
    "Engine",
    "PcmF32",
    "StepEvent",
    "StepSession",
    "TimedAudio",
    "Utterance",
    "VoiceInfo",
    "WordEvent",
]

PcmF32 = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Utterance:
    """One piece of text to speak, with everything that shapes how it sounds."""

    text: str
    voice: str
    speed: float = 1.0
    """Speaking-rate multiplier: 1.0 is the voice's normal rate."""
    seed: int | None = None
    """For sampling engines: same seed + same text → same audio."""
    params: tuple[tuple[str, float | int | str], ...] = field(default=())
    """Engine-specific sampling parameters, as sorted pairs so utterances stay hashable."""
    speaker: SpeakerDef | None = None
    """A voice the engine does not list (a tenant's voice, a mix), resolved at submission;
    ``voice`` is then ``custom:<digest>``. Only engines whose capabilities list
    ``voice_kinds`` get one."""


@dataclass(frozen=True, slots=True)
class WordEvent:
    """An engine's report that a word starts: ``[char_start, char_end)`` of the utterance's
    text, heard from ``sample`` (at the engine's rate) of the utterance's audio."""

    char_start: int
    char_end: int
    sample: int


@dataclass(frozen=True, slots=True)
class TimedAudio:
    """One utterance's audio with the engine's word events (none where the engine does not
    know its word times: :attr:`Engine.word_timings`)."""

    pcm: PcmF32
    words: tuple[WordEvent, ...] = ()
    """Sample positions count from the start of the utterance's audio."""


@dataclass(frozen=True, slots=True)
class StepEvent:
    """What one step produced for one row of a :class:`StepSession`."""

    handle: int
    audio: PcmF32
    """New audio: a streamed row's next chunk; a whole row's entire audio when it finishes;
    may be empty."""
    finished: bool
    """The row ended (its end-of-utterance or its budget): no more events for it, and its
    memory is released."""
    words: tuple[WordEvent, ...] = ()
    """Word events this step completed (samples from the row's start); none from an engine
    that does not know its word times."""


class StepSession(ABC):
    """One running batch of a stepping engine (continuous batching).

    Driven by one thread (the batcher's scheduler thread). Rows are admitted between steps
    and leave at their own ends; each :meth:`step` advances the rows it is given by one
    decoding step (and admitted rows by a bounded amount of prefill work).
    """

    @abstractmethod
    def admit(self, handle: int, utterance: Utterance, *, stream: bool) -> None:
        """Add a row (it is prefilled by the next steps that include it). ``stream``: its
        audio comes out in chunks as it is made; else whole, with its ``finished`` event.
        ``handle`` is the caller's name for the row, unique within the session."""

    def fits(self, utterance: Utterance) -> bool:
        """Whether one more row like this stays within the session's memory budget (the
        batcher admits a row only then). Default: no budget but the batcher's ``max_batch``."""
        return True

    @abstractmethod
    def remove(self, handle: int) -> None:
        """Drop a row (cancelled, past its deadline, evicted) and release its memory now.
        Unknown handles are ignored."""

    @abstractmethod
    def step(self, handles: Sequence[int]) -> list[StepEvent]:
        """Advance these rows (in priority order; rows not given stay paused, keeping their
        state) by one step: prefill work for admitted rows, bounded per step and given in
        this order, and one decoding step for the rows already decoding.

        On :class:`~voicelane.common.errors.EngineOutOfMemoryError` nothing of the step is
        committed: the caller may remove rows and step again.
        """

    @property
    @abstractmethod
    def handles(self) -> list[int]:
        """The rows in the session, in admission order."""

    @abstractmethod
    def close(self) -> None:
        """Drop every row and release the session's memory."""


class Engine(ABC):
    """A speech engine. Subclasses set ``name`` and ``sample_rate_hz``."""

    name: str = "engine"
    sample_rate_hz: int = 24000
    max_batch: int | None = None
    """Most utterances worth putting in one call; None: as many as the batcher allows.
    An engine that renders a batch one utterance at a time sets 1."""
    min_speed: float = 1.0
    max_speed: float = 1.0
    """The speaking-rate multipliers the engine can render (its published range)."""
    seed_voices: bool = False
    """Any ``seed:N`` is a voice (engines that draw speakers from a seed)."""
    steps: bool = False
    """The engine runs a batch step by step and rows can join and leave between steps
    (:meth:`open_steps`): the batcher schedules it per step (continuous batching)."""
    word_timings: bool = False
    """The engine reports where each word starts (:meth:`synthesize_timed` gives
    :class:`WordEvent`s); published in its capabilities."""
    voice_kinds: tuple[str, ...] = ()
    """The kinds of tenant voice (:data:`voicelane.core.speakers.VOICE_KINDS`) the engine
    renders from :attr:`Utterance.speaker`; published in its capabilities."""
    unload_frees_memory: bool = True
    """:meth:`unload` gives back memory worth an idle unload (``VOICELANE_IDLE_UNLOAD_S``);
    False: the batcher never unloads it for idleness (espeak: nothing of its own to free)."""

    def load(self) -> None:  # noqa: B027 - optional hook
        """Load the model. Called once, on the thread that will run it."""

    def unload(self) -> None:  # noqa: B027 - optional hook
        """Release the model and its memory. ``load`` may be called again afterwards."""

    def memory_in_use_bytes(self) -> int:
        """Memory the engine's device holds for this process: the process's resident memory
        here (a CPU engine); a GPU engine reports its allocator's."""
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    @abstractmethod
    def voices(self) -> list[VoiceInfo]:
        """Every voice this engine can speak with."""

    def capabilities(self) -> EngineCapabilities:
        """What this engine accepts, as workers publish it for the fronts' request rules
        (:mod:`voicelane.core.rules`). Computed once: voices do not change while an engine lives."""
        cached: EngineCapabilities | None = self.__dict__.get("_capabilities")
        if cached is None:
            cached = EngineCapabilities(
                engine=self.name,
                sample_rate_hz=self.sample_rate_hz,
                min_speed=self.min_speed,
                max_speed=self.max_speed,
                voices=tuple(self.voices()),
                seed_voices=self.seed_voices,
                word_timings=self.word_timings,
                voice_kinds=self.voice_kinds,
            )
            self.__dict__["_capabilities"] = cached
        return cached

    def validate(self, utterance: Utterance) -> None:
        """Raise a permanent error when the utterance can never be rendered: the request
        rules of :mod:`voicelane.core.rules` against this engine's capabilities."""
        caps = self.capabilities()
        if utterance.speaker is None:
            check_voice(utterance.voice, caps)
        elif not caps.voice_kinds:
            raise UnknownVoiceError(
                f"voice: the {self.name} engine speaks only its own voices", field="voice"
            )
        check_speed(utterance.speed, caps.min_speed, caps.max_speed)

    def batch_key(self, utterance: Utterance) -> Hashable:
        """What must be identical for two utterances to share one call."""
        return (utterance.voice, utterance.speed, utterance.seed, utterance.params)

    def open_steps(self) -> StepSession:
        """A new, empty running batch (engines with ``steps = True``)."""
        raise NotImplementedError(f"engine {self.name} does not step")

    @abstractmethod
    def synthesize(self, batch: Sequence[Utterance]) -> list[PcmF32]:
        """Render every utterance whole; one array per utterance, in order."""

    def synthesize_stream(self, batch: Sequence[Utterance]) -> Iterator[list[PcmF32]]:
        """Render in steps: each yield holds one (possibly empty) array per utterance.

        The default renders each utterance whole, one step per utterance, so callers see
        the first utterance's audio before the last one is rendered.
        """
        empty = np.zeros(0, dtype=np.float32)
        for index, utterance in enumerate(batch):
            (audio,) = self.synthesize([utterance])
            yield [audio if i == index else empty for i in range(len(batch))]

    def synthesize_timed(self, batch: Sequence[Utterance]) -> list[TimedAudio]:
        """:meth:`synthesize` with each utterance's word events; the default knows none.
        The batcher calls this (and :meth:`synthesize_stream_timed`): an engine that knows
        its words overrides both."""
        return [TimedAudio(pcm) for pcm in self.synthesize(batch)]

    def synthesize_stream_timed(self, batch: Sequence[Utterance]) -> Iterator[list[TimedAudio]]:
        """:meth:`synthesize_stream` with the word events that each step's audio completes
        (sample positions from the start of the utterance, not of the step's chunk); the
        default knows none."""
        steps = self.synthesize_stream(batch)
        try:
            for step in steps:
                yield [TimedAudio(chunk) for chunk in step]
        finally:
            close = getattr(steps, "close", None)
            if close is not None:  # stopped early: the engine's stream stops too
                close()
