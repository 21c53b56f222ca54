#!/usr/bin/env bash
# Fetch, on a machine WITH network, the wheels that bench/gpu/run.sh installs on a GPU machine
# WITHOUT network (only the repository is copied there; see bench/gpu/README.md).
#
#   bench/gpu/fetch-wheels.sh [DIR]          # DIR defaults to .whl (repo root)
#
# It fetches only what the GPU image lacks (its python3 already has torch, torchaudio,
# transformers, tokenizers, safetensors, numpy, numba, scipy, einops, huggingface-hub, tqdm,
# pyyaml, requests): ChatTTS and its model libraries, and pydantic for our settings. Versions
# are those of this checkout's .venv (scripts/install-chattts.sh installs them), for CPython
# $PY_VERSION (3.12 by default) on manylinux x86_64. Pure-Python packages without a wheel on
# PyPI (chattts, encodec) are built into wheels here. About 5 MB.
set -euo pipefail
cd "$(dirname "$0")/../.."

DIR=${1:-.whl}
VENV_PY=${VENV_PY:-.venv/bin/python}
PY_VERSION=${PY_VERSION:-3.12}
mkdir -p "$DIR"

version() { "$VENV_PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }

# Pure Python: a wheel from PyPI, or one built here from the sdist.
pure=(chattts vocos encodec vector-quantize-pytorch einx loguru torch-einops-utils
      pydantic pydantic-settings python-dotenv annotated-types typing-inspection pycparser
      prometheus-client)
# Compiled: the CPython $PY_VERSION manylinux wheel.
binary=(pybase16384 cffi pydantic-core frozendict)

pins=()
for name in "${pure[@]}"; do pins+=("$name==$(version "$name")"); done
"$VENV_PY" -m pip wheel --quiet --no-deps --wheel-dir "$DIR" "${pins[@]}"

platforms=()
for n in 17 27 28 34; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64)
for name in "${binary[@]}"; do
    "$VENV_PY" -m pip download --quiet --no-deps --only-binary=:all: \
        --python-version "$PY_VERSION" --implementation cp "${platforms[@]}" \
        --dest "$DIR" "$name==$(version "$name")"
done
echo "fetch-wheels: $(ls "$DIR"/*.whl | wc -l) wheels, $(du -sh "$DIR" | cut -f1) in $DIR"
