"""Search sends a reader to the page that teaches, not to a copy of it.

A query for a topic the site teaches, typed into the site's own search
box, must put that page first. Two things make it so:

- the notebooks' pages (generated/notebooks/...) repeat their pages and
  are left out of the index (macros.py for MkDocs, the notebook page's
  front matter for Zensical), reachable from the page they belong to;
- each teaching page lists the topics it teaches in its front matter
  (`tags:`), which Material's search weighs above titles and text; a
  topic belongs to one page (two pages with one tag tie).

The search box is Material's (MkDocs). Zensical 0.0.73 has its own
widget and ranking, which does not weigh `tags`: there the test types the
same queries and checks none lands on a notebook's page.
"""

import json
import re
from urllib.parse import urlsplit

import harness
import pagecheck
import pytest

pytestmark = pytest.mark.browser

# A reader's query -> the page that teaches it. Each goes whole into the
# search box, as pasted, then its last key is lifted (Material searches
# on keyup); the first result must be on that page.
QUERIES = {
    "embedding": "input/",
    "causal mask": "attention-matrix/",
    "attention matrix": "attention-matrix/",
    "scaling": "scaling/",
    "sqrt": "scaling/",
    "temperature": "scaling/",
    "softmax backward": "softmax-backward/",
    "Jacobian": "softmax-backward/",
    "gradient": "layer-backward/",
    "multi-head": "multiple-heads/",
    "splitting heads": "multiple-heads/",
    "parameter budget": "multiple-heads/",
    "nn.MultiheadAttention": "experiment/",
    "KV cache": "kv-cache/",
    "RoPE": "kv-cache/",
    "prefill": "kv-cache/",
    "positional encoding": "positions/",
    "YaRN": "positions/",
    "paged attention": "serving/",
    "GQA": "grouped-heads/",
    "MQA": "grouped-heads/",
    "repeat_interleave": "grouped-heads/",
    "flash attention": "tiled/",
    "online softmax": "tiled/",
    "padding mask": "edges/",
    "fully masked row": "edges/",
    "bfloat16": "edges/",
    "interview questions": "review/",
}
NOTEBOOKS = "generated/notebooks/"

# Each engine's search box and its result links. Zensical's widget lives
# in a shadow root, which Playwright's locators and deepFirst() enter.
BOXES = {
    "material": {
        "open": "label.md-header__button[for=__search], .md-search__input",
        "input": ".md-search__input",
        "result": "a.md-search-result__link",
    },
    "zensical": {
        "open": ".md-search__button",
        "input": "input[role=combobox]",
        "result": "ol[role=listbox] a[role=option]",
    },
}

# True once the first result has stayed the same for STABLE_MS: the
# results of the query are in. The query goes in whole (one input event,
# so one search and one redraw), so a short while suffices.
STABLE_MS = 150
_SETTLED = """([selector, stable]) => {
  const deepFirst = root => {
    const found = root.querySelector(selector);
    if (found) return found;
    for (const el of root.querySelectorAll("*"))
      if (el.shadowRoot) {
        const inner = deepFirst(el.shadowRoot);
        if (inner) return inner;
      }
    return null;
  };
  const first = deepFirst(document);
  const now = first ? first.href : null;
  if (now !== window.__mhaFirst) {
    window.__mhaFirst = now;
    window.__mhaSince = performance.now();
    return false;
  }
  return now !== null && performance.now() - window.__mhaSince > stable;
}"""


def first_results(page, engine, queries, after=None):
    """{query: path of the first result} as a reader gets them;
    ``after(query)`` runs once each query's results are in."""
    box = BOXES[engine]
    page.locator(box["open"]).locator("visible=true").first.click()
    found = {}
    for query in queries:
        typed = page.locator(box["input"])
        typed.fill("")  # the last query's results leave
        page.locator(box["result"]).first.wait_for(
            state="detached", timeout=pagecheck.WAIT_MS
        )
        page.evaluate("() => { window.__mhaFirst = undefined; }")
        typed.fill(query)
        typed.press("End")  # the key a reader lifts last (Material: keyup)
        page.wait_for_function(
            _SETTLED,
            arg=[box["result"], STABLE_MS],
            timeout=pagecheck.WAIT_MS,
            polling=100,
        )
        first = page.locator(box["result"]).first
        found[query] = urlsplit(first.evaluate("a => a.href")).path
        if after is not None:
            after(query)
    return found


def index_locations(site):
    """Every location in the built site's search index, either engine's."""
    mkdocs = site / "search" / "search_index.json"
    zensical = site / "search.json"
    path = mkdocs if mkdocs.is_file() else zensical
    data = json.loads(path.read_text(encoding="utf-8"))
    return path, [
        doc["location"]
        for doc in data.get("docs", []) + (data.get("items", []))
    ]


