"""The dynamic batcher of one engine (one per GPU), shared by both lanes: see
:mod:`voicelane.workers.batching.batcher` for its rules and its parts."""

from voicelane.workers.batching.batcher import Batcher
from voicelane.workers.batching.items import AudioStream, Priority, StreamEvent, StreamWords
from voicelane.workers.batching.lifecycle import ReloadReport
from voicelane.workers.batching.metrics import BatcherStats, WaitStats

__all__ = [
    "AudioStream",
    "Batcher",
    "BatcherStats",
    "Priority",
    "ReloadReport",
    "StreamEvent",
    "StreamWords",
    "WaitStats",
]
