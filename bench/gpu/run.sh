#!/usr/bin/env bash
# Run the ChatTTS GPU benchmark (bench/gpu/chattts_gpu.py) on a bare GPU machine onto which
# only this repository was copied, with no network.
#
#   bench/gpu/run.sh [chattts_gpu.py arguments]      e.g. --batches 1,8,64 --steps 128 --half
#
# What it expects there:
#   * python3 (or $PYTHON) with torch built for CUDA and torchaudio of the same release, and
#     transformers (>=4.54,<5.40), tokenizers, safetensors, numpy, numba, scipy, einops,
#     huggingface-hub, tqdm, pyyaml, requests. The H200 image's python3 has all of them.
#   * Everything else (ChatTTS 0.2.5, vocos, encodec, vector-quantize-pytorch and their
#     helpers, pybase16384, pydantic + pydantic-settings) as wheels in $WHEELS (default
#     .whl/ in the repository root), made beforehand on a machine with network by
#     bench/gpu/fetch-wheels.sh and carried along. They are installed with --no-index into
#     a scratch directory ($SITE) put first on PYTHONPATH: nothing of the image changes.
#   * It never touches torchaudio's libraries (the CPU-only workaround of
#     scripts/install-chattts.sh is for machines without CUDA).
#
# Output: the tables on standard output; the numbers in $OUT/chattts_gpu.json when $OUT is
# set (the device tool's output folder), else ./chattts_gpu.json. Exit status: the
# benchmark's (1 when a self-check failed), 3 when something it needs is missing.
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
SITE=${SITE:-/tmp/voicelane-site}
RESULT=${OUT:-.}/chattts_gpu.json
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

say() { echo "run.sh: $*" >&2; }

if ! command -v "$PY" >/dev/null; then
    say "no $PY; set PYTHON to a python with CUDA torch"; exit 3
fi
if ! "$PY" -c 'import torch' 2>/dev/null; then
    say "$PY has no torch: use the image's python3 (PYTHON=...), or carry a CUDA torch wheel"
    exit 3
fi
"$PY" - <<'PYEOF' >&2
import sys, torch
print(f"run.sh: python {sys.version.split()[0]}, torch {torch.__version__}, "
      f"CUDA available: {torch.cuda.is_available()}")
PYEOF

MODULES="ChatTTS vocos vector_quantize_pytorch pybase16384 pydantic pydantic_settings prometheus_client transformers tokenizers safetensors numba"
missing() {
    PYTHONPATH="$SITE:${PYTHONPATH:-}" "$PY" - $MODULES <<'PYEOF'
import importlib, sys
gone = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as error:  # ImportError, or a broken native library
        gone.append(f"{name} ({type(error).__name__}: {error})")
print("; ".join(gone))
PYEOF
}

gone=$(missing)
if [ -n "$gone" ]; then
    if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
        say "missing: $gone"
        say "and no wheels in $WHEELS: run bench/gpu/fetch-wheels.sh where there is network, carry $WHEELS"
        exit 3
    fi
    say "installing $(ls "$WHEELS"/*.whl | wc -l) wheels from $WHEELS into $SITE (no index)"
    mkdir -p "$SITE"
    if "$PY" -m pip --version >/dev/null 2>&1; then
        "$PY" -m pip install --quiet --no-index --no-deps --no-compile --disable-pip-version-check \
            --upgrade --target "$SITE" "$WHEELS"/*.whl
    else  # no pip: a wheel is a zip of the package and its metadata
        "$PY" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' \
            "$SITE" "$WHEELS"/*.whl
    fi
    gone=$(missing)
    if [ -n "$gone" ]; then
        say "still missing after installing the wheels: $gone"; exit 3
    fi
fi

export PYTHONPATH="$SITE:$PWD:${PYTHONPATH:-}"
say "running bench/gpu/chattts_gpu.py $*"
set +e
"$PY" bench/gpu/chattts_gpu.py --json "$RESULT" "$@"
status=$?
set -e
say "exit status $status; numbers in $RESULT"
exit $status
