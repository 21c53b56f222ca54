"""The lexicon routes of the REST API in-process (real Redis): create, replace, list, read and
delete over HTTP, JSON and W3C PLS bodies, the default, every kind of bad input as a 4xx JSON
error naming its field (leaving Redis as it was), and one tenant never reaching another's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from voicelane.api.rest import create_app
from voicelane.core.settings import ApiSettings
from voicelane.core.storage import LocalStorage, LocalStorageSettings

pytestmark = pytest.mark.integration

KEYS = "acme:acme-key-0001,other:other-key-0002"
ACME = {"Authorization": "Bearer acme-key-0001"}
OTHER = {"Authorization": "Bearer other-key-0002"}
PLS_TYPE = {"content-type": "application/pls+xml"}
BRANDS = {
    "entries": [
        {"graphemes": ["GIF"], "alias": "jif"},
        {"graphemes": ["Nguyen", "NGUYEN"], "phoneme": "wɪn", "alphabet": "ipa"},
    ]
}
PLS = """<?xml version="1.0" encoding="UTF-8"?>
<lexicon version="1.0" alphabet="x-sampa" xml:lang="en-US"
    xmlns="http://www.w3.org/2005/01/pronunciation-lexicon">
  <lexeme><grapheme>tomato</grapheme><phoneme>t@'meItoU</phoneme></lexeme>
  <lexeme><grapheme>W3C</grapheme><alias>World Wide Web Consortium</alias></lexeme>
