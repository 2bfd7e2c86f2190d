"""What a reader would see broken on a page, checked in a real browser.

Each check takes a Playwright page (already loaded) and returns a list of
problems, one readable line each, [] when the page is fine. The tests
collect every problem of a page before asserting, so one run names them
all. tests/browser/test_pagecheck.py shows each check failing on a small
broken page: a check that cannot fail checks nothing. The site, its
server, Chromium and the network recorder are in harness.py.

Waits are event-based: a check waits for a condition in the page (every
formula rendered, every image settled) with a timeout, and reports what
is still wrong when the timeout passes; nothing sleeps.
"""

import contextlib
from pathlib import Path

WAIT_MS = 5000  # how long a page may take to settle before we report


# JavaScript shared by the math checks. `count(root)` counts the formulas
# a document holds before any script runs: one per arithmatex span/div,
# plus the $...$, $$...$$, \(...\) and \[...\] in notebook Markdown cells
# (mkdocs-jupyter leaves those as text for a script to render), or the
# .katex the build typeset there (pipeline/typeset_math.py).
_MATH_JS = r"""
const NOTEBOOK = ".jp-RenderedMarkdown, .jp-RenderedLatex";
const TEX = /\$\$[\s\S]+?\$\$|\\\[[\s\S]+?\\\]|\\\([\s\S]+?\\\)|\$[^$\n]+?\$/g;
function notebookMath(root) {
  let n = 0;
  for (const cell of root.querySelectorAll(NOTEBOOK)) {
    const copy = cell.cloneNode(true);
    copy.querySelectorAll("pre, code, .katex").forEach(e => e.remove());
    n += (copy.textContent.match(TEX) || []).length;
  }
  return n;
}
// formulas the build typeset into notebook cells: one .katex each
function notebookTypeset(root) {
  let n = 0;
  for (const cell of root.querySelectorAll(NOTEBOOK))
    n += cell.querySelectorAll(".katex").length;
  return n;
}
function count(root) {
  return root.querySelectorAll(".arithmatex").length + notebookMath(root)
    + notebookTypeset(root);
}
"""


def source_math_count(page, html):
    """How many formulas `html` (a page's HTML as served) holds."""
    return page.evaluate(
        f"""html => {{ {_MATH_JS}
            return count(new DOMParser().parseFromString(html, "text/html"));
        }}""",
        html,
    )


