# magrpo: every target that runs code depends on `setup`, so each is complete on a fresh clone.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
TORCH_VERSION ?= 2.13.0
# The index of the torch build `make setup` installs: the CPU build by default (about 200 MB; on Linux
# the public index's default is the CUDA build, several GB). pip's own indexes are used when they give
# that build already (`+cpu`, as some machines' pip settings do); else this index is added. Empty:
# pip's own default build (the CUDA build on Linux); .../whl/cu128: that CUDA build (docs/install.md).
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
ifneq ($(TORCH_INDEX),)
TORCH_FROM = $$($(PIP) install -q --dry-run --no-deps --ignore-installed --report - torch==$(TORCH_VERSION) 2>/dev/null \
	| grep -q '"version": "$(TORCH_VERSION)+$(notdir $(TORCH_INDEX))"' || echo --extra-index-url $(TORCH_INDEX))
endif
STAMP := $(VENV)/.installed
ARGS ?=
RUNS ?= $(wildcard outputs multirun)
OUT ?= outputs/table
TABLE ?= writing
SCALE ?= paper
SEEDS ?= 0,1,2
JOBS ?= 2
TUNE ?= 0
TEST_WORKERS ?= 2

.DEFAULT_GOAL := help
.PHONY: help setup train test typecheck test-slow test-gpu bench bench-compare real-shapes sweep table paper dashboard crossplay export docs docs-check docs-serve docs-tables lint clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'
	@echo "  pass options with ARGS='...', e.g. make train ARGS='task=tldr seed=1'"

setup: $(STAMP) ## create .venv: torch (the CPU build; TORCH_INDEX= for pip's default) first, then the package with dev extras

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first and pinned, so no dependency pulls another build: TORCH_INDEX's (above)
	$(PIP) install -q torch==$(TORCH_VERSION) $(TORCH_FROM)
	$(PIP) install -q -e '.[dev]'
	touch $(STAMP)

train: setup ## train with the embedded default (tiny agents, length_ratio); ARGS= for overrides
	$(VENV)/bin/magrpo-train $(ARGS)

test: setup typecheck ## the type check, then the test suite, TEST_WORKERS=2 processes (pytest-xdist; 0 runs it in this one)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal $(ARGS)

typecheck: setup ## mypy over magrpo/ ([tool.mypy] in pyproject.toml)
	$(PY) -m mypy

test-slow: setup ## slow checks: multi-seed learning, fresh-clone set-up, the Ray launcher
	$(PIP) install -q -e '.[dev,ray]'
	$(PY) -m pytest -q -m slow $(ARGS)

test-gpu: setup ## the CUDA paths (tests/test_gpu.py) on this machine's GPU; skipped without one
	$(PY) -m pytest -q -m gpu $(ARGS)

bench: setup ## throughput of MAGRPO on the builtin "small" model (docs/benchmarks.md)
	$(PY) scripts/bench.py --model builtin:small --agents 2 --prompts 32 --batch 8 --gens 4 --tokens 64 --threads 1 $(ARGS)

bench-compare: setup ## MAGRPO vs a bare generate+update loop vs comlrl 1.4.3, one thread each
	$(PIP) install -q -e '.[dev,bench]'
	$(PY) scripts/bench.py --model builtin:small --agents 2 --prompts 32 --batch 8 --gens 4 --tokens 64 --mode compare --threads 1 $(ARGS)

real-shapes: setup ## a LoRA step, eval, checkpoint and resume at the real 1.7B/3B dimensions (random weights; ARGS='--cases 1.7b-lora')
	$(PY) scripts/real_shapes.py $(ARGS)

sweep: setup ## an example multirun sweep: 3 seeds x 2 advantage estimators
	$(VENV)/bin/magrpo-train -m seed=0,1,2 algo.advantage=mean,rloo $(ARGS)

table: setup ## tables (md/csv/tex) and learning curves from run directories: RUNS=... OUT=...
	$(VENV)/bin/magrpo-table $(RUNS) --out $(OUT) $(ARGS)

paper: setup ## one table of the paper: TABLE=writing|coding|maporl|coordination SCALE=paper|tiny SEEDS=0,1,2 JOBS=2 TUNE=0
	$(PY) -m magrpo.cli.paper $(TABLE) --scale $(SCALE) --seeds $(SEEDS) --jobs $(JOBS) --tune-trials $(TUNE) $(ARGS)

dashboard: setup ## a W&B workspace comparing one sweep's runs: PROJECT=... GROUP=... (ARGS='--out spec.json' offline)
	@test -n "$(PROJECT)" -a -n "$(GROUP)" || { echo 'make dashboard: give PROJECT=<W&B project> GROUP=<sweep group> (ARGS="--out spec.json" writes the spec without W&B)'; exit 2; }
	$(VENV)/bin/magrpo-dashboard --project $(PROJECT) --group $(GROUP) $(ARGS)

crossplay: setup ## pair agents across runs or exported teams: SOURCES="RUN_A RUN_B ..." OUT=...
	@test -n "$(SOURCES)" || { echo 'make crossplay: give SOURCES="RUN_A RUN_B ..." (runs or exported teams)'; exit 2; }
	$(VENV)/bin/magrpo-crossplay $(SOURCES) --out $(if $(filter outputs/table,$(OUT)),outputs/crossplay,$(OUT)) $(ARGS)

export: setup ## one run as a team directory: RUN=outputs/train/<run> OUT=exports/<name>
	@test -n "$(RUN)" || { echo 'make export: give RUN=<run dir> OUT=<team dir>'; exit 2; }
	$(VENV)/bin/magrpo-export $(RUN) $(if $(filter outputs/table,$(OUT)),exports/$(notdir $(RUN)),$(OUT)) $(ARGS)

docs: setup ## build the docs site into site/ (mkdocs --strict: a broken link or a stale table fails)
	$(PY) scripts/docs_tables.py --check
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

docs-check: docs ## open every page of the built site in headless Chromium: pages load, math typeset, images load
	$(PY) scripts/check_site.py --site site

docs-serve: setup ## serve the docs site at http://127.0.0.1:8000, rebuilt on every change
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

docs-tables: setup ## regenerate docs/reference/ from conf/, the registries and the schemas
	$(PY) scripts/docs_tables.py

lint: setup ## ruff
	$(VENV)/bin/ruff check magrpo scripts tests

clean: ## remove run outputs (not the venv)
	rm -rf outputs multirun site
