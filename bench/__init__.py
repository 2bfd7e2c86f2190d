"""Benchmarks: build times, test suite, reading, implementations, KaTeX.

    python -m bench                    # everything (make bench)
    python -m bench --only impl,katex  # build, reading, impl, katex, decode,
                                       # roofline, engines, suite, weight
    python -m bench --only weight --site site  # weigh a site built already
    python -m bench --quick            # fewer runs and sizes (a smoke test)
    python -m bench --out /tmp/bench   # write the report elsewhere

Writes bench/report.json and bench/report.md. Every figure is the median
of its runs (shown beside it), and every ratio compares figures measured
in the same round, so a busy machine slows both sides. This is a
benchmark, not a test: it asserts nothing, and reports each target as
met or not.

One module per part, each with its own docstring:

- build_times: in a temporary copy, cold generation (every page but
  trained-heads; trained-heads apart), warm `make site` after a prose
  edit against the floor (`mkdocs build --strict`), and after an edit
  of mha_ref/numpy_ref.py.
- reading: headless Chromium against the built site, cold cache.
- implementations: time and memory of each attention, against SDPA.
- katex_prerender: math on the first paint (typeset at build time):
  math / FCP, layout shift and bytes of every page, and the step itself.
- decode: one decode step with a long KV cache, per number of KV heads.
- roofline: this CPU's peak matmul rate and copy bandwidth, and a
  prefill and a decoding step of the reference layer against them
  (also bench/roofline.json, which the cost page reads).
- engines: MkDocs against Zensical, builds and server reloads.
- suite: `make test` and `make fast` in a fresh copy, from empty
  outputs (--quick: `make fast` only).
- weight: every page's first view in Chromium, in bytes, against the
  budgets of a text page (500 kB) and a notebook page (700 kB).

Each part a page quotes (decode, impl, roofline) is also written alone,
as bench/<part>.json, which that page reads and its notebook carries
(bench/report.py, PAGE_PARTS).

A run of some parts (--only) keeps the other parts of the report.

and around them: env (the machine), timing (medians, timed commands),
report (JSON and Markdown) and __main__ (the command line).
"""
