"""The LLM bridge (:mod:`voicelane.api.llm`) against the stand-in Ollama
(:mod:`voicelane.api.ollama_standin`), through the real ``ollama`` client: the reply's text,
what Ollama is asked (``num_ctx``, ``keep_alive``, the trimmed history), the cap per host,
barge-in, each fault as its typed error, the stats and the metrics.

Every test runs its own event loop under an overall timeout; waiting is polling with a
deadline (the stand-in's ``wait_until``), never a sleep. The one bound on a measured duration
is the protocol's: a closed reply is seen by the server at once (< 1 s)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from tests.support.aio import async_test_with
from voicelane.api.llm import (
    ChatTurn,
    GenerationSlots,
    LlmBridge,
    LlmReply,
    estimate_tokens,
    prepare_messages,
)
from voicelane.api.ollama_standin import (
    DEFAULT_MODELS,
    OllamaStandin,
    StandinConfig,
    default_reply,
    tokenize,
)
from voicelane.common.errors import (
    ConfigError,
    DeadlineExceededError,
    InvalidInputError,
    NotFoundError,
    QuotaExceededError,
    UnavailableError,
    grpc_status_name,
    http_status,
)
from voicelane.core.settings import ApiSettings, FrontSettings, GrpcSettings, LlmSettings

TEST_TIMEOUT_S = 30.0
MODEL = DEFAULT_MODELS[1]
QUESTION = [ChatTurn("user", "What is the capital of France?")]


async_test = async_test_with(TEST_TIMEOUT_S)
"""Run the coroutine test in a fresh event loop, failing it after TEST_TIMEOUT_S."""


@pytest.fixture
def standin() -> Iterator[OllamaStandin]:
    with OllamaStandin(StandinConfig(tokens_per_s=0)) as server:
        yield server


@contextlib.asynccontextmanager
async def bridge_to(url: str, **settings: Any) -> AsyncIterator[LlmBridge]:
    settings.setdefault("model", MODEL)
    settings.setdefault("max_parallel", 1)
    bridge = LlmBridge(LlmSettings(host=url, **settings))
    try:
        yield bridge
    finally:
        await bridge.close()


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def replies(outcome: str) -> float:
    return sample("voicelane_llm_replies_total", outcome=outcome)


def long_reply(_body: object) -> str:
    return " ".join(f"Sentence number {i} is here." for i in range(200))


def wire(turns: list[ChatTurn]) -> list[dict[str, str]]:
    return [{"role": t.role, "content": t.content} for t in turns]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# ---- the reply ----------------------------------------------------------------------------------


@async_test
async def test_the_deltas_are_the_reply(standin: OllamaStandin) -> None:
    ok, prompt_tokens, reply_tokens = replies("ok"), 0.0, 0.0
    prompt_tokens = sample("voicelane_llm_tokens_total", kind="prompt")
    reply_tokens = sample("voicelane_llm_tokens_total", kind="reply")
    ttft = sample("ollama_time_to_first_token_seconds_count", model=MODEL)
    async with bridge_to(standin.url) as bridge:
        reply = await bridge.reply(QUESTION)
        deltas = [delta async for delta in reply]
    body = standin.bodies()[-1]
    expected = default_reply(body)
    assert "".join(deltas) == expected
    assert deltas == tokenize(expected)
    assert reply.trimmed_messages == 0
    stats = reply.stats
    assert stats is not None
    assert stats.model == MODEL
    assert stats.done_reason == "stop"
    assert stats.reply_tokens == len(deltas)
    assert stats.prompt_tokens > 0
    assert stats.total_ms > 0 and stats.eval_ms >= 0 and stats.load_ms > 0
    assert stats.time_to_first_token_ms > 0
    assert replies("ok") == ok + 1
    assert (
        sample("voicelane_llm_tokens_total", kind="prompt") == prompt_tokens + stats.prompt_tokens
    )
    assert sample("voicelane_llm_tokens_total", kind="reply") == reply_tokens + stats.reply_tokens
    assert sample("ollama_time_to_first_token_seconds_count", model=MODEL) == ttft + 1
    assert sample("ollama_batch_size", host=standin.url) == 0


@async_test
async def test_ollama_is_asked_with_num_ctx_and_keep_alive(standin: OllamaStandin) -> None:
    async with bridge_to(standin.url, system="Be brief.") as bridge:
        async with contextlib.aclosing(await bridge.reply(QUESTION)) as reply:
            assert "".join([d async for d in reply])
        body = standin.bodies()[-1]
        assert body["model"] == MODEL
        assert body["options"] == {"num_ctx": 2048}
        assert body["keep_alive"] == "30m"
        assert body["stream"] is True
        assert body["messages"] == [{"role": "system", "content": "Be brief."}, *wire(QUESTION)]
        # A request's own system prompt replaces the settings'; an empty one means none.
        async with contextlib.aclosing(
            await bridge.reply(QUESTION, system="Answer in French.", model=DEFAULT_MODELS[0])
        ) as reply:
            assert [d async for d in reply]
        body = standin.bodies()[-1]
        assert body["model"] == DEFAULT_MODELS[0]
        assert body["messages"][0] == {"role": "system", "content": "Answer in French."}
        async with contextlib.aclosing(await bridge.reply(QUESTION, system="")) as reply:
            assert [d async for d in reply]
        assert standin.bodies()[-1]["messages"] == wire(QUESTION)


@async_test
async def test_a_chinese_conversation(standin: OllamaStandin) -> None:
    async with bridge_to(standin.url) as bridge:
        reply = await bridge.reply([ChatTurn("user", "北京有什么好玩的？")])
        text = "".join([d async for d in reply])
    assert "北京" in text


# ---- validation and the window ------------------------------------------------------------------


def test_token_estimates() -> None:
    assert estimate_tokens("") == 4
    assert estimate_tokens("abcd") == 5
    assert estimate_tokens("abcde") == 6
    assert estimate_tokens("你好") == 6
    assert estimate_tokens("你好 abcd") == 2 + 2 + 4  # 2 CJK + 5 other characters


@pytest.mark.parametrize(
    ("messages", "words"),
    [
        ([], "at least one message"),
        ([ChatTurn("robot", "hi")], "role"),
        ([ChatTurn("user", "hi"), ChatTurn("user", "   ")], "empty"),
        ([ChatTurn("user", b"hi")], "text"),  # type: ignore[arg-type]
        ([ChatTurn("user", "a\x00b")], "control"),
    ],
)
def test_bad_messages_are_refused(messages: list[ChatTurn], words: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        prepare_messages(messages, "", num_ctx=2048, reserve_tokens=512)
    assert words in caught.value.message
    assert "\n" not in caught.value.message
    assert caught.value.field == "messages"


@async_test
async def test_bad_messages_never_reach_ollama(standin: OllamaStandin) -> None:
    invalid = replies("invalid")
    async with bridge_to(standin.url) as bridge:
        with pytest.raises(InvalidInputError):
            await bridge.reply([])
        with pytest.raises(InvalidInputError):
            await bridge.reply([ChatTurn("user", "")])
    assert replies("invalid") == invalid + 2
    assert standin.bodies() == []


def test_the_oldest_whole_messages_are_dropped_to_fit() -> None:
    # 200 characters = 50 + 4 tokens; the budget is 300 - 100 = 200 tokens.
    history = [
        ChatTurn("system", "Rules."),  # 2 + 4 = 6 tokens, kept though it is the oldest
        ChatTurn("user", "a" * 200),
        ChatTurn("assistant", "b" * 200),
        ChatTurn("user", "c" * 200),
        ChatTurn("assistant", "d" * 200),
        ChatTurn("user", "e" * 200),
    ]
    messages, trimmed = prepare_messages(history, "", num_ctx=300, reserve_tokens=100)
    assert trimmed == 2
    assert messages == wire([history[0], *history[3:]])
    # 6 + 3 x 54 = 168 tokens kept; with a system prompt of its own (40 + 4) one more goes.
    system = "Be brief. " * 16
    messages, trimmed = prepare_messages(history, system, num_ctx=300, reserve_tokens=100)
    assert trimmed == 3
    assert messages == [
        {"role": "system", "content": system},
        *wire([history[0], *history[4:]]),
    ]
    # Everything fits: nothing dropped.
    messages, trimmed = prepare_messages(history, "", num_ctx=2048, reserve_tokens=512)
    assert (trimmed, messages) == (0, wire(history))


def test_chinese_counts_a_token_per_character() -> None:
    history = [ChatTurn("user", "你" * 100), ChatTurn("assistant", "好" * 100)]
    history.append(ChatTurn("user", "吗" * 100))
    messages, trimmed = prepare_messages(history, "", num_ctx=300, reserve_tokens=100)
    assert trimmed == 2  # 104 tokens each, 200 to spend: only the last fits
    assert messages == wire(history[2:])


@async_test
async def test_trimming_is_reported_and_a_last_message_too_long_is_refused(
    standin: OllamaStandin,
) -> None:
    history = [ChatTurn("user" if i % 2 == 0 else "assistant", "x" * 400) for i in range(7)]
    async with bridge_to(standin.url, num_ctx=512, reply_reserve_tokens=200) as bridge:
        reply = await bridge.reply(history)
        assert [d async for d in reply]
        # 104 tokens each, 312 to spend: the last three are kept.
        assert reply.trimmed_messages == 4
        assert standin.bodies()[-1]["messages"] == wire(history[4:])
        with pytest.raises(InvalidInputError) as caught:
            await bridge.reply([*history, ChatTurn("user", "y" * 1300)])
        assert "does not fit" in caught.value.message
    assert len(standin.bodies()) == 1


# ---- errors -------------------------------------------------------------------------------------


@async_test
async def test_an_unknown_model_is_not_found(standin: OllamaStandin) -> None:
    not_found = replies("not_found")
    async with bridge_to(standin.url) as bridge:
        with pytest.raises(NotFoundError) as caught:
            await bridge.reply(QUESTION, model="mystery:13b")
    assert "'mystery:13b'" in caught.value.message
    assert http_status(caught.value) == 404
    assert grpc_status_name(caught.value) == "NOT_FOUND"
    assert replies("not_found") == not_found + 1
    assert sample("ollama_batch_size", host=standin.url) == 0


@async_test
async def test_unreachable_ollama_is_unavailable() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    unavailable = replies("unavailable")
    async with bridge_to(url) as bridge:
        with pytest.raises(UnavailableError) as caught:
            await bridge.reply(QUESTION)
        assert "unreachable" in caught.value.message
        assert url in caught.value.message
        assert http_status(caught.value) == 503
        with pytest.raises(UnavailableError):
            await bridge.preload()
    assert replies("unavailable") == unavailable + 1
    assert sample("ollama_batch_size", host=url) == 0


@async_test
async def test_a_busy_ollama_is_unavailable(standin: OllamaStandin) -> None:
    async with bridge_to(standin.url) as bridge:
        with pytest.raises(UnavailableError) as caught:
            await bridge.reply(QUESTION, model="busy")
    assert "503" in caught.value.message
    assert caught.value.retry_after_s is not None


async def deltas_then(reply: LlmReply) -> tuple[list[str], BaseException | None]:
    deltas: list[str] = []
    try:
        async for delta in reply:
            deltas.append(delta)
    except Exception as error:
        return deltas, error
    return deltas, None


@pytest.mark.parametrize("model", ["error-mid", "disconnect"])
@async_test
async def test_a_failure_mid_reply_comes_after_the_text(standin: OllamaStandin, model: str) -> None:
    unavailable = replies("unavailable")
    async with bridge_to(standin.url) as bridge:
        reply = await bridge.reply(QUESTION, model=model)  # the first chunk came: no error yet
        deltas, error = await deltas_then(reply)
    assert len(deltas) == standin.config.tokens_before_fault
    assert isinstance(error, UnavailableError)
    assert "mid-reply" in error.message and "\n" not in error.message
    assert reply.stats is None
    assert replies("unavailable") == unavailable + 1
    assert sample("ollama_batch_size", host=standin.url) == 0


@async_test
async def test_a_reply_that_ends_without_done_is_unavailable(standin: OllamaStandin) -> None:
    async with bridge_to(standin.url) as bridge:
        reply = await bridge.reply(QUESTION, model="truncated")
        deltas, error = await deltas_then(reply)
        assert len(deltas) == standin.config.tokens_before_fault
        assert isinstance(error, UnavailableError)
        assert "without done" in error.message
        standin.config.tokens_before_fault = 0  # nothing at all: raised by reply()
        with pytest.raises(UnavailableError):
            await bridge.reply(QUESTION, model="truncated")


@async_test
async def test_a_stall_is_a_deadline(standin: OllamaStandin) -> None:
    timeouts = replies("timeout")
    async with bridge_to(standin.url, read_timeout_s=0.5) as bridge:
        reply = await bridge.reply(QUESTION, model="stall")
        deltas, error = await deltas_then(reply)
        assert len(deltas) == standin.config.tokens_before_fault
        assert isinstance(error, DeadlineExceededError)
        assert http_status(error) == 504
        # Stalled before the first token: raised by reply() itself.
        standin.config.tokens_before_fault = 0
        with pytest.raises(DeadlineExceededError):
            await bridge.reply(QUESTION, model="stall")
    assert replies("timeout") == timeouts + 2
    # The bridge left: the stand-in saw both clients go and stopped.
    await standin.wait_until(lambda s: all(g.stopped_on_disconnect for g in s.generations))
    assert standin.in_flight == 0


# ---- barge-in and the cap ----------------------------------------------------------------------


@async_test
async def test_aclose_stops_the_generation_at_once(standin: OllamaStandin) -> None:
    standin.config.tokens_per_s = 50
    standin.config.reply = long_reply
    cancelled = replies("cancelled")
    async with bridge_to(standin.url) as bridge:
        reply = await bridge.reply(QUESTION)
        first = await anext(reply)
        assert first
        closed_at = time.monotonic()
        await reply.aclose()
        await reply.aclose()  # idempotent
        assert [d async for d in reply] == []
        await standin.wait_until(lambda s: s.generations[-1].stopped_at is not None)
        generation = standin.generations[-1]
        assert generation.disconnected_at is not None
        assert generation.disconnected_at - closed_at < 1.0  # protocol bound, not a timing test
        assert generation.stopped_on_disconnect
        assert generation.tokens_sent < generation.tokens_planned
        assert reply.stats is None
        assert replies("cancelled") == cancelled + 1
        assert sample("ollama_batch_size", host=standin.url) == 0
        # The slot is free again (max_parallel is 1).
        standin.config.reply = default_reply
        standin.config.tokens_per_s = 0
        again = await bridge.reply(QUESTION)
        assert "".join([d async for d in again]) == default_reply(standin.bodies()[-1])


@async_test
async def test_aclose_from_another_task_ends_the_consumer(standin: OllamaStandin) -> None:
    standin.config.tokens_per_s = 50
    standin.config.reply = long_reply
    async with bridge_to(standin.url) as bridge:
        reply = await bridge.reply(QUESTION)
        received: list[str] = []

        async def consume() -> None:
            async for delta in reply:
                received.append(delta)

        consumer = asyncio.create_task(consume())
        deadline = time.monotonic() + 10
        while len(received) < 3:  # the consumer is waiting in the iterator now and then
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
        await reply.aclose()
        await asyncio.wait_for(consumer, 10)  # the iteration ended, no error
        await standin.wait_until(lambda s: s.generations[-1].stopped_on_disconnect)


@async_test
async def test_an_abandoned_reply_closed_by_aclosing(standin: OllamaStandin) -> None:
    standin.config.tokens_per_s = 50
    standin.config.reply = long_reply
    async with bridge_to(standin.url) as bridge:
        async with contextlib.aclosing(await bridge.reply(QUESTION)) as reply:
            async for _delta in reply:
                break
        await standin.wait_until(lambda s: s.generations[-1].stopped_on_disconnect)
        assert sample("ollama_batch_size", host=standin.url) == 0


@async_test
async def test_at_most_max_parallel_generations_per_host(standin: OllamaStandin) -> None:
    waits = sample("voicelane_llm_queue_wait_seconds_count")
    waiting = sample("voicelane_llm_waiting_replies")
    standin.hold()  # every generation waits before its first token until released
    async with bridge_to(standin.url, max_parallel=2) as bridge:

        async def ask(n: int) -> str:
            turns = [ChatTurn("user", f"Question number {n}?")]
            async with contextlib.aclosing(await bridge.reply(turns)) as reply:
                return "".join([d async for d in reply])

        tasks = [asyncio.create_task(ask(n)) for n in range(4)]
        await standin.wait_until(lambda s: s.in_flight == 2)
        assert sample("ollama_batch_size", host=standin.url) == 2
        assert sample("voicelane_llm_waiting_replies") == waiting + 2  # the other two, queued
        standin.release()
        texts = await asyncio.gather(*tasks)
    assert texts == [
        default_reply({"messages": [{"role": "user", "content": f"Question number {n}?"}]})
        for n in range(4)
    ]
    assert standin.max_in_flight == 2
    assert len(standin.generations) == 4
    assert sample("voicelane_llm_queue_wait_seconds_count") == waits + 4
    assert sample("ollama_batch_size", host=standin.url) == 0
    assert sample("voicelane_llm_waiting_replies") == waiting


@async_test
async def test_a_reply_cancelled_while_queued_frees_nothing_it_did_not_take(
    standin: OllamaStandin,
) -> None:
    standin.hold()
    cancelled = replies("cancelled")
    async with bridge_to(standin.url, max_parallel=1) as bridge:
        first = asyncio.create_task(bridge.reply(QUESTION))
        await standin.wait_until(lambda s: s.in_flight == 1)
        waiting = sample("voicelane_llm_waiting_replies")
        queued = asyncio.create_task(bridge.reply(QUESTION))
        await asyncio.sleep(0)  # one turn of the loop: it runs up to the slot's queue
        assert sample("voicelane_llm_waiting_replies") == waiting + 1
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert sample("voicelane_llm_waiting_replies") == waiting  # it left the queue
        first.cancel()  # cancelled while waiting for its first chunk: the stream is closed
        with pytest.raises(asyncio.CancelledError):
            await first
        await standin.wait_until(lambda s: s.in_flight == 0)
        standin.release()
        assert replies("cancelled") == cancelled + 2
        reply = await bridge.reply(QUESTION)  # the one slot is free
        assert [d async for d in reply]


# ---- preload and settings ------------------------------------------------------------------------


@async_test
async def test_preload_sends_an_empty_request(standin: OllamaStandin) -> None:
    async with bridge_to(standin.url, keep_alive="-1") as bridge:
        await bridge.preload()
        await bridge.preload(DEFAULT_MODELS[0])
        with pytest.raises(NotFoundError):
            await bridge.preload("absent:1b")
    first, second, _ = standin.bodies()
    assert first["model"] == MODEL and second["model"] == DEFAULT_MODELS[0]
    assert first["messages"] == []
    assert first["keep_alive"] == "-1"
    assert first["options"] == {"num_ctx": 2048}  # the replies' window: no reload later
    assert standin.generations == []
    assert MODEL in standin.loaded


@pytest.mark.parametrize("front", [ApiSettings, GrpcSettings])
def test_settings_default_to_ollamas_own_variables(
    monkeypatch: pytest.MonkeyPatch, front: type[FrontSettings]
) -> None:
    """A front's ``llm`` section takes Ollama's own variables as its defaults; its own
    ``VOICELANE_LLM__*`` win over them."""
    for name in ("OLLAMA_HOST", "OLLAMA_NUM_PARALLEL", "VOICELANE_LLM__HOST"):
        monkeypatch.delenv(name, raising=False)
    defaults = front().llm
    assert defaults == LlmSettings()
    assert defaults.host == "http://127.0.0.1:11434"
    assert defaults.max_parallel == 1
    assert (defaults.model, defaults.keep_alive, defaults.num_ctx) == ("qwen2.5:7b", "30m", 2048)
    monkeypatch.setenv("OLLAMA_HOST", "http://gpu-box:11434")
    monkeypatch.setenv("OLLAMA_NUM_PARALLEL", "4")
    assert front().llm.host == "http://gpu-box:11434"
    assert front().llm.max_parallel == 4
    monkeypatch.setenv("OLLAMA_NUM_PARALLEL", "0")  # Ollama's "choose for me": not a count
    assert front().llm.max_parallel == 1
    monkeypatch.setenv("VOICELANE_LLM__HOST", "http://other:11434")
    monkeypatch.setenv("VOICELANE_LLM__MAX_PARALLEL", "3")
    assert front().llm.host == "http://other:11434"
    assert front().llm.max_parallel == 3


def test_an_old_llm_variable_is_refused_naming_the_new_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICELANE_LLM_MODEL", "llama3:8b")
    with pytest.raises(ConfigError, match="VOICELANE_LLM_MODEL is now VOICELANE_LLM__MODEL"):
        ApiSettings()


@pytest.mark.parametrize("front", [ApiSettings, GrpcSettings])
def test_the_openai_backend_is_chosen_by_settings(
    monkeypatch: pytest.MonkeyPatch, front: type[FrontSettings]
) -> None:
    """``VOICELANE_LLM__BACKEND=openai`` with its base URL and key; Ollama's variables keep
    their meaning (the default of ``host``), and the bridge talks to the base URL."""
    monkeypatch.setenv("OLLAMA_HOST", "http://gpu-box:11434")
    monkeypatch.setenv("VOICELANE_LLM__BACKEND", "openai")
    monkeypatch.setenv("VOICELANE_LLM__BASE_URL", "http://127.0.0.1:8080/v1")
    monkeypatch.setenv("VOICELANE_LLM__API_KEY", "sk-test")
    monkeypatch.setenv("VOICELANE_LLM__MODEL", "smollm2")
    llm = front().llm
    assert (llm.backend, llm.base_url, llm.model) == (
        "openai",
        "http://127.0.0.1:8080/v1",
        "smollm2",
    )
    assert llm.api_key is not None and llm.api_key.get_secret_value() == "sk-test"
    assert "sk-test" not in repr(llm)
    assert llm.host == "http://gpu-box:11434"
    assert llm.address == LlmBridge(llm).host == "http://127.0.0.1:8080/v1"
    assert front().llm.model_copy(update={"backend": "ollama"}).address == "http://gpu-box:11434"


def test_the_openai_backend_needs_a_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOICELANE_LLM__BACKEND", "openai")
    monkeypatch.delenv("VOICELANE_LLM__BASE_URL", raising=False)
    with pytest.raises(ValueError, match="needs VOICELANE_LLM__BASE_URL"):
        ApiSettings()
    monkeypatch.setenv("VOICELANE_LLM__BACKEND", "vllm")
    with pytest.raises(ValueError, match="backend"):
        ApiSettings()


@pytest.mark.parametrize("name", ["BACKEND", "BASE_URL", "API_KEY", "MODEL"])
def test_the_single_underscore_spellings_are_refused_naming_the_tree_name(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The issue's ``VOICELANE_LLM_BASE_URL`` spelling is the settings tree's
    ``VOICELANE_LLM__BASE_URL``: set the other, the front stops at start saying so."""
    monkeypatch.setenv(f"VOICELANE_LLM_{name}", "x")
    with pytest.raises(ConfigError, match=f"VOICELANE_LLM_{name} is now VOICELANE_LLM__{name}"):
        ApiSettings()


