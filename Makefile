# qassist: `make run` sets up a fresh machine and starts every process; `make test` checks it.
# Every step is idempotent and quick when it has already been done.

SHELL := /bin/bash
comma := ,
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
LLAMA_VERSION := 0.3.36
# pip's own wheel cache ignores CMAKE_ARGS, so the no-AMX build is kept here and pip is never
# allowed to build llama-cpp-python by itself.
WHEEL_DIR ?= $(HOME)/.cache/qassist/wheels/noamx
NOAMX := -mno-amx-int8 -mno-amx-tile -mno-amx-bf16
STAMP := $(VENV)/.installed
MANAGE := $(BIN)/python manage.py

HOST ?= 127.0.0.1
PORT ?= 8000
MODE ?= auto  # auto (Redis when REDIS_URL is set or one answers on 127.0.0.1:6379), redis, embedded
# Several models served at once (issue #36), comma-separated: one inference worker each (Redis
# mode), one engine each in the web process (embedded). The first is the default model.
MODELS ?=
PYTEST_ARGS ?=
BENCH_ARGS ?=

export PIP_DISABLE_PIP_VERSION_CHECK := 1
export HOST PORT

.PHONY: help install check-llama run model fetch-models test test-idp lint bench clean distclean

help:
	@echo "make run           set up this machine (venv, llama.cpp without AMX, database, model"
	@echo "                   qwen2.5-coder-0.5b or QASSIST_MODEL,"
	@echo "                   demo tenant and admin) and start qassist on http://$(HOST):$(PORT)/"
	@echo "                   MODE=embedded forces the no-Redis mode; HOST=, PORT= change the address;"
	@echo "                   MODELS=a,b serves several models, one engine each (the first is the default)"
	@echo "make test          ruff, mypy and pytest (PYTEST_ARGS='-k ...' passes options to pytest);"
	@echo "                   fetches the tests' model (smollm2-135m) and installs the single"
	@echo "                   sign-on tests' identity provider with npm first"
	@echo "make fetch-models  the embedded model and qwen2.5-coder-0.5b (for benchmarks)"
	@echo "make bench         the benchmarks (BENCH_ARGS='...' passes options)"
	@echo "make clean         caches and collected static files (keeps .venv, models and data)"
	@echo "make distclean     clean, and remove .venv too"

# --- Installation ----------------------------------------------------------------------------

install: $(STAMP) check-llama

$(BIN)/python:
	@echo "== creating $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	@if ! ls $(WHEEL_DIR)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1; then \
	  echo "== building llama-cpp-python $(LLAMA_VERSION) without AMX into $(WHEEL_DIR) (about 4 minutes, once per machine)"; \
	  tmp=$$(mktemp -d); \
	  CMAKE_ARGS="-DCMAKE_C_FLAGS='$(NOAMX)' -DCMAKE_CXX_FLAGS='$(NOAMX)'" \
	    $(BIN)/pip wheel --no-cache-dir --no-deps -w "$$tmp" llama-cpp-python==$(LLAMA_VERSION); \
	  mkdir -p $(WHEEL_DIR); \
	  mv "$$tmp"/llama_cpp_python-$(LLAMA_VERSION)-*.whl $(WHEEL_DIR)/; \
	  rm -rf "$$tmp"; \
	fi
	@echo "== installing llama-cpp-python $(LLAMA_VERSION) from $(WHEEL_DIR)"
	@# --no-index: the wheel above or nothing; a build already in the venv is replaced.
	$(BIN)/pip install -q --force-reinstall --no-deps --no-index --find-links $(WHEEL_DIR) \
	  llama-cpp-python==$(LLAMA_VERSION)
	@echo "== installing qassist and its dependencies"
	$(BIN)/pip install -q --find-links $(WHEEL_DIR) -e '.[dev]'
	touch $@

