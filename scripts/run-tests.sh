#!/usr/bin/env bash
# The suite as `make test` runs it, in two passes (docs/architecture.md, "Tests"):
#   1. every test not marked `slow`, spread over VOICELANE_TEST_WORKERS processes (pytest-xdist,
#      default 2; whole files per process, so a module's fixtures are built once);
#   2. the `slow` ones (chaos runs, failovers, long renders) one at a time, alone on the
#      machine: they start and kill whole stacks and bound how long recovery takes.
# Arguments go to both passes (a path, -k ...). A pass that selects nothing is not a failure;
# both selecting nothing is.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
WORKERS=${VOICELANE_TEST_WORKERS:-2}

parallel=(-m "not slow")
if [ "$WORKERS" -gt 1 ]; then parallel+=(-n "$WORKERS" --dist loadfile); fi

"$PY" -m pytest "${parallel[@]}" "$@"
first=$?
"$PY" -m pytest -m slow "$@"
second=$?

# pytest's 5: no test collected.
if [ "$first" -eq 5 ] && [ "$second" -eq 5 ]; then echo "no test selected" >&2; exit 5; fi
for rc in "$first" "$second"; do
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
done
exit 0
