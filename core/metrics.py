"""Prometheus metrics: every name voicelane exports, defined once, in one registry per process.

Each process serves its own ``/metrics``: the REST API on its port, the gRPC front and the
workers on ``VOICELANE_METRICS_PORT`` (:func:`serve`; ``voicelane up`` gives each one a port and
writes the Prometheus file-SD target list). No process forks after import (Celery runs a
threads pool, uvicorn one process), so the default registry is per process and no
multiprocess mode is needed.

The reference design's names are kept as they are (``chattts_stream_latency_ms``,
``gpu_memory_free_bytes``, ``grpc_stream_errors_total``); voicelane's own are under
``voicelane_*``. Values read from live objects (queues, slots, memory) are collected at
scrape time (:class:`Collector` subclasses register themselves), events are counted as they
happen.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from prometheus_client import (
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

_LATENCY_MS_BUCKETS = (5, 10, 20, 50, 100, 150, 200, 300, 500, 1000, 2000, 5000, 10000)
_WAIT_S_BUCKETS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
_RTF_BUCKETS = (1, 3, 10, 30, 100, 300, 1000, 3000)

# ---- fronts --------------------------------------------------------------------------------

STREAM_LATENCY_MS = Histogram(
    "chattts_stream_latency_ms",
    "First-audio latency of a real-time stream as its front saw it: submission to the first "
    "audio chunk, in milliseconds",
    ["front", "engine"],
    buckets=_LATENCY_MS_BUCKETS,
)
GRPC_STREAM_ERRORS = Counter(
    "grpc_stream_errors_total",
    "gRPC calls of the speech service that ended with an error status",
    ["method", "code"],
)

# ---- workers: batcher and engine -----------------------------------------------------------

BATCH_SIZE = Histogram(
    "voicelane_batch_size",
    "Items per engine call, by the highest class in the batch",
    ["class"],
    buckets=_BATCH_BUCKETS,
)
BATCH_WAIT_S = Histogram(
    "voicelane_batch_wait_seconds",
    "Submission to batch start, per item, by class",
    ["class"],
    buckets=_WAIT_S_BUCKETS,
)
REALTIME_FACTOR = Histogram(
    "voicelane_realtime_factor",
    "Seconds of audio an engine call produced per second it took",
    buckets=_RTF_BUCKETS,
)
TEXT_UNSPEAKABLE_CHARS = Counter(
    "voicelane_text_unspeakable_chars_total",
    "Characters left out because the engine cannot speak them (after normalization), by engine",
    ["engine"],
)


def count_unspeakable(engine: str, chars: int) -> None:
    """Count characters a text lost to the engine's alphabet (listed as warnings too)."""
    if chars:
        TEXT_UNSPEAKABLE_CHARS.labels(engine=engine).inc(chars)


OOM_EVENTS = Counter(
    "voicelane_oom_events_total", "Engine out-of-memory errors (the batcher halves max_batch)"
)
PREEMPTIONS = Counter(
    "voicelane_batch_preemptions_total",
    "Batch rows taken out of a running batch (memory freed, queued again) to make room for a "
    "real-time row that did not fit",
)
ENGINE_RELOADS = Counter(
    "voicelane_engine_reloads_total", "Hot-swaps: the engine's weights reloaded in place"
)
ENGINE_MEMORY_BYTES = Gauge(
    "voicelane_engine_memory_bytes",
    "The engine's memory around its last reload, idle unload and load again (CUDA allocator "
    "on a GPU, RSS on the CPU), by when: before_reload, unloaded, after_reload, "
    "before_idle_unload, idle_unloaded, after_idle_reload",
    ["when"],
)
_LOAD_S_BUCKETS = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0)
ENGINE_LOAD_S = Histogram(
    "voicelane_engine_load_seconds",
    "Time the engine took to load its weights, by cause: start, demand (new work after an "
    "idle unload), reload (a hot-swap)",
    ["engine", "cause"],
    buckets=_LOAD_S_BUCKETS,
)
ENGINE_IDLE_UNLOADS = Counter(
    "voicelane_engine_idle_unloads_total",
    "Times the engine dropped its weights after VOICELANE_IDLE_UNLOAD_S without work",
    ["engine"],
)
CHUNK_RETRIES = Counter(
    "voicelane_chunk_retries_total", "Batch-lane chunks rendered again after a failed attempt"
)
LEASE_TAKEOVERS = Counter(
    "voicelane_lease_takeovers_total",
    "Chunks re-queued by the reconciler after their worker's lease lapsed",
)
CALLBACK_FAILURES = Counter(
    "voicelane_callback_failures_total",
    "Job callback attempts that failed (not sent, refused, unreachable, or a non-2xx answer)",
)


