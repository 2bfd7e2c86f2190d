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

The parts the pages quote, one module each (bench/<part>.json):

- implementations: time and memory of each attention, against SDPA.
- decode: one decode step with a long KV cache, per number of KV heads.
- roofline: this CPU's peak matmul rate and copy bandwidth, and a
  prefill and a decoding step of the reference layer against them.

The site's own performance, apart in bench/site_perf/ (its docstring):
build times, reading, KaTeX on the first paint (katex), the engines,
the test suite and each page's weight.

Each part a page quotes (decode, impl, roofline) is also written alone,
as bench/<part>.json, which that page reads and its notebook carries
(bench/report.py, PAGE_PARTS).

A run of some parts (--only) keeps the other parts of the report.

and around them: env (the machine), timing (medians, timed commands),
report (JSON and Markdown) and __main__ (the command line).
"""
