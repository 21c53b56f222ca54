# The entry points the README names. Each target installs what it needs, idempotently.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SYSTEM_STAMP := $(VENV)/.system-deps
PYTEST_ARGS ?=

.PHONY: all install system-deps demo test lint format bench clean

all: test

# System packages (apt) when missing; re-checked whenever the script changes.
$(SYSTEM_STAMP): scripts/install-system-deps.sh
	PYTHON=$(PYTHON) scripts/install-system-deps.sh
	@mkdir -p $(VENV) && touch $@

system-deps: $(SYSTEM_STAMP)

# The virtual environment with the project (editable) and its dev tools.
$(STAMP): pyproject.toml $(SYSTEM_STAMP)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=23.1"
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

install: $(STAMP)

demo: install
	@mkdir -p out
	$(BIN)/voicelane render examples/sample.txt -o out/sample.ogg

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install
	$(BIN)/python bench/render.py
	$(BIN)/python bench/batcher.py
	$(BIN)/python bench/audio_codecs.py
	$(BIN)/python bench/text_split.py

clean:
	rm -rf $(VENV) out .mypy_cache .ruff_cache .pytest_cache