# Cheap (one import), so it runs every time: a venv changed by hand fails here, not at run time.
check-llama: $(STAMP)
	@$(BIN)/python -c "import llama_cpp; assert 'AMX_INT8' not in llama_cpp.llama_print_system_info().decode()" \
	  || { \
	  echo "ERROR: the llama-cpp-python in $(VENV) is missing or was built with AMX." >&2; \
	  echo "qassist needs the build without AMX. To rebuild it:" >&2; \
	  echo "  rm -f $(WHEEL_DIR)/llama_cpp_python-*.whl $(STAMP) && make install" >&2; \
	  exit 1; }

# --- Running ---------------------------------------------------------------------------------

model: install
	$(MANAGE) fetch_model

fetch-models: install
	$(MANAGE) fetch_model smollm2-135m
	$(MANAGE) fetch_model qwen2.5-coder-0.5b

# The model `make run` serves: the 0.5B model answers company questions from the documents
# (bench/rag_eval: 0.66 of them, against 0.25 for smollm2-135m; README, "Models"). The tests
# and the settings' own default stay on smollm2-135m. QASSIST_MODEL=... make run chooses another.
run: export QASSIST_MODEL ?= $(if $(strip $(MODELS)),$(firstword $(subst $(comma), ,$(MODELS))),qwen2.5-coder-0.5b)
run: export QASSIST_MODELS ?= $(strip $(MODELS))
run: install
	@case "$(strip $(MODE))" in auto|redis|embedded) ;; \
	  *) echo "ERROR: MODE must be auto, redis or embedded, not '$(strip $(MODE))'" >&2; exit 1;; esac
	$(MANAGE) fetch_model
	@for model in $(subst $(comma), ,$(MODELS)); do $(MANAGE) fetch_model "$$model"; done
	$(MANAGE) migrate --noinput
	$(MANAGE) collectstatic --noinput --verbosity 0
	$(MANAGE) bootstrap_demo
	@var="$${QASSIST_VAR_DIR:-var}"; mkdir -p "$$var/celery/queue" "$$var/celery/processed" "$$var/celery/control"
	@mode="$(strip $(MODE))"; reason="MODE=$$mode"; \
	if [[ "$$mode" == auto ]]; then \
	  if [[ -n "$${QASSIST_NO_REDIS:-}" ]]; then \
	    mode=embedded; reason="QASSIST_NO_REDIS is set"; \
	  elif [[ -n "$${REDIS_URL:-}" ]]; then \
	    mode=redis; reason="REDIS_URL is set"; \
	  elif $(BIN)/python -c "import redis; redis.Redis(host='127.0.0.1', port=6379, socket_timeout=1, socket_connect_timeout=1).ping()" 2>/dev/null; then \
	    mode=redis; reason="a Redis answers on 127.0.0.1:6379"; \
	    export REDIS_URL=redis://127.0.0.1:6379/0; \
	  else \
	    mode=embedded; reason="REDIS_URL is not set and no Redis answers on 127.0.0.1:6379"; \
	  fi; \
	fi; \
	case "$$mode" in \
	  redis) \
	    export REDIS_URL="$${REDIS_URL:-redis://127.0.0.1:6379/0}"; \
	    shown=$$(sed -E 's#//[^@/]*@#//***@#' <<< "$$REDIS_URL"); \
	    if ! REDIS_URL="$$REDIS_URL" $(BIN)/python -c "import os, redis; redis.Redis.from_url(os.environ['REDIS_URL'], socket_timeout=2, socket_connect_timeout=2).ping()" 2>/dev/null; then \
	      echo "ERROR: Redis at $$shown does not answer; start it, or run: make run MODE=embedded" >&2; \
	      exit 1; \
	    fi; \
	    procfile=Procfile; models="$(strip $(MODELS))"; \
	    echo "== Redis mode ($$reason): REDIS_URL=$$shown"; \
	    if [[ -n "$(strip $(MODELS))" ]]; then \
	      echo "   processes: web (daphne), worker-1.. (an inference engine per model: $(MODELS)), celery, beat"; \
	    else \
	      echo "   processes: web (daphne), worker (the inference engine), celery, beat"; \
	    fi;; \
	  embedded) \
	    export REDIS_URL=; \
	    procfile=Procfile.embedded; models=; \
	    echo "== embedded mode ($$reason): no Redis, the engine runs inside the web process"; \
	    echo "   processes: web (daphne + engine), celery and beat on a filesystem broker";; \
	esac; \
	echo "== qassist on http://$(HOST):$(PORT)/  (health: http://$(HOST):$(PORT)/healthz; Ctrl-C stops all)"; \
	echo "   a process that dies is restarted (back-off 1 s doubling to 30 s); the others keep serving"; \
	export PATH="$(abspath $(BIN)):$$PATH"; \
	exec $(BIN)/python -m qassist.supervise $$procfile --models "$$models"

