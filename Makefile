# The README's two commands: `make run` and `make test`. Everything else is for developers.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check
# Tests run on the CPU build of torch; on a GPU box: make test TORCH_SPEC='torch==2.13.0' with a CUDA index.
TORCH_SPEC ?= torch==2.13.0
# The versions benchmarks/data/fit_traces was traced with: a newer one re-traces every stored
# fit basis (minutes), so the test environment takes these.
TRACE_PINS ?= transformers==5.24.0 peft==0.21.2

.PHONY: run test test-fast system lint typecheck unit docs gpu bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.stamp-run: pyproject.toml | $(BIN)/python
	$(PIP) install -q -e .
	touch $@

$(VENV)/.stamp-test: pyproject.toml | $(BIN)/python
	$(PIP) install -q "$(TORCH_SPEC)" $(TRACE_PINS)
	$(PIP) install -q -e '.[all,dev]' "$(TORCH_SPEC)" $(TRACE_PINS)
	touch $@ $(VENV)/.stamp-run

run: $(VENV)/.stamp-run
	$(BIN)/dlrig doctor

# System packages first (apt-get as root or with passwordless sudo; otherwise the one command
# to run is printed), so no test is skipped for a missing program.
system:
	.ci/system-packages

test: system $(VENV)/.stamp-test lint typecheck unit docs

lint: $(VENV)/.stamp-test
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/codespell src docs tests/unit tests/cli tests/integration benchmarks README.md CONTRIBUTING.md CHANGELOG.md
	shellcheck .ci/run .ci/system-packages $(wildcard benchmarks/*.sh)

# The documentation site into site/; --strict turns a broken link or a page left out of the
# navigation into a failure.
docs: $(VENV)/.stamp-test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

typecheck: $(VENV)/.stamp-test
	$(BIN)/mypy

unit: $(VENV)/.stamp-test system
	$(BIN)/pytest

# The inner loop: the in-process unit tests, without the slow tier (processes, real training
# steps, timed I/O); about a minute on 2 cores. `make test` runs every tier.
test-fast: $(VENV)/.stamp-test
	$(BIN)/pytest tests/unit -m "not gpu and not slow"

# Where a GPU is: the CUDA/NVML smoke tests and every GPU figure, into out/gpu-suite/.
gpu: $(VENV)/.stamp-test
	benchmarks/gpu_suite.sh

$(VENV)/.stamp-bench: pyproject.toml $(VENV)/.stamp-test
	$(PIP) install -q -e '.[all,dev,bench]' "$(TORCH_SPEC)" $(TRACE_PINS)
	touch $@

# Every benchmark against its reference (fio for storage, HTA for profile): system packages
# first. Each writes its output to benchmarks/results/<bench>_<machine>_<date>.md.
bench: system $(VENV)/.stamp-bench
	$(BIN)/python benchmarks/doctor_vs_collect_env.py
	$(BIN)/python benchmarks/diagnose_throughput.py
	$(BIN)/python benchmarks/fit_accuracy.py
	$(BIN)/python benchmarks/fit_speed.py
	$(BIN)/python benchmarks/monitor_scrape.py
	$(BIN)/python benchmarks/storage_vs_fio.py
	$(BIN)/python benchmarks/dataloader_search.py
	$(BIN)/python benchmarks/provision_speed.py
	$(BIN)/python benchmarks/plan_speed.py
	$(BIN)/python benchmarks/train_overhead.py
	$(BIN)/python benchmarks/pack_vs_formats.py
	$(BIN)/python benchmarks/pack_fill_contention.py
	$(BIN)/python benchmarks/health_speed.py
	$(BIN)/python benchmarks/profile_hta_agreement.py
	$(BIN)/python benchmarks/profile_speed.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache site
