"""A stand-in Ollama server: Ollama's HTTP protocol, no model behind it.

No Ollama binary or weights can run where the tests run, so this server speaks the protocol
the official ``ollama`` client (0.6.3) talks (``/work/shared/notes/ollama.md``), and the real
``ollama.AsyncClient`` works against it unchanged:

* ``POST /api/chat`` — ``stream`` true (the default): NDJSON, one chunk per token
  (``{"model","created_at","message":{"role":"assistant","content":TOKEN},"done":false}``),
  the last one ``done: true`` with ``done_reason: "stop"`` and ``total_duration,
  load_duration, prompt_eval_count, prompt_eval_duration, eval_count, eval_duration`` (ns);
  ``stream`` false: one JSON object with the whole message and the same numbers. An empty
  (or missing) ``messages`` list is a preload: ``done_reason: "load"`` at once (``"unload"``
  with ``keep_alive`` 0).
* ``POST /api/generate`` — the same with ``prompt``/``response``; an empty prompt is a
  preload.
* ``GET /api/tags``, ``GET /api/ps`` (the models used so far, with the ``num_ctx`` they were
  last asked for as ``context_length``), ``GET /api/version``.

The reply text is ``StandinConfig.reply(body)`` — by default :func:`default_reply`: a
deterministic few sentences that depend on the last user message (English; Chinese when that
message holds CJK), with a little markdown (a ``**bold**`` word) and a decimal and an
abbreviation for the sentence splitter. :func:`tokenize` cuts it the way a tokenizer would
(pieces of 1-6 characters, a space attached to the word after it, 1-2 CJK characters per
token); tokens go out at ``tokens_per_s`` (default 50; 0: as fast as possible) after
``first_token_delay_s`` (default 0).

Faults are chosen by the **model name**, so that a test can pick one through the whole stack
(a tagless name also matches ``NAME:latest``):

==================  =================================================================
model               behaviour
==================  =================================================================
``models``          the normal models; default ``("llama3.2:3b", "qwen2.5:7b")``
anything else       404 ``{"error":"model 'X' not found"}``
``busy``            503 ``{"error":"server busy, please try again.  maximum pending
                    requests exceeded"}``
``error-mid``       ``tokens_before_fault`` tokens (default 5), then an
                    ``{"error": error_message}`` line (HTTP 200)
``disconnect``      ``tokens_before_fault`` tokens, then the socket is closed (no ``done``)
``stall``           ``tokens_before_fault`` tokens, then nothing until the client leaves
``truncated``       ``tokens_before_fault`` tokens, then the body ends cleanly without a
                    ``done`` line (the client raises nothing: its caller must notice)
==================  =================================================================

The fault names are ``StandinConfig.busy_model`` / ``error_mid_model`` /
``disconnect_model`` / ``stall_model`` / ``truncated_model``. A request without a model gets 400
``{"error":"model is required"}``.

Observations, for tests: :attr:`OllamaStandin.requests` (every request: path and JSON body),
:attr:`OllamaStandin.generations` (one :class:`Generation` per chat or generate that was not a
preload: tokens planned and sent, when the client disconnected, whether generation stopped
then), :attr:`OllamaStandin.in_flight` and :attr:`OllamaStandin.max_in_flight` (a generation
counts from its start until its last token, before the final ``done`` line goes out),
:meth:`OllamaStandin.wait_until`. :meth:`OllamaStandin.hold` keeps every new generation before
its first token until :meth:`OllamaStandin.release`.

Two ways to run it: in-process (``with OllamaStandin(config) as server: server.url``; uvicorn
in a thread on 127.0.0.1, port 0 by default) and as a process for a demo::

    python -m voicelane.api.ollama_standin --port 11434 [--tokens-per-s 50]

which prints one line with its URL and stops cleanly on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import logging
import re
import signal
import socket
import sys
import threading
import time
import zlib
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import uvicorn

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

DEFAULT_MODELS = ("llama3.2:3b", "qwen2.5:7b")
BUSY_ERROR = "server busy, please try again.  maximum pending requests exceeded"
VERSION = "0.12.6"
_HOLD_POLL_S = 0.005
_NS = 1_000_000_000


# ---- the reply text and its tokens ------------------------------------------------------------

_CJK = (
    "\u2e80-\u2fff\u3000-\u303f\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
)
_HAS_CJK = re.compile(f"[{_CJK}]")
_PIECE = re.compile(
    rf"\n+"  # line breaks on their own
    rf"| ?[{_CJK}]+"  # a run of CJK (cut into 1-2 characters below)
    rf"| ?[^\W{_CJK}]+"  # a word (or number), its leading space attached
    rf"| ?[^\w\s{_CJK}]{{1,3}}"  # punctuation and markdown marks, up to 3 together
    rf"|\s"  # any other whitespace
    rf"|.",  # anything else, so that the pieces always cover the text
    re.DOTALL,
)
_WORD_CUTS = (4, 3, 5, 2, 6)  # lengths a long word is cut into, in turn (deterministic)
_CJK_CUTS = (2, 1, 2, 2, 1)


def tokenize(text: str) -> list[str]:
    """``text`` cut into tokens the way a tokenizer would: ``"".join(tokenize(t)) == t``."""
    tokens: list[str] = []
    for match in _PIECE.finditer(text):
        piece = match.group()
        body = piece.lstrip(" ")
        if body and _HAS_CJK.match(body):
            cuts = _CJK_CUTS
        elif len(piece) > 6:
            cuts = _WORD_CUTS
        else:
            tokens.append(piece)
            continue
        start, turn = 0, 0
        while start < len(piece):
            size = cuts[turn % len(cuts)] + (1 if turn == 0 and piece.startswith(" ") else 0)
            tokens.append(piece[start : start + size])
            start += size
            turn += 1
    return tokens


def last_user_text(body: Mapping[str, Any]) -> str:
    """The last user message of a chat body (or a generate body's prompt)."""
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                return str(message.get("content") or "")
    return str(body.get("prompt") or "")


def default_reply(body: Mapping[str, Any]) -> str:
    """A deterministic reply to the last user message: English, or Chinese when it holds CJK."""
    asked = " ".join(last_user_text(body).split())
    variant = zlib.crc32(asked.encode()) % 3
    if _HAS_CJK.search(asked):
        topic = asked[:12].rstrip("。！？，、；：?!.,;: ")
        openers = ("好问题。", "明白了。", "我来说说。")
        return (
            f"{openers[variant]}你问的是「{topic}」。这里有一个**简短**的回答：先把问题拆开，"
            f"再逐一解决。其次，检查细节；然后再试一次！还有别的问题吗？"
        )
    words = re.findall(r"[\w']+", asked)
    topic = " ".join(words[:8]) or "nothing in particular"
    openers = ("Good question.", "Let me think about that.", "Here is what I know.")
    return (
        f"{openers[variant]} You asked about {topic}. The **short** answer is that it "
        f"depends on about 3.14 things, and Dr. Smith agrees. First, keep it simple! Second, "
        f"check the details; then try again. Is there anything else you would like to know?"
    )


def estimate_prompt_tokens(body: Mapping[str, Any]) -> int:
    """A rough prompt size for ``prompt_eval_count``: what a tokenizer would count."""
    texts: list[str] = []
    messages = body.get("messages")
    if isinstance(messages, list):
        texts.extend(str(m.get("content") or "") for m in messages if isinstance(m, dict))
    texts.append(str(body.get("prompt") or ""))
    texts.append(str(body.get("system") or ""))
    return sum(len(tokenize(t)) for t in texts) + 4 * len(texts)


# ---- configuration and observations ---------------------------------------------------------


@dataclass
class StandinConfig:
    """How the stand-in behaves; change fields before or during a test."""

    models: tuple[str, ...] = DEFAULT_MODELS
    tokens_per_s: float = 50.0
    """Tokens emitted per second (0: no pacing)."""
    first_token_delay_s: float = 0.0
    """Pause before the first token (prompt evaluation)."""
    reply: Callable[[Mapping[str, Any]], str] = default_reply
    """The reply text for a request body."""
    busy_model: str = "busy"
    error_mid_model: str = "error-mid"
    disconnect_model: str = "disconnect"
    stall_model: str = "stall"
    truncated_model: str = "truncated"
    tokens_before_fault: int = 5
    """Tokens sent before the error line, the disconnect or the stall."""
    error_message: str = "an error was encountered while running the model: unexpected EOF"
    load_duration_ns: int = 2_000_000
    """``load_duration`` reported (the model stays loaded)."""
    version: str = VERSION


@dataclass
class RecordedRequest:
    method: str
    path: str
    body: dict[str, Any] | None
    received_at: float
    """``time.monotonic()`` when the body had been read."""


@dataclass
class Generation:
    """One chat or generate that was not a preload, as the stand-in served it."""

    path: str
    model: str
    stream: bool
    body: dict[str, Any]
    tokens_planned: int
    started_at: float
    tokens_sent: int = 0
    disconnected_at: float | None = None
    """``time.monotonic()`` when the client went away before the end (None: it did not)."""
    stopped_at: float | None = None
    """When generation stopped (its last token, a fault, or the disconnect)."""
    stopped_on_disconnect: bool = False
    """Generation stopped because the client left, before every planned token was sent."""
    fault: str | None = None
    """The fault model's name when the model was one (error-mid, disconnect, stall,
    truncated)."""
    outcome: str = "running"
    """running, done, error (the error line, or an exception), disconnect and truncated (the
    faults), client_gone (the client left first: ``stopped_on_disconnect``), server_stopped."""


def _same_model(asked: str, name: str) -> bool:
    def full(n: str) -> str:
        return n if ":" in n else f"{n}:latest"

    return full(asked) == full(name)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def keep_alive_s(value: object) -> float | None:
    """Seconds a ``keep_alive`` asks for (negative: forever; None: the default, 5 min)."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    with contextlib.suppress(ValueError):
        return float(text)
    sign = -1.0 if text.startswith("-") else 1.0
    parts = _DURATION.findall(text.lstrip("+-"))
    if not parts or "".join(n + u for n, u in parts) != text.lstrip("+-"):
        return None
    return sign * sum(float(n) * _UNIT_S[u] for n, u in parts)


def _now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")


class _DropFilter(logging.Filter):
    """Hides uvicorn's complaint about the ``disconnect`` fault's deliberately cut response."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "returned without completing response" not in record.getMessage()


_DROP_FILTER = _DropFilter()


# ---- the ASGI application ---------------------------------------------------------------------


class _Exchange:
    """One streamed response: sends lines, watches for the client leaving."""

    def __init__(self, receive: Receive, send: Send, abort: asyncio.Event) -> None:
        self._receive = receive
        self._send = send
        self._server_abort = abort
        self.gone = asyncio.Event()
        self.gone_at: float | None = None
        self.finished = False
        self._watcher = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                if not self.finished:
                    self.gone_at = time.monotonic()
                    self.gone.set()
                return

    def left(self) -> bool:
        return self.gone.is_set() or self._server_abort.is_set()

    async def pause_until(self, deadline: float) -> bool:
        """Wait until ``deadline`` (monotonic); False if the client left (or the server
        stops) first."""
        while not self.left():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            await self._wait_any(remaining)
        return False

    async def pause_forever(self) -> None:
        while not self.left():
            await self._wait_any(None)

    async def _wait_any(self, timeout: float | None) -> None:
        waits = [asyncio.ensure_future(self.gone.wait()), asyncio.ensure_future(self._abort())]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    async def _abort(self) -> None:
        await self._server_abort.wait()

    async def start(self, status: int = 200, content_type: bytes = b"application/x-ndjson") -> None:
        await self._send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", content_type)],
            }
        )

    async def line(self, obj: Mapping[str, Any]) -> None:
        body = (json.dumps(obj, ensure_ascii=False) + "\n").encode()
        await self._send({"type": "http.response.body", "body": body, "more_body": True})

    async def end(self) -> None:
        self.finished = True
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def json(self, status: int, obj: Mapping[str, Any]) -> None:
        self.finished = True
        await _json(self._send, status, obj)

    def close(self) -> None:
        self._watcher.cancel()


