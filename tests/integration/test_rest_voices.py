"""The voice routes of the REST API in-process (real Redis): every kind of voice created over
HTTP (JSON, and a form with an uploaded clip), read, listed and deleted; the clip back as
24 kHz PCM; the tenant's bound; every kind of bad input as a 4xx JSON error naming its field
(leaving Redis as it was); an engine that makes no voices; and one tenant never reaching
another's voices."""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from starlette.testclient import TestClient

from voicelane.api.rest import create_app
from voicelane.api.voice_options import VoiceResolver
from voicelane.common.audio import AudioFormat, PcmF32, open_writer, resample
from voicelane.core.lane.keys import capabilities_key
from voicelane.core.ledger import Ledger
from voicelane.core.rules import EngineCapabilities, VoiceInfo
from voicelane.core.settings import ApiSettings
from voicelane.core.speaker_embedding import encode_spk_emb
from voicelane.core.speakers import VOICE_KINDS, SpeakerDef
from voicelane.core.storage import LocalStorage, LocalStorageSettings

pytestmark = pytest.mark.integration

KEYS = "acme:acme-key-0001,other:other-key-0002"
ACME = {"Authorization": "Bearer acme-key-0001"}
OTHER = {"Authorization": "Bearer other-key-0002"}
EMB = encode_spk_emb([(n % 7 - 3) / 10 for n in range(768)])
"""A real ChatTTS spk_emb string (768 values: the official weights' size)."""
CHATTTS = EngineCapabilities(
    engine="chattts",
    sample_rate_hz=24_000,
    min_speed=0.5,
    max_speed=2.0,
    voices=(VoiceInfo("auto"), VoiceInfo("narrator"), VoiceInfo("seed:0")),
    seed_voices=True,
    voice_kinds=VOICE_KINDS,
)


def tone(duration_s: float, rate_hz: int) -> PcmF32:
    t = np.arange(int(duration_s * rate_hz)) / rate_hz
    return (0.3 * np.sin(2 * np.pi * 150 * t) * (0.6 + 0.4 * np.sin(6 * t))).astype(np.float32)


def audio_file(pcm: PcmF32, rate_hz: int, fmt: AudioFormat = AudioFormat.WAV) -> bytes:
    target = io.BytesIO()
    with open_writer(target, fmt, rate_hz) as writer:
        writer.write(pcm)
    return target.getvalue()


CLIP = audio_file(tone(4.0, 16_000), 16_000)
CLIP_B64 = base64.b64encode(CLIP).decode()


def make_app(redis_url: str, tmp_path: Path, **overrides: Any) -> TestClient:
    settings = ApiSettings(redis_url=redis_url, api_keys=KEYS, **overrides)
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "storage", secret="s" * 40))
    storage.prepare()
    app = create_app(settings, storage=storage, enqueue=lambda *a, **k: None)
    return TestClient(app, base_url="http://api")


@pytest.fixture
def api(redis_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, redis.Redis]]:
    """The REST app of a stack whose engine is ChatTTS (its capabilities published)."""
    connection = redis.Redis.from_url(redis_url)
    connection.set(capabilities_key("chattts"), CHATTTS.to_json())
    with make_app(redis_url, tmp_path, engine="chattts", tenant_max_voices=6) as client:
        yield client, connection
    connection.close()


def voice_keys(connection: redis.Redis) -> dict[str, Any]:
    """Every voice key and what it holds (the rate bucket every write takes from is not the
    voices' state)."""
    out: dict[str, Any] = {}
    for raw in connection.scan_iter(match="vl:tenant:*"):
        key = raw.decode()
        kind = connection.type(key)
        out[key] = connection.hgetall(key) if kind == b"hash" else connection.get(key)
    return out


def create(client: TestClient, body: dict[str, Any], headers: dict[str, str] = ACME) -> Any:
    response = client.post("/v1/voices", headers=headers, json=body)
    assert response.status_code == 201, response.text
    return response.json()


