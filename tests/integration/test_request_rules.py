"""One set of request rules: every way in agrees on what it accepts.

The same edge parameters go to REST jobs, gRPC ``Synthesize``, the WebSocket stream and
OpenAI's speech route of one real stack (redis-server, ``voicelane api``, ``voicelane grpc``,
a GPU and a CPU worker, espeak). For each case all four either accept it and produce audio
(a job that finishes ``done``; a stream's first audio) or all refuse it with a 4xx /
INVALID_ARGUMENT that names the same error code and the field at fault (the REST body's
``code`` and ``field``, gRPC's ``error-code`` and ``error-field`` trailers, the WebSocket
error's ``error_code`` and ``field``). A job accepted with 202 must never fail. The SDK's
clients (gRPC and REST jobs) raise what the server said: status, code and field.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import redis
import websockets

from tests.support.stack import ACME_KEY, OTHER_KEY, Stack, wait_for
from voicelane.api.text_options import DEFAULT_TTL_S as TEXT_OPTIONS_TTL_S
from voicelane.client import JobsClient, RetryPolicy, SpeechClient
from voicelane.common.error_wire import CODE_KEY, FIELD_KEY
from voicelane.common.errors import RemoteError
from voicelane.common.wire import speech_pb2 as pb
from voicelane.common.wire import speech_pb2_grpc as pb_grpc
from voicelane.core.lane.keys import REQUESTS_KEY
from voicelane.core.redis_server import RedisServer

pytestmark = pytest.mark.integration

LIMIT = 400
"""The text limit of both lanes in this stack (jobs and streams alike)."""
SENTENCE = "The river runs past the old mill, and the children wave at the boats. "
AT_LIMIT = (SENTENCE * 10)[: LIMIT - 1] + "."
AUTH = {"Authorization": f"Bearer {ACME_KEY}"}
METADATA = (("authorization", f"Bearer {ACME_KEY}"),)


@dataclass(frozen=True)
class Case:
    name: str
    text: str | None = "Hello there, this is a short test."
    """None: the request has no text (gRPC, which cannot tell a missing field, sends "")."""
    voice: str | None = None
    speed: float | None = None
    sample_rate_hz: int | None = None
    refused_field: str | None = None
    """None: every front accepts; else every front refuses, naming this field ("text" stands
    for each front's own text field: ``input`` on OpenAI's route)."""
    refused_code: str | None = None
    """The error code every front gives a refused case."""
    normalize: bool | None = None
    ssml: bool | None = None
    lexicons: tuple[str, ...] | None = None
    """How the text is read (None: the front's default)."""
    openai_accepts: bool = False
    """OpenAI's speech route accepts what the other fronts refuse: its speed range is OpenAI's,
    0.25-4.0, time-stretched beyond the engine's (issue 24)."""


CASES = [
    Case(
        "speed 0.25",
        speed=0.25,
        refused_field="speed",
        refused_code="invalid_input",
        openai_accepts=True,
    ),
    Case("speed 0.5", speed=0.5),
    Case("speed 2.5", speed=2.5),
    Case(
        "speed 4.0",
        speed=4.0,
        refused_field="speed",
        refused_code="invalid_input",
        openai_accepts=True,
    ),
    Case("speed 4.5", speed=4.5, refused_field="speed", refused_code="invalid_input"),
    *(
        Case(f"{rate} Hz", sample_rate_hz=rate)
        for rate in (8000, 12000, 16000, 24000, 48000)  # what Opus (and Ogg/Opus) carries
    ),
    *(
        Case(
            f"{rate} Hz",
            sample_rate_hz=rate,
            refused_field="sample_rate_hz",
            refused_code="unsupported_format",
        )
        for rate in (11025, 22050, 44100, 96000)
    ),
    Case(
        "unknown voice", voice="no-such-voice", refused_field="voice", refused_code="unknown_voice"
    ),
    Case(
        "malformed seed voice", voice="seed:x", refused_field="voice", refused_code="unknown_voice"
    ),
    Case(
        "punctuation only",
        text="... !!! ??? --- ***",
        refused_field="text",
        refused_code="invalid_input",
    ),
    Case("missing text", text=None, refused_field="text", refused_code="invalid_input"),
    Case("digits as written", text="Room 101, please.", normalize=False),
    Case("SSML", text='<speak>Hello <break time="300ms"/> world.</speak>'),
    Case("SSML, said to be", text="<speak><s>Hello there.</s></speak>", ssml=True),
    Case(
        "SSML with nothing to speak",
        text='<speak><break time="500ms"/></speak>',
        refused_field="text",
        refused_code="invalid_input",
    ),
    Case(
        "malformed SSML",
        text="<speak><s>Hello there.</speak>",
        refused_field="text",
        refused_code="malformed_request",
    ),
    Case(
        "SSML voice unknown to the engine",
        text='<speak><voice name="no-such-voice">Hello there.</voice></speak>',
        refused_field="text",
        refused_code="unknown_voice",
    ),
    Case("no lexicons", lexicons=()),
    Case(
        "unknown lexicon",
        lexicons=("no-such-lexicon",),
        refused_field="lexicons",
        refused_code="invalid_input",
    ),
    Case("text at the limit", text=AT_LIMIT),
    Case(
        "text over the limit",
        text=AT_LIMIT + "x",
        refused_field="text",
        refused_code="text_too_large",
    ),
]


@dataclass(frozen=True)
class Outcome:
    accepted: bool
    field: str | None = None
    """For a refusal: the field the front named (None if it named none)."""
    detail: str = ""
    code: str | None = None
    """For a refusal: the error code the front gave."""

    def __str__(self) -> str:
        if self.accepted:
            return "accepted"
        return f"refused ({self.code}, {self.field}): {self.detail}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("rules")
    redis_server = RedisServer(directory / "redis").start()
    stack = Stack(
        directory / "stack",
        redis_server.url,
        env_overrides={
            "VOICELANE_MAX_TEXT_CHARS": str(LIMIT),
            "VOICELANE_MAX_STREAM_TEXT_CHARS": str(LIMIT),
            "VOICELANE_REALTIME__LOOKAHEAD_S": "1000",
            "VOICELANE_REALTIME__ENCODE_AHEAD_S": "1000",
        },
    )
    try:
        stack.gpu_worker()
        stack.cpu_worker()
        stack.grpc()
        stack.api()
        stack.wait_realtime_workers()
        yield stack
    except BaseException:
        print(stack.logs())
        raise
    finally:
        stack.stop()
        redis_server.stop()


def _drop_none(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _text_options(case: Case) -> dict[str, Any]:
    """The case's text options as a JSON body's fields (unset ones left out)."""
    options = _drop_none({"normalize": case.normalize, "ssml": case.ssml})
    if case.lexicons is not None:
        options["lexicons"] = list(case.lexicons)
    return options


def _refusal(status: int, body: dict[str, Any]) -> Outcome:
    """A refusal's outcome, from voicelane's error body (``field``) or OpenAI's (``param``)."""
    assert 400 <= status < 500, (status, body)
    error = body["error"]
    return Outcome(False, error.get("field", error.get("param")), error["message"], error["code"])


# ---- the four fronts -----------------------------------------------------------------------


def rest_job(stack: Stack, case: Case) -> tuple[Outcome, str | None]:
    """The outcome of the submission, and the job id when it was accepted."""
    body = _drop_none(
        {
            "text": case.text,
            "voice": case.voice,
            "speed": case.speed,
            "sample_rate_hz": case.sample_rate_hz,
            "format": "ogg",
            **_text_options(case),
        }
    )
    response = httpx.post(f"{stack.api_url}/v1/jobs", json=body, headers=AUTH, timeout=30)
    if response.status_code == 202:
        return Outcome(True), str(response.json()["id"])
    return _refusal(response.status_code, response.json()), None


def openai_speech(stack: Stack, case: Case) -> Outcome:
    body = _drop_none(
        {
            "model": "tts-1",
            "input": case.text,
            "voice": case.voice or "alloy",
            "speed": case.speed,
            "sample_rate_hz": case.sample_rate_hz,
            "response_format": "opus",
            **_text_options(case),
        }
    )
    with httpx.stream(
        "POST", f"{stack.api_url}/v1/audio/speech", json=body, headers=AUTH, timeout=30
    ) as response:
        if response.status_code != 200:
            return _refusal(response.status_code, json.loads(response.read()))
        first = next(response.iter_bytes(), b"")
        return Outcome(first.startswith(b"OggS"), detail=f"first bytes {first[:8]!r}")


async def grpc_synthesize(stack: Stack, case: Case) -> Outcome:
    request = pb.SynthesizeRequest(
        text=case.text or "",
        voice=case.voice or "",
        speed=case.speed or 0.0,
        sample_rate_hz=case.sample_rate_hz or 0,
    )
    if case.normalize is not None:
        request.normalize = case.normalize
    if case.ssml is not None:
        request.ssml = case.ssml
    if case.lexicons is not None:
        request.lexicons.CopyFrom(pb.Lexicons(names=case.lexicons))
    async with grpc.aio.insecure_channel(stack.grpc_target) as channel:
        call = pb_grpc.SpeechStub(channel).Synthesize(request, metadata=METADATA, timeout=30)
        try:
            async for chunk in call:
                if chunk.opus_packets:
                    call.cancel()
                    return Outcome(True)
        except grpc.aio.AioRpcError as error:
            assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error
            details = error.details() or ""
            trailers = dict(error.trailing_metadata() or ())
            field = trailers.get(FIELD_KEY)
            assert field is None or details.startswith(field), (field, details)
            return Outcome(False, field, details, trailers.get(CODE_KEY))
    return Outcome(False, detail="the stream ended without audio")


async def websocket_stream(stack: Stack, case: Case) -> Outcome:
    body = _drop_none(
        {
            "text": case.text,
            "voice": case.voice,
            "speed": case.speed,
            "sample_rate_hz": case.sample_rate_hz,
            **_text_options(case),
        }
    )
    url = f"ws://127.0.0.1:{stack.api_port}/v1/stream"
    async with websockets.connect(url, additional_headers=AUTH) as socket:
        await socket.send(json.dumps(body))
        async for message in socket:
            if isinstance(message, bytes):
                return Outcome(True)
            event = json.loads(message)
            if event["type"] == "error":
                assert event["code"] == "INVALID_ARGUMENT", event
                return Outcome(False, event.get("field"), event["message"], event["error_code"])
    return Outcome(False, detail="the socket closed without audio")


# ---- the test ------------------------------------------------------------------------------


def test_every_front_accepts_and_refuses_the_same_requests(stack: Stack) -> None:
    jobs: dict[str, str] = {}
    disagreements: list[str] = []
    for case in CASES:
        job, job_id = rest_job(stack, case)
        if job_id is not None:
            jobs[case.name] = job_id
        outcomes = {
            "REST job": job,
            "gRPC": asyncio.run(grpc_synthesize(stack, case)),
            "WebSocket": asyncio.run(websocket_stream(stack, case)),
            "OpenAI speech": openai_speech(stack, case),
        }
        for front, outcome in outcomes.items():
            expected_field = case.refused_field
            if case.openai_accepts and front == "OpenAI speech":
                expected_field = None
            if expected_field == "text" and front == "OpenAI speech":
                expected_field = "input"
            if expected_field is None:
                ok = outcome.accepted
            else:
                ok = (
                    not outcome.accepted
                    and outcome.field == expected_field
                    and outcome.code == case.refused_code
                    and expected_field in outcome.detail
                )
            if not ok:
                want = (
                    "accepted"
                    if expected_field is None
                    else f"refused ({case.refused_code}, {expected_field})"
                )
                disagreements.append(f"{case.name} / {front}: {outcome}; want {want}")
    assert not disagreements, "\n".join(disagreements)

    # Every job accepted with 202 renders: nothing knowable at submission fails later.
    expected = {c.name for c in CASES if c.refused_field is None}
    assert set(jobs) == expected
    with httpx.Client(base_url=stack.api_url, headers=AUTH, timeout=30) as client:

        def final_states() -> dict[str, str] | None:
            states = {n: client.get(f"/v1/jobs/{i}").json()["state"] for n, i in jobs.items()}
            final = all(s in ("done", "failed", "cancelled") for s in states.values())
            return states if final else None

        states = wait_for(final_states, 180, "every accepted job to finish")
    assert states == dict.fromkeys(jobs, "done"), states


def test_the_job_api_reports_the_field_of_a_bad_format(stack: Stack) -> None:
    response = httpx.post(
        f"{stack.api_url}/v1/jobs",
        json={"text": "Hello.", "format": "aac"},
        headers=AUTH,
        timeout=30,
    )
    outcome = _refusal(response.status_code, response.json())
    assert outcome.field == "format" and "aac" in outcome.detail


def test_rules_are_checked_before_anything_is_written(stack: Stack, tmp_path: Path) -> None:
    """A refused job leaves no trace: the caller's job list does not grow."""
    with httpx.Client(base_url=stack.api_url, headers=AUTH, timeout=30) as client:
        before = len(client.get("/v1/jobs", params={"limit": 100}).json()["jobs"])
        response = client.post("/v1/jobs", json={"text": "Hi.", "speed": 9})
        after = len(client.get("/v1/jobs", params={"limit": 100}).json()["jobs"])
    assert response.status_code == 422 and response.json()["error"]["field"] == "speed"
    assert after == before


def test_the_sdk_raises_what_the_server_said(stack: Stack) -> None:
    """The same unknown voice through the SDK's gRPC client and its REST jobs client: one
    RemoteError each, with the server's status, code and field."""

    async def over_grpc() -> RemoteError:
        retry = RetryPolicy(max_attempts=1)
        async with SpeechClient(stack.grpc_target, ACME_KEY, retry=retry) as client:
            with pytest.raises(RemoteError) as caught:
                async with client.synthesize("Hello there.", voice="no-such-voice") as stream:
                    async for _ in stream:
                        pass
        return caught.value

    jobs = JobsClient(stack.api_url, ACME_KEY)
    try:
        with pytest.raises(RemoteError) as over_rest:
            jobs.submit("Hello there.", voice="no-such-voice")
    finally:
        jobs.close()
    for error in (asyncio.run(over_grpc()), over_rest.value):
        assert (error.status, error.code, error.field) == (
            "INVALID_ARGUMENT",
            "unknown_voice",
            "voice",
        ), error
        assert error.permanent and "no-such-voice" in error.message


# ---- how the text is read: one rule set on every front -------------------------------------

HOUSE = {"entries": [{"graphemes": ["W3C"], "alias": "World Wide Web Consortium"}]}
LEXICON_TEXT = "The W3C met on 2024-05-06."


class LaneRequests:
    """Stream requests as the fronts queue them: the raw ``XADD`` lines Redis's ``MONITOR``
    shows for the lane's request stream (its entries are trimmed once served, so they cannot
    be read back later)."""

    def __init__(self, stack: Stack) -> None:
        self._url = stack.redis_url
        self._client = redis.Redis.from_url(self._url)
        self._token = f"stop-{uuid.uuid4().hex}"
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> LaneRequests:
        self._monitor = self._client.monitor().__enter__()  # type: ignore[no-untyped-call]
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        other = redis.Redis.from_url(self._url)
        other.echo(self._token)  # the watcher's cue to stop
        other.close()
        self._thread.join(10)
        self._client.close()

    def _watch(self) -> None:
        wanted = f'"XADD" "{REQUESTS_KEY.key("espeak")}"'
        while True:
            raw = self._monitor.connection.read_response()
            line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            if self._token in line:
                return
            if wanted in line:
                self.lines.append(line)


def test_a_tenant_s_lexicon_and_text_options_reach_every_front_alike(stack: Stack) -> None:
    """The tenant's default lexicon applies wherever its text goes in (a job, gRPC, the
    WebSocket, OpenAI's route) and ``POST /v1/text`` shows its effect; ``normalize: false``
    and ``lexicons: []`` travel the same way; another tenant cannot use it."""
    with stack.client() as client:
        assert client.put("/v1/lexicons/house", json=HOUSE).status_code in (200, 201)
        assert client.put("/v1/lexicons/house/default").status_code in (200, 204)
        try:

            def shown_with_alias() -> dict[str, Any] | None:
                # A lexicon change reaches new requests within the fronts' 1 s cache.
                view: dict[str, Any] = client.post("/v1/text", json={"text": LEXICON_TEXT}).json()
                return view if "World Wide Web" in view["segments"][0]["text"] else None

            shown = wait_for(shown_with_alias, 5, "the default lexicon to apply")
            assert "World Wide Web Consortium" in shown["segments"][0]["text"]
            assert "May sixth" in shown["segments"][0]["text"]
            plain = client.post(
                "/v1/text", json={"text": LEXICON_TEXT, "lexicons": [], "normalize": False}
            ).json()
            assert plain["segments"][0]["text"] == LEXICON_TEXT

            time.sleep(TEXT_OPTIONS_TTL_S)  # every front's cache has seen the new default
            job = client.post("/v1/jobs", json={"text": LEXICON_TEXT}).json()
            assert job["lexicons"] == ["house"] and job["normalize"] is True
            raw_job = client.post(
                "/v1/jobs", json={"text": LEXICON_TEXT, "lexicons": [], "normalize": False}
            ).json()
            assert raw_job["lexicons"] == [] and raw_job["normalize"] is False

            case = Case("lexicon", text=LEXICON_TEXT)
            raw = Case("raw", text=LEXICON_TEXT, normalize=False, lexicons=())
            with LaneRequests(stack) as lane:
                for outcome in (
                    asyncio.run(grpc_synthesize(stack, case)),
                    asyncio.run(websocket_stream(stack, case)),
                    openai_speech(stack, case),
                    asyncio.run(grpc_synthesize(stack, raw)),
                ):
                    assert outcome.accepted, outcome
            queued = lane.lines
            assert len(queued) == 4
            for line in queued[:3]:
                assert '"lexicon_names" "house"' in line and '"normalize" "1"' in line
                assert "World Wide Web Consortium" in line
            assert '"lexicon"' not in queued[3] and '"normalize" "0"' in queued[3]
        finally:
            client.delete("/v1/lexicons/house")
    with stack.client(OTHER_KEY) as other:
        refused = other.post("/v1/text", json={"text": LEXICON_TEXT, "lexicons": ["house"]})
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["field"] == "lexicons"


HOSTILE = {
    "billion laughs": (
        '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
        '<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>'
        "<speak>&lol2;</speak>"
    ),
    "external entity": (
        '<!DOCTYPE speak [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><speak>&xxe;</speak>'
    ),
    "nested elements": "<speak>" + "<s>" * 70 + "Hi",  # refused at the 65th start tag
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_ssml_is_refused_by_every_front_with_nothing_queued(
    stack: Stack, name: str
) -> None:
    """Within this stack's 400-character limit: a DTD (billion laughs, an external entity)
    and elements nested too deep are 400 ``malformed_request`` naming the line and column on
    every front, and nothing reaches the lane or the job ledger."""
    source = HOSTILE[name]
    case = Case(name, text=source, refused_field="text", refused_code="malformed_request")
    with stack.client() as client:
        jobs_before = len(client.get("/v1/jobs", params={"limit": 100}).json()["jobs"])
        with LaneRequests(stack) as lane:
            outcomes = [
                rest_job(stack, case)[0],
                asyncio.run(grpc_synthesize(stack, case)),
                asyncio.run(websocket_stream(stack, case)),
                openai_speech(stack, case),
            ]
        jobs_after = len(client.get("/v1/jobs", params={"limit": 100}).json()["jobs"])
    for outcome in outcomes:
        assert not outcome.accepted and outcome.code == "malformed_request", outcome
        assert outcome.field in ("text", "input") and "SSML line 1, column" in outcome.detail
    assert lane.lines == [] and jobs_after == jobs_before
