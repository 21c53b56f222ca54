#!/usr/bin/env bash
# What the browser tests (tests/browser) need besides Debian's chromium and chromium-driver
# (the Makefile installs those with install-system-deps.sh): axe-core, pinned, from npm into
# .venv/npm (git-ignored, removed with the venv). Installs npm from Debian only when missing.
# Idempotent: does nothing when the pinned version is already there.
set -euo pipefail

AXE_VERSION=4.14.1
prefix=${VENV:-.venv}/npm
installed="$prefix/node_modules/axe-core/package.json"

if [ -f "$installed" ] && grep -q "\"version\": \"$AXE_VERSION\"" "$installed"; then
    exit 0
fi
if ! command -v npm >/dev/null; then
    PYTHON=${PYTHON:-python3} "$(dirname "$0")/install-system-deps.sh" npm
fi
mkdir -p "$prefix"
echo "installing axe-core $AXE_VERSION into $prefix"
npm install --prefix "$prefix" --no-audit --no-fund --silent "axe-core@$AXE_VERSION"