class _App:
    def __init__(self, standin: OllamaStandin) -> None:
        self.standin = standin
        self.abort = asyncio.Event()  # created in the server's loop (see OllamaStandin._serve)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        routes: dict[str, tuple[str, Callable[..., Awaitable[None]]]] = {
            "/api/chat": ("POST", self.chat),
            "/api/generate": ("POST", self.generate),
            "/api/tags": ("GET", self.tags),
            "/api/ps": ("GET", self.ps),
            "/api/version": ("GET", self.version),
        }
        if path not in routes:
            await _plain(send, 404, "404 page not found")
            return
        allowed, handler = routes[path]
        if method != allowed and not (method == "HEAD" and allowed == "GET"):
            await _plain(send, 405, "405 method not allowed")
            return
        raw = await _read_body(receive)
        body: dict[str, Any] | None = None
        if allowed == "POST":
            try:
                parsed = json.loads(raw or b"{}")
            except json.JSONDecodeError as error:
                self.standin._record(RecordedRequest(method, path, None, time.monotonic()))
                await _json(send, 400, {"error": f"invalid request body: {error}"})
                return
            if not isinstance(parsed, dict):
                await _json(send, 400, {"error": "invalid request body"})
                return
            body = parsed
        self.standin._record(RecordedRequest(method, path, body, time.monotonic()))
        await handler(body, receive, send)

    # -- GET

    async def tags(self, _body: object, _receive: Receive, send: Send) -> None:
        models = [
            {
                "name": name,
                "model": name,
                "modified_at": "2025-01-01T00:00:00Z",
                "size": 2_000_000_000,
                "digest": f"{zlib.crc32(name.encode()):08x}" * 8,
                "details": {
                    "format": "gguf",
                    "family": name.split(":")[0],
                    "parameter_size": name.split(":")[-1].upper(),
                    "quantization_level": "Q4_K_M",
                },
            }
            for name in self.standin.config.models
        ]
        await _json(send, 200, {"models": models})

    async def ps(self, _body: object, _receive: Receive, send: Send) -> None:
        now = dt.datetime.now(dt.UTC)
        models = []
        for name, (until, num_ctx) in sorted(self.standin.loaded.items()):
            expires = (
                "2318-01-01T00:00:00Z"
                if until is None
                else (now + dt.timedelta(seconds=max(0.0, until - time.monotonic())))
                .isoformat()
                .replace("+00:00", "Z")
            )
            models.append(
                {
                    "name": name,
                    "model": name,
                    "size": 3_000_000_000,
                    "digest": f"{zlib.crc32(name.encode()):08x}" * 8,
                    "details": {"format": "gguf", "family": name.split(":")[0]},
                    "expires_at": expires,
                    "size_vram": 3_000_000_000,
                    "context_length": num_ctx,
                }
            )
        await _json(send, 200, {"models": models})

    async def version(self, _body: object, _receive: Receive, send: Send) -> None:
        await _json(send, 200, {"version": self.standin.config.version})

    # -- POST

    async def chat(self, body: dict[str, Any], receive: Receive, send: Send) -> None:
        await self._generation("/api/chat", body, receive, send)

    async def generate(self, body: dict[str, Any], receive: Receive, send: Send) -> None:
        await self._generation("/api/generate", body, receive, send)

    async def _generation(
        self, path: str, body: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        config = self.standin.config
        model = body.get("model")
        if not isinstance(model, str) or not model:
            await _json(send, 400, {"error": "model is required"})
            return
        faults = (
            config.error_mid_model,
            config.disconnect_model,
            config.stall_model,
            config.truncated_model,
        )
        if _same_model(model, config.busy_model):
            await _json(send, 503, {"error": BUSY_ERROR})
            return
        known = any(_same_model(model, m) for m in (*config.models, *faults))
        if not known:
            await _json(send, 404, {"error": f"model '{model}' not found"})
            return
        chat = path == "/api/chat"
        self.standin._loaded(model, body)
        is_preload = not body.get("messages") if chat else not body.get("prompt")
        if is_preload:
            unload = keep_alive_s(body.get("keep_alive")) == 0
            reason = "unload" if unload else "load"
            if unload:
                self.standin.loaded.pop(model, None)
            answer: dict[str, Any] = {"model": model, "created_at": _now_rfc3339()}
            if chat:
                answer["message"] = {"role": "assistant", "content": ""}
            else:
                answer["response"] = ""
            answer.update(done=True, done_reason=reason)
            await _json(send, 200, answer)
            return

        fault = next((f for f in faults if _same_model(model, f)), None)
        tokens = tokenize(config.reply(body))
        planned = len(tokens)
        if fault is not None:
            tokens = tokens[: config.tokens_before_fault]
        stream = body.get("stream", True) is not False
        generation = Generation(path, model, stream, body, planned, time.monotonic(), fault=fault)
        exchange = _Exchange(receive, send, self.abort)
        self.standin._started(generation)
        try:
            await self._emit(
                exchange, generation, model=model, chat=chat, tokens=tokens, fault=fault, body=body
            )
        finally:
            exchange.close()
            self.standin._stopped(generation)

    async def _emit(
        self,
        exchange: _Exchange,
        generation: Generation,
        *,
        model: str,
        chat: bool,
        tokens: list[str],
        fault: str | None,
        body: dict[str, Any],
    ) -> None:
        config = self.standin.config
        standin = self.standin

        def chunk(text: str) -> dict[str, Any]:
            out: dict[str, Any] = {"model": model, "created_at": _now_rfc3339()}
            if chat:
                out["message"] = {"role": "assistant", "content": text}
            else:
                out["response"] = text
            out["done"] = False
            return out

        def stop(outcome: str) -> None:
            generation.outcome = outcome
            if generation.stopped_at is None:
                generation.stopped_at = time.monotonic()
                standin._finished(generation)

        def client_left() -> None:
            generation.disconnected_at = exchange.gone_at
            generation.stopped_on_disconnect = exchange.gone.is_set()
            stop("client_gone" if exchange.gone.is_set() else "server_stopped")

        while standin.held() and not exchange.left():
            await exchange.pause_until(time.monotonic() + _HOLD_POLL_S)
        began = time.monotonic()
        first_at = began + config.first_token_delay_s
        rate = config.tokens_per_s
        if generation.stream:
            await exchange.start()
        for index, token in enumerate(tokens):
            due = first_at + (index / rate if rate > 0 else 0.0)
            if not await exchange.pause_until(due):
                client_left()
                return
            if generation.stream:
                await exchange.line(chunk(token))
            generation.tokens_sent += 1
        if exchange.left():
            client_left()
            return
        if fault == config.error_mid_model:
            stop("error")
            if generation.stream:
                await exchange.line({"error": config.error_message})
                await exchange.end()
            else:
                await exchange.json(500, {"error": config.error_message})
            return
        if fault == config.disconnect_model:
            stop("disconnect")
            if not generation.stream:
                await exchange.start(content_type=b"application/json")
                await exchange.line({"model": model})
            return  # the response is never completed: uvicorn closes the socket
        if fault == config.truncated_model:
            stop("truncated")
            if generation.stream:
                await exchange.end()
            else:
                await exchange.json(200, chunk("".join(tokens)))
            return
        if fault == config.stall_model:
            await exchange.pause_forever()  # in flight until the client leaves
            client_left()
            return

        stop("done")  # the generation is over before its final line goes out
        ended = time.monotonic()
        prompt_eval_ns = int((first_at - began) * _NS)
        final = chunk("" if generation.stream else "".join(tokens))
        final.update(
            done=True,
            done_reason="stop",
            total_duration=int((ended - generation.started_at) * _NS) + config.load_duration_ns,
            load_duration=config.load_duration_ns,
            prompt_eval_count=estimate_prompt_tokens(body),
            prompt_eval_duration=prompt_eval_ns,
            eval_count=len(tokens),
            eval_duration=max(0, int((ended - first_at) * _NS)),
        )
        if generation.stream:
            await exchange.line(final)
            await exchange.end()
        else:
            await exchange.json(200, final)


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _json(send: Send, status: int, obj: Mapping[str, Any]) -> None:
    body = json.dumps(obj, ensure_ascii=False).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


# ---- the server -------------------------------------------------------------------------------


class OllamaStandin:
    """The stand-in Ollama, served by uvicorn in a thread (:meth:`start` / :meth:`stop`, or a
    context manager). Its state is safe to read from any thread."""

    def __init__(
        self, config: StandinConfig | None = None, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.config = config or StandinConfig()
        self.host = host
        self.port = port
        self.requests: list[RecordedRequest] = []
        self.generations: list[Generation] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.loaded: dict[str, tuple[float | None, int | None]] = {}
        """Models used so far → (monotonic expiry or None for forever, last num_ctx)."""
        self._lock = threading.Lock()
        self._hold = threading.Event()
        self._thread: threading.Thread | None = None
        self._server: uvicorn.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._app: _App | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- observations

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _loaded(self, model: str, body: Mapping[str, Any]) -> None:
        keep = keep_alive_s(body.get("keep_alive"))
        keep = 300.0 if keep is None else keep
        options = body.get("options")
        num_ctx = options.get("num_ctx") if isinstance(options, dict) else None
        until = None if keep < 0 else time.monotonic() + keep
        with self._lock:
            self.loaded[model] = (until, num_ctx)

    def _started(self, generation: Generation) -> None:
        with self._lock:
            self.generations.append(generation)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _finished(self, generation: Generation) -> None:
        with self._lock:
            self.in_flight -= 1

    def _stopped(self, generation: Generation) -> None:
        if generation.stopped_at is None:  # ended by an exception: count it out anyway
            generation.stopped_at = time.monotonic()
            generation.outcome = "error"
            self._finished(generation)

    def bodies(self, path: str = "/api/chat") -> list[dict[str, Any]]:
        """The JSON bodies received on ``path``, in order."""
        with self._lock:
            return [r.body for r in self.requests if r.path == path and r.body is not None]

    def reset(self) -> None:
        """Forget what was recorded (the in-flight count stays)."""
        with self._lock:
            self.requests.clear()
            self.generations.clear()
            self.max_in_flight = self.in_flight

    def hold(self) -> None:
        """Keep every generation before its first token until :meth:`release`."""
        self._hold.set()

    def release(self) -> None:
        self._hold.clear()

    def held(self) -> bool:
        return self._hold.is_set()

    async def wait_until(self, condition: Callable[[Self], bool], timeout_s: float = 10.0) -> None:
        """Poll ``condition(self)`` until it holds; TimeoutError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not condition(self):
            if time.monotonic() > deadline:
                raise TimeoutError(f"stand-in condition not met within {timeout_s} s")
            await asyncio.sleep(0.005)

    # -- running

    def start(self) -> Self:
        """Serve in a thread; returns once it accepts connections."""
        if self._thread is not None:
            return self
        logging.getLogger("uvicorn.error").addFilter(_DROP_FILTER)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self._thread = threading.Thread(
            target=self._run, args=(sock,), name="ollama-standin", daemon=True
        )
        self._thread.start()
        self._ready.wait(10.0)
        if self._error is not None or self._server is None or not self._server.started:
            self.stop()
            raise RuntimeError(f"ollama stand-in did not start: {self._error}")
        return self

    def _run(self, sock: socket.socket) -> None:
        try:
            asyncio.run(self._serve(sock))
        except BaseException as error:
            self._error = error
        finally:
            self._ready.set()

    async def _serve(self, sock: socket.socket) -> None:
        self._loop = asyncio.get_running_loop()
        self._app = _App(self)
        config = uvicorn.Config(
            self._app,
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=3,
            timeout_keep_alive=5,
        )
        self._server = uvicorn.Server(config)
        serving = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started and not serving.done():
            await asyncio.sleep(0.005)
        self._ready.set()
        await serving

    def stop(self) -> None:
        """Stop serving: streams in progress end (the clients see the socket close)."""
        if self._loop is not None and self._app is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._app.abort.set)
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10.0)
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# ---- as a process -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m voicelane.api.ollama_standin",
        description="A stand-in Ollama server (no model behind it) for demos and tests.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=11434)
    parser.add_argument("--tokens-per-s", type=float, default=50.0)
    parser.add_argument("--first-token-delay-s", type=float, default=0.0)
    parser.add_argument(
        "--models",
        default=",".join(DEFAULT_MODELS),
        help="comma-separated normal models (default: %(default)s)",
    )
    parser.add_argument("--tokens-before-fault", type=int, default=5)
    args = parser.parse_args(argv)
    config = StandinConfig(
        models=tuple(m.strip() for m in args.models.split(",") if m.strip()),
        tokens_per_s=args.tokens_per_s,
        first_token_delay_s=args.first_token_delay_s,
        tokens_before_fault=args.tokens_before_fault,
    )
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        standin = OllamaStandin(config, host=args.host, port=args.port).start()
    except (OSError, RuntimeError) as error:
        print(f"ollama stand-in: {error}", file=sys.stderr)
        return 1
    print(f"ollama stand-in listening on {standin.url}", flush=True)
    try:
        while not stopping.wait(0.5):
            pass
    finally:
        standin.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
