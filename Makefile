# Entry points: make serve | site | test | fast | bench | help
# The engines run as their users type them (`mkdocs build --strict`,
# `zensical build`, the console scripts, not `python -m`), so `make site`
# proves the plain commands work from the repository root.
# MkDocs is the default engine; Zensical builds the same site too:
# make site-zensical (site-zensical/) and make serve-fast.
# Every target sets up .venv on first use; nothing is needed beforehand.
# Generation has one owner: these targets run `python -m pipeline` (the
# page scripts in scripts/) before MkDocs builds, and `python -m
# pipeline.check` (the pages agree with the code and data; one line per
# mistake, with file:line) after it generates (make site: beside
# MkDocs); `make serve` runs both in its loop. MkDocs itself never runs
# either.

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
# The engines run with the DeprecationWarnings of their dependencies
# hidden (pathspec's, on every build): nothing this project can act on.
ENGINE := PYTHONWARNINGS=ignore::DeprecationWarning $(VENV)/bin

.PHONY: help serve site test fast bench setup browser generate check lint \
	format clean site-zensical serve-fast zensical-config \
	screenshots

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | \
	  awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

# ------------------------------------------------------------ entry points

# One process runs the loop (pipeline/serve.py): it generates, checks
# the pages, starts the engine's server and reruns what an edit affects;
# a page mistake is one line and the server goes on. Ctrl-C stops all.
serve: $(STAMP) ## generate, then serve at http://127.0.0.1:8000 (reloads)
	@$(PY) -m pipeline.serve -a $(HOST)

# make site: generation first (a mistake it finds before any page
# runs ends the command at once), then MkDocs builds while the page
# linter reads the pages and the new data beside it (MkDocs keeps one
# core; either failing fails the build), then the math is typeset.
site: generate ## generate, build site/ strictly, check its pages, typeset
	$(PY) -m pipeline.check & checking=$$!; \
	$(ENGINE)/mkdocs build --strict; built=$$?; \
	wait $$checking || exit 1; exit $$built
	$(PY) -m pipeline.postbuild site

site-zensical: check ## the same site with Zensical
	$(PY) -m pipeline.zensical
	$(ENGINE)/zensical build --strict -f zensical.yml
	$(PY) -m pipeline.postbuild site-zensical

serve-fast: zensical-config ## Zensical's live preview (127.0.0.1:8000)
	@$(PY) -m pipeline.serve --engine zensical -a $(HOST)

# make test: build, then test. Each engine builds once, each notebook
# runs once (in generation); pytest then reads the builds.
test: $(STAMP) browser ## build both sites once, then run every test once
	@$(BESIDE_THE_BUILD) & units=$$!; \
	$(MAKE) --no-print-directory -o $(STAMP) generate \
	  GENERATE_FLAGS=$(TEST_GENERATE_FLAGS) && \
	$(MAKE) --no-print-directory -o $(STAMP) -o generate -o check \
	  $(SIDE_BY_SIDE) site site-zensical; built=$$?; \
	wait $$units; units_rc=$$?; $(UNITS_REPORT); \
	[ $$built -eq 0 ] || exit $$built; \
	$(ONE_THREAD) $(PY) -m pytest $(XDIST) --durations=12 \
	  $(NO_BUILD:%=--ignore=%); rest=$$?; \
	[ $$units_rc -eq 0 ] || exit $$units_rc; exit $$rest

