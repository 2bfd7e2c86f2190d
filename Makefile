# Entry points: make serve | site | test | fast | bench | help
# Every target sets up .venv on first use; nothing is needed beforehand.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
HOST := 127.0.0.1:8000
# torch's CPU wheels (the +cpu pin in constraints.txt) are served here,
# not on PyPI; used only when pip's own sources lack that wheel.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# Material 9.7+ prints a notice about MkDocs 2.0 on every build; this
# project pins mkdocs<2 on purpose (2.0 drops plugins), so it is noise.
export NO_MKDOCS_2_WARNING := 1

.PHONY: help serve site test fast bench setup browser generate doctest \
	lint clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | \
	  awk -F':.*## ' '{printf "  make %-9s %s\n", $$1, $$2}'

# ------------------------------------------------------------ entry points

serve: generate ## generate, then serve at http://127.0.0.1:8000 (reloads)
	$(PY) -m mkdocs serve --strict -a $(HOST)

site: generate doctest ## generate, run the doctests, build site/ strictly
	MHA_REF_SKIP_GENERATION=1 $(PY) -m mkdocs build --strict

test: site browser ## build the site, then run every test (browser too)
	$(PY) -m pytest

fast: $(STAMP) ## the quick checks while writing (no build, no browser)
	$(PY) -m pytest -m "not browser and not build" -x -q

bench: $(STAMP) ## benchmarks: build times, page load, implementations
	$(PY) -m scripts.bench

# ------------------------------------------------------------- the steps

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# constraints.txt pins every version tested. torch first, alone: from
	# pip's own sources when they hold the +cpu wheel, else its CPU index;
	# then the rest, whose indexes need not know +cpu.
	$(PY) -m pip install -q -c constraints.txt --no-deps torch 2>/dev/null \
	  || $(PY) -m pip install -q -c constraints.txt --no-deps \
	       $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) torch
	$(PY) -m pip install -q -c constraints.txt -e '.[docs,dev]'
	touch $@

setup: $(STAMP) ## create .venv and install the pinned packages

browser: ## install Debian's chromium for the browser tests, if missing
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -q && apt-get install -y -q chromium) >/dev/null; \
	  else \
	    echo "no chromium: browser tests will skip (apt install chromium)"; \
	  fi; }

generate: $(STAMP) ## compute every number, table and figure (cached)
	$(PY) -m scripts.build

doctest: $(STAMP) ## run the docstring examples the pages show
	$(PY) -m pytest -q -p no:cacheprovider --doctest-modules mha_ref

lint: $(STAMP) ## check the code style with ruff
	$(PY) -m ruff check mha_ref scripts tests

clean: ## remove built and generated files (keeps .venv)
	rm -rf site docs/generated .cache build
