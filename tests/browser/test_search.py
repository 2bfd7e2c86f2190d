"""Search sends a reader to the page that teaches, not to a copy of it.

A query for a topic the site teaches, typed into the site's own search
box, must put that page first. Two things make it so:

- the notebooks' pages (generated/notebooks/...) repeat their pages and
  are left out of the index (macros.py for MkDocs, the notebook page's
  front matter for Zensical), reachable from the page they belong to;
- each teaching page lists the topics it teaches in its front matter
  (`tags:`), which Material's search weighs above titles and text; a
  topic belongs to one page (two pages with one tag tie). The tags are
  the one place a topic names its page: every tag is a query whose first
  result must be its page, and every glossary term must be some page's
  tag (the glossary page's own for the names no other page teaches).
  Where a word of one page's tag is in another's ("rotary" in "partial
  rotary"), the page that teaches it carries `search: boost:` too.

Each tag and glossary term is asked of Material's own search worker
(the script the search box runs, fed the built index, one message per
query: seconds for all of them), and so is QUERIES, the queries a
reader types; a few of them (BOX_QUERIES) also go through the search
box itself, which Zensical's build is checked with too.

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

from macros import glossary_entries
from pipeline import config

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
    "grouped query": "grouped-heads/",
    "key padding": "edges/",
    "fp16": "edges/",
    "parity with PyTorch": "experiment/",
}
# Typed into the search box itself: a few queries of each shape (one
# word, several, a dotted name, an underscore, mixed case); the search
# worker ranks every query above, test_search_ranks_each_topic_on_its_page
BOX_QUERIES = {
    q: QUERIES[q]
    for q in (
        "causal mask",
        "nn.MultiheadAttention",
        "repeat_interleave",
        "KV cache",
        "fully masked row",
        "parity with PyTorch",
    )
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


# Material's search worker, fed the built index, asked each query in
# turn: what the search box shows, without typing (Material 9.x's
# messages: 0 set up, 1 ready, 2 query, 3 result; the result's items
# are grouped by page, best first).
_ASK_WORKER = """async (queries) => {
  const config = JSON.parse(
    document.getElementById("__config").textContent);
  const base = new URL(config.base + "/", location.href);
  const index = await (
    await fetch(new URL("search/search_index.json", base))).json();
  const worker = new Worker(new URL(config.search, base));
  const reply = () => new Promise(resolve => worker.addEventListener(
    "message", ev => resolve(ev.data), { once: true }));
  worker.postMessage({ type: 0, data: {
    config: index.config, docs: index.docs,
    options: { suggest: false } } });
  await reply();
  const found = {};
  for (const query of queries) {
    worker.postMessage({ type: 2, data: query });
    const { data } = await reply();
    found[query] = data.items.length
      ? data.items[0][0].location.split("#")[0] : null;
  }
  worker.terminate();
  return found;
}"""


def worker_first_results(page, queries):
    """{query: location of the first result's page}, from Material's
    search worker (one call for all the queries)."""
    return page.evaluate(_ASK_WORKER, list(queries))


def tag_pages(site):
    """{tag: the page whose front matter lists it} from the index."""
    _, data = _index(site)
    pages = {}
    for doc in data.get("docs", []):
        for tag in doc.get("tags") or []:
            pages[tag] = doc["location"].split("#")[0]
    return pages


def _index(site):
    mkdocs = site / "search" / "search_index.json"
    zensical = site / "search.json"
    path = mkdocs if mkdocs.is_file() else zensical
    return path, json.loads(path.read_text(encoding="utf-8"))


def index_locations(site):
    """Every location in the built site's search index, either engine's."""
    path, data = _index(site)
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
        page, "zensical" if zensical else "material", BOX_QUERIES
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
            for query, want in BOX_QUERIES.items()
            if found[query].strip("/") != want.strip("/")
        ]
    problems += recorder.problems()
    assert not problems, (
        f"{len(problems)} of {len(BOX_QUERIES)} queries miss:\n"
        + "\n".join(problems)
    )


def test_every_glossary_term_is_a_tag(site_dir):
    """A glossary term names the page that teaches it, as its tag."""
    if (site_dir / "search.json").is_file():
        pytest.skip("Zensical's index does not weigh tags")
    tags = {tag.casefold() for tag in tag_pages(site_dir)}
    terms = [term for term, _ in glossary_entries(config.glossary_file())]
    untagged = [term for term in terms if term.casefold() not in tags]
    assert not untagged, (
        "glossary terms that no page lists in its tags (add each to the "
        f"page that teaches it, or to glossary.md's): {untagged}"
    )


def test_search_ranks_each_topic_on_its_page(site_dir, site_origin, open_page):
    """Every tag, glossary term and reader's query, asked of Material's
    search worker: its first result is the page that teaches it."""
    if (site_dir / "search.json").is_file():
        pytest.skip("Zensical's search ranks by its own rules")
    wanted = tag_pages(site_dir)
    wanted.update(QUERIES)
    page, recorder = open_page(site_origin)
    page.goto(f"{site_origin}/", wait_until="load")
    found = worker_first_results(page, wanted)
    problems = [
        f"{query!r}: first result {found[query]!r}, not {want!r}"
        for query, want in wanted.items()
        if (found[query] or "").strip("/") != want.strip("/")
    ]
    problems += recorder.problems()
    assert not problems, (
        f"{len(problems)} of {len(wanted)} queries miss:\n"
        + "\n".join(problems)
    )
