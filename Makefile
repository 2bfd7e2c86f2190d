# Entry points: make serve | site | test | fast | bench | help
# The engines run as their users type them (`mkdocs build --strict`,
# `zensical build`, the console scripts, not `python -m`), so `make site`
# proves the plain commands work from the repository root.
# MkDocs is the default engine; Zensical builds the same site too:
# make site-zensical (site-zensical/) and make serve-fast.
# Every target sets up .venv on first use; nothing is needed beforehand.
# Generation has one owner: these targets run `python -m pipeline` (the
# page scripts in scripts/) and `python -m pipeline.check` (the pages
# agree with the code and data; one line per mistake, with file:line)
# before MkDocs builds or serves; MkDocs itself never runs either.

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

.PHONY: help serve site test fast bench setup browser generate check lint \
	format clean site-zensical serve-fast zensical-config \
	screenshots

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | \
	  awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

# ------------------------------------------------------------ entry points

# The watcher reruns the pages an edit of mha_ref/ or scripts/ affects;
# the server reloads on what it writes. Ctrl-C stops both.
serve: check ## generate, then serve at http://127.0.0.1:8000 (reloads)
	@$(PY) -m pipeline --watch & watcher=$$!; \
	trap 'kill $$watcher 2>/dev/null' EXIT; \
	$(VENV)/bin/mkdocs serve --strict -a $(HOST)

site: check ## generate, build site/ strictly, typeset its math
	$(VENV)/bin/mkdocs build --strict
	$(PY) -m pipeline.postbuild site

site-zensical: check zensical-config ## the same site with Zensical
	$(VENV)/bin/zensical build --strict -f zensical.yml
	$(PY) -m pipeline.postbuild site-zensical

serve-fast: check zensical-config ## Zensical's live preview (127.0.0.1:8000)
	@echo "Zensical's server: prose edits reload fast; no --strict there"
	@$(PY) -m pipeline --watch & watcher=$$!; \
	trap 'kill $$watcher 2>/dev/null' EXIT; \
	$(VENV)/bin/zensical serve -f zensical.yml -a $(HOST)

# Each engine builds once and each notebook runs once (in generation).
# The unit tests (mha_ref against PyTorch; they read no build) run beside
# the build, whose trained-heads page keeps one core busy for most of a
# minute while the other is soon idle; their report follows the build's.
# pytest then reads the builds: docs agreement, the engines compared page
# by page, the notebooks, the browser checks on the default site. One
# worker per core (pytest-xdist); tests go to whichever worker is free
# (worksteal), so a module fixture may start on both: a costly one (the
# engines' reading of both sites) has one test using it.
PYTEST_JOBS ?= auto
XDIST := -n $(PYTEST_JOBS) --dist worksteal
UNIT := tests/unit mha_ref
UNIT_LOG := build/unit-tests.log
test: $(STAMP) browser ## build both sites once, run every test once
	@mkdir -p build
	@$(PY) -m pytest -q -p no:cacheprovider $(UNIT) >$(UNIT_LOG) 2>&1 & \
	units=$$!; \
	$(MAKE) --no-print-directory -o $(STAMP) site site-zensical; built=$$?; \
	wait $$units; units_rc=$$?; \
	echo "--- unit tests, run beside the build ($(UNIT_LOG)):"; \
	cat $(UNIT_LOG); \
	[ $$built -eq 0 ] || exit $$built; \
	$(PY) -m pytest $(XDIST) $(UNIT:%=--ignore=%); rest=$$?; \
	[ $$units_rc -eq 0 ] || exit $$units_rc; exit $$rest

fast: check ## the quick checks while writing (no site, no browser)
	$(PY) -m pytest -x -q $(XDIST) \
	  -m "not build and not browser and not slow" tests/unit tests/docs mha_ref

# Not part of make test: pictures for a person to look at.
screenshots: site browser ## full-page PNGs of every page in build/screenshots/
	MHA_REF_SCREENSHOTS=1 $(PY) -m pytest $(XDIST) -q \
	  tests/browser/test_site_pages.py

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

# axe-core, which the accessibility tests inject into every page, needs no
# install: it is vendored and pinned in tests/browser/vendor/ (VERSION,
# README.txt; refresh with tests/browser/vendor/vendor_axe.sh).
browser: ## install Debian's chromium for the browser tests, if missing
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -q && apt-get install -y -q chromium; \
	  else \
	    echo "no chromium: browser tests will skip (apt install chromium)"; \
	  fi; }

generate: $(STAMP) ## run the page scripts (cached, in parallel)
	$(PY) -m pipeline

check: generate ## the pages agree with code and data (file:line each)
	$(PY) -m pipeline.check

# zensical.yml: mkdocs.yml with Zensical's few changes (pipeline/zensical.py)
zensical-config: $(STAMP)
	$(PY) -m pipeline.zensical

clean: ## remove built and generated files (keeps .venv)
	rm -rf site site-zensical zensical.yml docs/generated .cache build
