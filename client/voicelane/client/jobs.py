"""The REST jobs client (:class:`JobsClient`: submit, poll, download), and ``voicelane jobs``:
submit a text file to a running stack and fetch the audio (:func:`submit_and_fetch`).

An error answer raises :class:`~voicelane.common.errors.RemoteError` with the status its HTTP
status stands for and what the body and ``Retry-After`` say: the server's code, message and
field, and the retry hint (:mod:`voicelane.common.error_wire`)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

import httpx

from voicelane.common.atomic import atomic_output
from voicelane.common.error_wire import from_http
from voicelane.common.errors import DeadlineExceededError, RemoteError, status_for_http

FINAL = ("done", "failed", "cancelled")


class JobsClient:
    def __init__(
        self,
        server: str,
        api_key: str,
        *,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """``transport``: httpx's (a proxy's, a test's); None for a plain connection."""
        self.http = httpx.Client(
            base_url=server.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout_s,
            transport=transport,
        )

    def close(self) -> None:
        self.http.close()

    def _json(self, response: httpx.Response) -> dict[str, Any]:
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = None
            wire = from_http(response.status_code, body, response.headers.get("retry-after"))
            said = wire.message or response.text[:200]
            message = f"server answered {response.status_code}: {said}"
            raise RemoteError.from_wire(replace(wire, message=message))
        data: dict[str, Any] = response.json()
        return data

    def submit(self, text: str, **options: Any) -> dict[str, Any]:
        body = {"text": text, **{k: v for k, v in options.items() if v is not None}}
        return self._json(self.http.post("/v1/jobs", json=body))

    def submit_file(
        self, path: Path, *, content_type: str | None = None, **options: Any
    ) -> dict[str, Any]:
        """Upload a file as a job (multipart): plain text, Markdown, HTML, SSML or EPUB —
        the server tells which from its content and name unless ``input_format`` says."""
        fields = {k: _form_value(v) for k, v in options.items() if v is not None}
        with path.open("rb") as handle:
            files = {"file": (path.name, handle, content_type or "application/octet-stream")}
            return self._json(self.http.post("/v1/jobs", data=fields, files=files))

    def subtitles(self, job_id: str, fmt: str = "vtt") -> bytes:
        """A done job's subtitles (``vtt``, ``srt`` or ``json``), through a fresh link."""
        response = self.http.get(
            f"/v1/jobs/{job_id}/subtitles", params={"format": fmt}, follow_redirects=False
        )
        if response.status_code != 302:
            self._json(response)
            raise RemoteError("INTERNAL", f"subtitles answered {response.status_code}")
        with httpx.Client(timeout=60.0) as plain:  # a signed link: no API key sent there
            got = plain.get(response.headers["location"])
        if got.status_code != 200:
            raise RemoteError(
                status_for_http(got.status_code), f"subtitles download answered {got.status_code}"
            )
        return got.content

    def get(self, job_id: str) -> dict[str, Any]:
        return self._json(self.http.get(f"/v1/jobs/{job_id}"))

    def wait(
        self, job_id: str, *, timeout_s: float, poll_s: float = 0.5, out: TextIO | None = None
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.get(job_id)
            if out is not None:
                eta = f", eta {job['eta_s']:.0f} s" if job.get("eta_s") is not None else ""
                out.write(
                    f"\r{job['state']:10} {job['chunks_done']}/{job['chunks_total']} chunks, "
                    f"{job['audio_seconds_rendered']:.1f} s of audio{eta}   "
                )
                out.flush()
            if job["state"] in FINAL:
                if out is not None:
                    out.write("\n")
                return job
            if time.monotonic() > deadline:
                raise DeadlineExceededError(f"job {job_id} not finished after {timeout_s:.0f} s")
            time.sleep(poll_s)

    def download(self, url: str, target: Path) -> int:
        with httpx.stream("GET", url, timeout=60.0, follow_redirects=True) as response:
            if response.status_code != 200:
                raise RemoteError(
                    status_for_http(response.status_code),
                    f"download answered {response.status_code}",
                )
            size = 0
            with atomic_output(target) as part, part.open("wb") as handle:
                for block in response.iter_bytes():
                    handle.write(block)
                    size += len(block)
            return size


def _form_value(value: Any) -> str:
    """A form field's text: booleans as ``true``/``false``, lists comma-separated."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)