def test_every_kind_is_created_read_listed_and_deleted(
    api: tuple[TestClient, redis.Redis],
) -> None:
    client, _ = api
    response = client.post(
        "/v1/voices", headers=ACME, json={"name": "alice", "kind": "seed", "seed": 42}
    )
    assert response.status_code == 201, response.text
    assert response.headers["location"] == "/v1/voices/alice"
    alice = response.json()
    assert alice["name"] == "alice" and alice["engine"] == "chattts"
    assert alice["kind"] == "seed" and alice["seed"] == 42 and alice["description"] == ""
    assert alice["created_at"] > 0

    bob = create(client, {"name": "bob", "spk_emb": EMB, "description": "  calm\n voice "})
    assert bob["kind"] == "embedding" and bob["spk_emb"] == EMB
    assert bob["description"] == "calm voice"
    clara = create(client, {"name": "clara", "clip_base64": CLIP_B64, "transcript": "Hello there."})
    assert clara["kind"] == "clip"
    assert clara["clip"]["transcript"] == "Hello there."
    assert clara["clip"]["duration_s"] == pytest.approx(4.0, abs=0.01)
    assert 0 < clara["clip"]["size_bytes"] < 40_000 and len(clara["clip"]["sha256"]) == 64
    duo = create(client, {"name": "duo", "engine": "chattts", "mix": "alice(3)+seed:7"})
    assert duo["kind"] == "mix" and duo["mix_text"] == "alice(3)+seed:7"
    assert duo["mix"] == [{"voice": "alice", "weight": 3.0}, {"voice": "seed:7", "weight": 1.0}]
    trio = create(
        client,
        {
            "name": "trio",
            "kind": "mix",
            "mix": [{"voice": "duo", "weight": 2}, {"voice": "bob"}, {"voice": "narrator"}],
        },
    )
    assert trio["mix_text"] == "duo(2)+bob+narrator"

    assert client.get("/v1/voices/bob", headers=ACME).json() == bob
    assert client.get("/v1/voices/clara", headers=ACME).json() == clara
    listing = client.get("/v1/voices/custom", headers=ACME).json()
    assert [v["name"] for v in listing["voices"]] == ["alice", "bob", "clara", "duo", "trio"]
    assert "spk_emb" not in listing["voices"][1]  # the listing leaves the long string out
    assert listing["usage"] == {"voices": 5}
    assert listing["limits"] == {
        "voices": 6,
        "clip_min_s": 3.0,
        "clip_max_s": 30.0,
        "clip_max_bytes": 512 * 1024,
    }

    deleted = client.delete("/v1/voices/alice", headers=ACME)
    assert deleted.status_code == 204 and deleted.content == b""
    gone = client.get("/v1/voices/alice", headers=ACME)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"
    assert client.delete("/v1/voices/alice", headers=ACME).status_code == 404
    # a mix keeps what it was made of
    assert client.get("/v1/voices/duo", headers=ACME).json() == duo


def test_mixes_resolve_flattened_even_after_their_parts_go(
    api: tuple[TestClient, redis.Redis], redis_url: str
) -> None:
    client, _ = api
    create(client, {"name": "alice", "seed": 42})
    create(client, {"name": "bob", "spk_emb": EMB})
    create(client, {"name": "duo", "mix": "alice(3)+seed:7"})
    create(client, {"name": "trio", "mix": [{"voice": "duo", "weight": 2}, {"voice": "bob"}]})
    client.delete("/v1/voices/alice", headers=ACME)
    ledger = Ledger.from_url(redis_url)
    try:
        trio = ledger.voices.resolve("acme", "trio", engine="chattts")
        assert trio is not None
        assert trio.speaker == SpeakerDef.mix(
            [("seed:42", 1.5), ("seed:7", 0.5), ("emb:" + EMB, 1.0)]
        )
        direct = ledger.voices.resolve("acme", "duo+bob(2)")
        assert direct is not None and direct.engine == "chattts"
        assert direct.speaker == SpeakerDef.mix(
            [("seed:42", 0.75), ("seed:7", 0.25), ("emb:" + EMB, 2)]
        )
        fronts = VoiceResolver.over(ledger.voices)  # what the fronts call
        assert asyncio.run(fronts.resolve("acme", "duo+bob(2)", engine="chattts")) == direct
        assert asyncio.run(fronts.resolve("other", "trio")) is None
    finally:
        ledger.redis.close()


