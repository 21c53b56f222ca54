"""A stream's packets decoded to PCM (:class:`PcmAssembler`, with packet-loss concealment of
pts gaps), the decoded result (:class:`SynthesisResult`, with the stream's captions, word
timings and SSML marks), and writing it to a file atomically."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from voicelane.client.stats import StreamStats
from voicelane.common.atomic import atomic_output
from voicelane.common.audio.files import AudioFormat, open_writer
from voicelane.common.audio.opus import FRAME_DURATION_MS, OpusStreamDecoder
from voicelane.common.audio.pcm import PcmF32
from voicelane.common.wire import speech_pb2 as pb

MAX_CONCEALED_GAP_MS = 10_000
"""A pts jump larger than this is taken as a broken timestamp, not a gap to fill."""


@dataclass(frozen=True)
class SynthesisResult:
    """Decoded audio of one stream: mono float32 ``pcm`` at ``sample_rate_hz``.

    The codec delay (6.5 ms) is trimmed from the start, so sample ``i`` is the server's input
    sample ``i``; ``len(pcm) == packets * frame - delay`` plus any concealed gap. ``chunks``
    and ``packets`` count what arrived; ``concealed_ms`` is audio filled in where the
    presentation timestamps jumped (a worker takeover, see DESIGN.md).

    ``words`` (engines that know their word times, such as espeak) are the words of the
    request's text in order, each with its span in the text and its time in ``pcm``
    (``start_ms`` / 1000 * ``sample_rate_hz`` is its first sample); ``marks`` are the SSML
    marks reached, with their times.
    """

    pcm: PcmF32
    sample_rate_hz: int
    chunks: int
    packets: int
    captions: tuple[pb.Caption, ...]
    stats: StreamStats
    concealed_ms: int = 0
    words: tuple[pb.Word, ...] = ()
    marks: tuple[pb.MarkReached, ...] = ()

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / self.sample_rate_hz

    def words_json(self) -> list[dict[str, Any]]:
        """The word timings as ``voicelane say --words`` writes them: ``[{"text",
        "start_ms", "end_ms", "char_start", "char_end"}]``."""
        return [words_entry(word) for word in self.words]

    def marks_json(self) -> list[dict[str, Any]]:
        """The SSML marks as ``voicelane say --marks`` writes them: ``[{"name",
        "time_ms"}]``."""
        return [{"name": mark.name, "time_ms": mark.time_ms} for mark in self.marks]


def words_entry(word: pb.Word) -> dict[str, Any]:
    """A word as JSON (the shape of ``voicelane say --words`` and the WebSocket)."""
    return {
        "text": word.text,
        "start_ms": word.start_ms,
        "end_ms": word.end_ms,
        "char_start": word.char_start,
        "char_end": word.char_end,
    }


class PcmAssembler:
    """Decodes a stream's packets in order; fills pts gaps with packet-loss concealment."""

    def __init__(self, sample_rate_hz: int) -> None:
        self.sample_rate_hz = sample_rate_hz
        self._decoder = OpusStreamDecoder(sample_rate_hz)
        self._parts: list[PcmF32] = []
        self._next_pts_ms = 0
        self.chunks = 0
        self.packets = 0
        self.concealed_ms = 0
        self.captions: list[pb.Caption] = []
        self.words: list[pb.Word] = []
        self.marks: list[pb.MarkReached] = []

    def add(self, chunk: pb.AudioChunk) -> None:
        self.chunks += 1
        self.captions.extend(chunk.captions)
        self.words.extend(chunk.words)
        self.marks.extend(chunk.marks)
        if not chunk.opus_packets:
            return
        self._conceal_gap(chunk.pts_ms - self._next_pts_ms)
        for packet in chunk.opus_packets:
            self._parts.append(self._decoder.decode(packet))
            self._next_pts_ms += FRAME_DURATION_MS
            self.packets += 1

    def _conceal_gap(self, gap_ms: int) -> None:
        if gap_ms < FRAME_DURATION_MS or gap_ms > MAX_CONCEALED_GAP_MS:
            return
        for _ in range(gap_ms // FRAME_DURATION_MS):
            self._parts.append(self._decoder.decode(b""))
            self._next_pts_ms += FRAME_DURATION_MS
            self.concealed_ms += FRAME_DURATION_MS

    def pcm(self) -> PcmF32:
        """Everything decoded, minus the codec delay at the start."""
        if not self._parts:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(self._parts)[self._decoder.codec_delay_samples :]

    def result(self, stats: StreamStats) -> SynthesisResult:
        return SynthesisResult(
            pcm=self.pcm(),
            sample_rate_hz=self.sample_rate_hz,
            chunks=self.chunks,
            packets=self.packets,
            captions=tuple(self.captions),
            stats=stats,
            concealed_ms=self.concealed_ms,
            words=tuple(self.words),
            marks=tuple(self.marks),
        )


def write_atomically(
    path: Path, fmt: AudioFormat, sample_rate_hz: int, pcm: PcmF32, bitrate_bps: int | None
) -> None:
    """Encode to a temporary file beside ``path``, fsync, rename; remove it on any failure."""
    with (
        atomic_output(path) as part,
        open_writer(part, fmt, sample_rate_hz, bitrate_bps=bitrate_bps) as writer,
    ):
        writer.write(pcm)