@async_test
async def test_the_cap_belongs_to_the_bridge(standin: OllamaStandin) -> None:
    """Each bridge has its own ``max_parallel`` slots, sized by its own settings (a front
    process has one): a second bridge to the same host neither shares nor resizes them."""
    standin.hold()
    async with (
        bridge_to(standin.url, max_parallel=1) as one,
        bridge_to(standin.url, max_parallel=2) as two,
    ):
        first = asyncio.create_task(one.reply(QUESTION))
        await standin.wait_until(lambda s: s.in_flight == 1)
        more = [asyncio.create_task(two.reply(QUESTION)) for _ in range(2)]
        await standin.wait_until(lambda s: s.in_flight == 3)
        queued = asyncio.create_task(one.reply(QUESTION))  # waits for `one`'s only slot
        standin.release()
        for reply in await asyncio.gather(first, *more, queued):
            async with contextlib.aclosing(reply):
                assert [d async for d in reply]
    assert standin.max_in_flight == 3


# ---- the generation slots, shared by tenants -------------------------------------------------


async def granted(slots: GenerationSlots, tenant: str | None) -> asyncio.Task[None]:
    """``tenant``'s acquire, run up to its grant or its place in the queue."""
    task = asyncio.create_task(slots.acquire(tenant, timeout_s=TEST_TIMEOUT_S))
    await asyncio.sleep(0)  # one turn of the loop: granted, or queued
    return task


