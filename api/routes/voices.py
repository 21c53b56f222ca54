"""A tenant's own voices over REST: create, read, delete, and the tenant's listing.

Each tenant has its own voices (:mod:`voicelane.core.ledger.voices`): another tenant's voice
answers exactly like one that does not exist (404), and no request can use it. A voice is of
one engine and made from a **seed**, an **embedding** (ChatTTS's ``spk_emb``), a reference
**clip** with its transcript, or a **mix** of voices of that engine (the kinds the engine
publishes in its capabilities, ``voice_kinds``). ``POST /v1/voices`` takes JSON (the clip as
``clip_base64``) or ``multipart/form-data`` (the clip as a file part ``clip``, the other
fields as form fields); everything is checked before anything is written, and a refused
voice leaves the tenant's voices as they were. A name is created once (409 when taken:
delete it first).

The engines' own voices are listed by ``GET /v1/voices`` (:mod:`voicelane.api.routes.jobs`);
:func:`tenant_voice_list` is the tenant's part of that listing, served on its own as
``GET /v1/voices/custom`` until the two are one.
"""

from __future__ import annotations

import base64
import binascii
import time
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from voicelane.api.deps import ApiState, State, Tenant, blocking, json_body
from voicelane.common.errors import (
    InvalidInputError,
    MalformedRequestError,
    UnsupportedMediaTypeError,
)
from voicelane.core.rules import EngineCapabilities, check_voice, shown
from voicelane.core.speakers import VOICE_KINDS, SpeakerDef
from voicelane.core.text_input import check_encodable
from voicelane.core.voice_clips import StoredClip, prepare_clip
from voicelane.core.voices import (
    TenantVoice,
    VoiceClip,
    check_description,
    check_seed,
    check_spk_emb,
    check_transcript,
    check_voice_name,
    flatten_mix,
    mix_from_json,
)

router = APIRouter(tags=["voices"])

KIND_FIELDS = {"seed": "seed", "embedding": "spk_emb", "clip": "clip", "mix": "mix"}
"""The request field that makes a voice of each kind (``clip``: ``clip_base64`` in JSON, the
file part ``clip`` in a form)."""
FORM_TYPES = frozenset({"multipart/form-data", "application/x-www-form-urlencoded"})
_FORM_FIELDS = 10


class VoiceRequest(BaseModel):
    """``POST /v1/voices`` as JSON (or the form fields beside an uploaded clip)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="a-z 0-9 _ -, 1 to 64, starting with a letter or digit.")
    engine: str | None = Field(None, description="The voice's engine; unset: the stack's.")
    kind: Literal["seed", "embedding", "clip", "mix"] | None = Field(
        None, description="seed, embedding, clip or mix; unset: the kind of the field given."
    )
    seed: int | None = Field(None, description="kind seed: 0 to 2**63-1.")
    spk_emb: str | None = Field(None, description="kind embedding: ChatTTS's spk_emb string.")
    clip_base64: str | None = Field(
        None, description="kind clip: WAV, Ogg, MP3 or FLAC, base64 (3 to 30 s)."
    )
    transcript: str | None = Field(None, description="kind clip: what the clip says.")
    mix: str | list[Any] | None = Field(
        None,
        description="kind mix: 'alice(2)+bob(1)' or [{voice, weight}]: voices of the engine.",
    )
    description: str | None = Field(None, description="Free text, at most 256 characters.")

    @field_validator("seed", mode="before")
    @classmethod
    def _no_bool_seed(cls, value: object) -> object:
        if isinstance(value, bool):
            raise ValueError("a seed is an integer")
        return value


_CREATE_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": VoiceRequest.model_json_schema()},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "description": "The JSON fields as form fields; the clip as a file part.",
                    "properties": {
                        "clip": {"type": "string", "format": "binary"},
                        "name": {"type": "string"},
                        "transcript": {"type": "string"},
                    },
                    "required": ["name"],
                }
            },
        },
    }
}


@router.post(
    "/v1/voices",
    status_code=201,
    summary="Create a voice of the tenant's own (seed, embedding, reference clip or mix)",
    openapi_extra=_CREATE_BODY,
)
async def create_voice(request: Request, state: State, tenant: Tenant) -> JSONResponse:
    body, upload = await _read_voice_request(request)
    voice, stored = await _check_voice(state, tenant, body, upload)
    await state.rate.take(tenant)
    await blocking(
        state,
        state.ledger.voices.create,
        tenant,
        voice,
        max_voices=state.settings.tenant_max_voices,
        clip_audio=stored.audio if stored is not None else None,
    )
    return JSONResponse(
        voice.view(), status_code=201, headers={"Location": f"/v1/voices/{voice.name}"}
    )


@router.get(
    "/v1/voices/custom",
    summary="The caller's own voices, usage and limits (to join GET /v1/voices)",
)
async def list_custom_voices(state: State, tenant: Tenant) -> JSONResponse:
    return JSONResponse(await tenant_voice_list(state, tenant))


@router.get("/v1/voices/{name}", summary="One of the caller's voices")
async def get_voice(name: str, state: State, tenant: Tenant) -> JSONResponse:
    check_voice_name(name)
    voice = await blocking(state, state.ledger.voices.get, tenant, name)
    return JSONResponse(voice.view())


@router.delete("/v1/voices/{name}", status_code=204, summary="Delete one of the caller's voices")
async def delete_voice(name: str, state: State, tenant: Tenant) -> Response:
    check_voice_name(name)
    await state.rate.take(tenant)
    await blocking(state, state.ledger.voices.delete, tenant, name)
    return Response(status_code=204)


async def tenant_voice_list(state: ApiState, tenant: str) -> dict[str, Any]:
    """The tenant's voices (each as ``GET /v1/voices/{name}`` shows it, less ``spk_emb``),
    its usage and its limits: the tenant's part of ``GET /v1/voices``."""
    voices = await blocking(state, state.ledger.voices.list, tenant)
    settings = state.settings
    return {
        "voices": [_listed(voice) for voice in voices],
        "usage": {"voices": len(voices)},
        "limits": {
            "voices": settings.tenant_max_voices,
            "clip_min_s": settings.voice_clip_min_s,
            "clip_max_s": settings.voice_clip_max_s,
            "clip_max_bytes": settings.voice_clip_max_bytes,
        },
    }


