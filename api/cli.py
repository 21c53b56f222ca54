"""``voicelane``: the command line.

Embedded commands run in this process through the same batcher and engine as the workers,
with no Redis and no servers:

* ``voicelane render INPUT -o OUTPUT [--voice V] [--format F] [--sample-rate HZ]``
  (INPUT ``-`` reads standard input; the format follows OUTPUT's extension unless given);
* ``voicelane say TEXT -o FILE``;
* both with ``--words FILE`` (the word timings as JSON: ``[{"text", "start_ms", "end_ms",
  "char_start", "char_end"}]``, spans of the input) and ``--marks FILE`` (SSML marks:
  ``[{"name", "time_ms"}]``), each written atomically and only with the audio;
* ``voicelane text [TEXT|-] [--engine E] [--ssml] [--lexicon FILE] [--json]``: what the
  engine will be given (one line per segment), by the function the engines' callers use;
* ``voicelane voices``.

``render``, ``say`` and ``text`` take ``--no-normalize``, ``--ssml`` and ``--lexicon FILE``.

Bad input (empty or binary text, invalid UTF-8, a missing file, an unknown voice or format,
an output that cannot be written) exits with status 2 and one line on stderr; nothing is
left behind. Set ``VOICELANE_DEBUG=1`` to see tracebacks of unexpected errors.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from voicelane.common.errors import InvalidInputError, VoicelaneError, exit_status

if TYPE_CHECKING:
    from voicelane.core.settings import CliSettings, EmbeddedSettings
    from voicelane.core.speech_text import TextOptions

# numpy's OpenBLAS runs a matrix product on a thread per core, which then wait for each other
# spinning. The products here are small (the resampler's, per 200 ms of audio) and the
# processes already keep every core busy (one render worker per core, fronts, Redis): the
# helper threads only steal CPU, and a stream's event loop stalls while they get scheduled
# (measured: 55% of a worker's samples at 100 streams, see docs/benchmarks.md). Set before
# numpy loads; an operator's own setting wins. Process setup for a library, not voicelane's
# configuration (which only voicelane.core.settings reads): tests/unit/core/test_settings.py
# lists this write as an allowed exception.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

PROG = "voicelane"
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit 2 like every other bad input."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message} (see {self.prog} --help)\n")


def _format_duration(seconds: float) -> str:
    minutes, secs = divmod(seconds, 60.0)
    hours, minutes = divmod(int(minutes), 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:04.1f}s"
    if minutes:
        return f"{minutes}m{secs:04.1f}s"
    return f"{secs:.2f}s"


class _ProgressBar:
    """A one-line progress bar on a terminal; silent when stderr is not a terminal."""

    WIDTH = 30
    MIN_INTERVAL_S = 0.1

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.enabled = stream.isatty()
        self._last = 0.0

    def __call__(self, done: int, total: int, audio_s: float) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last < self.MIN_INTERVAL_S:
            return
        self._last = now
        filled = self.WIDTH * done // max(1, total)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        self.stream.write(
            f"\r[{bar}] {100 * done // max(1, total):3d}% "
            f"{done}/{total} segments, {_format_duration(audio_s)} of audio"
        )
        if done >= total:
            self.stream.write("\r" + " " * (self.WIDTH + 60) + "\r")
        self.stream.flush()


def _read_input(source: str, max_chars: int) -> str:
    from voicelane.core.text_input import decode_text

    if source == "-":
        return decode_text(sys.stdin.buffer.read(), max_chars=max_chars, source="standard input")
    path = Path(source)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InvalidInputError(f"{source}: no such file") from None
    except IsADirectoryError:
        raise InvalidInputError(f"{source}: is a directory, expected a text file") from None
    except OSError as error:
        raise InvalidInputError(f"{source}: {error.strerror or error}") from None
    return decode_text(data, max_chars=max_chars, source=source)


def _given(args: argparse.Namespace, **fields: str) -> dict[str, Any]:
    """The flags given (``flag=field``), as keyword arguments of a settings root: a flag wins
    over its variable and is validated like it."""
    return {
        field: getattr(args, flag)
        for flag, field in fields.items()
        if getattr(args, flag) is not None
    }


def _embedded(args: argparse.Namespace) -> EmbeddedSettings:
    from voicelane.core.settings import EmbeddedSettings

    return EmbeddedSettings(**_given(args, engine="engine"))


def _api_key(args: argparse.Namespace, cli: CliSettings) -> str:
    api_key = args.key or cli.api_key
    if not api_key:
        raise InvalidInputError("give --key or set VOICELANE_API_KEY")
    return str(api_key)


def _render(args: argparse.Namespace, settings: EmbeddedSettings, text: str) -> int:
    from voicelane.common.audio import format_from_name, format_from_path, validate_sample_rate
    from voicelane.workers.render import EmbeddedRenderer, embedded_engine

    engine, voice = embedded_engine(settings.engine, args.voice, text, settings)
    settings = settings.model_copy(update={"engine": engine})
    output = Path(args.output)
    fmt = format_from_name(args.format) if args.format else format_from_path(output)
    rate_hz = args.sample_rate or settings.sample_rate_hz
    validate_sample_rate(fmt, rate_hz)
    text_options = _text_options(args)
    with contextlib.ExitStack() as side_files, EmbeddedRenderer(settings) as renderer:
        words_part, marks_part = _side_files(side_files, args)
        result = renderer.render(
            text,
            output,
            fmt=fmt,
            voice=voice,
            sample_rate_hz=rate_hz,
            speed=args.speed,
            progress=_ProgressBar(sys.stderr),
            text_options=text_options,
            timings=words_part is not None or marks_part is not None,
        )
        if words_part is not None:
            _write_json(words_part, [word.to_json() for word in result.words])
        if marks_part is not None:
            _write_json(marks_part, [mark.to_json() for mark in result.marks])
    print(
        f"{result.path}: {_format_duration(result.duration_s)} of audio "
        f"({result.format.value}, {result.sample_rate_hz} Hz, {result.segments} segments) "
        f"in {result.elapsed_s:.2f} s, {result.speed_x:.0f}x real time"
    )
    return 0


def _side_files(
    stack: contextlib.ExitStack[bool | None], args: argparse.Namespace
) -> tuple[Path | None, Path | None]:
    """The ``--words`` and ``--marks`` files, opened before the audio is made (an unwritable
    path fails first) and kept only with the audio: a failure leaves none of them behind."""
    from voicelane.common.atomic import atomic_output

    words = stack.enter_context(atomic_output(Path(args.words))) if args.words else None
    marks = stack.enter_context(atomic_output(Path(args.marks))) if args.marks else None
    return words, marks


def _write_json(path: Path, data: object) -> None:
    import json

    from voicelane.common.errors import OutputError

    try:
        path.write_text(json.dumps(data, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as error:
        raise OutputError(f"cannot write {path}: {error.strerror or error}") from None


def _text_options(args: argparse.Namespace) -> TextOptions:
    """How the text is read, from ``--no-normalize``, ``--ssml`` and ``--lexicon FILE``."""
    from voicelane.core.lexicon import Lexicon, read_lexicon
    from voicelane.core.speech_text import TextOptions

    entries: list[Any] = []
    names: list[str] = []
    for path in args.lexicon or ():
        try:
            document = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise InvalidInputError(
                f"{path}: {getattr(error, 'strerror', None) or error}"
            ) from None
        entries.extend(read_lexicon(document, source=path).entries)
        names.append(Path(path).stem)
    return TextOptions(
        normalize=args.normalize,
        ssml=True if args.ssml else None,
        lexicon=Lexicon(tuple(entries)),
        lexicon_names=tuple(names),
    )


def _cmd_text(args: argparse.Namespace, _cli: CliSettings) -> int:
    """What the engine will be given: one line per segment (``--json``: spans and all)."""
    import json

    from voicelane.core.settings import EmbeddedSettings
    from voicelane.core.speech_text import prepare_text
    from voicelane.core.text_input import check_text
    from voicelane.core.text_profiles import PROFILES
    from voicelane.workers.render import embedded_engine

    settings = EmbeddedSettings(**_given(args, engine="engine"))
    if args.text == "-":
        text = _read_input("-", settings.max_text_chars)
    else:
        text = check_text(args.text, max_chars=settings.max_text_chars, source="TEXT")
    engine, _ = embedded_engine(settings.engine, None, text)
    if engine not in PROFILES:
        raise InvalidInputError(
            f"engine {engine!r} is unknown; one of {', '.join(sorted(PROFILES))}"
        )
    prepared = prepare_text(
        text,
        profile=PROFILES[engine],
        options=_text_options(args),
        max_segment_chars=settings.max_segment_chars,
    )
    prepared.check_speakable()
    if args.json:
        view = prepared.to_json(text, engine=engine)
        print(json.dumps(view, ensure_ascii=False, indent=2))
    else:
        for segment in prepared.segments:
            print(segment.text)
        for warning in prepared.warnings_json():
            print(f"warning: {warning['message']}", file=sys.stderr)
    return 0


def _cmd_render(args: argparse.Namespace, _cli: CliSettings) -> int:
    settings = _embedded(args)
    text = _read_input(args.input, settings.max_text_chars)
    return _render(args, settings, text)


def _cmd_say(args: argparse.Namespace, cli: CliSettings) -> int:
    from voicelane.core.text_input import check_text

    settings = _embedded(args)
    text = check_text(args.text, max_chars=settings.max_text_chars, source="TEXT")
    if args.server:
        return _say_remote(args, _api_key(args, cli), text)
    return _render(args, settings, text)


def _say_remote(args: argparse.Namespace, api_key: str, text: str) -> int:
    """Stream through the gRPC front: first audio while the rest is still being made; the
    word timings and marks (``--words``, ``--marks``) as the stream carried them."""
    from voicelane.client import say_to_file

    if args.lexicon:
        raise InvalidInputError(
            "--lexicon FILE applies to renders in this process; through --server the "
            "tenant's own lexicons apply (docs/api.md)"
        )
    with contextlib.ExitStack() as side_files:
        words_part, marks_part = _side_files(side_files, args)
        result = say_to_file(
            args.server,
            api_key,
            text,
            Path(args.output),
            voice=args.voice or "",
            sample_rate_hz=args.sample_rate or 24000,
            speed=args.speed,
            normalize=None if args.normalize else False,
            ssml=True if args.ssml else None,
            lexicons=_lexicon_names(args),
        )
        if words_part is not None:
            _write_json(words_part, result.words_json())
        if marks_part is not None:
            _write_json(marks_part, result.marks_json())
    first_s = result.stats.time_to_first_audio_s
    first = f"; first audio after {first_s * 1000:.0f} ms" if first_s is not None else ""
    duration_s = len(result.pcm) / result.sample_rate_hz
    print(f"{args.output}: {duration_s:.2f} s of audio streamed from {args.server}{first}")
    return 0


def _lexicon_names(args: argparse.Namespace) -> list[str] | None:
    """``--lexicons a,b`` (the tenant's lexicons on the server; ``""``: none), or None: the
    tenant's default lexicon."""
    if args.lexicons is None:
        return None
    return [name.strip() for name in args.lexicons.split(",") if name.strip()]


def _cmd_chat(args: argparse.Namespace, cli: CliSettings) -> int:
    """One question to the server's LLM; the reply's text printed, its audio written."""
    from voicelane.client import chat_to_file
    from voicelane.core.text_input import check_text

    api_key = _api_key(args, cli)
    message = check_text(args.message, max_chars=10_000, source="MESSAGE")
    messages = [("system", args.system)] if args.system else []
    result = chat_to_file(
        args.server, api_key, [*messages, ("user", message)], Path(args.output),
        model=args.model, voice=args.voice,
    )  # fmt: skip
    stats = result.stats
    print(result.text.strip())
    print(
        f"{args.output}: {result.audio.duration_s:.2f} s of speech; first token after "
        f"{stats.time_to_first_token_ms:.0f} ms, first audio after "
        f"{stats.time_to_first_audio_ms:.0f} ms ({stats.reply_tokens} tokens from {stats.model})"
    )
    return 0


def _cmd_voices(args: argparse.Namespace, _cli: CliSettings) -> int:
    """The voices of the embedded engine (``auto``: of every installed engine it picks from,
    by the ids that reach them: a bare id goes to the first engine listed that has it)."""
    from voicelane.core.engines import engine_installed
    from voicelane.workers.engines import create_engine
    from voicelane.workers.render import AUTO_ENGINE, ENGLISH_ENGINE_PREFERENCE

    settings = _embedded(args)
    names = [settings.engine]
    if settings.engine == AUTO_ENGINE:
        names = [name for name in ENGLISH_ENGINE_PREFERENCE if engine_installed(name)]
    for name in names:
        engine = create_engine(
            name, device=settings.device, chattts=settings.chattts, piper=settings.piper
        )
        for voice in engine.voices():
            languages = ",".join(voice.languages)
            if args.language and not any(
                lang.startswith(args.language) for lang in voice.languages
            ):
                continue
            print(f"{voice.id:24} {name:8} {languages:16} {voice.name}")
    return 0


def _cmd_worker(args: argparse.Namespace, _cli: CliSettings) -> int:
    from voicelane.core.settings import WorkerSettings
    from voicelane.workers.runtime import run_worker

    settings = WorkerSettings(
        **_given(args, engine="engine", device="device", concurrency="concurrency", queues="queues")
    )
    logging.getLogger().setLevel(logging.INFO)
    return run_worker(settings, hostname=args.hostname)


def _cmd_api(args: argparse.Namespace, _cli: CliSettings) -> int:
    import uvicorn

    from voicelane.api.rest import create_app
    from voicelane.api.ws_protocol import guarded_protocol
    from voicelane.core.settings import ApiSettings

    settings = ApiSettings(**_given(args, host="host", port="port"))
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level="info",
        access_log=False,
        ws=guarded_protocol(settings.websocket_preauth_max_bytes),
        ws_max_size=settings.websocket_max_message_bytes,
    )
    return 0