@pytest.mark.parametrize("fmt", [AudioFormat.WAV, AudioFormat.FLAC, AudioFormat.MP3])
def test_an_uploaded_clip_comes_back_at_24_khz(
    api: tuple[TestClient, redis.Redis], redis_url: str, fmt: AudioFormat
) -> None:
    client, _ = api
    pcm = tone(5.0, 44_100)
    response = client.post(
        "/v1/voices",
        headers=ACME,
        data={"name": "reader", "transcript": "Reading aloud.", "description": "from a file"},
        files={"clip": (f"me.{fmt.value}", audio_file(pcm, 44_100, fmt), fmt.mime_type)},
    )
    assert response.status_code == 201, response.text
    voice = response.json()
    assert voice["kind"] == "clip" and voice["description"] == "from a file"

    ledger = Ledger.from_url(redis_url)
    try:
        resolved = ledger.voices.resolve("acme", "reader", engine="chattts")
        assert resolved is not None
        ref = resolved.speaker.clip_ref
        assert ref == f"acme/{voice['clip']['sha256']}"
        assert resolved.speaker.clip_transcript == "Reading aloud."
        back = ledger.voices.clip_pcm(ref)
        assert back is not None and back.dtype == np.float32
        expected = resample(pcm, 44_100, 24_000)
        assert len(back) == pytest.approx(len(expected), abs=240)  # within 10 ms
        n = min(len(back), len(expected))
        assert float(np.corrcoef(back[:n], expected[:n])[0, 1]) > 0.98

        assert client.delete("/v1/voices/reader", headers=ACME).status_code == 204
        assert ledger.voices.clip_pcm(ref) is None  # the clip went with its voice
    finally:
        ledger.redis.close()


def test_a_name_is_created_once(api: tuple[TestClient, redis.Redis]) -> None:
    client, connection = api
    create(client, {"name": "alice", "seed": 1})
    before = voice_keys(connection)
    again = client.post("/v1/voices", headers=ACME, json={"name": "alice", "seed": 2})
    assert again.status_code == 409, again.text
    assert again.json()["error"] == {
        "code": "voice_exists",
        "message": "name: the tenant has a voice named 'alice' already (delete it first)",
        "field": "name",
    }
    assert voice_keys(connection) == before


def test_a_tenant_past_its_bound_is_refused(api: tuple[TestClient, redis.Redis]) -> None:
    client, connection = api
    for n in range(6):
        create(client, {"name": f"v{n}", "seed": n})
    before = voice_keys(connection)
    refused = client.post(
        "/v1/voices",
        headers=ACME,
        json={"name": "one-more", "clip_base64": CLIP_B64, "transcript": "Hi."},
    )
    assert refused.status_code == 413, refused.text
    assert refused.json()["error"] == {
        "code": "text_too_large",
        "message": "the tenant has 6 voices; a tenant keeps at most 6 (delete a voice first)",
    }
    assert voice_keys(connection) == before
    create(client, {"name": "v0", "seed": 1}, headers=OTHER)  # each tenant its own bound
    client.delete("/v1/voices/v0", headers=ACME)
    create(client, {"name": "one-more", "seed": 9})


def test_one_tenant_never_reaches_anothers_voices(api: tuple[TestClient, redis.Redis]) -> None:
    client, connection = api
    create(client, {"name": "secret", "clip_base64": CLIP_B64, "transcript": "Hi there."})
    create(client, {"name": "mine", "seed": 3})
    before = voice_keys(connection)

    listing = client.get("/v1/voices/custom", headers=OTHER).json()
    assert listing["voices"] == [] and listing["usage"] == {"voices": 0}
    for method, path in [("GET", "/v1/voices/secret"), ("DELETE", "/v1/voices/secret")]:
        response = client.request(method, path, headers=OTHER)
        assert response.status_code == 404, (method, path, response.text)
    mixing = client.post("/v1/voices", headers=OTHER, json={"name": "m", "mix": "mine+seed:1"})
    assert mixing.status_code == 422 and mixing.json()["error"]["code"] == "unknown_voice"
    assert mixing.json()["error"]["field"] == "mix"
    assert voice_keys(connection) == before
    assert "secret" not in str(connection.keys("vl:tenant:other:*"))

    # the same name, another tenant: its own voice, acme's untouched
    create(client, {"name": "secret", "seed": 5}, headers=OTHER)
    assert client.get("/v1/voices/secret", headers=OTHER).json()["kind"] == "seed"
    assert client.delete("/v1/voices/secret", headers=OTHER).status_code == 204
    assert client.get("/v1/voices/secret", headers=ACME).json()["kind"] == "clip"


def test_no_key_no_voices(api: tuple[TestClient, redis.Redis]) -> None:
    client, connection = api
    assert client.get("/v1/voices/custom").status_code == 401
    assert client.get("/v1/voices/alice").status_code == 401
    assert client.post("/v1/voices", json={"name": "a", "seed": 1}).status_code == 401
    wrong = {"Authorization": "Bearer nope-nope-nope"}
    assert client.delete("/v1/voices/a", headers=wrong).status_code == 401
    assert voice_keys(connection) == {}


