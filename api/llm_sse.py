"""OpenAI's streamed chat completion, read: server-sent ``data:`` lines → text and the end.

A stream is ``data: {chat.completion.chunk}`` lines (blank lines between events, ``:``
comments as keep-alives), the last choice chunk carrying ``finish_reason``, with
``stream_options.include_usage`` one more chunk with ``usage`` (and no choices), then
``data: [DONE]``. llama.cpp's server adds ``timings`` (``prompt_ms``, ``predicted_ms``) to its
last chunk. An error mid-stream comes as ``data: {"error": {...}}``. :class:`SseReply` folds
the lines into deltas and, at ``[DONE]``, the reply's numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from voicelane.api.llm_backend import ReplyEnd, one_line

DONE = "[DONE]"


class StreamError(Exception):
    """The server reported an error inside the stream (``data: {"error": …}``)."""


@dataclass
class SseReply:
    """One streamed reply's state, fed its lines in order."""

    model: str
    finish_reason: str = ""
    prompt_tokens: int = 0
    reply_tokens: int = 0
    prompt_eval_ms: float = 0.0
    eval_ms: float = 0.0
    done: bool = False
    events: int = 0
    """``data:`` events read (the first one means the server accepted the request)."""
    _seen_models: list[str] = field(default_factory=list)

    def feed(self, line: str) -> str | None:
        """The text one line adds (``""`` for an event without text), None for a line that
        is no event (blank, a comment, another field). Raises :class:`StreamError` for an
        error event, ``ValueError`` for a malformed one."""
        if not line.startswith("data:"):
            return None
        data = line[5:].strip()
        self.events += 1
        if data == DONE:
            self.done = True
            return ""
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            raise ValueError(f"an event that is not an object: {data[:80]!r}")
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise StreamError(one_line(message))
        if isinstance(chunk.get("model"), str) and not self._seen_models:
            self._seen_models.append(chunk["model"])
        self._numbers(chunk)
        text = ""
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str):
                text += content
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        return text

    def _numbers(self, chunk: dict[str, object]) -> None:
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            self.reply_tokens = int(usage.get("completion_tokens") or 0)
        timings = chunk.get("timings")
        if isinstance(timings, dict):
            self.prompt_eval_ms = float(timings.get("prompt_ms") or 0.0)
            self.eval_ms = float(timings.get("predicted_ms") or 0.0)

    def end(self, total_ms: float) -> ReplyEnd:
        """The numbers, once ``[DONE]`` came (``total_ms``: request sent → ``[DONE]``)."""
        return ReplyEnd(
            model=self._seen_models[0] if self._seen_models else self.model,
            prompt_tokens=self.prompt_tokens,
            reply_tokens=self.reply_tokens,
            prompt_eval_ms=self.prompt_eval_ms,
            eval_ms=self.eval_ms,
            total_ms=total_ms,
            load_ms=0.0,
            done_reason=self.finish_reason,
        )