def _cmd_grpc(args: argparse.Namespace, _cli: CliSettings) -> int:
    from voicelane.api.grpc_front import run_grpc
    from voicelane.core.settings import GrpcSettings

    settings = GrpcSettings(**_given(args, host="grpc_host", port="grpc_port"))
    logging.getLogger().setLevel(logging.INFO)
    run_grpc(settings)
    return 0


def _cmd_wyoming(args: argparse.Namespace, _cli: CliSettings) -> int:
    from voicelane.api.wyoming_front import run_wyoming
    from voicelane.core.settings import WyomingSettings

    settings = WyomingSettings(**_given(args, host="wyoming_host", port="wyoming_port"))
    logging.getLogger().setLevel(logging.INFO)
    run_wyoming(settings)
    return 0


def _cmd_flower(args: argparse.Namespace, _cli: CliSettings) -> int:
    from voicelane.api.flower import run_flower
    from voicelane.core.settings import FlowerSettings

    settings = FlowerSettings(**_given(args, port="flower_port"))
    run_flower(settings)
    return 0


def _cmd_up(args: argparse.Namespace, _cli: CliSettings) -> int:
    from voicelane.api.stack import run_stack
    from voicelane.core.settings import StackSettings

    settings = StackSettings(**({"engines": args.engines} if args.engines else {}))
    return run_stack(
        settings,
        Path(args.state_dir),
        pidfile=Path(args.pidfile) if args.pidfile else None,
        llm_standin=args.llm_standin or args.llm == "standin",
        llm_local=args.llm == "local",
    )