# Words next to formulas on the pages: their results' snippets hold the
# formulas, as the index has them.
FORMULA_QUERIES = ["rotation", "softmax", "gradient"]
RAW_TEX = re.compile(r"\\\(|\\\[|\$\$")


def test_search_index_holds_no_raw_tex(site_dir):
    r"""The index's titles and texts carry formulas as text (mθᵢ), not
    the raw TeX arithmatex wrote (\(m\theta_i\)): pipeline/
    search_index.py rewrites them after the build."""
    path, _ = index_locations(site_dir)
    data = json.loads(path.read_text(encoding="utf-8"))
    raw = [
        f"{doc['location']}: {doc[field][m.start() - 20 : m.end() + 30]!r}"
        for doc in data.get("docs", []) + data.get("items", [])
        for field in ("title", "text")
        for m in RAW_TEX.finditer(doc.get(field) or "")
    ]
    assert not raw, f"{len(raw)} raw formulas in {path.name}:\n" + "\n".join(
        raw[:10]
    )


def test_search_snippets_show_no_raw_tex(site_dir, site_origin, open_page):
    """What a reader sees under each result: no \\( or $$ (either
    engine's search box)."""
    zensical = (site_dir / "search.json").is_file()
    page, recorder = open_page(site_origin)
    page.goto(f"{site_origin}/", wait_until="load")
    problems = []

    def look(query):
        problems.extend(
            f"{query!r}: {p}" for p in pagecheck.search_snippet_problems(page)
        )

    first_results(
        page, "zensical" if zensical else "material", FORMULA_QUERIES, look
    )
    problems += recorder.problems()
    assert not problems, "\n".join(problems)


def test_search_index_leaves_out_the_notebooks(site_dir):
    path, locations = index_locations(site_dir)
    copies = sorted(
        {loc.split("#")[0] for loc in locations if loc.startswith(NOTEBOOKS)}
    )
    assert locations, f"{path} indexes nothing"
    assert not copies, f"{path.name} indexes the notebooks' pages: {copies}"
    pages = {loc.split("#")[0] for loc in locations}
    missing = sorted(set(QUERIES.values()) - pages)
    assert not missing, f"{path.name} lacks the teaching pages {missing}"


def test_each_topic_has_one_teaching_page(site_dir):
    """A topic (a `tags:` entry) names the one page that teaches it: two
    pages with the same tag tie, and search may pick either."""
    path, _ = index_locations(site_dir)
    data = json.loads(path.read_text(encoding="utf-8"))
    pages = {}
    for doc in data.get("docs", []) + data.get("items", []):
        for tag in doc.get("tags") or []:
            name = tag if isinstance(tag, str) else tag.get("name", "")
            page = doc["location"].split("#")[0] or "/"
            pages.setdefault(name.lower(), set()).add(page)
    shared = {tag: sorted(p) for tag, p in pages.items() if len(p) > 1}
    assert not shared, "\n".join(
        f"tag {tag!r} on {', '.join(p)}" for tag, p in sorted(shared.items())
    )


def test_notebook_pages_are_linked_from_their_page(site_dir):
    """Out of the index, each notebook's page is still a click away."""
    notebooks = harness.notebook_pages(site_dir)
    assert notebooks, "no notebook pages in the site"
    problems = []
    for notebook in notebooks:
        name = notebook.path.removeprefix(NOTEBOOKS).strip("/")
        page = site_dir / name / "index.html"
        if not page.is_file():
            continue  # a notebook of its own (the experiment's is in nav)
        html = page.read_text(encoding="utf-8")
        if not re.search(rf'href="[^"]*{re.escape(notebook.path)}"', html):
            problems.append(f"{name}/ does not link {notebook.path}")
    assert not problems, "\n".join(problems)


def test_search_puts_the_teaching_page_first(site_dir, site_origin, open_page):
    """Material's search box: each query's first result is its page.

    Zensical's widget ranks by its own rules (titles first, and it does
    not weigh `tags`): there, no query may land on a notebook's page."""
    zensical = (site_dir / "search.json").is_file()
    page, recorder = open_page(site_origin)
    page.goto(f"{site_origin}/", wait_until="load")
    found = first_results(
        page, "zensical" if zensical else "material", QUERIES
    )
    if zensical:
        problems = [
            f"{query!r}: first result is a notebook's page, {path!r}"
            for query, path in found.items()
            if path.strip("/").startswith(NOTEBOOKS)
        ]
    else:
        problems = [
            f"{query!r}: first result {found[query]!r}, not {want!r}"
            for query, want in QUERIES.items()
            if found[query].strip("/") != want.strip("/")
        ]
    problems += recorder.problems()
    assert not problems, (
        f"{len(problems)} of {len(QUERIES)} queries miss:\n"
        + "\n".join(problems)
    )
