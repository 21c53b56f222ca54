"""LiveKit Agents against a real voicelane stack, with the real framework packages in their
own environments (``tests/clients/venvs/livekit.txt``: livekit-agents and
livekit-plugins-openai 1.8.9 and our ``integrations/livekit``; ``livekit17.txt``: the 1.7.0
pair, whose OpenAI plugin picks its parser by model name).

- LiveKit's OpenAI plugin: ``openai.TTS(base_url=.../v1, ...)``'s ``synthesize()`` gives
  24 kHz mono frames of a plausible length, with 1.8.9 and with 1.7.0 for both of its
  parsers (``tts-1``: raw audio; ``gpt-4o-mini-tts``: ``stream_format="sse"``).
- Our plugin (``livekit.plugins.voicelane``) over ``/v1/agent``: ``synthesize()``;
  ``stream()`` with several pushes, a flush and the end of input gives frames and aligned
  words (the pieces of the text in order, timed inside the audio); an interruption
  (``aclose()`` mid-sentence) sends ``cancel``, the server answers ``cancelled`` and nothing
  of that context follows, and the pooled socket serves the next request.

Real processes: redis-server, the API and a GPU worker (espeak); the clients run as
subprocesses (tests/support/client_venv.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.client_venv import run_client
from tests.support.stack import ACME_KEY, Stack
from voicelane.core.redis_server import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SAMPLE_RATE_HZ = 24_000
TEXT = "The quick brown fox jumps over the lazy dog. Then it runs home."
"""What the client scripts speak in ``synthesize()`` (tests/clients/livekit_*_tts.py)."""
LOOKAHEAD_S = 3.0
"""``realtime.lookahead_s`` (the default): how far a live stream renders ahead of playback."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("livekit")
    redis_server = RedisServer(directory / "redis").start()
    lane = Stack(directory / "stack", redis_server.url)
    try:
        lane.gpu_worker()
        lane.api()
        lane.wait_realtime_workers()
        yield lane
    except BaseException:
        print(lane.logs())
        raise
    finally:
        lane.stop()
        redis_server.stop()


def plausible_seconds(text: str) -> tuple[float, float]:
    """Bounds on the speech of ``text`` at any sane voice and speed (2–6 words a second)."""
    words = len(text.split())
    return words / 6, words / 2 + 1.0


def assert_frames(findings: dict[str, Any], text: str = TEXT) -> None:
    assert findings["error"] is None, findings
    assert findings["frames"] > 0, findings
    assert findings["sample_rates"] == [SAMPLE_RATE_HZ], findings
    assert findings["channels"] == [1], findings
    low, high = plausible_seconds(text)
    assert low <= findings["duration_s"] <= high, findings


# ---------------------------------------------------------------- LiveKit's OpenAI plugin


def test_openai_plugin_1_8_9_synthesizes_24khz_frames(stack: Stack) -> None:
    findings = run_client(
        "livekit", "livekit_openai_tts.py", f"{stack.api_url}/v1", ACME_KEY, "tts-1", "alloy"
    )
    assert findings["plugin"] == "1.8.9", findings
    assert_frames(findings)


@pytest.mark.parametrize(
    ("model", "parser"),
    [("tts-1", "AudioChunkedStream"), ("gpt-4o-mini-tts", "SSEChunkedStream")],
    ids=["raw audio", "sse"],
)
def test_openai_plugin_1_7_0_synthesizes_with_either_parser(
    stack: Stack, model: str, parser: str
) -> None:
    """1.7.0 asks for ``stream_format="sse"`` for every model but tts-1/tts-1-hd and parses
    the body as SSE whatever its Content-Type: without SSE on ``/v1/audio/speech`` it fails
    with "no audio frames were pushed"."""
    findings = run_client(
        "livekit17", "livekit_openai_tts.py", f"{stack.api_url}/v1", ACME_KEY, model, "alloy"
    )
    assert findings["plugin"] == "1.7.0", findings
    assert findings["stream_class"] == parser, findings
    assert_frames(findings)


# ---------------------------------------------------------------- our plugin


@pytest.fixture(scope="module")
def ours(stack: Stack) -> Any:
    """One run of tests/clients/livekit_voicelane_tts.py (synthesize, stream, interrupt)."""
    return run_client("livekit", "livekit_voicelane_tts.py", stack.api_url, ACME_KEY)


def assert_aligned(result: dict[str, Any]) -> None:
    """The words are the text's pieces in order (joined: the text as sent; each holds one
    word of it), timed in order inside the audio."""
    words = result["words"]
    texts = [text for text, _, _ in words]
    assert "".join(texts) == result["text"], texts
    spoken = re.findall(r"\w+", result["text"])
    timed = [re.findall(r"\w+", text) for text in texts]
    assert [w for piece in timed for w in piece] == spoken, texts
    assert sum(1 for piece in timed if piece) >= len(spoken) - 2, texts  # about one word each
    starts = [start for _, start, _ in words]
    assert starts == sorted(starts), words
    for text, start, end in words:
        assert 0 <= start <= end <= result["duration_s"] + 0.05, (text, start, end, result)


def test_our_plugin_registers_and_says_what_it_can(ours: dict[str, Any]) -> None:
    assert "livekit.plugins.voicelane" in ours["registered"], ours["registered"]
    assert ours["capabilities"] == {"streaming": True, "aligned_transcript": True}
    assert ours["sample_rate"] == SAMPLE_RATE_HZ