def settle(page, condition, arg=None, wait_ms=WAIT_MS):
    """Wait until the JavaScript `condition(arg)` holds, or wait_ms pass.

    A timeout is not an error here: the check that follows reports what
    is still wrong, in its own words.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_function(condition, arg=arg, timeout=wait_ms)


def wait_for_math(page, expected, wait_ms=WAIT_MS):
    """Wait until `expected` formulas are rendered or errored (or wait_ms)."""
    settle(
        page,
        "n => document.querySelectorAll('.katex, .katex-error').length >= n",
        expected,
        wait_ms,
    )


def math_problems(page, html, wait_ms=WAIT_MS):
    """Every formula of the served `html` rendered once by KaTeX.

    Waits until the page holds as many rendered formulas (or KaTeX error
    boxes) as the source has formulas, then checks each arithmatex
    element holds exactly one .katex and no .katex-error, and that the
    page has no .katex-error anywhere.
    """
    expected = source_math_count(page, html)
    wait_for_math(page, expected, wait_ms)
    found = page.evaluate(
        """() => {
        const short = s => s.replace(/\\s+/g, " ").trim().slice(0, 80);
        const bad = [];
        for (const e of document.querySelectorAll(".arithmatex")) {
          const n = e.querySelectorAll(".katex").length;
          if (n !== 1) bad.push(`${n} .katex in: ${short(e.textContent)}`);
        }
        const errors = [...document.querySelectorAll(".katex-error")].map(
          e => `${short(e.textContent)} (${e.title})`);
        return {katex: document.querySelectorAll(".katex").length,
                bad, errors};
        }"""
    )
    problems = []
    if found["katex"] != expected:
        problems.append(
            f"{found['katex']} formulas rendered by KaTeX, the page's "
            f"source has {expected}"
        )
    problems += [f"formula not rendered once: {b}" for b in found["bad"]]
    problems += [f"KaTeX error: {e}" for e in found["errors"]]
    return problems


def raw_tex_problems(page):
    r"""TeX a reader can see as text: \(, \[, $$ or $..\x..$ left over.

    Code blocks, KaTeX's own output and hidden elements are skipped.
    """
    return page.evaluate(
        r"""() => {
        const SKIP = "pre, code, script, style, textarea, .katex, " +
                     "mjx-container, .MathJax";
        const RAW = /\\\(|\\\)|\\\[|\\\]|\$\$|\$[^$\s][^$]*[\\^_{][^$]*\$/;
        const walker = document.createTreeWalker(
          document.body, NodeFilter.SHOW_TEXT);
        const found = [];
        for (let n = walker.nextNode(); n; n = walker.nextNode()) {
          const el = n.parentElement;
          if (!el || el.closest(SKIP)) continue;
          const m = n.textContent.match(RAW);
          if (!m || !el.getClientRects().length) continue;
          if (getComputedStyle(el).visibility === "hidden") continue;
          const text = n.textContent.replace(/\s+/g, " ").trim();
          found.push(`raw TeX "${m[0]}" in visible text: ` +
                     text.slice(0, 80));
        }
        return found;
        }"""
    )


def wait_for_images(page):
    """Make lazy images eager; wait until every image settled, or WAIT_MS."""
    page.evaluate(
        "() => document.querySelectorAll('img[loading=lazy]')"
        ".forEach(i => { i.loading = 'eager'; })"
    )
    settle(page, "() => [...document.images].every(i => i.complete)")


def image_problems(page):
    """Every <img> loaded: complete with a natural width above zero.

    Lazy images are switched to eager first, so images below the fold or
    hidden for the other colour scheme are checked as well.
    """
    wait_for_images(page)
    broken = page.evaluate(
        """() => [...document.images]
            .filter(i => !i.complete || i.naturalWidth === 0)
            .map(i => i.getAttribute("src"))"""
    )
    return [f"image did not load: {src}" for src in broken]


def current_scheme(page):
    """Material's colour scheme on the body: 'default' or 'slate'."""
    return page.evaluate(
        "() => document.body.getAttribute('data-md-color-scheme')"
    )


def set_scheme(page, scheme):
    """Switch Material's palette with its own toggle until `scheme`.

    Raises AssertionError when the page has no toggle reaching it.
    """
    toggles = page.locator('form[data-md-component="palette"] label')
    for _ in range(toggles.count() + 1):
        now = current_scheme(page)
        if now == scheme:
            return
        visible = toggles.locator("visible=true")
        if visible.count() == 0:
            break
        visible.first.click()
        page.wait_for_function(
            "s => document.body.getAttribute('data-md-color-scheme') !== s",
            arg=now,
            timeout=WAIT_MS,
        )
    raise AssertionError(
        f"no palette toggle switches {page.url} to the {scheme!r} scheme"
    )


def scheme_problems(page, scheme):
    """Only the figure variant meant for `scheme` is displayed.

    Material hides img[src$="#only-dark"] on the light ('default') scheme
    and img[src$="#only-light"] on the dark ('slate') one; a reader sees
    an image when it has a box on the page and is not hidden.
    """
    if current_scheme(page) != scheme:
        return [f"page is in scheme {current_scheme(page)!r}, not {scheme!r}"]
    shown = "only-dark" if scheme == "slate" else "only-light"
    hidden = "only-light" if scheme == "slate" else "only-dark"
    found = page.evaluate(
        """() => [...document.querySelectorAll("img")]
          .filter(i => /#only-(light|dark)$/.test(i.getAttribute("src")))
          .map(i => {
            const r = i.getBoundingClientRect();
            const s = getComputedStyle(i);
            return {src: i.getAttribute("src"),
                    seen: r.width > 0 && r.height > 0 &&
                          s.visibility !== "hidden" && s.opacity !== "0"};
          })"""
    )
    problems = []
    for img in found:
        if img["src"].endswith(shown) and not img["seen"]:
            problems.append(f"{scheme}: {img['src']} is not displayed")
        if img["src"].endswith(hidden) and img["seen"]:
            problems.append(f"{scheme}: {img['src']} is displayed")
    return problems


def overflow_problems(page):
    """The page never scrolls sideways; wide blocks scroll in their box.

    Tables, code blocks and display formulas may be wider than the
    screen, but only inside a box that scrolls (overflow-x auto/scroll)
    and ends within the screen; a box that clips them hides content.
    Every other element of the content ends within the content column
    (and the screen) unless it is inside a box that scrolls.
    """
    return page.evaluate(
        """() => {
        const doc = document.documentElement;
        const vw = doc.clientWidth;
        const found = [];
        if (doc.scrollWidth > vw + 1)
          found.push(`page scrolls sideways: ${doc.scrollWidth}px of ` +
                     `content in ${vw}px`);
        const out = e => {
          const r = e.getBoundingClientRect();
          return r.right > vw + 1 || r.left < -1;
        };
        const BLOCKS = "article pre, article table, article .katex-display";
        for (const el of document.querySelectorAll(BLOCKS)) {
          if (!el.getClientRects().length) continue;
          if (el.scrollWidth <= el.clientWidth + 1 && !out(el)) continue;
          // Wide: find the box that scrolls it. An element sticking out
          // of the screen needs an ancestor; one whose content is wider
          // than itself may scroll that content itself.
          let box = out(el) ? el.parentElement : el, clip = null;
          while (box && box !== document.body) {
            const o = getComputedStyle(box).overflowX;
            if (o === "auto" || o === "scroll") break;
            if ((o === "hidden" || o === "clip") && !clip) clip = box;
            box = box.parentElement;
          }
          const name = el.tagName.toLowerCase() + (el.classList.length ?
                       "." + el.classList[0] : "");
          const text = el.textContent.replace(/\\s+/g, " ").slice(0, 40);
          if (clip)
            found.push(`${name} wider than its box, cut off: ${text}`);
          else if (!box || box === document.body)
            found.push(`${name} wider than the screen, in no scrolling ` +
                       `box: ${text}`);
          else if (out(box))
            found.push(`${name}'s scrolling box ends past the screen: ` +
                       text);
        }
        // Any other element of the content (a figure, a control, a
        // formula in a paragraph) that ends past the content column, or
        // the screen, and scrolls in no box of its own: cut off.
        const root = document.querySelector(".md-content article") ||
                     document.querySelector("article");
        if (!root) return found;
        const edge = Math.min(vw, root.parentElement
                                  .getBoundingClientRect().right);
        const wide = [];
        for (const el of root.querySelectorAll("*")) {
          if (el.closest(BLOCKS.replace(/article /g, ""))) continue;
          // KaTeX's stretchy SVG paths are clipped by design, and its
          // MathML copy is visually hidden (for screen readers only)
          if (el.closest("svg path, .katex-mathml")) continue;
          const r = el.getBoundingClientRect();
          if (!r.width || r.right <= edge + 1) continue;
          // a box that scrolls its own content and stays on the screen
          // (Zensical's full-width tab row on a phone) cuts nothing off
          const own = getComputedStyle(el).overflowX;
          if ((own === "auto" || own === "scroll") && r.right <= vw + 1)
            continue;
          let box = el.parentElement, scrolls = false;
          for (; box && box !== root.parentElement; box = box.parentElement) {
            const o = getComputedStyle(box).overflowX;
            if (o === "auto" || o === "scroll") { scrolls = true; break; }
          }
          if (!scrolls) wide.push(el);
        }
        for (const el of wide) {
          if (wide.includes(el.parentElement)) continue; // its box is named
          const name = el.tagName.toLowerCase() + (el.classList.length ?
                       "." + el.classList[0] : "");
          const right = Math.round(el.getBoundingClientRect().right);
          const text = el.textContent.replace(/\\s+/g, " ").slice(0, 40);
          found.push(`${name} ends at ${right}px, past the content ` +
                     `column (${Math.round(edge)}px), in no scrolling ` +
                     `box: ${text}`);
        }
        return found;
        }"""
    )


def screenshot(page, path):
    """A full-page PNG at `path`, once fonts and images have settled."""
    page.evaluate("() => document.fonts.ready.then(() => true)")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True, animations="disabled")


# axe-core is vendored (tests/browser/vendor/: pinned, with its licence;
# vendor_axe.sh refreshes it) and injected into the page, offline.
AXE = Path(__file__).parent / "vendor" / "axe.min.js"
AXE_FAILS = ("serious", "critical")
# Runs axe once the page has settled (two frames after the call, for the
# layout after a scheme or viewport change, and its CSS transitions
# done); serious and critical findings only.
_AXE_RUN = """async ({options, fails}) => {
  await new Promise(done =>
    requestAnimationFrame(() => requestAnimationFrame(done)));
  // colours mid-transition (Material animates some) are not the page's
  await Promise.all(document.getAnimations().map(a => a.finished));
  const result = await axe.run(document, options);
  return result.violations.filter(v => fails.includes(v.impact)).map(v => ({
    id: v.id, impact: v.impact, help: v.help, n: v.nodes.length,
    html: v.nodes[0].html.slice(0, 120),
    why: (v.nodes[0].failureSummary || "").split("\\n").slice(1, 2)
           .join("").trim().slice(0, 160),
  }));
}"""


def axe_problems(page, rules=None):
    """Serious and critical axe-core violations on the page as it is now.

    `rules`: the axe rule ids to run, or None for every rule axe runs by
    default. One line per rule: how many elements, and the first one.
    Moderate and minor findings are not reported.
    """
    if not page.evaluate("() => typeof axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    options = {"resultTypes": ["violations"], "preload": False}
    if rules:
        options["runOnly"] = {"type": "rule", "values": list(rules)}
    found = page.evaluate(
        _AXE_RUN, {"options": options, "fails": list(AXE_FAILS)}
    )
    return [
        f"axe {v['id']} ({v['impact']}, {v['n']} elements: {v['help']}); "
        f"e.g. {v['html']} {v['why']}"
        for v in found
    ]