def _cmd_redis(args: argparse.Namespace, _cli: CliSettings) -> int:
    import signal

    from voicelane.core.redis_server import RedisServer
    from voicelane.core.settings import RedisSettings

    budget = RedisSettings().redis_maxmemory_bytes
    server = RedisServer(args.dir, port=args.port, maxmemory_bytes=budget).start()
    print(f"redis-server on {server.url} (AOF in {args.dir}); Ctrl-C stops it", flush=True)
    stop = __import__("threading").Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def _cmd_jobs_submit(args: argparse.Namespace, cli: CliSettings) -> int:
    api_key = _api_key(args, cli)
    source = Path(args.input)
    if not source.is_file():
        raise InvalidInputError(f"{args.input}: no such file")
    subtitles = Path(args.subtitles) if args.subtitles else None
    subtitles_format = None
    if subtitles is not None:
        from voicelane.core.subtitles import parse_subtitle_format

        suffix = subtitles.suffix.lstrip(".").lower()
        subtitles_format = parse_subtitle_format(args.subtitles_format or suffix or "vtt")
    return _submit_and_fetch(
        args.server or cli.server,
        api_key,
        source,
        Path(args.output) if args.output else None,
        voice=args.voice,
        fmt=args.format,
        timeout_s=args.timeout,
        text_fields={
            "normalize": None if args.normalize else False,
            "ssml": True if args.ssml else None,
            "lexicons": _lexicon_names(args),
            "input_format": args.input_format,
            "split_chapters": True if args.split_chapters else None,
        },
        subtitles=(subtitles, subtitles_format) if subtitles and subtitles_format else None,
    )