# Parallelism, in this one place. The tests that read no build (mha_ref
# against PyTorch and the other libraries; the generation of a tiny
# project of their own) run beside the build, whose slowest page
# keeps one core busy while the other is soon idle; their report follows
# the build's. They run at a lower priority (nice): the pages take the
# cores first, so the slowest page starts its long run alone sooner, and
# the units fill the core it leaves. They run in a copy of the tree with
# CONTRIBUTING's walkthrough code added (tests/docs/walkthrough_tree.py):
# one run shows the tree's units pass and the guide's new module passes
# the whole unit suite. They run on two workers, a module
# to a worker (loadfile: a module's warm kernels start once), so once
# the build is done they fill both cores. Once generated, the two
# engines build side by side (each is one process; the page linter runs
# beside MkDocs, as in make site), each one's log printed whole. The
# other tests run on one pytest-xdist worker per core; a test goes to
# whichever worker is free (worksteal), so a module fixture may start
# on both: a costly one (the engines' reading of both sites) has one
# test using it.
# Generation runs two pages per core (pipeline/generation.py,
# JOBS_PER_CORE). make test's generation records no trace of which
# mha_ref functions each page ran (a few per cent of its time): its
# outputs are the same, and the next edit under make serve or make site
# reruns every page that carries the edited file once, then traces.
TEST_GENERATE_FLAGS ?= --no-trace
PYTEST_JOBS ?= auto
XDIST := -n $(PYTEST_JOBS) --dist worksteal
# One BLAS/OpenMP thread per test process, as in generation's kernels
# (pipeline/kernel.py): the processes already fill the cores, and a
# second thread per process only spins waiting for a core (7 of 56
# CPU-s of the unit tests, run alone).
ONE_THREAD := OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
NO_BUILD := tests/unit mha_ref tests/pipeline/test_pipeline.py \
	tests/pipeline/test_serve.py tests/pipeline/test_code_units.py \
	tests/pipeline/test_jupyter_cache_hook.py tests/pipeline/test_memo.py \
	tests/pipeline/test_notebook_trace.py \
	tests/pipeline/test_page_cache_hook.py \
	tests/pipeline/test_postbuild_cache.py
SIDE_BY_SIDE := -j2 --output-sync=target
UNIT_LOG := build/unit-tests.log
BESIDE_THE_BUILD := mkdir -p build; \
	$(ONE_THREAD) nice -n 10 $(PY) -m tests.docs.walkthrough_tree -q \
	  -p no:cacheprovider -n 2 --dist loadfile --durations=8 $(NO_BUILD) \
	  >$(UNIT_LOG) 2>&1
UNITS_REPORT := echo "--- unit tests, run beside the build ($(UNIT_LOG)):"; \
	cat $(UNIT_LOG)

fast: check ## the quick checks while writing (no site, no browser)
	$(ONE_THREAD) $(PY) -m pytest -x -q $(XDIST) \
	  -m "not build and not browser and not slow" tests/unit tests/docs tests/pipeline tests/bench mha_ref

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

# constraints.txt pins every version tested. torch first, alone: from
# pip's own sources when they hold the +cpu wheel, else its CPU index;
# then the rest, whose indexes need not know +cpu, with uv (pinned too),
# which installs them in seconds where pip takes half a minute (the
# torch installed stays: it meets the pin); pip again if uv fails.
# The packages are compiled to bytecode as they install (uv's
# --compile-bytecode: all of site-packages; pip does so by default). A
# machine that sets PYTHONDONTWRITEBYTECODE (this one does) would
# otherwise compile every module of MkDocs, Jupyter and transformers
# from source in every process: 0.7 s of each `mkdocs build`. The
# project's own files are never compiled ahead: they are edited.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt --no-deps torch \
	  || { echo "trying torch's CPU index $(TORCH_INDEX)"; \
	       $(PY) -m pip install -q -c constraints.txt --no-deps \
	         $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) torch; }
	{ $(PY) -m pip install -q -c constraints.txt uv && \
	  VIRTUAL_ENV=$(VENV) $(VENV)/bin/uv pip install -q --compile-bytecode \
	    -c constraints.txt -e '.[docs,dev]'; } \
	  || $(PY) -m pip install -q -c constraints.txt -e '.[docs,dev]'
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
	$(PY) -m pipeline $(GENERATE_FLAGS)

check: generate ## the pages agree with code and data (file:line each)
	$(PY) -m pipeline.check

# zensical.yml: mkdocs.yml with Zensical's few changes, and a Markdown
# page per notebook, which only Zensical reads (pipeline/zensical.py)
zensical-config: $(STAMP)
	$(PY) -m pipeline.zensical

clean: ## remove built and generated files (keeps .venv)
	rm -rf site site-zensical zensical.yml docs/generated .cache build