def test_our_plugin_synthesize_gives_frames_and_aligned_words(ours: dict[str, Any]) -> None:
    result = ours["synthesize"]
    assert_frames({**result, "error": None})
    assert_aligned(result)


def test_our_plugin_stream_with_several_pushes_gives_frames_and_aligned_words(
    ours: dict[str, Any],
) -> None:
    result = ours["stream"]
    assert_frames({**result, "error": None}, result["text"])
    assert len(result["segment_ids"]) == 1 and result["finals"] == 1, result
    assert_aligned(result)


def test_a_segment_of_whitespace_is_silent_without_error(ours: dict[str, Any]) -> None:
    assert ours["blank"]["frames"] == 0, ours["blank"]
    assert ours["blank"]["sent"] == [], ours["blank"]  # no context was opened for it


def test_an_interruption_cancels_the_context_and_no_audio_follows(
    ours: dict[str, Any],
) -> None:
    result = ours["interrupt"]
    assert result["cancel_sent"] and result["cancelled_received"], result
    assert result["after_cancelled"] == [], result  # nothing of the context after ``cancelled``
    assert not result["done_received"], result
    assert result["late_frames"] == 0, result
    # what the server rendered stopped at the interruption: what was heard, plus what the
    # lane renders ahead of playback and the sentence in hand — not the 12 sentences
    assert result["server_audio_s"] <= result["heard_s"] + LOOKAHEAD_S + 6.0, result
    # the socket went back to the pool and served the next request
    assert_frames({**result["after"], "error": None}, result["after"]["text"])
    assert ours["connections"] == 1, ours


def test_a_bad_key_is_a_non_retryable_status_error(ours: dict[str, Any]) -> None:
    bad_key = ours["bad_key"]
    assert bad_key is not None, ours
    assert bad_key["class"] == "APIStatusError", bad_key
    assert bad_key["status_code"] == 401 and bad_key["retryable"] is False, bad_key


def test_a_context_error_is_a_400_and_the_socket_goes_on(ours: dict[str, Any]) -> None:
    """An unknown voice fails that segment only (the server's error of the context): a
    non-retryable 400 naming the server's error code; the next request on the same TTS
    reuses the socket."""
    bad_voice = ours["bad_voice"]
    assert bad_voice is not None, ours
    assert bad_voice["class"] == "APIStatusError", bad_voice
    assert bad_voice["status_code"] == 400 and bad_voice["retryable"] is False, bad_voice
    assert bad_voice["error_code"] == "unknown_voice", bad_voice
    assert_frames({**ours["after_error"], "error": None}, ours["after_error"]["text"])
    assert ours["connections"] == 1, ours


def test_the_sample_rate_is_the_one_asked_for(ours: dict[str, Any]) -> None:
    result = ours["rate_16k"]
    assert result["frames"] > 0 and result["sample_rates"] == [16_000], result
    assert_aligned(result)


# ---------------------------------------------------------------- our plugin's wire, unit


def test_our_plugin_protocol_parts() -> None:
    """The plugin's pure parts (``_protocol``) on fixed inputs, in the plugin's environment."""
    found = run_client("livekit", "livekit_voicelane_protocol.py")
    assert found["urls"] == {
        "http://host:8000": "ws://host:8000/v1/agent",
        "http://host:8000/": "ws://host:8000/v1/agent",
        "http://host:8000/v1": "ws://host:8000/v1/agent",
        "https://tts.example/v1/": "wss://tts.example/v1/agent",
        "ws://host:8000": "ws://host:8000/v1/agent",
    }
    assert found["errors"] == {
        "INVALID_ARGUMENT": ["APIStatusError", 400, False],
        "UNAUTHENTICATED": ["APIStatusError", 401, False],
        "PERMISSION_DENIED": ["APIStatusError", 403, False],
        "RESOURCE_EXHAUSTED": ["APIStatusError", 429, True],
        "UNAVAILABLE": ["APIStatusError", 503, True],
        "DEADLINE_EXCEEDED": ["APIStatusError", 504, True],
        "INTERNAL": ["APIStatusError", 500, True],
    }
    assert found["closes"] == {
        "1008": ["APIStatusError", 400, False],
        "1011": ["APIStatusError", 500, True],
        "1013": ["APIStatusError", 503, True],
        "1000": ["APIConnectionError", None, True],
        "None": ["APIConnectionError", None, True],
    }
    assert found["first_append"] == {
        "type": "append",
        "context_id": "c1",
        "text": "Hi.",
        "sample_rate_hz": 16000,
        "encoding": "pcm",
        "voice": "espeak:en-us",
        "speed": 1.5,
    }
    assert found["later_append"] == {
        "type": "append",
        "context_id": "c1",
        "text": "More.",
        "close": True,
    }
    aligner = found["aligner"]
    assert aligner["first"] == [["Hello", 0.01, 0.3], [", world", 0.35, 0.7]]
    assert aligner["again"] == []  # a word already handed out is not handed out twice
    assert aligner["late"] == [[". Bye", 0.35, 0.9]]  # in order; clamped to the text
    assert aligner["ending"] == [["Bye", 0.0, 0.25], [" now", 0.25, 0.6]]
    assert aligner["tail"] == [[".", 1.2, 1.2]]  # the closing punctuation, at the end
    assert aligner["tail_again"] is None
