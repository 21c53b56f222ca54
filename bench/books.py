"""Benchmark (issue 22): a 300,000-character EPUB job end to end on the default stack.

The book: generated Markdown (``--chapters`` chapters ``# Chapter N``, some ``## Section``s,
paragraphs of English sentences with numbers, dates, times, money and percentages, so
normalization runs), made an EPUB 3 by Debian's ``pandoc``; its prose (what the document
reader extracts, exactly what the job reads) must be within 2% of ``--characters``.

Three measurements in the same run, back to back:

* **embedded render (baseline)** — ``EmbeddedRenderer.render`` of the extracted prose to
  Ogg/Opus in this process, with word timings (``timings=True``: the job delivers subtitles,
  so both compute them);
* **lane job** — ``voicelane up`` (the default stack: redis, a render worker per engine
  served, a CPU worker, api, grpc, flower; its own state directory and free ports), the EPUB
  uploaded to ``POST /v1/jobs`` (multipart), wall time from the submission to ``done`` seen
  by polling; overhead = lane wall / embedded wall - 1 (target <= 10%);
* **lane job, a render worker SIGKILLed** — a fresh stack, the same upload; once ~40% of the
  chunks are done the render worker of the job's engine is SIGKILLed (its process group);
  ``up`` restarts it and the job must finish with every chunk committed exactly once
  (the ledger's commit log ``job:{id}:commits``), the same audio duration as the no-kill job
  and as many subtitle sentences.

Each stack runs with its defaults, chapter pause included (1.5 s before each chapter but the
first; the embedded render has none): the lane's expected duration is the embedded one plus
one ``chapter_pause_s`` per chapter that does not start the audio (a pandoc EPUB's title
page comes first: every chapter gets one). Peak memory: VmHWM of every process of the stack (read
from ``/proc/PID/status`` before it stops; pids from ``up``'s ``children.json``) and of this
process for the embedded render.

Run: ``.venv/bin/python -m bench.books [--voice espeak:en-us] [--characters 300000]``
(``--voice piper:en_US-joe-medium --characters 30000`` for a smaller Piper run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.render import ENGLISH

ROOT = Path(__file__).resolve().parents[1]
DEV_KEY = "demo-key"
READY_LINE = "Ctrl-C stops everything"
KILL_AT = 0.4
"""The fraction of chunks done at which the kill run SIGKILLs a render worker."""
DURATION_TOLERANCE_S = 1.0
"""|lane - expected| allowed. Far below a chunk's audio (a chunk rendered twice adds its
whole audio: several seconds); above espeak's drift: a restarted libespeak-ng times some
sentences 1-20 ms apart from the worker it replaced (measured: sentence by sentence from the
kill on, ~0.2 s over 20 minutes of audio)."""
TEXT_TOLERANCE = 0.02
"""The extracted prose may differ from ``--characters`` by this fraction."""
POLL_S = 0.25

# ---- the book --------------------------------------------------------------------------------

NAMES = ("Ada", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas")
PLACES = ("Lisbon", "the old harbor", "Oslo", "the northern valley", "Kyoto", "the market square")
ADJECTIVES = ("quiet", "narrow", "bright", "ancient", "crowded", "distant", "heavy", "careful")
NOUNS = ("bridge", "library", "engine", "garden", "lantern", "letter", "orchard", "railway")
PLURALS = ("boxes", "letters", "workers", "books", "ships", "lamps", "maps", "coins")
VERBS_PAST = ("found", "repaired", "counted", "carried", "painted", "measured", "opened")
MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
TEMPLATES = (
    "On {date}, {name} {verb} {count} {plurals} in {place}.",
    "The {adj} {noun} cost {money}, about {percent} more than it did in {year}.",
    "At {clock} on {weekday}, {name} {verb} the {adj} {noun} near {place}.",
    "By {year}, {count} of the {plurals} had been {verb} along the {adj} {noun}.",
    "The ledger, dated {iso}, lists {count} {plurals} and {decimal} kilometres of {noun}.",
    "Did {name} really walk {count} kilometres to the {adj} {noun} before {clock}?",
    "{name} said that the {ordinal} {noun} was {adj}, and that nobody had {verb} it since {year}.",
    "Nobody expected {count} {plurals} to arrive at {place} on {date}, but they did.",
)


def sentence(rng: random.Random) -> str:
    """One English sentence from the word lists, with numbers, dates, times, money and
    percentages (what normalization reads as words); now and then one of bench/render.py's."""
    if rng.random() < 0.1:
        return rng.choice(ENGLISH)
    day = rng.randint(1, 28)
    month = rng.randint(1, 12)
    year = rng.randint(1890, 2030)
    ordinal = {1: "1st", 2: "2nd", 3: "3rd"}.get(day, f"{day}th")
    return rng.choice(TEMPLATES).format(
        name=rng.choice(NAMES),
        place=rng.choice(PLACES),
        adj=rng.choice(ADJECTIVES),
        noun=rng.choice(NOUNS),
        plurals=rng.choice(PLURALS),
        verb=rng.choice(VERBS_PAST),
        count=rng.randint(2, 9999),
        money=rng.choice(("€", "£")) + f"{rng.randint(1, 5000)}.{rng.randint(0, 99):02d}",
        percent=f"{rng.randint(1, 99)}%",
        year=year,
        date=f"{MONTHS[month - 1]} {day}, {year}",
        iso=f"{year}-{month:02d}-{day:02d}",
        clock=f"{rng.randint(0, 23)}:{rng.randint(0, 59):02d}",
        weekday=rng.choice(WEEKDAYS),
        decimal=f"{rng.randint(0, 99)}.{rng.randint(1, 9)}",
        ordinal=ordinal,
    )