@async_test
async def test_a_tenant_holds_at_most_its_share_and_another_finds_a_slot() -> None:
    slots = GenerationSlots(2, per_tenant=1, max_queued=4)
    first = await granted(slots, "acme")
    second = await granted(slots, "acme")  # acme's share is taken: it waits
    assert first.done() and not second.done()
    other = await granted(slots, "other")
    assert other.done() and slots.held("other") == 1
    slots.release("acme")
    await asyncio.sleep(0)
    assert second.done() and slots.held("acme") == 1


@async_test
async def test_a_freed_slot_goes_to_the_tenants_in_turn() -> None:
    slots = GenerationSlots(1, per_tenant=1, max_queued=3)
    await granted(slots, "holder")
    order: list[str] = []

    async def wait(tenant: str, name: str) -> None:
        await slots.acquire(tenant, timeout_s=TEST_TIMEOUT_S)
        order.append(name)

    waiters = [asyncio.create_task(wait("acme", f"acme{i}")) for i in range(3)]
    await asyncio.sleep(0)
    waiters.append(asyncio.create_task(wait("other", "other")))  # after all of acme's
    await asyncio.sleep(0)
    slots.release("holder")
    for turn in ("acme", "other", "acme", "acme"):
        await asyncio.sleep(0)
        slots.release(turn)
    await asyncio.gather(*waiters)
    assert order == ["acme0", "other", "acme1", "acme2"]


