"""What the OpenAI-compatible routes share: their body parsing, their voices and their error
flavour.

The OpenAI routes (``/v1/audio/speech``, ``/v1/chat/completions``, ``/v1/models``,
``/v1/audio/voices``) are served by routers whose ``route_class`` is :class:`OpenAIRoute`:
every failure of such a route — its key, its body, the gateway's refusals — is answered in
OpenAI's error shape and statuses (:func:`voicelane.api.failures.openai_reply`: 400
``invalid_request_error`` with ``param`` for bad input, 401, 429...), which OpenAI's clients
turn into their own error classes (``openai.BadRequestError``...; Pipecat turns only
``BadRequestError`` into an ErrorFrame). Every other route keeps voicelane's shape.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException

from voicelane.api.deps import ApiState, json_body
from voicelane.api.failures import invalid_input, openai_reply
from voicelane.api.openai_voices import is_mapped_name, mapped_voice, voice_map
from voicelane.common.errors import TextTooLargeError
from voicelane.core.text_input import check_strings_encodable

Body = TypeVar("Body", bound=BaseModel)

MAX_SPEECH_BODY_BYTES = 1024 * 1024
"""OpenAI caps ``input`` at 4,096 characters; a body over 1 MiB is never a speech request."""


async def openai_body(request: Request, model: type[Body]) -> Body:
    """An OpenAI route's JSON body: over ``MAX_SPEECH_BODY_BYTES`` 413; not JSON 400
    ``malformed_request``; not the model's shape, pydantic's error naming the field at fault
    (400 ``invalid_input`` in the OpenAI flavour)."""
    raw = await request.body()  # bounded while it streams in (voicelane.api.body_limit)
    if len(raw) > MAX_SPEECH_BODY_BYTES:
        raise TextTooLargeError(f"request body is over {MAX_SPEECH_BODY_BYTES} bytes")
    try:
        return model.model_validate_json(raw)
    except ValidationError as error:
        if any(e.get("type") == "json_invalid" for e in error.errors()):
            # Not JSON to pydantic's parser, which refuses a lone surrogate (``"\ud800"``)
            # there: if the standard parser takes it, say which field and where, as REST does.
            check_strings_encodable(json_body(raw))
        raise


Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class OpenAIRoute(APIRoute):
    """A route whose failures are answered in OpenAI's error flavour (module docstring):
    the handler's exceptions, its dependencies' (the API key) and FastAPI's validation of
    its parameters. Starlette's own refusals (``HTTPException``) go to the app's handler."""

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()

        async def openai_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except HTTPException:
                raise
            except RequestValidationError as error:
                return openai_response(invalid_input(error.errors(), located=True), request)
            except Exception as error:
                return openai_response(error, request)

        return openai_handler


def openai_response(error: BaseException, request: Request) -> JSONResponse:
    """``error`` as an OpenAI route answers it."""
    reply = openai_reply(error, where=f"{request.method} {request.url.path}")
    return JSONResponse(reply.body, status_code=reply.status_code, headers=reply.headers)


async def openai_voice(state: ApiState, requested: str | None) -> str:
    """The voicelane voice an OpenAI route's ``voice`` speaks as
    (:mod:`voicelane.api.openai_voices`, over the engines that published their voices). A
    voice that is no mapped name is used as it is, without reading the engines' voices."""
    configured = state.settings.openai_voices
    if not is_mapped_name(requested, configured):
        return mapped_voice(requested, {})
    return mapped_voice(requested, voice_map(configured, await state.engines.published()))