bench: install
	$(BIN)/python -m bench.run $(BENCH_ARGS)

# --- Checking --------------------------------------------------------------------------------

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

# The identity provider the single sign-on tests start (tests/idp): panva's oidc-provider,
# pinned by its package-lock.json. Without npm it is skipped here and those tests are skipped
# too (CI sets QASSIST_REQUIRE_SERVICES=1, which makes them fail instead).
IDP_DIR := tests/idp
IDP_STAMP := $(IDP_DIR)/node_modules/.installed

test-idp:
	@if ! command -v npm >/dev/null; then \
	  echo "WARNING: npm (Node.js 20) is missing: the single sign-on tests' identity provider is not installed" >&2; \
	elif [[ ! -f $(IDP_STAMP) || $(IDP_DIR)/package-lock.json -nt $(IDP_STAMP) ]]; then \
	  echo "== installing the test identity provider (npm ci in $(IDP_DIR))"; \
	  (cd $(IDP_DIR) && npm ci --no-audit --no-fund --loglevel error) && touch $(IDP_STAMP); \
	fi

# The model the tests run (tests/needs.py), whatever model `make run` serves. Fetched here,
# quick when present. When it cannot be (no network), the tests that need it are skipped with
# fetch_model's reason; with QASSIST_REQUIRE_SERVICES=1 (CI) `make test` fails here instead.
# pytest's exit code 5 (it collected no test) is a failure, never a silent pass.
TEST_MODEL := smollm2-135m

test: lint test-idp
	$(MANAGE) check --fail-level ERROR
	@err=$$(mktemp); trap 'rm -f "$$err"' EXIT; \
	if { $(MANAGE) fetch_model $(TEST_MODEL) 2>&1 1>&3 | tee "$$err" >&2; } 3>&1; then \
	  unset QASSIST_TEST_MODEL_FETCH_ERROR; \
	else \
	  reason=$$(grep -v '^[[:space:]]*$$' "$$err" | tail -n 1 | sed 's/^CommandError: //'); \
	  case "$${QASSIST_REQUIRE_SERVICES:-0}" in \
	    0) echo "WARNING: the tests' model $(TEST_MODEL) could not be fetched: the tests that need it are skipped" >&2; \
	       export QASSIST_TEST_MODEL_FETCH_ERROR="$${reason:-fetch_model failed}";; \
	    *) echo "ERROR: the tests' model $(TEST_MODEL) could not be fetched (QASSIST_REQUIRE_SERVICES is set)" >&2; \
	       exit 1;; \
	  esac; \
	fi; \
	rc=0; $(BIN)/pytest $(PYTEST_ARGS) || rc=$$?; \
	if [[ $$rc -eq 5 ]]; then echo "ERROR: pytest collected no tests" >&2; fi; \
	exit $$rc

# --- Cleaning --------------------------------------------------------------------------------

clean:
	rm -rf .mypy_cache .ruff_cache .pytest_cache build *.egg-info var/staticfiles var/celery
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -print0 | xargs -0 rm -rf

distclean: clean
	rm -rf $(VENV) $(IDP_DIR)/node_modules