@async_test
async def test_a_tenants_queue_is_bounded() -> None:
    slots = GenerationSlots(1, per_tenant=1, max_queued=2)
    await granted(slots, "acme")
    queued = [await granted(slots, "acme") for _ in range(2)]
    with pytest.raises(QuotaExceededError, match="2 replies waiting") as refused:
        await slots.acquire("acme", timeout_s=TEST_TIMEOUT_S)
    assert refused.value.retry_after_s is not None and refused.value.retry_after_s > 0
    assert http_status(refused.value) == 429
    other = await granted(slots, "other")  # another tenant's queue is its own
    assert slots.waiting("other") == 1
    for task in [*queued, other]:
        task.cancel()


@async_test
async def test_a_waiter_that_leaves_or_waits_too_long_leaves_the_queue() -> None:
    slots = GenerationSlots(1, per_tenant=1, max_queued=1)
    await granted(slots, "holder")
    leaving = await granted(slots, "acme")
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    assert slots.waiting("acme") == 0
    with pytest.raises(UnavailableError, match="no LLM generation slot came free") as late:
        await slots.acquire("acme", timeout_s=0.01)
    assert late.value.retry_after_s is not None
    assert slots.waiting("acme") == 0
    slots.release("holder")  # nobody waits: the slot stays free
    assert (await granted(slots, "acme")).done()


