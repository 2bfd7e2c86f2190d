# Entry points: make serve | site | test | fast | bench | help
# MkDocs is the default engine; Zensical builds the same site too:
# make site-zensical (site-zensical/) and make serve-fast.
# Every target sets up .venv on first use; nothing is needed beforehand.
# Generation has one owner: these targets run `python -m pipeline` before
# MkDocs builds or serves; MkDocs itself never runs it.

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

.PHONY: help serve site test fast bench setup browser generate lint \
	format clean site-zensical serve-fast zensical-config

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | \
	  awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

# ------------------------------------------------------------ entry points

serve: generate ## generate, then serve at http://127.0.0.1:8000 (reloads)
	@echo "after editing mha_ref/ or topics/, run 'make generate' in" \
	  "another terminal: the server reloads on docs/generated/"
	$(PY) -m mkdocs serve --strict -a $(HOST)

site: generate ## generate, build site/ strictly, typeset its math
	$(PY) -m mkdocs build --strict
	$(PY) -m pipeline.postbuild site

site-zensical: generate zensical-config ## the same site with Zensical
	$(PY) -m zensical build --strict -f zensical.yml
	$(PY) -m pipeline.postbuild site-zensical

serve-fast: generate zensical-config ## Zensical's live preview (127.0.0.1:8000)
	@echo "Zensical's server: prose edits reload fast; no --strict there"
	$(PY) -m zensical serve -f zensical.yml -a $(HOST)

test: site site-zensical browser ## build both sites, run every test
	$(PY) -m pytest
	# the browser checks again, on the Zensical build
	MHA_REF_SITE=site-zensical $(PY) -m pytest -q -m browser tests/browser

fast: generate ## the quick checks while writing (no site, no browser)
	$(PY) -m pytest -x -q -m "not build" tests/unit tests/docs mha_ref

bench: $(STAMP) ## benchmarks: build times, page load, implementations
	$(PY) -m bench

lint: $(STAMP) ## ruff check and ruff format --check (CI runs this)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(STAMP) ## apply ruff format and ruff's fixes
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

# ------------------------------------------------------------- the steps

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# constraints.txt pins every version tested. torch first, alone: from
	# pip's own sources when they hold the +cpu wheel, else its CPU index;
	# then the rest, whose indexes need not know +cpu.
	$(PY) -m pip install -q -c constraints.txt --no-deps torch \
	  || { echo "trying torch's CPU index $(TORCH_INDEX)"; \
	       $(PY) -m pip install -q -c constraints.txt --no-deps \
	         $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) torch; }
	$(PY) -m pip install -q -c constraints.txt -e '.[docs,dev]'
	touch $@

setup: $(STAMP) ## create .venv and install the pinned packages

browser: ## install Debian's chromium for the browser tests, if missing
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -q && apt-get install -y -q chromium; \
	  else \
	    echo "no chromium: browser tests will skip (apt install chromium)"; \
	  fi; }

generate: $(STAMP) ## compute every number, table and figure (cached)
	$(PY) -m pipeline

# zensical.yml: mkdocs.yml with Zensical's few changes (pipeline/zensical.py)
zensical-config: $(STAMP)
	$(PY) -m pipeline.zensical

clean: ## remove built and generated files (keeps .venv)
	rm -rf site site-zensical zensical.yml docs/generated .cache build
