"""The OpenAI-compatible backend against a real LLM: llama.cpp's server with SmolLM2-135M
(tests/support/llm_server.py), through :class:`voicelane.api.llm.LlmBridge` — tokens streamed,
the history trimmed to the server's window, the per-read timeout on a server that stalls
(SIGSTOP), barge-in stopping the server's generation, the cap, typed errors, the warm-up."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.aio import async_test_with
from tests.support.llm_server import MODEL, LocalLlm
from tests.support.stack import wait_for
from voicelane.api.llm import ChatTurn, LlmBridge
from voicelane.common.errors import (
    DeadlineExceededError,
    InvalidInputError,
    NotFoundError,
    UnavailableError,
)
from voicelane.core.redis_server import free_port

pytestmark = pytest.mark.integration

CTX_PER_SLOT = 512
MAX_TOKENS = 128
"""The server's cap on a reply."""
SHORT_REPLY_TOKENS = 40
"""The bridge's, where a test reads a reply to its end."""
QUESTION = [ChatTurn("user", "What should I pack for a weekend in the mountains?")]
STORY = [ChatTurn("user", "Tell me a very long story about a dragon and a knight.")]

async_test = async_test_with(60.0)


@pytest.fixture(scope="module")
def llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalLlm]:
    log = tmp_path_factory.mktemp("llm") / "llm.log"
    with LocalLlm(log, ctx_per_slot=CTX_PER_SLOT, parallel=2, max_tokens=MAX_TOKENS) as server:
        yield server


@contextlib.asynccontextmanager
async def bridge_to(llm: LocalLlm, **settings: Any) -> AsyncIterator[LlmBridge]:
    settings.setdefault("reply_reserve_tokens", MAX_TOKENS)
    settings.setdefault("max_reply_tokens", SHORT_REPLY_TOKENS)  # bounded test time
    bridge = LlmBridge(llm.settings(**settings))
    try:
        yield bridge
    finally:
        await bridge.close()


def history(turns: int) -> list[ChatTurn]:
    """A long conversation, each message different (no prompt cache shortcut), then a
    question."""
    said = []
    for index in range(turns):
        role = "user" if index % 2 == 0 else "assistant"
        text = (
            f"Message {index}: the trail past the {index}th bridge climbs through pine forest, "
            "crosses two streams and ends at a hut where hikers dry their boots by the stove "
            "and trade stories about the weather on the ridge and the shortest way down."
        )
        said.append(ChatTurn(role, text))
    return [*said, ChatTurn("user", "Which bridge did we talk about first?")]


@async_test
async def test_the_reply_streams_token_by_token(llm: LocalLlm) -> None:
    async with bridge_to(llm) as bridge:
        reply = await bridge.reply(QUESTION)
        deltas = [delta async for delta in reply]
    assert len(deltas) >= 5  # token by token, not one block
    text = "".join(deltas)
    assert len(text.split()) >= 5
    stats = reply.stats
    assert stats is not None
    assert stats.model == MODEL
    assert stats.prompt_tokens > 10 and stats.reply_tokens >= len(deltas) - 1
    assert stats.done_reason in ("stop", "length")
    assert stats.eval_ms > 0 and stats.prompt_eval_ms > 0  # llama.cpp's own timings
    assert 0 < stats.time_to_first_token_ms <= stats.total_ms


@async_test
async def test_the_history_is_trimmed_to_the_servers_window(llm: LocalLlm) -> None:
    """Sent whole, the conversation overflows the server's window (it refuses it: 400); the
    bridge drops the oldest messages and the reply streams."""
    turns = history(16)
    wire = [{"role": turn.role, "content": turn.content} for turn in turns]
    async with httpx.AsyncClient(timeout=60) as client:
        whole = await client.post(
            f"{llm.base_url}/chat/completions", json={"model": MODEL, "messages": wire}
        )
    assert whole.status_code == 400, whole.text
    async with bridge_to(llm) as bridge:
        reply = await bridge.reply(turns)
        text = "".join([delta async for delta in reply])
    assert reply.trimmed_messages > 0
    assert text and reply.stats is not None
    assert reply.stats.prompt_tokens <= CTX_PER_SLOT - MAX_TOKENS


