#!/usr/bin/env bash
# Generate the Python code of proto/voicelane/v1/*.proto into core/wire/.
# The generated code is committed (importable as core.wire.*, shared by the fronts and the
# client SDK): users need no code generation step. Run this after changing a .proto
# (`make proto`); tests/unit/test_proto.py fails when the committed code is stale.
# (Not a top-level `proto` package: that name belongs to proto-plus, which google-cloud
# libraries install.)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.}
python=${PYTHON:-.venv/bin/python}
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
mkdir -p "$staging/core/wire"
cp proto/voicelane/v1/*.proto "$staging/core/wire/"
mkdir -p "$out/core/wire"
"$python" -m grpc_tools.protoc -I "$staging" \
    --plugin=protoc-gen-mypy_grpc="$(dirname "$python")/protoc-gen-mypy_grpc" \
    --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" --mypy_grpc_out="$out" \
    "$staging"/core/wire/*.proto >/dev/null
[ -f "$out/core/wire/__init__.py" ] || printf '"""The wire contract voicelane.v1, generated from proto/ by scripts/gen-proto.sh (do not edit)."""\n' > "$out/core/wire/__init__.py"