@async_test
async def test_a_slot_freed_as_its_waiter_is_cancelled_is_not_lost() -> None:
    """The waiter's task is cancelled (its future with it) and the slot is freed in the same
    turn of the loop, before the task has left the queue: the slot must stay free."""
    slots = GenerationSlots(1, per_tenant=1, max_queued=2)
    await granted(slots, "acme")
    leaving = await granted(slots, "acme")
    leaving.cancel()
    slots.release("acme")
    with pytest.raises(asyncio.CancelledError):
        await leaving
    assert slots.held("acme") == 0 and slots.waiting("acme") == 0
    assert (await granted(slots, "acme")).done()


@async_test
async def test_a_request_of_no_tenant_is_bound_by_the_total_only() -> None:
    slots = GenerationSlots(2, per_tenant=1, max_queued=0)
    both = [await granted(slots, None) for _ in range(2)]
    assert all(task.done() for task in both)
    third = await granted(slots, None)  # queued, though max_queued is 0
    assert not third.done()
    slots.release(None)
    await asyncio.sleep(0)
    assert third.done()


def test_a_tenants_share_of_the_slots_defaults_to_all_but_one() -> None:
    assert LlmSettings(max_parallel=1).tenant_parallel == 1
    assert LlmSettings(max_parallel=4).tenant_parallel == 3
    assert LlmSettings(max_parallel=4, tenant_max_parallel=4).tenant_parallel == 4
    assert LlmSettings(max_parallel=2, tenant_max_parallel=9).tenant_parallel == 2
