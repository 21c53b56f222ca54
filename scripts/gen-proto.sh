#!/usr/bin/env bash
# Generate the Python code of proto/voicelane/v1/*.proto into api/gen/voicelane/v1/.
# The generated code is committed (importable as api.gen.voicelane.v1.*): users need no
# code generation step. Run this after changing a .proto (`make proto`);
# tests/unit/test_proto.py fails when the committed code is stale.
# (Not a top-level `proto` package: that name belongs to proto-plus, which google-cloud
# libraries install.)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.}
python=${PYTHON:-.venv/bin/python}
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
mkdir -p "$staging/api/gen/voicelane/v1"
cp proto/voicelane/v1/*.proto "$staging/api/gen/voicelane/v1/"
mkdir -p "$out/api/gen/voicelane/v1"
"$python" -m grpc_tools.protoc -I "$staging" \
    --plugin=protoc-gen-mypy_grpc="$(dirname "$python")/protoc-gen-mypy_grpc" \
    --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" --mypy_grpc_out="$out" \
    "$staging"/api/gen/voicelane/v1/*.proto >/dev/null
for d in api/gen api/gen/voicelane api/gen/voicelane/v1; do touch "$out/$d/__init__.py"; done
