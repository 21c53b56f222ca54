#!/usr/bin/env bash
# The third-party clients the integration tests drive (LiveKit, Pipecat, wyoming-bench...),
# each in a virtual environment of its own under .venv/clients/NAME: their pins conflict with
# the server's (pipecat-ai and livekit-agents want protobuf 6; the committed gRPC code needs 7),
# and some tests need two versions of one framework side by side. One environment per
# requirements file tests/clients/venvs/NAME.txt (which may name ./integrations/... plugins,
# installed from this checkout). Idempotent: an environment is rebuilt only when its
# requirements file (or a plugin it installs) changed.
set -euo pipefail

PYTHON=${PYTHON:-python3}
root=$(cd "$(dirname "$0")/.." && pwd)
base=${VENV:-.venv}/clients
mkdir -p "$base"

for requirements in "$root"/tests/clients/venvs/*.txt; do
    [ -e "$requirements" ] || continue
    name=$(basename "$requirements" .txt)
    venv="$base/$name"
    # The requirements and every plugin they install from this checkout decide the stamp.
    plugins=$(grep -oE '^\./integrations/[A-Za-z0-9_-]+' "$requirements" || true)
    digest=$( { cat "$requirements"; for p in $plugins; do
        find "$root/$p" -type f \( -name '*.py' -o -name '*.toml' \) -print0 | sort -z | xargs -0 cat;
    done; } | sha256sum | cut -d' ' -f1)
    stamp="$venv/.installed-$digest"
    if [ -f "$stamp" ]; then
        continue
    fi
    echo "installing client environment $name into $venv"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade "pip>=23.1"
    (cd "$root" && "$venv/bin/python" -m pip install --quiet -r "$requirements")
    touch "$stamp"
done
