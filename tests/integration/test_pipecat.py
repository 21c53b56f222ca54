"""Pipecat 1.14 against a real stack (redis-server, a render worker with espeak, ``voicelane
api``), driven from Pipecat's own environment (``.venv/clients/pipecat``, tests/clients):

- our plugin, ``voicelane_pipecat.VoicelaneTTSService`` (``integrations/pipecat``, over
  ``/v1/agent``), in a pipeline: PCM frames at the pipeline's rate, word timestamps, an
  interruption mid-utterance that stops its audio within 100 ms with the cancel acknowledged,
  a refused context and a wrong key as ErrorFrames, a rate the server does not offer;
- Pipecat's own ``OpenAITTSService`` (``/v1/audio/speech``): audio frames with OpenAI's
  ``marin``, and a request the server refuses becomes an ErrorFrame (OpenAI's 400, which
  Pipecat catches as ``BadRequestError``), not an exception escaping the service.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.client_venv import client_python, run_client
from tests.support.stack import ACME_KEY, Stack
from voicelane.core.redis_server import RedisServer

pytestmark = pytest.mark.integration

PIPELINE_RATE_HZ = 16000  # what the script's pipeline asks for (tests/clients/pipecat_voicelane.py)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    client_python("pipecat")  # skip (or fail under CI) before starting anything
    directory = tmp_path_factory.mktemp("pipecat")
    redis_server = RedisServer(directory / "redis").start()
    stack = Stack(directory / "stack", redis_server.url)
    try:
        stack.gpu_worker()
        stack.wait_realtime_workers()
        stack.api()
        yield stack
    finally:
        stack.stop()
        redis_server.stop()


@pytest.fixture(scope="module")
def ours(stack: Stack) -> dict[str, Any]:
    findings: dict[str, Any] = run_client(
        "pipecat", "pipecat_voicelane.py", stack.api_url, ACME_KEY, timeout_s=240
    )
    return findings


@pytest.fixture(scope="module")
def openai_service(stack: Stack) -> dict[str, Any]:
    findings: dict[str, Any] = run_client(
        "pipecat", "pipecat_openai.py", stack.api_url, ACME_KEY, timeout_s=240
    )
    return findings


# The LLM turn: Pipecat's sentences appended and flushed one by one (its default), or its
# tokens appended as they come (TOKEN mode: the server cuts the sentences).
TURNS = pytest.mark.parametrize("turn_name", ["turn", "token_turn"], ids=["sentences", "tokens"])


@TURNS
def test_our_service_streams_pcm_at_the_pipelines_rate(
    ours: dict[str, Any], turn_name: str
) -> None:
    turn = ours[turn_name]
    assert turn["started_sample_rate_hz"] == PIPELINE_RATE_HZ, turn
    assert turn["frame_sample_rates_hz"] == [PIPELINE_RATE_HZ], turn
    assert turn["frame_channels"] == [1], turn
    assert turn["audio_frames"] > 10 and turn["audio_s"] > 2.0, turn
    # Every sample the server said it sent reached the end of the pipeline (20 ms slack).
    assert abs(turn["audio_s"] * 1000 - turn["done_duration_ms"]) <= 20, turn
    assert ours["max_contexts"] >= 1


def test_a_rate_the_server_does_not_offer_is_resampled_whole(ours: dict[str, Any]) -> None:
    resampled = ours["resampled"]
    assert resampled["started_sample_rate_hz"] == 24000, resampled
    assert resampled["frame_sample_rates_hz"] == [resampled["pipeline_rate_hz"]], resampled
    # Nothing lost in the resampler: its tail comes out with the context's end (5 ms slack).
    assert abs(resampled["audio_s"] * 1000 - resampled["done_duration_ms"]) <= 5, resampled


@TURNS
def test_our_service_gives_word_timestamps_within_the_audio(
    ours: dict[str, Any], turn_name: str
) -> None:
    turn = ours[turn_name]
    wire = turn["wire_words"]
    spoken = " ".join(w["text"] for w in wire)
    for word in ("Hello", "Pipecat", "quick", "brown", "fox", "lazy", "dog", "time"):
        assert word in spoken, spoken
    assert turn["wire_word_slices_match"], wire
    starts = turn["word_starts_s"]
    assert len(starts) == len(wire) and starts[0] >= 0, turn
    assert all(b > a for a, b in itertools.pairwise(starts)), starts
    assert starts[-1] < turn["audio_s"], (starts, turn["audio_s"])
    assert all(w["end_ms"] / 1000 <= turn["audio_s"] + 0.02 for w in wire), wire
    # Pipecat turned them into word-aligned TTSTextFrames, timed in increasing order.
    assert turn["text_frames"] == [w["text"] for w in wire], turn
    assert turn["text_frames_with_pts"] == len(wire) and turn["text_frame_pts_increasing"]


def test_an_interruption_stops_the_audio_within_100_ms(ours: dict[str, Any]) -> None:
    cut = ours["interruption"]
    # Interrupted while its audio flowed, well before its end.
    assert cut["audio_s_before_interrupt"] >= 1.5, cut
    assert cut["audio_s_total"] < cut["text_s_estimate"] / 2, cut
    # Mid-sentence: words of the sentence being spoken were still to come.
    assert cut["heard_text"] and len(cut["unheard_rest_of_sentence"].split()) >= 2, cut
    assert cut["last_audio_after_interrupt_ms"] <= 100, cut
    assert cut["cancel_sent"] and cut["cancel_sent_after_interrupt_ms"] <= 100, cut
    assert cut["cancel_ack_ms"] is not None and cut["cancel_ack_ms"] <= 1000, cut
    assert cut["on_context_cancelled"] == [cut["context_id"]], cut
    assert cut["wire_messages_after_cancelled"] == 0 and not cut["done_of_interrupted"], cut
    # The connection goes on: the next utterance is spoken in a context of its own.
    assert cut["next_context_id"] != cut["context_id"] and cut["next_audio_s"] > 0.5, cut


def test_two_contexts_at_once_on_one_socket_play_in_order(ours: dict[str, Any]) -> None:
    both = ours["overlapping"]
    assert both["second_started_before_first_done"], both
    assert both["played_in_order"], both
    for audio_s, done_ms in zip(both["audio_s"], both["done_duration_ms"], strict=True):
        assert audio_s > 1.0 and abs(audio_s * 1000 - done_ms) <= 20, both


def test_a_refused_context_is_one_error_frame_and_the_pipeline_goes_on(
    ours: dict[str, Any],
) -> None:
    refused = ours["refused_voice"]
    # One error for the turn of three sentences: the rest of the turn was not sent.
    assert len(refused["voicelane_errors"]) == 1, refused
    assert "no-such-voice" in refused["voicelane_errors"][0], refused
    assert refused["refused_appends"] == 1 and refused["usable"], refused
    assert refused["audio_of_refused"] == 0, refused
    assert refused["audio_s_after"] > 0.5, refused


def test_pipecats_openai_service_makes_audio_frames(openai_service: dict[str, Any]) -> None:
    spoken = openai_service["spoken"]
    assert spoken["voice"] == "marin"
    assert spoken["audio_frames"] > 5 and spoken["audio_s"] > 1.0, spoken
    assert spoken["frame_sample_rates_hz"] == [24000], spoken
    assert spoken["errors"] == [], spoken


def test_pipecats_openai_service_turns_a_refused_request_into_an_error_frame(
    openai_service: dict[str, Any],
) -> None:
    refused = openai_service["refused"]
    # Pipecat's OpenAI service catches only BadRequestError (400): anything else escapes
    # run_tts and reaches Pipecat as "Error processing frame: ...".
    # (Pipecat adds "TTS context ... completed with no audio" of its own.)
    errors = [e for e in refused["errors"] if not e.startswith("TTS context")]
    assert errors, refused
    assert all(e.startswith("Unknown error occurred: Error code: 400") for e in errors), errors
    assert refused["audio_frames"] == 0, refused
    assert openai_service["after_refused"]["audio_s"] > 0.5, openai_service


def test_openais_sdk_gets_a_bad_request_error_in_openais_shape(
    openai_service: dict[str, Any],
) -> None:
    raw = openai_service["raw_bad_voice"]
    assert raw["exception"] == "BadRequestError" and raw["status"] == 400, raw
    error = raw["body"]["error"]
    assert set(error) >= {"message", "type", "param", "code"}, raw
    assert error["type"] == "invalid_request_error" and error["param"] == "voice", raw


def test_the_service_takes_a_base_url_or_the_agent_url(ours: dict[str, Any]) -> None:
    assert ours["agent_urls"] == {
        "http://h:8000": "ws://h:8000/v1/agent",
        "https://h/v1/": "wss://h/v1/agent",
        "ws://h:8000/v1/agent": "ws://h:8000/v1/agent",
        "http://h/prefix?x=1": "ws://h/prefix/v1/agent?x=1",
    }


def test_a_wrong_key_is_an_authentication_error_frame(ours: dict[str, Any]) -> None:
    wrong = ours["wrong_key"]
    assert any("unauthenticated" in e and "API key" in e for e in wrong["errors"]), wrong
    # Permanent (retrying will not help): Pipecat stops giving the service work.
    assert wrong["usable"] is False and wrong["audio_frames"] == 0, wrong
