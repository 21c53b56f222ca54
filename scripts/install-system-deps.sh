#!/usr/bin/env bash
# Install the Debian packages voicelane needs, only those missing. Idempotent.
#   install-system-deps.sh [EXTRA...]  also installs EXTRA packages (the Makefile adds
#   prometheus for the tests only; packages are installed, their services never started here).
#   libopus0    libopus for the streaming Opus encoder (opuslib loads it with ctypes)
#   opus-tools  opusinfo, which the tests and benchmarks use to validate Ogg Opus files
#   redis-server the broker and job ledger (started by voicelane's own scripts, never as a system service)
#   python3-venv (only when this Python cannot make a virtual environment)
set -euo pipefail

packages=(libopus0 opus-tools redis-server "$@")
python=${PYTHON:-python3}

if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
    echo "voicelane needs Python >= 3.11 (found: $("$python" --version 2>&1))" >&2
    exit 1
fi
if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
    packages+=(python3-venv)
fi

missing=()
for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$package")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null; then
    echo "missing system packages: ${missing[*]} (and no apt-get to install them)" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