def _submit_and_fetch(
    server: str,
    api_key: str,
    source: Path,
    output: Path | None,
    *,
    voice: str | None,
    fmt: str | None,
    timeout_s: float,
    text_fields: dict[str, Any] | None = None,
    subtitles: tuple[Path, str] | None = None,
) -> int:
    """Upload ``source`` as a job (any format the server reads: text, Markdown, HTML, SSML,
    EPUB), show its progress, print its link, download it (and its subtitles)."""
    from voicelane.client import JobsClient
    from voicelane.common.atomic import atomic_output
    from voicelane.common.errors import RemoteError

    client = JobsClient(server, api_key)
    try:
        job = client.submit_file(source, voice=voice, format=fmt, **(text_fields or {}))
        print(f"submitted job {job['id']} ({job['characters']} characters)")
        job = client.wait(job["id"], timeout_s=timeout_s, out=sys.stderr)
        if job["state"] != "done":
            raise RemoteError(
                "FAILED_PRECONDITION", f"job {job['id']} {job['state']}: {job.get('error')}"
            )
        url = job["download_url"]
        print(f"download link (valid {job['download_expires_in_s']} s): {url}")
        if output is not None:
            size = client.download(url, output)
            print(
                f"{output}: {job['output']['duration_s']:.1f} s of audio, {size:,} bytes, "
                f"sha256 {job['output']['sha256'][:16]}..."
            )
        if subtitles is not None:
            target, subtitles_format = subtitles
            data = client.subtitles(job["id"], subtitles_format)
            with atomic_output(target) as part:
                part.write_bytes(data)
            print(f"{target}: {subtitles_format} subtitles, {len(data):,} bytes")
        return 0
    finally:
        client.close()


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", required=True, help="the audio file to write")
    parser.add_argument("--voice", help="voice id (see `voicelane voices`); default: auto")
    parser.add_argument("--format", help="ogg, mp3, wav or flac; default: from the extension")
    parser.add_argument(
        "--sample-rate", type=int, metavar="HZ", help="output sample rate; default 24000"
    )
    parser.add_argument(
        "--speed", type=float, default=1.0, help="speaking rate multiplier; default 1.0"
    )
    parser.add_argument("--engine", help="engine name; default espeak")
    parser.add_argument(
        "--words",
        metavar="FILE",
        help="also write the word timings as JSON (text, start_ms, end_ms, char_start, char_end)",
    )
    parser.add_argument(
        "--marks", metavar="FILE", help="also write the SSML marks' times as JSON (name, time_ms)"
    )
    _add_text_options(parser)