# ---- the LLM lane (api/llm.py: the bridge to Ollama) ---------------------------------------

_TTFT_S_BUCKETS = (0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0)

OLLAMA_BATCH_SIZE = Gauge(
    "ollama_batch_size",
    "Generations in flight on an Ollama host (the LLM's batch), as the bridge counts them",
    ["host"],
)
OLLAMA_TIME_TO_FIRST_TOKEN_S = Histogram(
    "ollama_time_to_first_token_seconds",
    "Request sent to Ollama to the reply's first text (queue wait for a slot not included)",
    ["model"],
    buckets=_TTFT_S_BUCKETS,
)
LLM_REPLIES = Counter(
    "voicelane_llm_replies_total",
    "LLM replies asked for, by how they ended: ok, cancelled, not_found, unavailable, "
    "timeout, invalid, queue_full (the tenant's queue for slots), queue_timeout",
    ["outcome"],
)
LLM_TOKENS = Counter(
    "voicelane_llm_tokens_total",
    "Tokens Ollama reported for finished replies, by kind: prompt, reply",
    ["kind"],
)
LLM_WAITING = Gauge(
    "voicelane_llm_waiting_replies",
    "Replies waiting for a generation slot (max_parallel) in this front",
)
LLM_QUEUE_WAIT_S = Histogram(
    "voicelane_llm_queue_wait_seconds",
    "Time a reply waited for a generation slot of its Ollama host (max_parallel)",
    buckets=_WAIT_S_BUCKETS,
)
CONVERSATIONS = Counter(
    "voicelane_chat_conversations_total",
    "Chats (an LLM's reply spoken) by how they ended: ok, cancelled, failed, refused",
    ["outcome"],
)

# ---- values read at scrape time ------------------------------------------------------------


class ReadAtScrape(Collector):
    """Gauges whose values come from ``read()`` when Prometheus scrapes (queue depths, free
    slots, memory): nothing to keep up to date between scrapes. A failing read is logged and
    the family left out of that scrape."""

    def __init__(self, read: Callable[[], Iterable[GaugeMetricFamily]]) -> None:
        self._read = read
        REGISTRY.register(self)

    def collect(self) -> Iterable[GaugeMetricFamily]:
        try:
            return list(self._read())
        except Exception as error:
            log.warning("metrics: could not read values: %s", error)
            return []

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return []  # families are produced at scrape time; no fixed description

    def close(self) -> None:
        REGISTRY.unregister(self)


def gauge(name: str, documentation: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=labels)


def serve(port: int, host: str = "127.0.0.1") -> None:
    """Serve this process's ``/metrics`` on ``port`` (a daemon thread)."""
    start_http_server(port, addr=host)
    log.info("metrics on http://%s:%d/metrics", host, port)


__all__ = [
    "BATCH_SIZE",
    "BATCH_WAIT_S",
    "CALLBACK_FAILURES",
    "CHUNK_RETRIES",
    "CONVERSATIONS",
    "ENGINE_IDLE_UNLOADS",
    "ENGINE_LOAD_S",
    "ENGINE_MEMORY_BYTES",
    "ENGINE_RELOADS",
    "GRPC_STREAM_ERRORS",
    "LEASE_TAKEOVERS",
    "LLM_QUEUE_WAIT_S",
    "LLM_REPLIES",
    "LLM_TOKENS",
    "LLM_WAITING",
    "OLLAMA_BATCH_SIZE",
    "OLLAMA_TIME_TO_FIRST_TOKEN_S",
    "OOM_EVENTS",
    "PREEMPTIONS",
    "REALTIME_FACTOR",
    "STREAM_LATENCY_MS",
    "ReadAtScrape",
    "gauge",
    "serve",
]