SHORT = base64.b64encode(audio_file(tone(1.0, 16_000), 16_000)).decode()
BAD_VOICES: list[tuple[str, dict[str, Any], int, str, str | None, str]] = [
    ("bad name", {"name": "Alice", "seed": 1}, 422, "invalid_input", "name", "not a voice name"),
    ("colon", {"name": "seed:1", "seed": 1}, 422, "invalid_input", "name", "not a voice name"),
    ("auto", {"name": "auto", "seed": 1}, 422, "invalid_input", "name", "'auto' is reserved"),
    ("custom", {"name": "custom", "seed": 1}, 422, "invalid_input", "name", "reserved"),
    (
        "an engine voice's name",
        {"name": "narrator", "seed": 1},
        422,
        "invalid_input",
        "name",
        "'narrator' is a voice of the chattts engine",
    ),
    ("no name", {"seed": 1}, 422, "invalid_input", "name", "field required"),
    ("unknown field", {"name": "a", "seed": 1, "x": 1}, 422, "invalid_input", "x", "x"),
    ("no kind", {"name": "a"}, 422, "invalid_input", "kind", "exactly one of seed, spk_emb"),
    (
        "two kinds",
        {"name": "a", "seed": 1, "spk_emb": EMB},
        422,
        "invalid_input",
        "kind",
        "exactly one of",
    ),
    (
        "kind without its field",
        {"name": "a", "kind": "embedding", "seed": 1},
        422,
        "invalid_input",
        "spk_emb",
        "a voice of kind embedding is made from its spk_emb",
    ),
    (
        "kind with another's field",
        {"name": "a", "kind": "seed", "seed": 1, "mix": "a+b"},
        422,
        "invalid_input",
        "mix",
        "a voice of kind seed takes no mix",
    ),
    ("bad kind", {"name": "a", "kind": "robot", "seed": 1}, 422, "invalid_input", "kind", "kind"),
    ("seed bool", {"name": "a", "seed": True}, 422, "invalid_input", "seed", "integer"),
    ("seed negative", {"name": "a", "seed": -1}, 422, "invalid_input", "seed", "0 to"),
    ("seed huge", {"name": "a", "seed": 2**63}, 422, "invalid_input", "seed", "0 to"),
    (
        "not an embedding",
        {"name": "a", "spk_emb": "hello"},
        422,
        "invalid_input",
        "spk_emb",
        "not a ChatTTS speaker embedding",
    ),
    (
        "not base64",
        {"name": "a", "clip_base64": "@@@", "transcript": "x"},
        422,
        "invalid_input",
        "clip_base64",
        "not base64",
    ),
    (
        "not audio",
        {"name": "a", "clip_base64": base64.b64encode(b"x" * 999).decode(), "transcript": "x"},
        422,
        "invalid_input",
        "clip_base64",
        "not audio voicelane reads",
    ),
    (
        "clip too short",
        {"name": "a", "clip_base64": SHORT, "transcript": "x"},
        422,
        "invalid_input",
        "clip_base64",
        "1.0 s long; a reference clip is 3 to 30 s",
    ),
    (
        "no transcript",
        {"name": "a", "clip_base64": CLIP_B64},
        422,
        "invalid_input",
        "transcript",
        "needs the transcript",
    ),
    (
        "a transcript without a clip",
        {"name": "a", "seed": 1, "transcript": "x"},
        422,
        "invalid_input",
        "transcript",
        "only a clip voice",
    ),
    ("bad mix", {"name": "a", "mix": "b++c"}, 422, "invalid_input", "mix", "part 2"),
    (
        "unknown voice in a mix",
        {"name": "a", "mix": "nobody(2)+seed:1"},
        422,
        "unknown_voice",
        "mix",
        "'nobody' is unknown to the chattts engine",
    ),
    (
        "a clip voice in a mix",
        {"name": "a", "mix": "held+seed:1"},
        422,
        "invalid_input",
        "mix",
        "'held' is a clip voice, which cannot be mixed",
    ),
    (
        "an engine not served",
        {"name": "a", "engine": "piper", "seed": 1},
        422,
        "invalid_input",
        "engine",
        "'piper' is not served here (this stack serves chattts)",
    ),
    (
        "long description",
        {"name": "a", "seed": 1, "description": "x" * 257},
        422,
        "invalid_input",
        "description",
        "at most 256",
    ),
]