def paragraph(rng: random.Random) -> str:
    return " ".join(sentence(rng) for _ in range(rng.randint(3, 7)))


@dataclass(frozen=True)
class Book:
    """A generated book: its Markdown (for pandoc) and what it should read as."""

    markdown: str
    chapters: int
    sections: int
    prose_chars: int
    """The blocks' characters joined by blank lines, as the document reader extracts them
    (headings are blocks: they are read aloud too)."""


TITLE = "The Long Bench"
AUTHOR = "Voicelane Bench"


def build_book(characters: int, chapters: int = 20, seed: int = 22) -> Book:
    """A book of ``chapters`` chapters whose prose is ``characters`` long (to a sentence or so):
    every chapter gets an equal share; every third chapter has two ``## Section`` headings."""
    if chapters < 1 or characters < 200 * chapters:
        raise ValueError(f"{characters} characters are too few for {chapters} chapters")
    rng = random.Random(seed)
    blocks: list[str] = []
    markdown = [f"---\ntitle: {TITLE}\nauthor: {AUTHOR}\nlang: en-US\n---\n"]
    sections = 0
    total = 0

    def add(block: str, prefix: str = "") -> None:
        nonlocal total
        total += len(block) + (2 if blocks else 0)
        blocks.append(block)
        markdown.append(prefix + block + "\n")

    for n in range(1, chapters + 1):
        budget = characters * n // chapters  # where this chapter's prose should end
        add(f"Chapter {n}", "# ")
        share = budget - total
        section_marks = [] if n % 3 else [budget - share * 2 // 3, budget - share // 3]
        while True:
            if section_marks and total >= section_marks[0]:
                section_marks.pop(0)
                sections += 1
                add(f"Section {n}.{2 - len(section_marks)}", "## ")
            text = paragraph(rng)
            if total + 2 + len(text) > budget:
                # The last paragraph: as many whole sentences as fit (at least one).
                words = text
                while total + 2 + len(words) > budget and ". " in words:
                    words = words.rsplit(". ", 1)[0] + "."
                add(words)
                break
            add(text)
    return Book("\n".join(markdown), chapters, sections, total)


def pandoc_epub(book: Book, path: Path) -> bytes:
    """``book`` as an EPUB 3 written by pandoc (one chapter per ``#`` heading)."""
    source = path.with_suffix(".md")
    source.write_text(book.markdown, encoding="utf-8")
    subprocess.run(
        ["pandoc", "-f", "markdown", "-t", "epub3", "--epub-chapter-level=1", "-o", str(path),
         str(source)],
        check=True,
    )  # fmt: skip
    return path.read_bytes()


def extracted(epub: bytes) -> tuple[str, int]:
    """The prose and chapter count the job reads from ``epub`` (the API's own reader)."""
    from voicelane.core.documents import DocumentLimits, read_document

    document = read_document(epub, kind="epub", limits=DocumentLimits(max_chars=10**7))
    return document.text, len(document.chapters)


# ---- processes and memory --------------------------------------------------------------------


def vm_hwm_kib(pid: int) -> int:
    """Peak resident set (VmHWM) of ``pid`` in KiB; 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return 0
    return 0


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int, start: int = 20000) -> list[int]:
    """``count`` consecutive free ports (``up`` gives the metrics ports consecutively)."""
    rng = random.Random(os.getpid())
    for _ in range(200):
        base = rng.randrange(start, 60000)
        if all(_bindable(base + i) for i in range(count)):
            return list(range(base, base + count))
    raise RuntimeError("no run of free ports")


@dataclass
class UpStack:
    """``voicelane up --state-dir DIRECTORY`` on free ports, its defaults otherwise."""

    directory: Path
    process: subprocess.Popen[bytes] | None = None
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def log(self) -> Path:
        return self.directory / "up.log"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['api']}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.ports['redis']}/0"

    def start(self, timeout_s: float = 300.0) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        api, grpc, flower, redis_port, *metrics = free_ports(12)
        self.ports = {"api": api, "grpc": grpc, "flower": flower, "redis": redis_port}
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOICELANE_")}
        env.update(
            {
                "PYTHONPATH": str(ROOT),
                "PYTHONUNBUFFERED": "1",
                "VOICELANE_PORT": str(api),
                "VOICELANE_GRPC_PORT": str(grpc),
                "VOICELANE_FLOWER_PORT": str(flower),
                "VOICELANE_REDIS_URL": self.redis_url,
                "VOICELANE_METRICS_BASE_PORT": str(metrics[0]),
            }
        )
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "voicelane.api.cli", "up", "--state-dir",
                 str(self.directory / "state")],
                env=env,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while READY_LINE not in self.log.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"voicelane up did not start:\n{self.tail()}")
            time.sleep(0.2)

    def children(self) -> dict[str, int]:
        """Name -> pid of every process ``up`` runs now (redis included), from children.json."""
        state = json.loads((self.directory / "state" / "children.json").read_text())
        return {name: int(s["pid"]) for name, s in state.items() if s and s.get("pid")}

    def peaks_kib(self) -> dict[str, int]:
        return {name: vm_hwm_kib(pid) for name, pid in self.children().items()}

    def render_worker(self, engine: str) -> tuple[str, int]:
        """The (first) render worker of ``engine``: ``{engine}-worker-1`` with several engines
        served, ``gpu-worker`` with one."""
        children = self.children()
        for name in sorted(children):
            if name.startswith((f"{engine}-worker", "gpu-worker")):
                return name, children[name]
        raise RuntimeError(f"no render worker of {engine} in {sorted(children)}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            children = self.children()
        except (OSError, ValueError):
            children = {}
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            for pid in children.values():  # ours: started by the up we started
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


# ---- runs ------------------------------------------------------------------------------------


@dataclass
class EmbeddedRun:
    wall_s: float
    audio_s: float
    segments: int
    peak_kib: int


def embedded_run(text: str, voice: str, directory: Path) -> EmbeddedRun:
    from voicelane.common.audio import AudioFormat
    from voicelane.core.engines import split_voice
    from voicelane.core.settings import EmbeddedSettings
    from voicelane.workers.render import EmbeddedRenderer

    engine, voice_id = split_voice(voice)  # the embedded renderer takes the engine's own id
    with EmbeddedRenderer(EmbeddedSettings(engine=engine or "auto")) as renderer:
        renderer.render("Warm up.", directory / "warm.ogg", fmt=AudioFormat.OGG, voice=voice_id)
        started = time.perf_counter()
        result = renderer.render(
            text, directory / "embedded.ogg", fmt=AudioFormat.OGG, voice=voice_id, timings=True
        )
        wall_s = time.perf_counter() - started
    return EmbeddedRun(wall_s, result.duration_s, result.segments, vm_hwm_kib(os.getpid()))


@dataclass
class LaneRun:
    wall_s: float
    audio_s: float
    chunks: int
    commits: int
    duplicated: int
    missing: int
    chapters: int
    pauses: int
    """Chapter pauses in the audio: chapters that start after its beginning."""
    sentences: int
    sentence_texts: list[str]
    phases_s: dict[str, float]
    peaks_kib: dict[str, int]
    killed: str | None = None
    killed_at_chunks: int = 0
    killed_peak_kib: int = 0
    commits_by_worker: dict[str, int] = field(default_factory=dict)


def commit_counts(chunks: Sequence[int], total: int) -> tuple[int, int]:
    """(commits beyond the first of a chunk, chunks 0..total-1 never committed)."""
    counts = Counter(chunks)
    duplicated = sum(c - 1 for c in counts.values())
    missing = sum(1 for n in range(total) if counts[n] == 0)
    return duplicated, missing


def _wait_done(client: httpx.Client, job_id: str, timeout_s: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in ("done", "failed", "cancelled") or time.monotonic() > deadline:
            return job
        time.sleep(POLL_S)


def lane_run(epub: bytes, voice: str, directory: Path, *, kill: bool, timeout_s: float) -> LaneRun:
    import redis

    from tests.support.ledger import commit_log

    stack = UpStack(directory)
    stack.start()
    try:
        headers = {"Authorization": f"Bearer {DEV_KEY}"}
        with httpx.Client(base_url=stack.api_url, headers=headers, timeout=120) as client:
            warm = client.post("/v1/jobs", json={"text": "Warm up.", "voice": voice})
            warm.raise_for_status()
            assert _wait_done(client, warm.json()["id"])["state"] == "done", stack.tail()
            submitted_at = time.time()
            started = time.perf_counter()
            response = client.post(
                "/v1/jobs",
                files={"file": ("book.epub", epub, "application/epub+zip")},
                data={"voice": voice, "format": "ogg"},
            )
            if response.status_code != 202:
                raise RuntimeError(f"submit: {response.status_code} {response.text}")
            job_id = response.json()["id"]
            killed: tuple[str, int] | None = None
            killed_at_chunks = killed_peak = 0
            assembling_at: float | None = None
            deadline = time.monotonic() + timeout_s
            while True:
                job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
                if job["state"] in ("done", "failed", "cancelled"):
                    break
                if job["state"] == "assembling" and assembling_at is None:
                    assembling_at = time.time()
                total, done = int(job["chunks_total"] or 0), int(job["chunks_done"] or 0)
                if kill and killed is None and total and done >= KILL_AT * total:
                    killed = stack.render_worker(str(job["engine"]))
                    killed_peak = vm_hwm_kib(killed[1])
                    killed_at_chunks = done
                    os.killpg(killed[1], signal.SIGKILL)
                if time.monotonic() > deadline:
                    raise RuntimeError(f"job {job_id} not done after {timeout_s} s: {job}")
                time.sleep(POLL_S)
            wall_s = time.perf_counter() - started
            peaks = stack.peaks_kib()  # before anything stops
            if job["state"] != "done":
                raise RuntimeError(f"job {job_id} {job['state']}: {job.get('error')}")
            subtitles = client.get(
                f"/v1/jobs/{job_id}/subtitles", params={"format": "json"}, follow_redirects=True
            )
            subtitles.raise_for_status()
            texts = [str(s["text"]) for s in subtitles.json()["sentences"]]
        client_redis = redis.Redis.from_url(stack.redis_url)
        try:
            log = commit_log(client_redis, job_id)
        finally:
            client_redis.close()
    finally:
        stack.stop()
    total = int(job["chunks_total"])
    duplicated, missing = commit_counts([n for n, _, _ in log], total)
    created, begun, finished = job["created_at"], job["started_at"], job["finished_at"]
    assembling_at = assembling_at or finished
    phases = {
        "upload + read": created - submitted_at,
        "queue + plan": begun - created,
        "chunk renders": assembling_at - begun,
        "assembly": finished - assembling_at,
        "seen done": wall_s - (finished - submitted_at),
    }
    return LaneRun(
        wall_s=wall_s,
        audio_s=float(job["output"]["duration_s"]),
        chunks=total,
        commits=len(log),
        duplicated=duplicated,
        missing=missing,
        chapters=len(job.get("chapters") or []),
        pauses=chapter_pauses([float(c.get("start_s", 0.0)) for c in job.get("chapters") or []]),
        sentences=len(texts),
        sentence_texts=texts,
        phases_s=phases,
        peaks_kib=peaks,
        killed=killed[0] if killed else None,
        killed_at_chunks=killed_at_chunks,
        killed_peak_kib=killed_peak,
        commits_by_worker=dict(Counter(w for _, _, w in log)),
    )


# ---- tables ----------------------------------------------------------------------------------


def chapter_pauses(starts_s: Sequence[float]) -> int:
    """The chapter pauses in a job's audio: one before each chapter that does not start it
    (a pandoc EPUB's title page comes before chapter 1: chapter 1 has one too)."""
    return sum(1 for start_s in starts_s if start_s > 0)


def expected_lane_audio_s(embedded_audio_s: float, pauses: int, chapter_pause_s: float) -> float:
    """The lane's audio: the embedded render's plus its chapter pauses."""
    return embedded_audio_s + pauses * chapter_pause_s


def overhead(lane_wall_s: float, embedded_wall_s: float) -> float:
    return lane_wall_s / embedded_wall_s - 1


def results_table(
    engine: str, base: EmbeddedRun, plain: LaneRun, killed: LaneRun, chapter_pause_s: float
) -> list[str]:
    """The main table (Markdown lines)."""
    expected = expected_lane_audio_s(base.audio_s, plain.pauses, chapter_pause_s)
    lines = [
        "| run | engine | wall s | audio s | x real time | overhead vs embedded | chunks "
        "| commits | chunks committed twice | chunks never committed | subtitle sentences "
        "| audio s vs expected |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| embedded render (baseline) | {engine} | {base.wall_s:.1f} | {base.audio_s:.1f} "
        f"| {base.audio_s / base.wall_s:.0f} | — | — | — | — | — | {base.segments} segments "
        f"| — |",
    ]
    for title, run in (("lane job", plain), ("lane job, render worker SIGKILLed", killed)):
        at = f" at {run.killed_at_chunks}/{run.chunks} chunks" if run.killed else ""
        label = title + at
        lines.append(
            f"| {label} | {engine} | {run.wall_s:.1f} | {run.audio_s:.1f} "
            f"| {run.audio_s / run.wall_s:.0f} | {overhead(run.wall_s, base.wall_s):+.1%} "
            f"| {run.chunks} | {run.commits} | {run.duplicated} | {run.missing} "
            f"| {run.sentences} | {run.audio_s - expected:+.3f} |"
        )
    return lines


def phases_table(runs: Sequence[tuple[str, LaneRun]]) -> list[str]:
    """Where a lane job's wall time goes (seconds)."""
    phases = list(runs[0][1].phases_s)
    lines = [
        "| run | " + " | ".join(phases) + " |",
        "|---|" + "---:|" * len(phases),
    ]
    for name, run in runs:
        lines.append(f"| {name} | " + " | ".join(f"{run.phases_s[p]:.1f}" for p in phases) + " |")
    return lines


def process_kind(name: str) -> str:
    """``espeak-worker-1`` -> ``render worker (espeak)``; ``cpu-worker`` and the fronts as named."""
    if name.startswith("gpu-worker"):
        return "render worker"
    if "-worker" in name and not name.startswith("cpu"):
        return f"render worker ({name.split('-worker', maxsplit=1)[0]})"
    return name


def memory_table(base: EmbeddedRun, plain: LaneRun, killed: LaneRun) -> list[str]:
    """Peak RSS (VmHWM, MiB) per process, for both lane runs and the embedded render."""
    names = list(dict.fromkeys([*plain.peaks_kib, *killed.peaks_kib]))
    lines = [
        "| process | kind | lane job: peak MiB | kill run: peak MiB |",
        "|---|---|---:|---:|",
    ]
    for name in names:
        after = killed.peaks_kib.get(name, 0) / 1024
        kill_cell = f"{after:.0f}"
        if name == killed.killed:
            kill_cell = f"{killed.killed_peak_kib / 1024:.0f} at the kill; {after:.0f} restarted"
        lines.append(
            f"| {name} | {process_kind(name)} | {plain.peaks_kib.get(name, 0) / 1024:.0f} "
            f"| {kill_cell} |"
        )
    lines.append(
        f"| bench process | embedded render | {base.peak_kib / 1024:.0f} (whole process) | — |"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--voice", default="espeak:en-us")
    parser.add_argument("--characters", type=int, default=300_000)
    parser.add_argument("--chapters", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=3600.0, help="per lane job, seconds")
    parser.add_argument("--keep", type=Path, help="keep the book, outputs and logs here")
    args = parser.parse_args()

    from voicelane.core.engines import split_voice
    from voicelane.core.settings.processes import WorkerSettings

    engine = split_voice(args.voice)[0] or "auto"
    chapter_pause_s = WorkerSettings().chapter_pause_s
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.keep or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        book = build_book(args.characters, args.chapters)
        epub = pandoc_epub(book, directory / "book.epub")
        text, chapters = extracted(epub)
        off = len(text) / args.characters - 1
        print(
            f"book: {len(epub):,} bytes EPUB (pandoc), {chapters} chapters, {book.sections} "
            f"sections, prose {len(text):,} characters ({off:+.2%} vs --characters)",
            file=sys.stderr,
        )
        if abs(off) > TEXT_TOLERANCE:
            raise SystemExit(f"the extracted prose is {off:+.2%} off the target")
        base = embedded_run(text, args.voice, directory)
        print(f"embedded: {base.wall_s:.1f} s", file=sys.stderr)
        plain = lane_run(epub, args.voice, directory / "lane", kill=False, timeout_s=args.timeout)
        print(f"lane: {plain.wall_s:.1f} s", file=sys.stderr)
        killed = lane_run(
            epub, args.voice, directory / "lane-kill", kill=True, timeout_s=args.timeout
        )
        print(f"lane with a kill: {killed.wall_s:.1f} s", file=sys.stderr)

    print(
        f"{len(text):,}-character EPUB (pandoc, {chapters} chapters), voice {args.voice}, "
        f"Ogg/Opus 24 kHz, default stack (`voicelane up`, chapter pause {chapter_pause_s:g} s), "
        f"{os.cpu_count()} cores\n"
    )
    print("\n".join(results_table(engine, base, plain, killed, chapter_pause_s)))
    print(
        f"\noverhead = lane wall / embedded wall - 1 (target <= 10%); expected lane audio = "
        f"embedded + {plain.pauses} chapter pauses x {chapter_pause_s:g} s; "
        f"kill run vs no-kill audio: {killed.audio_s - plain.audio_s:+.3f} s; "
        f"commits by worker (kill run): {killed.commits_by_worker}\n"
    )
    print("\n".join(phases_table([("lane job", plain), ("kill run", killed)])))
    print()
    print("\n".join(memory_table(base, plain, killed)))
    checks = {
        "no chunk committed twice": killed.duplicated == 0 and plain.duplicated == 0,
        "every chunk committed": killed.missing == 0 and plain.missing == 0,
        "kill run audio = no-kill audio": abs(killed.audio_s - plain.audio_s)
        <= DURATION_TOLERANCE_S,
        "lane audio = embedded + pauses": abs(
            plain.audio_s - expected_lane_audio_s(base.audio_s, plain.pauses, chapter_pause_s)
        )
        <= DURATION_TOLERANCE_S,
        "subtitle sentences equal, same texts in order": killed.sentence_texts
        == plain.sentence_texts,
        "overhead <= 10%": overhead(plain.wall_s, base.wall_s) <= 0.10,
    }
    print()
    for name, ok in checks.items():
        print(f"- {'PASS' if ok else 'FAIL'}: {name}")
    if not all(ok for name, ok in checks.items() if name != "overhead <= 10%"):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
