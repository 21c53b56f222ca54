"""``POST /v1/text``: what the engine will be given, without speaking it.

The same function the workers call (:func:`voicelane.core.speech_text.prepare_text`) on the
same options every front takes: the answer is exactly the text each segment hands the engine,
with its span in the input, what SSML set for it, and the warnings (what cannot be spoken).
``voicelane text`` prints the same from the command line.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from voicelane.api.deps import State, Tenant, blocking
from voicelane.common.errors import InvalidInputError
from voicelane.core.rules import check_speech_text
from voicelane.core.speech_text import TextOptions, prepare_text
from voicelane.core.text_profiles import PROFILES, profile_for

router = APIRouter(tags=["text"])


class TextRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="The text (or SSML) to read.")
    engine: str | None = Field(
        None,
        description="Whose alphabet: espeak, piper or chattts; unset: the voice's engine.",
    )
    voice: str | None = Field(
        None, description="The voice a request would name; its engine is the alphabet."
    )
    normalize: bool = Field(True, description="As on every front (docs/text.md).")
    ssml: bool | None = Field(None, description="As on every front (docs/ssml.md).")
    lexicons: list[str] | None = Field(
        None, description="The tenant's lexicons; unset: its default lexicon; empty: none."
    )


@router.post("/v1/text", summary="What the engine will be given for a text (nothing is spoken)")
async def show_text(body: TextRequest, state: State, tenant: Tenant) -> JSONResponse:
    settings = state.settings
    text = check_speech_text(body.text, max_chars=settings.max_text_chars)
    engine = (
        body.engine or (await state.streams.resolve_voice(tenant, body.voice, text=text)).engine
    )
    if engine not in PROFILES:
        raise InvalidInputError(
            f"engine {engine!r} is unknown; one of {', '.join(sorted(PROFILES))}",
            field="engine",
        )
    options = await state.streams.text_options.resolve(
        tenant, normalize=body.normalize, ssml=body.ssml, lexicons=body.lexicons
    )
    view = await blocking(state, _view, text, engine, options, settings.max_segment_chars)
    return JSONResponse(view)


def _view(text: str, engine: str, options: TextOptions, max_segment_chars: int) -> dict[str, Any]:
    prepared = prepare_text(
        text, profile=profile_for(engine), options=options, max_segment_chars=max_segment_chars
    )
    return prepared.to_json(text, engine=engine)
