#!/usr/bin/env bash
# Debian's Prometheus (2.42) for the tests that prove the dashboard and alert rules against a
# real Prometheus (tests/integration/test_prometheus.py). Only `make test` installs it; the
# service is never started: the tests run their own, on a free port. Idempotent.
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "prometheus is missing (and no apt-get to install it)" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "installing system package: prometheus"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# The package enables a system service where systemd runs; the tests need none of it.
if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
    $sudo systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
