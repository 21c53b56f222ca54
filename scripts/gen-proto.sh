#!/usr/bin/env bash
# Generate the Python code of proto/voicelane/v1/*.proto into client/voicelane/common/wire/.
# The generated code is committed (importable as voicelane.common.wire.*, shipped in the SDK's
# distribution and shared with the server): users need no code generation step. Run this after
# changing a .proto (`make proto`); tests/unit/test_proto.py fails when the committed code is
# stale. OUT (the first argument) is the folder that holds voicelane/common/wire; default client/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-client}
python=${PYTHON:-.venv/bin/python}
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
wire=voicelane/common/wire
mkdir -p "$staging/$wire"
cp proto/voicelane/v1/*.proto "$staging/$wire/"
mkdir -p "$out/$wire"
"$python" -m grpc_tools.protoc -I "$staging" \
    --plugin=protoc-gen-mypy_grpc="$(dirname "$python")/protoc-gen-mypy_grpc" \
    --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" --mypy_grpc_out="$out" \
    "$staging/$wire"/*.proto >/dev/null
[ -f "$out/$wire/__init__.py" ] || printf '"""The wire contract voicelane.v1, generated from proto/ by scripts/gen-proto.sh (do not edit)."""\n' > "$out/$wire/__init__.py"
