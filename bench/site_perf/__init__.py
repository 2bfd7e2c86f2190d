"""The site's own performance: what the build, the tests and a reader's
browser cost, apart from the benchmarks the pages quote (bench/).

build_times      cold generation, warm rebuilds after an edit
reading          headless Chromium against the built site, cold cache
katex_prerender  math on the first paint (typeset at build time)
engines          MkDocs against Zensical, builds and server reloads
suite            `make test` and `make fast` in a fresh copy
weight           every page's first view, in bytes, against its budget
server           the built site on 127.0.0.1, for these and the tests
"""
