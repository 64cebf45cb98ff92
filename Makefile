# Quick start: `make demo` (set up, fetch the embedded model, run a real agent task)
# and `make test` (set up and run the whole suite).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-all test-versions bench clean openblas sandbox install

$(STAMP): pyproject.toml
	@$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "spec-agent needs Python 3.11 or newer (mlx-lm 0.32 does); run make with PY=python3.11 (or newer)")'
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

setup: $(STAMP) openblas sandbox

# On Linux the MLX CPU wheel links the reference BLAS; Debian's OpenBLAS makes passes over many
# tokens (prefill, speculative verify) far faster (docs/models.md: CPU performance).
# Installed when we are root with apt-get; otherwise spec-agent prints how to get it.
openblas:
	@if [ "$$(uname)" = Linux ] && [ ! -e /usr/lib/$$(uname -m)-linux-gnu/openblas-pthread/libopenblas.so.0 ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas0-pthread >/dev/null) \
	      || echo "warning: could not install libopenblas0-pthread; CPU decoding will be slower"; \
	  else echo "note: install Debian's libopenblas0-pthread for fast CPU decoding (sudo apt-get install libopenblas0-pthread)"; fi; \
	fi

# Shell commands the agent runs are confined with bubblewrap on Linux; without it every shell
# command needs an approval.
sandbox:
	@if [ "$$(uname)" = Linux ] && ! command -v bwrap >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null) \
	      || echo "warning: could not install bubblewrap; shell commands will need approval"; \
	  else echo "note: install bubblewrap to sandbox the agent's shell commands (sudo apt-get install bubblewrap)"; fi; \
	fi

# spec-agent on PATH: a link in $(PREFIX)/bin to this checkout's .venv/bin/spec-agent.
PREFIX ?= $(HOME)/.local
install: setup
	@mkdir -p "$(PREFIX)/bin"
	ln -sf "$(CURDIR)/$(BIN)/spec-agent" "$(PREFIX)/bin/spec-agent"
	@case ":$$PATH:" in *":$(PREFIX)/bin:"*) ;; \
	  *) echo "note: $(PREFIX)/bin is not on your PATH; add it, e.g. export PATH=\"$(PREFIX)/bin:\$$PATH\"";; esac

demo: setup
	$(BIN)/spec-agent models pull
	@bash scripts/demo.sh

# Test processes (pytest-xdist; an idle one takes tests queued for the other): 2 fits the
# 2-core CI machine; TEST_JOBS=0 runs them in pytest's own process, TEST_JOBS=auto one per core.
TEST_JOBS ?= 2

# Like the CLI: OpenBLAS preloaded, and OPENBLAS_CORETYPE from the CPU's flags once a check has
# shown that kernel set computes correctly here (agent/engine/blas.py; the verdict is kept in the
# store as the CLI keeps it); a value you set wins.
test: setup
	$(BIN)/spec-agent models pull
	$(BIN)/spec-agent models pull embedded
	@lib="$$(ls /usr/lib/*-linux-gnu/openblas-pthread/libopenblas.so.0 2>/dev/null | head -1)"; \
	core="$${OPENBLAS_CORETYPE-$$([ -z "$$lib" ] || $(BIN)/python -m agent.engine.blas coretype "$$lib" "$$($(BIN)/python -c 'from agent import store; print(store.home())')/blas-coretype.json")}"; \
	echo "pytest with LD_PRELOAD=$${lib:-none} OPENBLAS_CORETYPE=$${core:-auto}"; \
	env SPEC_AGENT_REQUIRE_EMBEDDED=1 LD_PRELOAD="$$lib" $${core:+OPENBLAS_CORETYPE="$$core"} $(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist worksteal -m "not install and not slow" $(PYTEST_ARGS)

# The slow tests too (the 1.5B pair, sampling exactness at 4000 draws, mlx_lm.server): +3 min.
test-all:
	@$(MAKE) --no-print-directory test PYTEST_ARGS='-m "not install"'

# The install smoke test of every supported Python (pyenv's 3.11-3.13; 3.10 must be refused).
test-versions: setup
	$(BIN)/python -m pytest -q -s -m install tests/test_python_versions.py

bench: setup
	$(BIN)/spec-agent models pull embedded
	$(BIN)/spec-agent bench spec --quick

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
