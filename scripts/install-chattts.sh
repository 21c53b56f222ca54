#!/usr/bin/env bash
# Install the `chattts` extra (torch, ChatTTS, transformers, requests) into .venv. Idempotent.
#
#   scripts/install-chattts.sh            # VENV=.venv by default
#
# * torch is pinned (2.13.0, as in pyproject.toml) in the same pip command, so on a machine
#   that has the CPU wheel on its local disk (pip's find-links) pip takes that wheel instead of
#   pulling a CUDA build of several GB.
# * On machines WITHOUT CUDA only (no `nvidia-smi`, or torch.cuda.is_available() is false):
#   PyPI's torchaudio (pulled by vocos) is a CUDA build whose .so files fail to load beside
#   CPU torch, and `import ChatTTS` then fails. Removing the .so files in torchaudio/lib makes
#   torchaudio fall back to pure Python; the one thing ChatTTS uses from it (MelSpectrogram)
#   works that way. The script says what it removed. On CUDA machines nothing is touched.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PY="$VENV/bin/python"
TORCH_VERSION=2.13.0

if [ ! -x "$PY" ]; then
    echo "install-chattts: no $PY; run \`make install\` first" >&2
    exit 1
fi

# pip is idempotent: with everything installed it only checks (a few seconds).
echo "install-chattts: pip install -e '.[chattts]' torch==$TORCH_VERSION into $VENV"
"$PY" -m pip install --quiet -e ./client -e '.[chattts]' "torch==$TORCH_VERSION"

has_cuda() {
    command -v nvidia-smi >/dev/null 2>&1 || return 1
    "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null
}

if has_cuda; then
    echo "install-chattts: CUDA found; torchaudio left as installed"
else
    lib_dir=$("$PY" - <<'EOF'
import importlib.util, pathlib
spec = importlib.util.find_spec("torchaudio")
print(pathlib.Path(spec.origin).parent / "lib" if spec and spec.origin else "")
EOF
    )
    removed=0
    if [ -n "$lib_dir" ] && [ -d "$lib_dir" ]; then
        while IFS= read -r -d '' so_file; do
            rm -f -- "$so_file"
            echo "install-chattts: no CUDA: removed $so_file (torchaudio falls back to pure Python)"
            removed=$((removed + 1))
        done < <(find "$lib_dir" -maxdepth 1 -name '*.so*' -print0)
    fi
    if [ "$removed" -eq 0 ]; then
        echo "install-chattts: no CUDA: torchaudio CPU workaround already applied"
    fi
fi

# The check that matters: ChatTTS imports (torchaudio's workaround included).
"$PY" -c 'import ChatTTS, torch; print(f"install-chattts: ok (torch {torch.__version__}, CUDA available: {torch.cuda.is_available()})")'