@pytest.mark.parametrize(
    ("case", "body", "status", "code", "field", "message"),
    BAD_VOICES,
    ids=[bad[0] for bad in BAD_VOICES],
)
def test_bad_voices_are_4xx_json_naming_the_field_and_change_nothing(
    api: tuple[TestClient, redis.Redis],
    case: str,
    body: dict[str, Any],
    status: int,
    code: str,
    field: str | None,
    message: str,
) -> None:
    client, connection = api
    create(client, {"name": "held", "clip_base64": CLIP_B64, "transcript": "Hi."})
    before = voice_keys(connection)
    response = client.post("/v1/voices", headers=ACME, json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert error.get("field") == field
    assert message.lower() in error["message"].lower(), error["message"]
    assert "\n" not in error["message"]
    assert voice_keys(connection) == before


@pytest.mark.parametrize(
    ("request_kwargs", "status", "code", "message"),
    [
        ({"content": b'{"name": ', "headers": {"content-type": "application/json"}}, 400,
         "malformed_request", "malformed JSON"),
        ({"json": ["name"]}, 400, "malformed_request", "object"),
        ({"content": b"name=a", "headers": {"content-type": "text/plain"}}, 415,
         "unsupported_media_type", "text/plain"),
        ({"content": b"x" * (10 * 1024 * 1024 + 1),
          "headers": {"content-type": "application/json"}}, 413, "text_too_large",
         "over 10,485,760 bytes"),
        ({"data": {"name": "a", "clip_base64": CLIP_B64, "transcript": "x"}}, 422,
         "invalid_input", "a form uploads the clip as a file part 'clip'"),
        ({"data": {"name": "a", "transcript": "x"},
          "files": {"clip": ("c.txt", b"not audio at all" * 10, "text/plain")}}, 422,
         "invalid_input", "clip: not audio voicelane reads"),
        ({"content": b'{"name": "a", "seed": 1, "description": "\\ud800"}',
          "headers": {"content-type": "application/json"}}, 422, "invalid_input",
         "description is not valid Unicode"),
    ],
    ids=["malformed JSON", "JSON array", "content type", "body over 10 MiB", "form base64",
         "form junk clip", "lone surrogate"],
)  # fmt: skip
def test_bodies_that_are_not_a_voice(
    api: tuple[TestClient, redis.Redis],
    request_kwargs: dict[str, Any],
    status: int,
    code: str,
    message: str,
) -> None:
    client, connection = api
    headers = {**ACME, **request_kwargs.pop("headers", {})}
    response = client.post("/v1/voices", headers=headers, **request_kwargs)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and message in error["message"], error
    assert voice_keys(connection) == {}


def test_a_seed_voice_from_a_url_encoded_form(api: tuple[TestClient, redis.Redis]) -> None:
    client, _ = api
    response = client.post("/v1/voices", headers=ACME, data={"name": "f", "seed": "12"})
    assert response.status_code == 201, response.text
    assert response.json()["seed"] == 12


def test_an_engine_that_makes_no_voices_refuses_them(redis_url: str, tmp_path: Path) -> None:
    """espeak (computed locally: no worker published) lists no voice kinds."""
    connection = redis.Redis.from_url(redis_url)
    try:
        with make_app(redis_url, tmp_path) as client:
            for body in [
                {"name": "a", "seed": 1},
                {"name": "a", "mix": "en-us(2)+cmn"},
                {"name": "a", "clip_base64": CLIP_B64, "transcript": "x"},
            ]:
                response = client.post("/v1/voices", headers=ACME, json=body)
                assert response.status_code == 422, response.text
                error = response.json()["error"]
                assert error["field"] == "kind"
                assert "the espeak engine makes no" in error["message"]
                assert "(the kinds it makes: none)" in error["message"]
            assert client.get("/v1/voices/custom", headers=ACME).json()["voices"] == []
        assert voice_keys(connection) == {}
    finally:
        connection.close()


def test_the_routes_are_in_the_openapi_schema(api: tuple[TestClient, redis.Redis]) -> None:
    client, _ = api
    paths = client.get("/openapi.json").json()["paths"]
    assert {"post"} <= set(paths["/v1/voices"]) and {"get"} <= set(paths["/v1/voices"])
    assert {"get", "delete"} <= set(paths["/v1/voices/{name}"])
    assert {"get"} <= set(paths["/v1/voices/custom"])
