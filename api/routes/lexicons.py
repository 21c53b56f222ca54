"""Pronunciation lexicons over REST: create or replace, list, read, delete, and the default.

Each tenant has its own lexicons (:mod:`voicelane.core.ledger.lexicons`): another tenant's
lexicon answers exactly like one that does not exist (404). A lexicon comes as JSON
(``{"entries": [...]}``, :func:`voicelane.core.lexicon.parse_lexicon_json`) or as a W3C PLS
document (``application/pls+xml``, ``application/xml`` or ``text/xml``:
:func:`voicelane.core.lexicon.parse_pls`, on the hardened XML reader); it is checked whole
before anything is written, and a refused one leaves the tenant's lexicons as they were.
Requests name the lexicons they apply (or get the tenant's default) at submission, through
:meth:`voicelane.core.ledger.lexicons.Lexicons.resolve`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from voicelane.api.deps import State, Tenant, blocking, json_body
from voicelane.common.errors import (
    InvalidInputError,
    UnsupportedMediaTypeError,
)
from voicelane.core.ledger.lexicons import (
    MAX_TENANT_BYTES,
    MAX_TENANT_ENTRIES,
    MAX_TENANT_LEXICONS,
    LexiconInfo,
    check_name,
)
from voicelane.core.lexicon import Lexicon, parse_lexicon_json, parse_pls

router = APIRouter(tags=["lexicons"])

JSON_TYPES = frozenset({"application/json"})
PLS_TYPES = frozenset({"application/pls+xml", "application/xml", "text/xml"})

_ENTRY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "graphemes": {"type": "array", "items": {"type": "string", "maxLength": 100}},
        "grapheme": {"type": "string", "maxLength": 100},
        "alias": {"type": "string", "maxLength": 200},
        "phoneme": {"type": "string", "maxLength": 200},
        "alphabet": {"type": "string", "enum": ["ipa", "x-sampa"]},
    },
    "additionalProperties": False,
}
_PUT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {"entries": {"type": "array", "items": _ENTRY_SCHEMA}},
                    "required": ["entries"],
                }
            },
            "application/pls+xml": {"schema": {"type": "string", "description": "W3C PLS 1.0"}},
        },
    }
}


@router.put(
    "/v1/lexicons/{name}",
    summary="Create or replace a pronunciation lexicon (JSON or W3C PLS)",
    openapi_extra=_PUT_BODY,
)
async def put_lexicon(name: str, request: Request, state: State, tenant: Tenant) -> JSONResponse:
    check_name(name)
    raw = await request.body()  # bounded while it streams in (voicelane.api.body_limit)
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    lexicon = await blocking(state, _parse, content_type, raw)  # a big PLS: off the loop
    await state.rate.take(tenant)
    info, created = await blocking(state, state.ledger.lexicons.put, tenant, name, lexicon)
    return JSONResponse(
        info.to_json(),
        status_code=201 if created else 200,
        headers={"Location": f"/v1/lexicons/{name}"},
    )


@router.get("/v1/lexicons", summary="The caller's lexicons, its default, usage and limits")
async def list_lexicons(state: State, tenant: Tenant) -> JSONResponse:
    listing = await blocking(state, state.ledger.lexicons.list, tenant)
    return JSONResponse(
        {
            "lexicons": [_view(info, info.name == listing.default) for info in listing.lexicons],
            "default": listing.default,
            "usage": {
                "lexicons": len(listing.lexicons),
                "entries": listing.entries,
                "size_bytes": listing.size_bytes,
            },
            "limits": {
                "lexicons": MAX_TENANT_LEXICONS,
                "entries": MAX_TENANT_ENTRIES,
                "size_bytes": MAX_TENANT_BYTES,
            },
        }
    )


@router.get("/v1/lexicons/{name}", summary="A lexicon and its entries (JSON)")
async def get_lexicon(name: str, state: State, tenant: Tenant) -> JSONResponse:
    stored = await blocking(state, state.ledger.lexicons.get, tenant, name)
    view = _view(stored.info, stored.default)
    view["entries"] = [entry.to_json() for entry in stored.lexicon.entries]
    return JSONResponse(view)


@router.delete("/v1/lexicons/{name}", status_code=204, summary="Delete a lexicon")
async def delete_lexicon(name: str, state: State, tenant: Tenant) -> Response:
    await state.rate.take(tenant)
    await blocking(state, state.ledger.lexicons.delete, tenant, name)
    return Response(status_code=204)


@router.put(
    "/v1/lexicons/{name}/default",
    summary="Make a lexicon the default: applied to requests that name no lexicons",
)
async def set_default(name: str, state: State, tenant: Tenant) -> JSONResponse:
    await state.rate.take(tenant)
    await blocking(state, state.ledger.lexicons.set_default, tenant, name)
    return JSONResponse({"default": name})


@router.delete(
    "/v1/lexicons/{name}/default",
    summary="Stop using a lexicon as the default (if it is the default)",
)
async def clear_default(name: str, state: State, tenant: Tenant) -> JSONResponse:
    await state.rate.take(tenant)
    lexicons = state.ledger.lexicons
    if not await blocking(state, lexicons.clear_default, tenant, name):
        await blocking(state, lexicons.get, tenant, name)  # 404 when there is no such lexicon
    return JSONResponse({"default": await blocking(state, lexicons.default, tenant)})


def _parse(content_type: str, raw: bytes) -> Lexicon:
    """The lexicon a PUT carries, or the 4xx naming what is wrong with it."""
    if content_type in JSON_TYPES:
        data = json_body(raw)
        return parse_lexicon_json(data)
    if content_type in PLS_TYPES:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise InvalidInputError(
                f"lexicon: not valid UTF-8 (byte 0x{raw[error.start]:02x} at offset {error.start})",
                field="lexicon",
            ) from None
        return parse_pls(text)
    raise UnsupportedMediaTypeError(
        f"content type {content_type or 'none'!r} is not supported; send application/json "
        "or a W3C PLS document as application/pls+xml"
    )


def _view(info: LexiconInfo, default: bool) -> dict[str, Any]:
    view = info.to_json()
    view["default"] = default
    return view