</lexicon>"""


@pytest.fixture
def api(redis_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, redis.Redis]]:
    settings = ApiSettings(redis_url=redis_url, api_keys=KEYS)
    storage = LocalStorage(LocalStorageSettings(root=tmp_path / "storage", secret="s" * 40))
    storage.prepare()
    app = create_app(settings, storage=storage, enqueue=lambda *a, **k: None)
    connection = redis.Redis.from_url(redis_url)
    with TestClient(app, base_url="http://api") as client:
        yield client, connection
    connection.close()


def lexicon_keys(connection: redis.Redis) -> dict[str, Any]:
    """Every lexicon key and what it holds (the rate bucket, which every write takes from,
    is not the lexicons' state)."""
    out: dict[str, Any] = {}
    for raw in connection.scan_iter(match="vl:tenant:*"):
        key = raw.decode()
        kind = connection.type(key)
        out[key] = connection.hgetall(key) if kind == b"hash" else connection.get(key)
    return out


def test_create_read_replace_list_delete(api: tuple[TestClient, redis.Redis]) -> None:
    client, _ = api
    created = client.put("/v1/lexicons/brands", headers=ACME, json=BRANDS)
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/v1/lexicons/brands"
    assert created.json()["name"] == "brands" and created.json()["entry_count"] == 2

    shown = client.get("/v1/lexicons/brands", headers=ACME).json()
    assert shown["entries"] == BRANDS["entries"] and shown["default"] is False
    assert shown["size_bytes"] == created.json()["size_bytes"] > 0

    shown["entries"] = shown["entries"][:1]  # what GET shows can be sent back as it is
    replaced = client.put("/v1/lexicons/brands", headers=ACME, json=shown)
    assert replaced.status_code == 200 and replaced.json()["entry_count"] == 1

    assert client.put("/v1/lexicons/names", headers=ACME, json=BRANDS).status_code == 201
    listing = client.get("/v1/lexicons", headers=ACME).json()
    assert [(x["name"], x["entry_count"]) for x in listing["lexicons"]] == [
        ("brands", 1),
        ("names", 2),
    ]
    assert listing["default"] is None
    assert listing["usage"]["lexicons"] == 2 and listing["usage"]["entries"] == 3
    assert listing["limits"] == {"lexicons": 20, "entries": 5000, "size_bytes": 512 * 1024}

    deleted = client.delete("/v1/lexicons/brands", headers=ACME)
    assert deleted.status_code == 204 and deleted.content == b""
    gone = client.get("/v1/lexicons/brands", headers=ACME)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"
    assert client.delete("/v1/lexicons/brands", headers=ACME).status_code == 404
    assert [x["name"] for x in client.get("/v1/lexicons", headers=ACME).json()["lexicons"]] == [
        "names"
    ]


@pytest.mark.parametrize("content_type", ["application/pls+xml", "application/xml", "text/xml"])
def test_a_pls_upload(api: tuple[TestClient, redis.Redis], content_type: str) -> None:
    client, _ = api
    headers = {**ACME, "content-type": f"{content_type}; charset=utf-8"}
    response = client.put("/v1/lexicons/pls", headers=headers, content=PLS.encode())
    assert response.status_code == 201, response.text
    assert client.get("/v1/lexicons/pls", headers=ACME).json()["entries"] == [
        {"graphemes": ["tomato"], "phoneme": "t@'meItoU", "alphabet": "x-sampa"},
        {"graphemes": ["W3C"], "alias": "World Wide Web Consortium"},
    ]


def test_the_default(api: tuple[TestClient, redis.Redis]) -> None:
    client, connection = api
    client.put("/v1/lexicons/brands", headers=ACME, json=BRANDS)
    client.put("/v1/lexicons/names", headers=ACME, json=BRANDS)
    assert client.put("/v1/lexicons/nope/default", headers=ACME).status_code == 404

    made = client.put("/v1/lexicons/brands/default", headers=ACME)
    assert made.status_code == 200 and made.json() == {"default": "brands"}
    listing = client.get("/v1/lexicons", headers=ACME).json()
    assert listing["default"] == "brands"
    assert [x["default"] for x in listing["lexicons"]] == [True, False]
    assert client.get("/v1/lexicons/brands", headers=ACME).json()["default"] is True

    kept = client.delete("/v1/lexicons/names/default", headers=ACME)  # not the default
    assert kept.status_code == 200 and kept.json() == {"default": "brands"}
    assert client.delete("/v1/lexicons/nope/default", headers=ACME).status_code == 404
    cleared = client.delete("/v1/lexicons/brands/default", headers=ACME)
    assert cleared.status_code == 200 and cleared.json() == {"default": None}

    client.put("/v1/lexicons/names/default", headers=ACME)
    client.delete("/v1/lexicons/names", headers=ACME)  # deleting the default clears it
    assert client.get("/v1/lexicons", headers=ACME).json()["default"] is None
    assert not connection.exists("vl:tenant:acme:lexicon_default")


def test_one_tenant_never_reaches_anothers_lexicons(api: tuple[TestClient, redis.Redis]) -> None:
    client, connection = api
    client.put("/v1/lexicons/secret", headers=ACME, json=BRANDS)
    client.put("/v1/lexicons/secret/default", headers=ACME)
    before = lexicon_keys(connection)

    listing = client.get("/v1/lexicons", headers=OTHER).json()
    assert listing["lexicons"] == [] and listing["default"] is None
    for method, path in [
        ("GET", "/v1/lexicons/secret"),
        ("DELETE", "/v1/lexicons/secret"),
        ("PUT", "/v1/lexicons/secret/default"),
        ("DELETE", "/v1/lexicons/secret/default"),
    ]:
        response = client.request(method, path, headers=OTHER)
        assert response.status_code == 404, (method, path, response.text)
        assert "secret" not in str(connection.keys("vl:tenant:other:*"))
    assert lexicon_keys(connection) == before

    # the same name, another tenant: its own lexicon, acme's untouched
    mine = {"entries": [{"graphemes": ["GIF"], "alias": "gif"}]}
    assert client.put("/v1/lexicons/secret", headers=OTHER, json=mine).status_code == 201
    assert client.get("/v1/lexicons/secret", headers=ACME).json()["entries"] == BRANDS["entries"]
    assert client.delete("/v1/lexicons/secret", headers=OTHER).status_code == 204
    assert client.get("/v1/lexicons/secret", headers=ACME).json()["default"] is True


def test_no_key_no_lexicons(api: tuple[TestClient, redis.Redis]) -> None:
    client, connection = api
    assert client.get("/v1/lexicons").status_code == 401
    assert client.put("/v1/lexicons/x", json=BRANDS).status_code == 401
    assert (
        client.delete("/v1/lexicons/x", headers={"Authorization": "Bearer nope"}).status_code == 401
    )
    assert lexicon_keys(connection) == {}


DOCTYPE = '<?xml version="1.0"?>\n<!DOCTYPE lexicon [<!ENTITY x "y">]>\n<lexicon/>'
LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    '<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>'
    "<lexicon><lexeme><grapheme>&lol2;</grapheme><alias>x</alias></lexeme></lexicon>"
)
BAD_PUTS: list[tuple[str, str, dict[str, Any], int, str, str | None, str]] = [
    ("bad name", "a%20b", {"json": BRANDS}, 422, "invalid_input", "name", "not a lexicon name"),
    ("long name", "x" * 65, {"json": BRANDS}, 422, "invalid_input", "name", "lexicon name"),
    (
        "malformed JSON",
        "l",
        {"content": b'{"entries": [', "headers": {"content-type": "application/json"}},
        400,
        "malformed_request",
        None,
        "malformed JSON",
    ),
    ("JSON array", "l", {"json": []}, 400, "malformed_request", None, "object"),
    ("no entries", "l", {"json": {}}, 422, "invalid_input", "entries", "entries"),
    ("unknown field", "l", {"json": {"entries": [], "x": 1}}, 422, "invalid_input", "x", "x"),
    (
        "blank grapheme",
        "l",
        {"json": {"entries": [{"graphemes": [" "], "alias": "a"}]}},
        422,
        "invalid_input",
        "entries",
        "entries.0: grapheme 1 is blank",
    ),
    (
        "alias and phoneme",
        "l",
        {"json": {"entries": [{"graphemes": ["a"], "alias": "a", "phoneme": "a"}]}},
        422,
        "invalid_input",
        "entries",
        "exactly one of",
    ),
    (
        "bad alphabet",
        "l",
        {"json": {"entries": [{"graphemes": ["a"], "phoneme": "a", "alphabet": "sapi"}]}},
        422,
        "invalid_input",
        "entries",
        "alphabet 'sapi'",
    ),
    (
        "lone surrogate",
        "l",
        {
            "content": b'{"entries": [{"graphemes": ["\\ud800"], "alias": "x"}]}',
            "headers": {"content-type": "application/json"},
        },
        422,
        "invalid_input",
        "entries",
        "lone surrogate",
    ),
    (
        "PLS with a DOCTYPE",
        "l",
        {"content": DOCTYPE.encode(), "headers": PLS_TYPE},
        400,
        "malformed_request",
        "lexicon",
        "lexicon: line 2, column",
    ),
    (
        "billion laughs",
        "l",
        {"content": LAUGHS.encode(), "headers": PLS_TYPE},
        400,
        "malformed_request",
        "lexicon",
        "DOCTYPE",
    ),
    (
        "PLS not well-formed",
        "l",
        {"content": b"<lexicon><lexeme>\n</lexicon>", "headers": PLS_TYPE},
        400,
        "malformed_request",
        "lexicon",
        "line 2, column 3: mismatched tag",
    ),
    (
        "PLS breaking the rules",
        "l",
        {
            "content": b"<lexicon>\n  <lexeme><alias>x</alias></lexeme></lexicon>",
            "headers": PLS_TYPE,
        },
        422,
        "invalid_input",
        "lexicon",
        "line 2, column 3: a <lexeme> without a <grapheme>",
    ),
    (
        "PLS not UTF-8",
        "l",
        {"content": "<lexicon>é</lexicon>".encode("latin-1"), "headers": PLS_TYPE},
        422,
        "invalid_input",
        "lexicon",
        "not valid UTF-8",
    ),
    (
        "wrong content type",
        "l",
        {"content": b"GIF=jif", "headers": {"content-type": "text/plain"}},
        415,
        "unsupported_media_type",
        None,
        "text/plain",
    ),
    (
        "too many entries",
        "l",
        {"json": {"entries": [{"grapheme": f"w{n}", "alias": "x"} for n in range(5001)]}},
        413,
        "text_too_large",
        "entries",
        "at most 5,000",
    ),
    (
        "body over 2 MiB",
        "l",
        {"content": b"<lexicon>" + b" " * (2 * 1024 * 1024) + b"</lexicon>", "headers": PLS_TYPE},
        413,
        "text_too_large",
        None,
        "over 2,097,152 bytes",
    ),
]


