"""Every page, as axe-core sees it: no serious or critical violation.

axe-core is vendored (tests/browser/vendor/, pinned, with its licence;
vendor_axe.sh refreshes it) and injected into each page of the built
site, offline. One sweep visits every page three times:

- light scheme, desktop: every rule axe runs by default;
- dark scheme, desktop: colour contrast, which the scheme changes;
- light scheme, phone: scrollable regions reachable from the keyboard,
  since which boxes scroll sideways depends on the width.

The dark scheme is set once per sweep with Material's own toggle (it is
kept in localStorage for the next pages). Two tabs take turns, so one
page loads while axe checks the other. Moderate and minor findings are
not failures; a test page with known violations shows the check fails.
"""

import pagecheck
import pytest
from harness import DESKTOP, PHONE, REPO, site_pages

pytestmark = pytest.mark.browser

AXE = REPO / "tests" / "browser" / "vendor" / "axe.min.js"
FAILING = ("serious", "critical")
SWEEPS = [  # (name, viewport, scheme, rules: None for every rule)
    ("light", DESKTOP, "default", None),
    ("dark", DESKTOP, "slate", ["color-contrast"]),
    ("phone", PHONE, "default", ["scrollable-region-focusable"]),
]

# Starts axe in the page once Material has built it (document$ has
# emitted, and the scroll boxes were looked at, a frame later); the
# result is awaited by _RESULT.
_START = """options => {
  const frames = () => new Promise(done =>
    requestAnimationFrame(() => requestAnimationFrame(done)));
  window.__mhaAxe = frames().then(() => axe.run(document, options));
}"""
_RESULT = """() => window.__mhaAxe.then(result =>
  result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map(n => ({
      html: n.html.slice(0, 120),
      why: (n.failureSummary || "").split("\\n").slice(1, 2).join("")
             .trim().slice(0, 160),
    })),
  })))"""


def axe_options(rules):
    options = {"resultTypes": ["violations"], "preload": False}
    if rules:
        options["runOnly"] = {"type": "rule", "values": rules}
    return options


def start(tab, url, rules):
    tab.goto(url, wait_until="load")
    tab.add_script_tag(path=str(AXE))
    tab.evaluate(_START, axe_options(rules))


def sweep(context, origin, pages, scheme, rules):
    """{page name: violations} for every page, two tabs taking turns."""
    tabs = [context.new_page(), context.new_page()]
    tabs[0].goto(f"{origin}/", wait_until="load")
    pagecheck.set_scheme(tabs[0], scheme)  # kept for the pages to come
    found, pending = {}, []
    for n, site_page in enumerate(pages):
        tab = tabs[n % 2]
        if len(pending) == 2:  # this tab's last page: collect it first
            collect(found, *pending.pop(0), scheme)
        start(tab, f"{origin}/{site_page.path}", rules)
        pending.append((tab, site_page))
    for tab, site_page in pending:
        collect(found, tab, site_page, scheme)
    for tab in tabs:
        tab.close()
    return found


def collect(found, tab, site_page, scheme):
    violations = tab.evaluate(_RESULT)
    if pagecheck.current_scheme(tab) != scheme:
        violations.append(
            {
                "id": "scheme",
                "impact": "serious",
                "help": f"page not in the {scheme} scheme",
                "nodes": [{"html": "<body>", "why": ""}],
            }
        )
    found[site_page.name] = violations


def serious(found):
    """One line per serious or critical rule: pages, count, an example."""
    rules = {}
    for name, violations in found.items():
        for v in violations:
            if v["impact"] in FAILING:
                rule = rules.setdefault(
                    (v["id"], v["impact"], v["help"]), {"pages": [], "n": 0}
                )
                rule["pages"].append(name)
                rule["n"] += len(v["nodes"])
                rule.setdefault("example", v["nodes"][0])
    return [
        f"{rule_id} ({impact}, {rule['n']} elements: {help_}) on "
        f"{', '.join(rule['pages'][:6])}"
        f"{' ...' if len(rule['pages']) > 6 else ''}; e.g. "
        f"{rule['example']['html']} {rule['example']['why']}"
        for (rule_id, impact, help_), rule in rules.items()
    ]


def test_no_serious_axe_violation_on_any_page(site_dir, site_origin, browser):
    pages = site_pages(site_dir)
    assert pages, "no pages in the site"
    problems = []
    for name, viewport, scheme, rules in SWEEPS:
        context = browser.new_context(viewport=viewport)
        try:
            found = sweep(context, site_origin, pages, scheme, rules)
        finally:
            context.close()
        problems += [f"{name}: {line}" for line in serious(found)]
    assert not problems, "\n".join(problems)


BROKEN = """
<style>.faint { color: #aaa; background: #fff }</style>
<div role="dialog"><p>unnamed dialog</p></div>
<p class="faint">grey on white, 2.3:1</p>
<div style="overflow-x: auto; width: 100px">
  <p style="width: 400px">a box that scrolls, which no key reaches</p>
</div>
"""


def test_axe_check_fails_on_a_broken_page(tmp_path, serve_dir, browser):
    """Drifted: an unnamed dialog, faint text and a scroll box no key
    reaches are each reported as serious."""
    (tmp_path / "index.html").write_text(
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>broken</title></head><body><main>{BROKEN}</main>"
        "</body></html>"
    )
    origin = serve_dir(tmp_path)
    context = browser.new_context(viewport=DESKTOP)
    tab = context.new_page()
    tab.goto(f"{origin}/", wait_until="load")
    tab.add_script_tag(path=str(AXE))
    tab.evaluate(_START, axe_options(None))
    lines = serious({"broken": tab.evaluate(_RESULT)})
    context.close()
    for rule in (
        "aria-dialog-name",
        "color-contrast",
        "scrollable-region-focusable",
    ):
        assert any(line.startswith(rule + " ") for line in lines), lines
