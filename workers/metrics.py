"""A worker's values read at scrape time: its batcher, its real-time slots, its device memory.

Registered once per worker process by :mod:`voicelane.workers.runtime` (see
:mod:`voicelane.core.metrics` for the event counters and histograms, which the batcher, jobs and
reconciler feed as things happen).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily

from voicelane.common.encode_failures import encode_failures_total
from voicelane.core.metrics import ReadAtScrape, gauge
from voicelane.workers.batching import Batcher


def batcher_families(batcher: Batcher) -> Iterable[GaugeMetricFamily]:
    stats = batcher.stats()
    depth = gauge("voicelane_batcher_queue_depth", "Items waiting in the batcher", ["class"])
    for priority, waiting in stats.queue_depth.items():
        depth.add_metric([priority.name.lower()], waiting)
    busy = gauge("voicelane_batcher_utilisation", "Share of its uptime the engine was busy")
    busy.add_metric([], stats.utilization)
    max_batch = gauge(
        "voicelane_max_batch", "The batcher's current max batch (halved on out-of-memory)"
    )
    max_batch.add_metric([], stats.effective_max_batch)
    loaded = gauge(
        "voicelane_engine_loaded",
        "1 while the engine holds its weights, 0 once unloaded for idleness (it loads again on "
        "the next request)",
        ["engine"],
    )
    loaded.add_metric([batcher.engine.name], 1.0 if batcher.engine_loaded else 0.0)
    return [depth, busy, max_batch, loaded]


def slots_families(free: Callable[[], int], total: int) -> Iterable[GaugeMetricFamily]:
    slots = gauge("voicelane_realtime_slots", "Real-time session slots", ["state"])
    available = free()
    slots.add_metric(["free"], available)
    slots.add_metric(["used"], total - available)
    return [slots]


def memory_families(device: str) -> Iterable[GaugeMetricFamily]:
    """Free memory of the worker's device: the CUDA allocator's view on a GPU (torch is
    already loaded by the engine there), the system's available memory otherwise."""
    family = gauge(
        "gpu_memory_free_bytes", "Free memory of the worker's device", ["device", "source"]
    )
    if device.startswith("cuda"):
        import torch

        free_bytes, _ = torch.cuda.mem_get_info(torch.device(device))
        family.add_metric([device, "cuda"], free_bytes)
    else:
        family.add_metric([device, "system"], _mem_available_bytes())
    return [family]


def codec_families() -> Iterable[GaugeMetricFamily]:
    failures = gauge(
        "voicelane_opus_encode_failures",
        "Opus frames that failed to encode (sent as silence) since the process started",
    )
    failures.add_metric([], encode_failures_total())
    return [failures]


def _mem_available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def register_worker_metrics(
    device: str,
    batcher: Batcher | None,
    free_slots: Callable[[], int] | None,
    total_slots: int,
) -> list[ReadAtScrape]:
    collectors = [ReadAtScrape(codec_families)]
    if batcher is not None:
        collectors.append(ReadAtScrape(lambda: batcher_families(batcher)))
        collectors.append(ReadAtScrape(lambda: memory_families(device)))
    if free_slots is not None:
        collectors.append(ReadAtScrape(lambda: slots_families(free_slots, total_slots)))
    return collectors