@pytest.mark.parametrize(
    ("name", "path_name", "request_kwargs", "status", "code", "field", "message"),
    BAD_PUTS,
    ids=[b[0] for b in BAD_PUTS],
)
def test_bad_lexicons_are_4xx_json_naming_the_field_and_change_nothing(
    api: tuple[TestClient, redis.Redis],
    name: str,
    path_name: str,
    request_kwargs: dict[str, Any],
    status: int,
    code: str,
    field: str | None,
    message: str,
) -> None:
    client, connection = api
    client.put("/v1/lexicons/l", headers=ACME, json=BRANDS)  # a lexicon to leave as it is
    before = lexicon_keys(connection)
    headers = {**ACME, **request_kwargs.pop("headers", {})}
    response = client.put(f"/v1/lexicons/{path_name}", headers=headers, **request_kwargs)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert error.get("field") == field
    assert message.lower() in error["message"].lower(), error["message"]
    assert "\n" not in error["message"]
    assert lexicon_keys(connection) == before


def test_a_tenant_past_its_bounds_is_refused(api: tuple[TestClient, redis.Redis]) -> None:
    client, connection = api
    small = {"entries": [{"grapheme": "a", "alias": "b"}]}
    for n in range(20):
        assert client.put(f"/v1/lexicons/l{n}", headers=ACME, json=small).status_code == 201
    before = lexicon_keys(connection)
    refused = client.put("/v1/lexicons/one-more", headers=ACME, json=small)
    assert refused.status_code == 413, refused.text
    assert refused.json()["error"] == {
        "code": "text_too_large",
        "message": "lexicon: the tenant's lexicons would hold 21 lexicons; a tenant keeps at "
        "most 20 (delete or shrink a lexicon first)",
        "field": "lexicon",
    }
    assert lexicon_keys(connection) == before
    assert client.put("/v1/lexicons/l0", headers=ACME, json=small).status_code == 200
    assert client.put("/v1/lexicons/l0", headers=OTHER, json=small).status_code == 201


def test_the_routes_are_in_the_openapi_schema(api: tuple[TestClient, redis.Redis]) -> None:
    client, _ = api
    paths = client.get("/openapi.json").json()["paths"]
    assert {"get"} <= set(paths["/v1/lexicons"])
    assert {"get", "put", "delete"} <= set(paths["/v1/lexicons/{name}"])
    assert {"put", "delete"} <= set(paths["/v1/lexicons/{name}/default"])
    body = paths["/v1/lexicons/{name}"]["put"]["requestBody"]["content"]
    assert {"application/json", "application/pls+xml"} <= set(body)