async def _default_voice_engine(state: ApiState) -> str:
    """A voice created without ``engine``: the first served engine that makes tenant voices
    (ChatTTS in a stack that runs it beside Piper and espeak), else the default engine."""
    for caps in await state.engines.published():
        if caps.voice_kinds:
            return caps.engine
    return state.engines.default_engine


async def engine_capabilities(state: ApiState, engine: str) -> EngineCapabilities:
    """The published capabilities of ``engine`` if this stack serves it; else 422 naming
    ``engine``."""
    served = state.engines.engines
    if engine not in served:
        raise InvalidInputError(
            f"engine: {shown(engine)} is not served here (this stack serves {', '.join(served)})",
            field="engine",
        )
    return await state.engines.capabilities(engine)


# ---- reading the request --------------------------------------------------------------------


async def _read_voice_request(request: Request) -> tuple[VoiceRequest, bytes | None]:
    """The request's fields, and a form's uploaded clip. A body that does not fit
    :class:`VoiceRequest` raises pydantic's error (422 naming the field)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json":
        data = json_body(await request.body())  # bounded while it streams in (body_limit)
        if not isinstance(data, dict):
            raise MalformedRequestError("the JSON body must be an object")
        for name, value in data.items():
            if isinstance(value, str):
                check_encodable(value, source=str(name), field=str(name))
        return VoiceRequest.model_validate(data), None
    if content_type in FORM_TYPES:
        form = await request.form(max_files=1, max_fields=_FORM_FIELDS)
        upload = form.get("clip")
        clip: bytes | None = None
        if upload is not None:
            if isinstance(upload, str):
                raise InvalidInputError("clip: the clip is a file part", field="clip")
            clip = await upload.read()
        fields: dict[str, Any] = {}
        for name, value in form.multi_items():
            if name == "clip":
                continue
            if not isinstance(value, str):
                raise InvalidInputError(f"{name}: a file where a field was expected", field=name)
            if name in fields:
                raise InvalidInputError(f"{name}: given twice", field=name)
            fields[name] = value
        if "clip_base64" in fields:
            raise InvalidInputError(
                "clip_base64: a form uploads the clip as a file part 'clip'", field="clip_base64"
            )
        return VoiceRequest.model_validate(fields), clip
    raise UnsupportedMediaTypeError(
        f"content type {content_type or 'none'!r} is not supported; "
        "send application/json or multipart/form-data (a form without a clip may be "
        "application/x-www-form-urlencoded)"
    )


async def _check_voice(
    state: ApiState, tenant: str, body: VoiceRequest, upload: bytes | None
) -> tuple[TenantVoice, StoredClip | None]:
    """The voice a request makes, checked whole (and its clip, encoded for storage); raises a
    4xx naming the field at fault."""
    name = check_voice_name(body.name)
    given = {
        "seed": body.seed is not None,
        "embedding": body.spk_emb is not None,
        "clip": body.clip_base64 is not None or upload is not None,
        "mix": body.mix is not None,
    }
    kind = _kind(body.kind, given, clip_field="clip" if upload is not None else "clip_base64")
    if body.transcript is not None and kind != "clip":
        raise InvalidInputError(
            f"transcript: only a clip voice has a transcript (this one is of kind {kind})",
            field="transcript",
        )
    engine = body.engine if body.engine is not None else await _default_voice_engine(state)
    caps = await engine_capabilities(state, engine)
    if kind not in caps.voice_kinds:
        makes = ", ".join(caps.voice_kinds) or "none"
        raise InvalidInputError(
            f"kind: the {engine} engine makes no voices of kind {kind} (the kinds it makes: "
            f"{makes})",
            field="kind",
        )
    if name in caps.voice_ids:
        raise InvalidInputError(
            f"name: {name!r} is a voice of the {engine} engine; choose another name",
            field="name",
        )
    description = check_description(body.description)
    common: dict[str, Any] = {
        "name": name,
        "engine": engine,
        "kind": kind,
        "description": description,
        "created_at": round(time.time(), 3),
    }
    if kind == "seed":
        return TenantVoice(**common, seed=check_seed(body.seed)), None
    if kind == "embedding":
        return TenantVoice(**common, spk_emb=check_spk_emb(body.spk_emb)), None
    if kind == "clip":
        transcript = check_transcript(body.transcript)
        field = "clip" if upload is not None else "clip_base64"
        raw = upload if upload is not None else _base64(body.clip_base64 or "", field)
        settings = state.settings
        stored = await blocking(
            state,
            prepare_clip,
            raw,
            min_s=settings.voice_clip_min_s,
            max_s=settings.voice_clip_max_s,
            max_bytes=settings.voice_clip_max_bytes,
            field=field,
        )
        clip = VoiceClip(stored.sha256, transcript, stored.duration_s, len(stored.audio))
        return TenantVoice(**common, clip=clip), stored
    parts = mix_from_json(body.mix, field="mix")
    names = [part.voice for part in parts]
    found = await blocking(state, state.ledger.voices.find, tenant, names)
    flat = flatten_mix(parts, lookup=found, engine=engine, field="mix")
    for voice in flat.engine_voices:
        check_voice(voice, caps, field="mix")
    SpeakerDef.mix(list(flat.sources))  # weights it can carry
    return TenantVoice(**common, mix=parts, mix_sources=flat.sources), None


def _kind(asked: str | None, given: dict[str, bool], *, clip_field: str) -> str:
    """The voice's kind: the one asked, or the one whose field was given; its field must be
    there and no other kind's."""
    present = [kind for kind in VOICE_KINDS if given[kind]]
    fields = {**KIND_FIELDS, "clip": clip_field}
    if asked is None:
        if len(present) != 1:
            listed = ", ".join(fields[k] for k in VOICE_KINDS)
            raise InvalidInputError(
                f"kind: give exactly one of {listed} (or name the kind)", field="kind"
            )
        return present[0]
    if not given[asked]:
        raise InvalidInputError(
            f"{fields[asked]}: a voice of kind {asked} is made from its {fields[asked]}",
            field=fields[asked],
        )
    for other in present:
        if other != asked:
            raise InvalidInputError(
                f"{fields[other]}: a voice of kind {asked} takes no {fields[other]}",
                field=fields[other],
            )
    return asked


def _base64(text: str, field: str) -> bytes:
    """A clip sent as base64 (whitespace ignored; a ``data:...;base64,`` prefix allowed)."""
    if text.startswith("data:") and ";base64," in text[:100]:
        text = text.split(";base64,", 1)[1]
    try:
        raw = base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInputError(f"{field}: not base64", field=field) from None
    if not raw:
        raise InvalidInputError(f"{field}: the clip is empty", field=field)
    return raw


def _listed(voice: TenantVoice) -> dict[str, Any]:
    """A voice in the listing: as ``GET /v1/voices/{name}`` shows it, less the embedding
    (a thousand characters each)."""
    view = voice.view()
    view.pop("spk_emb", None)
    return view
