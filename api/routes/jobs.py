"""Batch jobs over REST: submit, look up, list, download, cancel; and the engine's voices.

A job is checked by the request rules (:mod:`voicelane.core.rules`, against the workers' engine)
before anything is written: a job accepted with 202 never fails for a reason knowable at
submission, and a rejected one leaves the ledger and the queues exactly as they were.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from voicelane.api.deps import ApiState, State, Tenant, blocking, json_body
from voicelane.api.routes.callbacks import check_callback
from voicelane.api.routes.voices import tenant_voice_list
from voicelane.common.audio import AudioFormat, format_from_name
from voicelane.common.audio.files import allowed_sample_rates
from voicelane.common.errors import (
    InvalidInputError,
    JobNotFoundError,
    JobStateError,
    MalformedRequestError,
    TextTooLargeError,
    UnsupportedFormatError,
    UnsupportedMediaTypeError,
)
from voicelane.core.documents import (
    DOCUMENT_KINDS,
    Document,
    DocumentLimits,
    document_from_text,
    read_document,
)
from voicelane.core.engines import qualified
from voicelane.core.job_files import chapter_file_key, cover_key, subtitles_key
from voicelane.core.job_view import chapter_views, job_summary
from voicelane.core.ledger import BookInfo, ChapterInfo, Job, JobOptions, JobState
from voicelane.core.ledger.jobs import new_job_id
from voicelane.core.rules import (
    EngineCapabilities,
    check_seed,
    check_speech_options,
    check_speech_text,
)
from voicelane.core.settings import ApiSettings
from voicelane.core.speech_text import TextOptions, prepare_text
from voicelane.core.subtitles import SUBTITLE_FORMATS, parse_subtitle_format
from voicelane.core.text_input import check_encodable
from voicelane.core.text_profiles import profile_for

router = APIRouter(tags=["jobs"])


class JobRequest(BaseModel):
    """``POST /v1/jobs`` as JSON (or the form fields beside an uploaded text file)."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="The text to speak (UTF-8), at most the configured limit.")
    voice: str | None = Field(None, description="A voice id from GET /v1/voices; auto if unset.")
    format: str = Field("ogg", description="ogg, mp3, wav, flac or m4b.")
    sample_rate_hz: int | None = Field(None, description="Output sample rate; 24000 if unset.")
    speed: float | None = Field(
        None, description="Speaking-rate multiplier, within the engine's range; 1.0 if unset."
    )
    callback_url: str | None = Field(
        None, description="POSTed the finished or failed job (retried).", max_length=2048
    )
    normalize: bool = Field(
        True,
        description="Read numbers, money, dates, times and symbols as words (docs/text.md); "
        "false hands the text to the engine as written.",
    )
    ssml: bool | None = Field(
        None,
        description="The text is SSML (docs/ssml.md); unset: SSML when it starts with <speak.",
    )
    lexicons: list[str] | None = Field(
        None,
        description="The tenant's pronunciation lexicons to apply (a list, or comma-separated "
        "in a form); unset: the tenant's default lexicon; empty: none.",
    )
    seed: int | None = Field(
        None,
        description="The sampling seed of an engine that samples (ChatTTS): the same voice, "
        "text and seed give the same audio; unset: a fresh draw.",
    )

    input_format: str | None = Field(
        None,
        description="What the text (or uploaded file) is: text, markdown, html, ssml or epub "
        "(a file only); unset: told by the file's content, name and type (docs/documents.md).",
    )
    split_chapters: bool = Field(
        False, description="Also one audio file per chapter of a document (links when done)."
    )

    @field_validator("lexicons", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        """A form field carries the names as one comma-separated string."""
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value


@router.post("/v1/jobs", status_code=202, summary="Submit a text or a document to render")
async def submit_job(request: Request, state: State, tenant: Tenant) -> JSONResponse:
    body, text_field, document = await _read_job_request(request, state.settings)
    options, text = await _check_job(state, tenant, body, text_field, document)
    await state.rate.take(tenant)
    job_id = new_job_id()
    if document.cover is not None:  # stored first, under the job's id; removed if refused
        key = cover_key(tenant, job_id, document.cover.media_type)
        await blocking(
            state,
            state.storage.put_bytes,
            key,
            document.cover.data,
            content_type=document.cover.media_type,
        )
        options = replace(
            options,
            book=replace(options.book, cover_key=key, cover_media_type=document.cover.media_type),
        )
    try:
        job = await blocking(
            state,
            state.jobs.submit,
            tenant,
            options,
            text,
            max_queued_chars=state.settings.tenant_max_queued_chars,
            max_stored_bytes=state.settings.tenant_max_stored_bytes,
            job_id=job_id,
        )
    except BaseException:
        if options.book.cover_key:
            await blocking(state, state.storage.delete, options.book.cover_key)
        raise
    view = await blocking(state, _job_view, state, job)
    return JSONResponse(view, status_code=202, headers={"Location": f"/v1/jobs/{job.id}"})


@router.get("/v1/jobs/{job_id}", summary="A job's state, progress, ETA and download link")
async def get_job(job_id: str, state: State, tenant: Tenant) -> JSONResponse:
    job = await blocking(state, state.ledger.jobs.get_for_tenant, tenant, job_id)
    return JSONResponse(await blocking(state, _job_view, state, job))


@router.get("/v1/jobs", summary="The caller's jobs, newest first")
async def list_jobs(
    state: State,
    tenant: Tenant,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[float | None, Query(allow_inf_nan=False)] = None,
) -> JSONResponse:
    jobs, next_cursor = await blocking(
        state,
        state.ledger.jobs.list_for_tenant,
        tenant,
        limit=min(limit, state.settings.page_size_max),
        before=cursor,
    )
    return JSONResponse(
        {"jobs": [_job_view(state, j, with_link=False) for j in jobs], "next_cursor": next_cursor}
    )


@router.get("/v1/jobs/{job_id}/audio", summary="Redirect to a fresh download link")
async def job_audio(job_id: str, state: State, tenant: Tenant) -> Response:
    job = await blocking(state, state.ledger.jobs.get_for_tenant, tenant, job_id)
    if job.state is not JobState.DONE or not job.output_key:
        raise JobStateError(f"job {job_id} is {job.state.value}, not done")
    return RedirectResponse(await blocking(state, _link, state, job), status_code=302)


@router.get(
    "/v1/jobs/{job_id}/subtitles", summary="Redirect to a fresh link to the job's subtitles"
)
async def job_subtitles(
    job_id: str,
    state: State,
    tenant: Tenant,
    format: Annotated[str, Query(description="vtt, srt or json")] = "vtt",
) -> Response:
    fmt = parse_subtitle_format(format)
    job = await blocking(state, state.ledger.jobs.get_for_tenant, tenant, job_id)
    if job.state is not JobState.DONE or not job.output_key:
        raise JobStateError(f"job {job_id} is {job.state.value}, not done")
    outputs = _outputs(await blocking(state, state.ledger.jobs.extras, job.id))
    if fmt not in outputs.get("subtitles", ()):
        raise JobNotFoundError(f"job {job_id} has no subtitles (it was planned before them)")
    link = await blocking(
        state,
        state.storage.link,
        subtitles_key(job, fmt),
        expires_s=state.settings.storage.link_expiry_s,
        filename=f"{job.id}.{fmt}",
    )
    return RedirectResponse(link, status_code=302)


@router.delete("/v1/jobs/{job_id}", summary="Cancel a job")
async def cancel_job(job_id: str, state: State, tenant: Tenant) -> JSONResponse:
    job = await blocking(state, state.jobs.cancel, tenant, job_id)
    return JSONResponse(await blocking(state, _job_view, state, job))


@router.get("/v1/voices", summary="The voices of every engine served, and the tenant's own")
async def voices(state: State, tenant: Tenant) -> JSONResponse:
    default = await state.engines.capabilities()
    engines = await state.engines.published()
    return JSONResponse(
        {
            "engine": default.engine,
            "voices": sorted(default.voice_ids),
            "speed": {"min": default.min_speed, "max": default.max_speed},
            "seed_voices": default.seed_voices,
            "engines": [engine_view(caps) for caps in engines],
            "custom": await tenant_voice_list(state, tenant),
        }
    )


def engine_view(caps: EngineCapabilities) -> dict[str, Any]:
    """One engine in the voice list: its voices by the ids that name them anywhere
    (``piper:en_US-joe-medium``) and what its requests may ask."""
    return {
        "engine": caps.engine,
        "sample_rate_hz": caps.sample_rate_hz,
        "speed": {"min": caps.min_speed, "max": caps.max_speed},
        "seed_voices": caps.seed_voices,
        "word_timings": caps.word_timings,
        "voice_kinds": list(caps.voice_kinds),
        "voices": [
            {
                "id": qualified(caps.engine, v.id),
                "name": v.name,
                "languages": list(v.languages),
                "gender": v.gender,
            }
            for v in sorted(caps.voices, key=lambda v: v.id)
        ],
    }


# ---- checks --------------------------------------------------------------------------------


async def _read_job_request(
    request: Request, settings: ApiSettings
) -> tuple[JobRequest, str, Document]:
    """The request body, the name of the field its text came in, and the document read from
    it (:mod:`voicelane.core.documents`: a plain text is a document without chapters). A body
    that does not fit :class:`JobRequest` raises pydantic's error, which the app answers as
    every front does (:func:`voicelane.api.failures.invalid_input`: 422 naming the field); a
    document that cannot or may not be read is a 400 naming what is wrong."""
    limits = DocumentLimits(max_chars=settings.max_text_chars)
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json":
        raw = await request.body()  # bounded while it streams in (voicelane.api.body_limit)
        if len(raw) > settings.max_upload_bytes + 4096:
            raise TextTooLargeError(f"request body is over {settings.max_upload_bytes} bytes")
        data = json_body(raw)
        if not isinstance(data, dict):
            raise MalformedRequestError("the JSON body must be an object")
        for name, value in data.items():
            if isinstance(value, str) and name != "text":  # the text's own checks name it
                check_encodable(value, source=str(name), field=str(name))
        body = JobRequest.model_validate(data)
        kind = _input_format(body.input_format)
        if kind == "epub":
            raise InvalidInputError(
                "input_format: an EPUB is uploaded as a file (multipart/form-data)",
                field="input_format",
            )
        document = (
            await run_in_threadpool(_document_from_field, body.text, kind, limits)
            if kind in ("markdown", "html")
            else Document(kind=kind or "text", text=body.text)
        )
        return body.model_copy(update={"text": document.text}), "text", document
    if content_type == "multipart/form-data":
        form = await request.form(max_files=1, max_fields=16)
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise InvalidInputError(
                "multipart upload needs a 'file' part holding the text or document", field="file"
            )
        data_bytes = await upload.read(settings.max_upload_bytes + 1)
        if len(data_bytes) > settings.max_upload_bytes:
            raise TextTooLargeError(
                f"the uploaded file is over {settings.max_upload_bytes} bytes", field="file"
            )
        fields: dict[str, Any] = {k: v for k, v in form.items() if k != "file"}
        kind = _input_format(fields.get("input_format"))
        document = await run_in_threadpool(
            read_document,
            data_bytes,
            kind=kind,
            filename=upload.filename,
            content_type=upload.content_type,
            limits=limits,
        )
        body = JobRequest.model_validate({**fields, "text": document.text})
        return body, "file", document
    raise UnsupportedMediaTypeError(
        f"content type {content_type or 'none'!r} is not supported; "
        "send application/json or multipart/form-data"
    )


def _document_from_field(text: str, kind: str, limits: DocumentLimits) -> Document:
    """The JSON ``text`` read as ``kind``; its errors name the field."""
    try:
        return document_from_text(text, kind, limits=limits)
    except InvalidInputError as error:
        if error.field is None:
            error.field = "text"
        raise


def _input_format(value: object) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or value not in DOCUMENT_KINDS:
        raise InvalidInputError(
            f"input_format must be one of {', '.join(DOCUMENT_KINDS)}", field="input_format"
        )
    return value


def _book_info(document: Document, split_chapters: bool) -> BookInfo:
    return BookInfo(
        kind=document.kind,
        title=document.title,
        author=document.author,
        language=document.language,
        chapters=tuple(ChapterInfo(c.title, c.start, c.level) for c in document.chapters),
        split_chapters=split_chapters and bool(document.chapters),
    )


async def _check_job(
    state: ApiState, tenant: str, body: JobRequest, text_field: str, document: Document
) -> tuple[JobOptions, str]:
    """The request rules for a job; raises a 4xx naming the field at fault (a job accepted
    with 202 never fails for a reason knowable now: the text is read as the workers will
    read it, and refused when nothing of it can be spoken or its SSML cannot be read)."""
    settings = state.settings
    text = check_speech_text(body.text, max_chars=settings.max_text_chars, field=text_field)
    fmt = _format(body.format)
    voice = await state.streams.resolve_voice(tenant, body.voice, text=text)
    caps = voice.caps
    ssml = True if document.kind == "ssml" else (False if document.kind != "text" else body.ssml)
    text_options = await state.streams.text_options.resolve(
        tenant, normalize=body.normalize, ssml=ssml, lexicons=body.lexicons
    )
    await blocking(state, _check_text, text, text_options, caps, settings, text_field)
    options = check_speech_options(
        caps,
        voice=voice.voice,
        speed=body.speed,
        sample_rate_hz=body.sample_rate_hz,
        allowed_rates=allowed_sample_rates(fmt),
        encoding=fmt.value,
        custom_voice=voice.speaker is not None,
    )
    callback = await check_callback(settings, body.callback_url)
    job_options = JobOptions(
        voice=options.voice,
        format=fmt.value,
        sample_rate_hz=options.sample_rate_hz,
        speed=options.speed,
        callback_url=callback,
        text_options=text_options,
        engine=voice.engine,
        speaker=voice.speaker,
        requested_voice=voice.requested if voice.requested != options.voice else "",
        seed=check_seed(body.seed),
        book=_book_info(document, body.split_chapters),
    )
    return job_options, text


def _check_text(
    text: str,
    options: TextOptions,
    caps: EngineCapabilities,
    settings: ApiSettings,
    field: str,
) -> None:
    prepared = prepare_text(
        text,
        profile=profile_for(caps.engine),
        options=options,
        max_segment_chars=settings.max_segment_chars,
        field=field,
    )
    prepared.check(caps, field=field)


def _format(name: str) -> AudioFormat:
    try:
        return format_from_name(name)
    except UnsupportedFormatError as error:
        raise UnsupportedFormatError(f"format: {error.message}", field="format") from None


# ---- views ---------------------------------------------------------------------------------


def _link(state: ApiState, job: Job) -> str:
    assert job.output_key is not None
    filename = f"{job.id}.{job.output_key.rsplit('.', 1)[-1]}"
    expiry_s = state.settings.storage.link_expiry_s
    return state.storage.link(job.output_key, expires_s=expiry_s, filename=filename)


def _outputs(extras: dict[str, str]) -> dict[str, Any]:
    """The files the assembler stored beside the audio (``Jobs.extras``' ``outputs``)."""
    outputs: dict[str, Any] = json.loads(extras.get("outputs", "{}"))
    return outputs


def _job_view(state: ApiState, job: Job, *, with_link: bool = True) -> dict[str, Any]:
    """The job as shown (:func:`job_summary`) with its links; one job's view (``with_link``)
    also has its chapters' progress and, when done, fresh links to every file."""
    view = job_summary(job)
    view["links"] = {
        "self": f"/v1/jobs/{job.id}",
        "audio": f"/v1/jobs/{job.id}/audio",
        "subtitles": {f: f"/v1/jobs/{job.id}/subtitles?format={f}" for f in SUBTITLE_FORMATS},
    }
    if not with_link:
        return view
    extras = state.ledger.jobs.extras(job.id)
    if job.options.book.chapters:
        done = state.ledger.jobs.done_chunks(job.id) if job.state is not JobState.DONE else set()
        view["chapters"] = chapter_views(job, extras, done)
    if job.state is JobState.DONE and job.output_key:
        expiry_s = state.settings.storage.link_expiry_s
        view["download_url"] = _link(state, job)
        view["download_expires_in_s"] = expiry_s
        outputs = _outputs(extras)
        view["subtitles_urls"] = {
            fmt: state.storage.link(
                subtitles_key(job, fmt), expires_s=expiry_s, filename=f"{job.id}.{fmt}"
            )
            for fmt in outputs.get("subtitles", ())
        }
        files = int(outputs.get("chapter_files", 0))
        if files and "chapters" in view:
            extension = job.output_key.rsplit(".", 1)[-1]
            for index, chapter in enumerate(view["chapters"][:files]):
                chapter["download_url"] = state.storage.link(
                    chapter_file_key(job, index),
                    expires_s=expiry_s,
                    filename=f"{job.id}-{index + 1:03d}.{extension}",
                )
    return view