@async_test
async def test_a_bridge_told_a_bigger_window_gets_the_servers_refusal_typed(
    llm: LocalLlm,
) -> None:
    async with bridge_to(llm, num_ctx=8192) as bridge:
        with pytest.raises(InvalidInputError, match="refused the request"):
            await bridge.reply(history(16))


@async_test
async def test_a_stalled_server_is_a_deadline_after_the_text_so_far(llm: LocalLlm) -> None:
    assert llm.process is not None
    async with bridge_to(llm, read_timeout_s=1.0, max_reply_tokens=None) as bridge:
        reply = await bridge.reply(STORY)
        got: list[str] = []
        os.killpg(llm.process.pid, signal.SIGSTOP)  # the server stops mid-reply
        try:
            with pytest.raises(DeadlineExceededError, match="mid-reply"):
                async for delta in reply:
                    got.append(delta)
        finally:
            os.killpg(llm.process.pid, signal.SIGCONT)
    assert reply.stats is None


@async_test
async def test_barge_in_closes_the_stream_and_the_server_stops_generating(
    llm: LocalLlm,
) -> None:
    before = llm.metrics()
    async with bridge_to(llm, max_reply_tokens=None) as bridge:
        reply = await bridge.reply(STORY)
        taken = 0
        async for _ in reply:
            taken += 1
            if taken == 3:
                break
        await reply.aclose()
        # The server saw the connection close: no request in progress any more ...
        await asyncio.to_thread(
            wait_for,
            lambda: llm.metrics()["llamacpp:requests_processing"] == 0,
            10,
            "the server to stop generating",
        )
    after = llm.metrics()
    predicted = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
    # ... and it stopped there, far short of the reply's MAX_TOKENS it would have written.
    print(f"barge-in after 3 deltas: the server predicted {predicted:g} tokens")
    assert predicted < MAX_TOKENS / 2, predicted
    assert bridge.slots.held(None) == 0


@async_test
async def test_the_cap_queues_a_second_reply_until_the_first_is_closed(llm: LocalLlm) -> None:
    async with bridge_to(llm, max_parallel=1) as bridge:
        first = await bridge.reply(STORY)
        second = asyncio.create_task(bridge.reply(QUESTION))
        await asyncio.to_thread(wait_for, lambda: bridge.slots.waiting(None) == 1, 10, "queued")
        assert not second.done()
        await first.aclose()
        reply = await second
        assert "".join([delta async for delta in reply])


@async_test
async def test_a_model_the_server_does_not_list_is_not_found(llm: LocalLlm) -> None:
    async with bridge_to(llm) as bridge:
        with pytest.raises(NotFoundError, match="'no-such-model' not found") as caught:
            await bridge.reply(QUESTION, model="no-such-model")
        assert caught.value.field == "model"
        reply = await bridge.reply(QUESTION)  # the listed one still answers
        await reply.aclose()


@async_test
async def test_a_server_that_is_down_is_unavailable(llm: LocalLlm) -> None:
    down = llm.settings(base_url=f"http://127.0.0.1:{free_port()}/v1")
    bridge = LlmBridge(down)
    try:
        with pytest.raises(UnavailableError, match="unreachable"):
            await bridge.reply(QUESTION)
        with pytest.raises(UnavailableError, match="unreachable"):
            await bridge.preload()
    finally:
        await bridge.close()


@async_test
async def test_the_warm_up_answers_and_checks_the_model(llm: LocalLlm) -> None:
    async with bridge_to(llm) as bridge:
        await bridge.preload()
        with pytest.raises(NotFoundError):
            await bridge.preload("no-such-model")


def test_the_api_key_is_sent_and_a_wrong_one_is_typed(tmp_path: Path) -> None:
    async def run(server: LocalLlm) -> None:
        async with bridge_to(server, api_key="wrong-key") as bridge:
            with pytest.raises(UnavailableError, match="refused the API key"):
                await bridge.reply(QUESTION)
        async with bridge_to(server, api_key="right-key") as bridge:
            reply = await bridge.reply(QUESTION)
            await reply.aclose()

    with LocalLlm(tmp_path / "llm.log", max_tokens=16, api_key="right-key") as server:
        asyncio.run(asyncio.wait_for(run(server), 60))
