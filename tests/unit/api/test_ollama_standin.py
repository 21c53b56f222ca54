"""The stand-in Ollama (:mod:`voicelane.api.ollama_standin`) as the official ``ollama`` client
sees it: streamed and whole replies, preloads, the listing endpoints, each fault, and what it
records. Every test runs its own event loop under an overall timeout; waiting is polling
with a deadline, never a sleep."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import pytest

from tests.support.aio import async_test_with
from voicelane.api.ollama_standin import (
    BUSY_ERROR,
    DEFAULT_MODELS,
    OllamaStandin,
    StandinConfig,
    default_reply,
    keep_alive_s,
    tokenize,
)

TEST_TIMEOUT_S = 30.0
ROOT = Path(__file__).resolve().parents[3]
MODEL = DEFAULT_MODELS[0]
HELLO = [{"role": "user", "content": "Tell me about the weather in Paris."}]


async_test = async_test_with(TEST_TIMEOUT_S)
"""Run the coroutine test in a fresh event loop, failing it after TEST_TIMEOUT_S."""


@pytest.fixture
def standin() -> Iterator[OllamaStandin]:
    with OllamaStandin(StandinConfig(tokens_per_s=0)) as server:
        yield server


def long_reply(_body: object) -> str:
    return " ".join(f"Sentence number {i} is here." for i in range(200))


# ---- the text and its tokens ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        default_reply({"messages": HELLO}),
        default_reply({"messages": [{"role": "user", "content": "今天天气怎么样？"}]}),
        "Mixed 中文 and English, with **bold** and `code`.\n\n- a list\n- 1.5 items  ",
        "",
        "internationalization supercalifragilistic",
    ],
)
def test_tokens_join_back_into_the_text(text: str) -> None:
    tokens = tokenize(text)
    assert "".join(tokens) == text
    assert all(tokens)


def test_tokens_are_small_with_the_space_before_the_word() -> None:
    english = tokenize(default_reply({"messages": HELLO}))
    assert all(1 <= len(t) <= 6 for t in english)
    assert " is" in english  # the space goes with the word after it
    assert not any(t.endswith(" ") for t in english)
    chinese = tokenize(default_reply({"messages": [{"role": "user", "content": "你好吗"}]}))
    cjk_tokens = [t for t in chinese if "\u4e00" <= t[0] <= "\u9fff"]
    assert cjk_tokens
    assert all(1 <= len(t) <= 2 for t in cjk_tokens)


def test_the_default_reply_follows_the_last_user_message() -> None:
    english = default_reply({"messages": HELLO})
    assert "weather in Paris" in english
    assert "**" in english
    assert english == default_reply({"messages": HELLO})  # deterministic
    other = default_reply({"messages": [{"role": "user", "content": "Something else"}]})
    assert other != english
    chinese = default_reply({"messages": [*HELLO, {"role": "user", "content": "你好吗"}]})
    assert "你好吗" in chinese
    assert "**" in chinese


def test_keep_alive_durations() -> None:
    assert keep_alive_s("30m") == 1800
    assert keep_alive_s("1h30m") == 5400
    assert keep_alive_s("-1") == -1
    assert keep_alive_s(0) == 0
    assert keep_alive_s(None) is None
    assert keep_alive_s("soon") is None


# ---- chat ---------------------------------------------------------------------------------------


@async_test
async def test_a_streamed_chat(standin: OllamaStandin) -> None:
    async with ollama.AsyncClient(standin.url, timeout=10) as client:
        stream = await client.chat(
            MODEL, HELLO, stream=True, options={"num_ctx": 2048}, keep_alive="30m"
        )
        parts = [part async for part in stream]
        *tokens, last = parts
        body = standin.bodies()[-1]
        assert "".join(p.message.content or "" for p in parts) == default_reply(body)
        assert [p.message.content for p in tokens] == tokenize(default_reply(body))
        assert not any(p.done for p in tokens)
        assert all(p.model == MODEL and p.message.role == "assistant" for p in parts)
        assert last.done and last.done_reason == "stop"
        assert last.eval_count == len(tokens)
        assert last.prompt_eval_count and last.prompt_eval_count > 0
        for number in (
            last.total_duration,
            last.load_duration,
            last.prompt_eval_duration,
            last.eval_duration,
        ):
            assert isinstance(number, int) and number >= 0
        # What was received, for the tests that check the bridge's requests.
        assert body["options"] == {"num_ctx": 2048}
        assert body["keep_alive"] == "30m"
        assert body["messages"] == HELLO
        assert body["stream"] is True
        (generation,) = standin.generations
        assert generation.outcome == "done"
        assert generation.tokens_sent == generation.tokens_planned == len(tokens)
        assert generation.disconnected_at is None and not generation.stopped_on_disconnect
        assert standin.in_flight == 0 and standin.max_in_flight == 1


@async_test
async def test_a_chinese_question_gets_a_chinese_reply(standin: OllamaStandin) -> None:
    async with ollama.AsyncClient(standin.url, timeout=10) as client:
        question = [{"role": "user", "content": "请介绍一下北京。"}]
        stream = await client.chat(MODEL, question, stream=True)
        text = "".join([p.message.content or "" async for p in stream])
        assert "北京" in text
        assert "。" in text


@async_test
async def test_a_whole_chat(standin: OllamaStandin) -> None:
    async with ollama.AsyncClient(standin.url, timeout=10) as client:
        answer = await client.chat(DEFAULT_MODELS[1], HELLO, stream=False)
        assert answer.done and answer.done_reason == "stop"
        assert answer.message.content == default_reply({"messages": HELLO})
        assert answer.eval_count == len(tokenize(answer.message.content))


@async_test
async def test_an_empty_chat_is_a_preload(standin: OllamaStandin) -> None:
    async with ollama.AsyncClient(standin.url, timeout=10) as client:
        loaded = await client.chat(MODEL, [], keep_alive="30m", options={"num_ctx": 2048})
        assert loaded.done and loaded.done_reason == "load"
        assert loaded.message.content == ""
        streamed = [p async for p in await client.chat(MODEL, [], stream=True)]
        assert [(p.done, p.done_reason, p.message.content) for p in streamed] == [
            (True, "load", "")
        ]
        unloaded = await client.chat(MODEL, [], keep_alive=0)
        assert unloaded.done_reason == "unload"
        assert not standin.generations  # preloads generate nothing
        assert standin.bodies()[0]["messages"] == []


@async_test
async def test_generate_and_its_preload(standin: OllamaStandin) -> None:
    async with ollama.AsyncClient(standin.url, timeout=10) as client:
        loaded = await client.generate(MODEL, "", keep_alive="30m")
        assert loaded.done and loaded.done_reason == "load"
        stream = await client.generate(MODEL, "Why is the sky blue?", stream=True)
        parts = [p async for p in stream]
        assert "".join(p.response or "" for p in parts) == default_reply(
            {"prompt": "Why is the sky blue?"}
        )
        assert parts[-1].done and parts[-1].done_reason == "stop"
        whole = await client.generate(MODEL, "Why is the sky blue?")
        assert whole.response == default_reply({"prompt": "Why is the sky blue?"})


@async_test
async def test_tags_ps_and_version(standin: OllamaStandin) -> None:
    async with ollama.AsyncClient(standin.url, timeout=10) as client:
        listed = await client.list()
        assert [m.model for m in listed.models] == list(DEFAULT_MODELS)
        assert (await client.ps()).models == []
        await client.chat(MODEL, [], keep_alive="-1", options={"num_ctx": 2048})
        (running,) = (await client.ps()).models
        assert running.model == MODEL
        assert running.context_length == 2048
        assert running.expires_at is not None
        async with httpx.AsyncClient(base_url=standin.url) as http:
            version = await http.get("/api/version")
            assert version.status_code == 200
            assert version.json()["version"]
            assert (await http.get("/api/nothing")).status_code == 404
            assert (await http.get("/api/chat")).status_code == 405
            bad = await http.post("/api/chat", content=b"{not json")
            assert bad.status_code == 400 and "error" in bad.json()
            no_model = await http.post("/api/chat", json={"messages": HELLO})
            assert no_model.status_code == 400
            assert no_model.json() == {"error": "model is required"}


# ---- faults -------------------------------------------------------------------------------------


@async_test
async def test_an_unknown_model_is_404(standin: OllamaStandin) -> None:
    async with ollama.AsyncClient(standin.url, timeout=10) as client:
        stream = await client.chat("nope:1b", HELLO, stream=True)
        with pytest.raises(ollama.ResponseError) as caught:
            await anext(stream)
        assert caught.value.status_code == 404
        assert caught.value.error == "model 'nope:1b' not found"
        with pytest.raises(ollama.ResponseError) as whole:
            await client.chat("nope:1b", HELLO)
        assert whole.value.status_code == 404


@async_test
async def test_busy_is_503(standin: OllamaStandin) -> None:
    async with ollama.AsyncClient(standin.url, timeout=10) as client:
        stream = await client.chat("busy", HELLO, stream=True)
        with pytest.raises(ollama.ResponseError) as caught:
            await anext(stream)
        assert caught.value.status_code == 503
        assert caught.value.error == BUSY_ERROR


async def tokens_then(
    standin: OllamaStandin, model: str, *, timeout: float = 10
) -> tuple[int, BaseException | None]:
    """Stream a chat with ``model``: how many tokens came, and what was raised after them."""
    async with ollama.AsyncClient(standin.url, timeout=timeout) as client:
        received = 0
        try:
            stream = await client.chat(model, HELLO, stream=True)
            async for part in stream:
                assert not part.done
                received += 1
        except Exception as error:
            return received, error
        return received, None


@async_test
async def test_an_error_line_mid_stream(standin: OllamaStandin) -> None:
    received, error = await tokens_then(standin, "error-mid")
    assert received == standin.config.tokens_before_fault
    assert isinstance(error, ollama.ResponseError)
    assert error.status_code == -1
    assert error.error == standin.config.error_message
    assert standin.generations[-1].outcome == "error"


@async_test
async def test_a_dropped_connection_mid_stream(standin: OllamaStandin) -> None:
    standin.config.tokens_before_fault = 3
    received, error = await tokens_then(standin, "disconnect")
    assert received == 3
    assert isinstance(error, httpx.RemoteProtocolError)
    assert standin.generations[-1].outcome == "disconnect"


@async_test
async def test_a_stall_until_the_client_leaves(standin: OllamaStandin) -> None:
    received, error = await tokens_then(standin, "stall:latest", timeout=0.3)
    assert received == standin.config.tokens_before_fault
    assert isinstance(error, httpx.ReadTimeout)
    await standin.wait_until(lambda s: s.generations[-1].stopped_at is not None)
    generation = standin.generations[-1]
    assert generation.stopped_on_disconnect
    assert generation.disconnected_at is not None
    assert standin.in_flight == 0


@async_test
async def test_fault_names_and_counts_are_configurable(standin: OllamaStandin) -> None:
    standin.config.error_mid_model = "flaky:1b"
    standin.config.tokens_before_fault = 0
    received, error = await tokens_then(standin, "flaky:1b")
    assert received == 0
    assert isinstance(error, ollama.ResponseError) and error.status_code == -1
    received, error = await tokens_then(standin, "error-mid")
    assert isinstance(error, ollama.ResponseError) and error.status_code == 404


@async_test
async def test_a_client_that_leaves_stops_the_generation(standin: OllamaStandin) -> None:
    standin.config.tokens_per_s = 50
    standin.config.reply = long_reply
    async with ollama.AsyncClient(standin.url, timeout=10) as client:
        stream = await client.chat(MODEL, HELLO, stream=True)
        await anext(stream)
        left_at = time.monotonic()
        await stream.aclose()
        await standin.wait_until(lambda s: s.generations[-1].stopped_at is not None)
        generation = standin.generations[-1]
        assert generation.outcome == "client_gone"
        assert generation.stopped_on_disconnect
        assert generation.disconnected_at is not None
        assert generation.disconnected_at - left_at < 1.0  # protocol bound: detected at once
        assert generation.tokens_sent < generation.tokens_planned
        assert standin.in_flight == 0


@async_test
async def test_in_flight_generations_are_counted(standin: OllamaStandin) -> None:
    standin.hold()
    async with ollama.AsyncClient(standin.url, timeout=10) as client:

        async def chat() -> str:
            stream = await client.chat(MODEL, HELLO, stream=True)
            return "".join([p.message.content or "" async for p in stream])

        tasks = [asyncio.create_task(chat()) for _ in range(3)]
        await standin.wait_until(lambda s: s.in_flight == 3)
        standin.release()
        replies = await asyncio.gather(*tasks)
        assert replies == [default_reply({"messages": HELLO})] * 3
        assert standin.max_in_flight == 3
        assert standin.in_flight == 0


# ---- as a process -------------------------------------------------------------------------------


def test_runs_as_a_process_and_stops_on_sigterm() -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "voicelane.api.ollama_standin", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline().strip()
            assert line.startswith("ollama stand-in listening on http://127.0.0.1:"), line
            url = line.rsplit(" ", 1)[-1]
            assert httpx.get(f"{url}/api/version", timeout=10).status_code == 200
            with ollama.Client(url, timeout=10) as client:
                answer = client.chat(MODEL, HELLO)
            assert answer.message.content == default_reply({"messages": HELLO})
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=20) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