def _add_reading_options(parser: argparse.ArgumentParser) -> None:
    """``--no-normalize`` and ``--ssml``: how the text is read, on every command that takes
    one."""
    parser.add_argument(
        "--no-normalize",
        dest="normalize",
        action="store_false",
        help="hand numbers, dates and symbols to the engine as written (docs/text.md)",
    )
    parser.add_argument(
        "--ssml", action="store_true", help="the text is SSML (default: when it starts <speak)"
    )


def _add_text_options(parser: argparse.ArgumentParser) -> None:
    _add_reading_options(parser)
    parser.add_argument(
        "--lexicon",
        action="append",
        metavar="FILE",
        help="a pronunciation lexicon (W3C PLS or JSON) to apply; may be repeated",
    )


def _add_lexicon_names(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lexicons",
        metavar="NAMES",
        help='through a server: the tenant\'s lexicons to apply, comma-separated ("": none); '
        "default: the tenant's default lexicon",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Self-hosted speech rendering.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    render = commands.add_parser("render", help="render a text file to an audio file")
    render.add_argument("input", metavar="INPUT", help="UTF-8 text file, or - for stdin")
    _add_output_options(render)
    render.set_defaults(handler=_cmd_render)

    text = commands.add_parser(
        "text", help="print what the engine will be given for a text (nothing is spoken)"
    )
    text.add_argument("text", metavar="TEXT", nargs="?", default="-", help="the text, or - (stdin)")
    text.add_argument("--engine", help="whose alphabet: espeak (default) or chattts")
    text.add_argument("--json", action="store_true", help="segments with their spans, as JSON")
    _add_text_options(text)
    text.set_defaults(handler=_cmd_text)

    say = commands.add_parser(
        "say", help="render one piece of text to an audio file (or stream it with --server)"
    )
    say.add_argument("text", metavar="TEXT")
    _add_output_options(say)
    say.add_argument("--server", metavar="HOST:PORT", help="stream through a gRPC front")
    say.add_argument("--key", help="API key for --server (default: $VOICELANE_API_KEY)")
    _add_lexicon_names(say)
    say.set_defaults(handler=_cmd_say)

    chat = commands.add_parser(
        "chat", help="ask the server's LLM; its reply is spoken into an audio file (gRPC Chat)"
    )
    chat.add_argument("message", metavar="MESSAGE", help="what the user says")
    chat.add_argument("-o", "--output", required=True, help="audio file (.wav, .ogg, .mp3, ...)")
    chat.add_argument("--server", required=True, metavar="HOST:PORT", help="a gRPC front")
    chat.add_argument("--key", help="API key (default: $VOICELANE_API_KEY)")
    chat.add_argument("--model", default="", help="Ollama model; default: the server's")
    chat.add_argument("--voice", default="", help="voice id; default auto")
    chat.add_argument("--system", default="", help="a system prompt")
    chat.set_defaults(handler=_cmd_chat)

    voices = commands.add_parser("voices", help="list the voices")
    voices.add_argument("--engine", help="engine name; default espeak")
    voices.add_argument("--language", help="only voices whose language starts with this")
    voices.set_defaults(handler=_cmd_voices)

    worker = commands.add_parser(
        "worker", help="run a lane worker (GPU: render; CPU: control,assemble; callbacks)"
    )
    worker.add_argument(
        "--queues", help="comma-separated: render (default), control,assemble, or callbacks"
    )
    worker.add_argument("--engine", help="engine for a render worker (default espeak)")
    worker.add_argument("--device", help="cpu or cuda:N")
    worker.add_argument("--concurrency", type=int, help="Celery threads (chunks in flight)")
    worker.add_argument("--hostname", help="worker name shown in Flower")
    worker.set_defaults(handler=_cmd_worker)

    api = commands.add_parser("api", help="run the REST API (port 8000)")
    api.add_argument("--host")
    api.add_argument("--port", type=int)
    api.set_defaults(handler=_cmd_api)

    grpc_cmd = commands.add_parser("grpc", help="run the gRPC front of the real-time lane")
    grpc_cmd.add_argument("--host")
    grpc_cmd.add_argument("--port", type=int)
    grpc_cmd.set_defaults(handler=_cmd_grpc)

    wyoming = commands.add_parser(
        "wyoming", help="run the Wyoming protocol server (Home Assistant; port 10200)"
    )
    wyoming.add_argument("--host")
    wyoming.add_argument("--port", type=int)
    wyoming.set_defaults(handler=_cmd_wyoming)

    flower = commands.add_parser("flower", help="run Flower (read-only, basic auth; port 5555)")
    flower.add_argument("--port", type=int)
    flower.set_defaults(handler=_cmd_flower)

    up = commands.add_parser("up", help="run the whole stack locally; Ctrl-C stops it")
    up.add_argument("--state-dir", default=".voicelane", help="Redis AOF, storage, logs")
    up.add_argument("--pidfile", help="write this process's pid here (make stop uses it)")
    up.add_argument(
        "--engines",
        help="the engines to serve, in order of preference (e.g. piper,espeak; default: "
        "$VOICELANE_ENGINES, else $VOICELANE_ENGINE): render workers start for each",
    )
    up.add_argument(
        "--llm-standin",
        action="store_true",
        help="also run the stand-in Ollama server of the tests (when no Ollama is reachable) "
        "and point the fronts' LLM lane at it; run from the repository root",
    )
    up.add_argument(
        "--llm",
        choices=["local", "standin"],
        help="also run an LLM and point the fronts' LLM lane at it: local: llama.cpp's server "
        "with SmolLM2-135M (a real model, CPU; the llm extra); standin: as --llm-standin",
    )
    up.set_defaults(handler=_cmd_up)

    redis_cmd = commands.add_parser("redis", help="run redis-server with AOF and noeviction")
    redis_cmd.add_argument("--port", type=int, default=6379)
    redis_cmd.add_argument("--dir", default=".voicelane/redis")
    redis_cmd.set_defaults(handler=_cmd_redis)

    jobs = commands.add_parser("jobs", help="batch jobs on a running stack")
    job_commands = jobs.add_subparsers(dest="jobs_command", required=True, parser_class=_Parser)
    submit = job_commands.add_parser("submit", help="submit a text file, wait, download")
    submit.add_argument("input", metavar="FILE")
    submit.add_argument("-o", "--output", help="download the audio here when done")
    submit.add_argument(
        "--server", help="the REST API (default: $VOICELANE_SERVER, else http://127.0.0.1:8000)"
    )
    submit.add_argument("--key", help="API key (default: $VOICELANE_API_KEY)")
    submit.add_argument("--voice")
    submit.add_argument("--format")
    submit.add_argument("--timeout", type=float, default=600.0, help="seconds to wait")
    submit.add_argument(
        "--subtitles",
        metavar="FILE",
        help="also download the subtitles here (format from the extension: .vtt, .srt, .json)",
    )
    submit.add_argument("--subtitles-format", choices=("vtt", "srt", "json"))
    submit.add_argument(
        "--input-format",
        choices=("text", "markdown", "html", "ssml", "epub"),
        help="what FILE is (default: told by the server from its content and name)",
    )
    submit.add_argument(
        "--split-chapters", action="store_true", help="also one audio file per chapter"
    )
    _add_reading_options(submit)
    _add_lexicon_names(submit)
    submit.set_defaults(handler=_cmd_jobs_submit)
    return parser


def _fail(message: str, status: int) -> int:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return status


def _bad_setting(error: Exception) -> str | None:
    """One line for settings that do not validate (pydantic), naming the variable."""
    from pydantic import ValidationError

    from voicelane.core.settings import variable_name

    if not isinstance(error, ValidationError):
        return None
    first = error.errors()[0]
    message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    return f"bad setting {variable_name(first.get('loc', ()))}: {message}"


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    debug = False
    try:
        from voicelane.core.settings import CliSettings

        cli = CliSettings()
        debug = cli.debug
        status: int = args.handler(args, cli)
    except VoicelaneError as error:
        return _fail(error.message, exit_status(error))
    except KeyboardInterrupt:
        return _fail("interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:
        return 1
    except Exception as error:
        if debug:
            raise
        if (setting := _bad_setting(error)) is not None:
            return _fail(setting, 2)
        return _fail(f"internal error: {type(error).__name__}: {error}", 1)
    return status


if __name__ == "__main__":
    sys.exit(main())
