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


# Clicks the palette's visible toggle until the body shows `scheme` (one
# call: Playwright's per-click checks cost half a second a switch, and a
# page is switched three times); false when no toggle reaches it.
_SET_SCHEME = """async ([scheme, waitMs]) => {
  const now = () => document.body.getAttribute("data-md-color-scheme");
  const toggles = [...document.querySelectorAll(
    'form[data-md-component="palette"] label')];
  for (let n = 0; n <= toggles.length; n++) {
    const was = now();
    if (was === scheme) return true;
    const visible = toggles.find(t => t.getClientRects().length &&
      getComputedStyle(t).visibility !== "hidden");
    if (!visible) return false;
    visible.click();
    const end = performance.now() + waitMs;
    while (now() === was && performance.now() < end)
      await new Promise(done => requestAnimationFrame(done));
  }
  return now() === scheme;
}"""


def set_scheme(page, scheme):
    """Switch Material's palette with its own toggle until `scheme`.

    Raises AssertionError when the page has no toggle reaching it.
    """
    if not page.evaluate(_SET_SCHEME, [scheme, WAIT_MS]):
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
# done); serious and critical findings only. `context` is axe's: the
# document, or {include: [[selector]]}.
_SETTLED = """async (waitMs) => {
  const frame = () => new Promise(done => requestAnimationFrame(done));
  await frame(); await frame();
  // colours mid-transition (Material animates some) are not the page's.
  // Polled, not awaited: Chromium drops a transition it replaces without
  // settling its finished promise.
  getComputedStyle(document.body).color;  // start any pending transition
  const end = performance.now() + waitMs;
  while (document.getAnimations().some(a => a.playState === "running") &&
         performance.now() < end) await frame();
}"""
_AXE_RUN = """async ({context, options, fails}) => {
  const result = await axe.run(context || document, options);
  return result.violations.filter(v => fails.includes(v.impact)).map(v => ({
    id: v.id, impact: v.impact, help: v.help, n: v.nodes.length,
    html: v.nodes[0].html.slice(0, 120),
    why: (v.nodes[0].failureSummary || "").split("\\n").slice(1, 2)
           .join("").trim().slice(0, 160),
  }));
}"""

# The rules whose verdict on an element depends only on how it looks:
# its text colour and shadow, whether it is large text (WCAG's threshold
# of size and weight), its parent's text colour (a link beside text) and
# the colours behind it (each ancestor's background and opacity up to the
# first opaque one; a wrapper with no colour, no image and full opacity
# adds nothing, so it is not part of the look). Each run of them builds a
# grid of the whole page's layout, a second or more on a page of typeset
# math, so in one test process each look is checked once, on the first
# page that shows it: an element that looks like one already checked gets
# the same verdict. axe runs them on one element per new look, and not
# at all on a page that shows none.
BY_LOOK = ("color-contrast", "link-in-text-block")
_LOOKS_SEEN = set()
_LOOK = "data-mha-look"  # marks the elements axe checks by look
_LOOKS_JS = """([mark, seen]) => {
  const behind = new Map();
  const backdrop = el => {
    if (!el || el.nodeType !== 1) return "";
    if (behind.has(el)) return behind.get(el);
    const s = getComputedStyle(el);
    const plain = s.backgroundImage === "none" && s.opacity === "1";
    const opaque = plain && /^rgb\\(/.test(s.backgroundColor);
    // a box with no colour, no image and full opacity adds nothing to
    // what shows behind: it is left out, so text nested in more or fewer
    // such wrappers keeps its look
    const clear = plain && s.backgroundColor === "rgba(0, 0, 0, 0)";
    const own = clear ? [] :
      [`${s.backgroundColor} ${s.backgroundImage} ${s.opacity}`];
    const below = opaque ? "" : backdrop(el.parentElement);
    const key = own.concat(below ? [below] : []).join(" > ");
    behind.set(el, key);
    return key;
  };
  const known = new Set(seen), fresh = [];
  document.querySelectorAll(`[${mark}]`).forEach(
    el => el.removeAttribute(mark));
  for (const el of document.body.querySelectorAll("*")) {
    if (![...el.childNodes].some(
        c => c.nodeType === 3 && c.nodeValue.trim())) continue;
    const s = getComputedStyle(el), box = el.getBoundingClientRect();
    // an element axe skips (hidden, or a 1 px screen-reader clip) must
    // not stand for its look: a shown one of that look would go unchecked
    if (s.visibility !== "visible" || box.width <= 1 || box.height <= 1)
      continue;
    const parent = el.parentElement ?
      getComputedStyle(el.parentElement).color : "";
    // WCAG's two thresholds: large text is 24px, or 18.66px and bold
    const px = parseFloat(s.fontSize), bold = parseInt(s.fontWeight) >= 700;
    const large = px >= 24 || (px >= 18.66 && bold);
    const look = [s.color, large, s.textShadow, parent, backdrop(el)]
      .join(" | ");
    if (known.has(look)) continue;
    known.add(look);
    fresh.push(look);
    el.setAttribute(mark, "");
  }
  return fresh;
}"""


# The rule whose verdict is about the boxes that scroll: each box a
# reader can scroll must be reachable by keyboard. Like every axe run, its
# run first reads the whole page (half a second on a long one), wherever
# it looks; so alone it runs only on the boxes that scroll now, sideways
# or down, with what they hold, and not at all on a page where none does.
# (Among every default rule, it runs on the whole page: a second run of
# its own would read the page again.)
BY_SCROLLING = ("scrollable-region-focusable",)
_SCROLLS = "data-mha-scrolls"  # marks the boxes that scroll
_SCROLLS_JS = """mark => {
  document.querySelectorAll(`[${mark}]`).forEach(
    el => el.removeAttribute(mark));
  let n = 0;
  for (const el of document.querySelectorAll("*")) {
    const s = getComputedStyle(el), can = /auto|scroll/;
    if ((can.test(s.overflowX) && el.scrollWidth > el.clientWidth) ||
        (can.test(s.overflowY) && el.scrollHeight > el.clientHeight)) {
      el.setAttribute(mark, "");
      n += 1;
    }
  }
  return n;
}"""


def scrolling_boxes(page):
    """Mark every box that scrolls now; return how many."""
    page.evaluate(_SETTLED, WAIT_MS)  # the layout at rest
    return page.evaluate(_SCROLLS_JS, _SCROLLS)


def new_looks(page):
    """Mark one element per look this process has not checked; return
    those looks (recorded as checked)."""
    page.evaluate(_SETTLED, WAIT_MS)  # the looks of the page at rest
    fresh = page.evaluate(_LOOKS_JS, [_LOOK, sorted(_LOOKS_SEEN)])
    _LOOKS_SEEN.update(fresh)
    return fresh


# The rules that can never fail a page: axe sets a finding's impact from
# the checks that fail, and when every check of a rule is minor or
# moderate, none of its findings is serious or critical (AXE_FAILS). Read
# from the vendored axe's own metadata, so a version that raises a
# check's impact runs its rule again; a run of every default rule leaves
# these out (region, the landmark rules and others: a third of the run
# on a long page).
_NEVER_FAILS_JS = """fails => axe._audit.rules.filter(rule => {
  const checks = [...rule.any, ...rule.all, ...rule.none];
  return checks.length && checks.every(c => {
    const meta = axe._audit.data.checks[c.id || c];
    return meta && meta.impact && !fails.includes(meta.impact);
  });
}).map(rule => rule.id)"""


def never_fails(page):
    """The axe rules whose findings are all below AXE_FAILS."""
    return page.evaluate(_NEVER_FAILS_JS, list(AXE_FAILS))


def _axe(page, context, rules, disabled=()):
    """The serious and critical violations of one axe run."""
    page.evaluate(_SETTLED, WAIT_MS)
    options = {"resultTypes": ["violations"], "preload": False}
    if rules:
        options["runOnly"] = {"type": "rule", "values": list(rules)}
    if disabled:
        options["rules"] = {r: {"enabled": False} for r in disabled}
    return page.evaluate(
        _AXE_RUN,
        {"context": context, "options": options, "fails": list(AXE_FAILS)},
    )


def axe_problems(page, rules=None, by_look=True):
    """Serious and critical axe-core violations on the page as it is now.

    `rules`: the axe rule ids to run, or None for every rule axe runs by
    default but those that never fail (never_fails). With `by_look`, the
    rules of BY_LOOK run on the elements of a look not yet checked (see
    above); without, on the whole page. The rules of BY_SCROLLING, when
    named, run on the boxes that scroll (see above). One line per rule:
    how many elements, and the first one. Moderate and minor findings
    are not reported.
    """
    if not page.evaluate("() => typeof axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    wanted = list(rules) if rules else None
    looked = [r for r in BY_LOOK if by_look and (not wanted or r in wanted)]
    scrolled = [r for r in BY_SCROLLING if wanted and r in wanted]
    rest = (
        [r for r in wanted if r not in looked + scrolled] if wanted else None
    )
    found = []
    if rest is None:  # every default rule but the looked and the harmless
        skipped = looked + never_fails(page)
        found += _axe(page, None, None, disabled=skipped)
    elif rest:
        found += _axe(page, None, rest)
    if looked and new_looks(page):
        found += _axe(page, {"include": [[f"[{_LOOK}]"]]}, looked)
    if scrolled and scrolling_boxes(page):
        found += _axe(page, {"include": [[f"[{_SCROLLS}]"]]}, scrolled)
    return [
        f"axe {v['id']} ({v['impact']}, {v['n']} elements: {v['help']}); "
        f"e.g. {v['html']} {v['why']}"
        for v in found
    ]


# ---- What issue 29 found a reader could not read: boxes that hide what
# they hold without saying so, figures that vanish on a scheme, a title
# that is not the page's name in the nav, code cut short, raw Python.

# A box "hides" content when it scrolls sideways and holds more than it
# shows; scroll-regions.js marks such a box (data-mha-more) and extra.css
# draws its cue, a shadow under the edge past which content is hidden.
_HIDING_BOXES = """
const hiding = () => [...document.querySelectorAll(
    ".md-content article *")].filter(el => {
  if (el.scrollWidth <= el.clientWidth + 1 || !el.getClientRects().length)
    return false;
  const o = getComputedStyle(el).overflowX;
  return o === "auto" || o === "scroll";
});
const what = el =>
  el.matches("table, .md-typeset__scrollwrap, .md-typeset__table") ||
    el.querySelector("table") ? "table" :
  el.querySelector("img, svg:not(.katex svg)") ? "figure" :
  el.matches(".katex-display") || el.querySelector(".katex") &&
    !el.querySelector("pre, code") ? "formula" :
  el.matches("pre, code") || el.querySelector("pre, code") ? "code" :
  "content";
"""


def scroll_cue_problems(page, wait_ms=WAIT_MS):
    """Every box that hides content past an edge shows a visible cue.

    A table wider than its column, a figure wider than a phone: the box
    scrolls, and the reader must see that it does (a shadow under the
    edge, or a mask fading it out), on the side where content is hidden
    (data-mha-more, set as the box scrolls). A box cut at a column or a
    panel otherwise reads as the whole table or figure.
    """
    settle(
        page,
        f"""() => {{ {_HIDING_BOXES}
          return hiding().every(el => el.hasAttribute("data-mha-more")); }}""",
        wait_ms=wait_ms,
    )
    return page.evaluate(
        f"""() => {{ {_HIDING_BOXES}
        const found = [];
        for (const el of hiding()) {{
          const s = getComputedStyle(el);
          const drawn = s.boxShadow !== "none" ||
            (s.maskImage || s.webkitMaskImage || "none") !== "none";
          const more = el.getAttribute("data-mha-more") || "";
          const right = el.scrollLeft + el.clientWidth < el.scrollWidth - 1;
          const text = el.textContent.replace(/\\s+/g, " ").trim()
            .slice(0, 40) || (el.querySelector("img") || {{}}).alt || "";
          const shown = `${{el.clientWidth}} of ${{el.scrollWidth}}px`;
          if (!drawn || (right && !more.includes("right")))
            found.push(`${{what(el)}} shows ${{shown}} with no cue that it ` +
                       `scrolls: ${{text.slice(0, 40)}}`);
        }}
        return found;
        }}"""
    )


# WCAG's contrast of two colours; any CSS colour, through a canvas.
_CONTRAST_JS = """
const ctx = document.createElement("canvas").getContext("2d");
function rgba(colour) {
  ctx.fillStyle = "#000"; ctx.fillStyle = colour;
  const c = ctx.fillStyle;
  if (c.startsWith("#"))
    return [1, 3, 5].map(i => parseInt(c.slice(i, i + 2), 16)).concat(1);
  const m = c.match(/[\\d.]+/g).map(Number);
  return [m[0], m[1], m[2], m.length > 3 ? m[3] : 1];
}
function luminance([r, g, b]) {
  const f = v => (v /= 255) <= 0.03928 ? v / 12.92 :
                 ((v + 0.055) / 1.055) ** 2.4;
  return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
}
function contrast(a, b) {
  const [x, y] = [luminance(a), luminance(b)].sort((p, q) => q - p);
  return (x + 0.05) / (y + 0.05);
}
// the colour a transparent element is seen on: its first opaque box
function backdrop(el) {
  for (let e = el; e; e = e.parentElement) {
    const c = rgba(getComputedStyle(e).backgroundColor);
    if (c[3] > 0.5) return c;
  }
  return [255, 255, 255, 1];
}
"""


def figure_text_problems(page):
    """The text of every SVG figure shown reads on what is behind it.

    For each displayed image whose source is an SVG (a file or a data:
    URL), the colour most of its tick labels (matplotlib's xtick_/ytick_
    groups; else of all its <text>) are drawn in is set against the
    figure's own background, or, where the figure is transparent, the
    colour of the page behind it; below 3:1 its labels are unreadable
    (a light variant, black labels, on the dark scheme: a notebook
    page's figures before issue 29).
    """
    return page.evaluate(
        f"""async () => {{ {_CONTRAST_JS}
        const found = [];
        const shown = [...document.querySelectorAll("article img")].filter(
          i => i.getClientRects().length && i.complete &&
               getComputedStyle(i).visibility !== "hidden" &&
               /^data:image\\/svg|\\.svg([#?]|$)/.test(i.getAttribute("src")));
        for (const img of shown) {{
          let svg;
          try {{
            const text = await (await fetch(img.src)).text();
            svg = new DOMParser().parseFromString(text, "image/svg+xml");
          }} catch (error) {{ continue; }}
          const fill = el => {{
            for (let e = el; e && e.getAttribute; e = e.parentNode) {{
              const m = (e.getAttribute("style") || "")
                .match(/(?:^|;)\\s*fill:\\s*([^;]+)/);
              if (m) return m[1].trim();
              if (e.getAttribute("fill")) return e.getAttribute("fill");
            }}
            return "#000000";
          }};
          // the tick labels, when it has axes: drawn on the figure's
          // ground (a heatmap's cell labels sit on their own cells)
          const ticks = svg.querySelectorAll(
            "[id^=xtick_] text, [id^=ytick_] text");
          const counts = {{}};
          for (const t of ticks.length ? ticks : svg.querySelectorAll("text"))
            if (t.textContent.trim())
              counts[fill(t)] = (counts[fill(t)] || 0) + 1;
          const colours = Object.keys(counts);
          if (!colours.length) continue;
          const ink = colours.sort((a, b) => counts[b] - counts[a])[0];
          // matplotlib's figure patch: its own background, or none
          const patch = svg.querySelector("#patch_1 path");
          const own = patch && fill(patch);
          const ground = own && own !== "none" && rgba(own)[3] > 0.5 ?
            rgba(own) : backdrop(img);
          const ratio = contrast(rgba(ink), ground);
          if (ratio < 3) {{
            const name = img.getAttribute("src").startsWith("data:") ?
              "an inline SVG" : img.getAttribute("src").split("/").pop();
            found.push(`figure text unreadable: ${{name}} draws its labels ` +
                       `in ${{ink}} on rgb(${{ground.slice(0, 3)}}), ` +
                       `contrast ${{ratio.toFixed(1)}}:1 (at least 3:1)`);
          }}
        }}
        return found;
        }}"""
    )


def code_width_problems(page, columns=79):
    """Every code block shows `columns` columns without scrolling.

    The package's lines are at most 79 columns (ruff), so a code block
    of the text column that shows fewer cuts nearly every line: checked
    at the desktop width, where the column has room (a notebook cell
    beside its In [n] prompt, before issue 29, showed 62).
    """
    return page.evaluate(
        """columns => {
        const found = [];
        const blocks = [...document.querySelectorAll(
          ".md-content article pre > code")].filter(c =>
            c.getClientRects().length &&
            !c.closest(".admonition, details, .mha-control"));
        for (const code of blocks) {
          const s = getComputedStyle(code);
          const probe = document.createElement("span");
          probe.textContent = "0".repeat(columns);
          probe.style.cssText = "position:absolute;visibility:hidden;" +
            "white-space:pre;font:inherit";
          code.appendChild(probe);
          const need = probe.getBoundingClientRect().width;
          probe.remove();
          const room = code.clientWidth - parseFloat(s.paddingLeft) -
                       parseFloat(s.paddingRight);
          if (room + 1 < need) {
            const first = code.textContent.trim().split("\\n")[0];
            const shows = Math.floor(room / need * columns);
            found.push(`code block shows ${shows} of ${columns} ` +
                       `columns: ${first.slice(0, 50)}`);
          }
        }
        return found;
        }""",
        columns,
    )


def title_problems(page):
    """The page's title is its name in the nav: its <h1> and the nav
    entry that leads to it say the same (a page not in the nav has
    nothing to differ from)."""
    found = page.evaluate(
        """() => {
        const squash = s => s.replace(/¶/g, "").replace(/\\s+/g, " ").trim();
        const links = [...document.querySelectorAll(
          ".md-nav--primary .md-nav__link--active")];
        const h1 = document.querySelector(".md-content article h1");
        if (!links.length || !h1) return null;
        return {nav: squash(links[links.length - 1].textContent),
                h1: squash(h1.textContent)};
        }"""
    )
    if found is None or found["nav"] == found["h1"]:
        return []
    h1, nav = found["h1"], found["nav"]
    return [f"title {h1!r} differs from its nav entry {nav!r}"]


# Python's own spelling in prose: a bool, None, a formatted zero that
# looks like a rounded small number, a zero with a sign.
_RAW_PYTHON = r"""
const SKIP = "pre, code, script, style, textarea, .katex, svg, " +
             ".md-nav, .md-search, .md-footer, .highlight";
const RAW = [
  // a value printed, not a word discussed ("True = blocked" is fine):
  // after a colon or "is", ending its clause
  [/(?:[:=]|\b(?:is|are|was|were))\s+(True|False|None)(?=\s*([.,;)]|$))/,
   "Python's"],
  [/(?<![\w.])[-−]?0\.0+e[+-]?0+\b/, "a formatted zero"],
  [/(?<![\w.−-])[-−]0(\.0+)?(?![\w.]|e[-+]?\d)/, "a signed zero"],
];
"""


def raw_python_problems(page):
    """No Python formatting in the text a reader reads: "passed: True",
    "at most 0.00e+00" (bit for bit equal), "-0.0 points". Code,
    formulas, figures and the site's chrome are not prose."""
    return page.evaluate(
        f"""() => {{ {_RAW_PYTHON}
        const root = document.querySelector(".md-content article");
        if (!root) return [];
        const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
        const found = [];
        for (let n = walker.nextNode(); n; n = walker.nextNode()) {{
          const el = n.parentElement;
          if (!el || el.closest(SKIP) || !el.getClientRects().length)
            continue;
          for (const [pattern, what] of RAW) {{
            const m = n.textContent.match(pattern);
            if (m) found.push(`${{what}} "${{m[0].replace(/\\s+/g, " ")}}" ` +
              "in the text: " +
              n.textContent.replace(/\\s+/g, " ").trim().slice(0, 70));
          }}
        }}
        return found;
        }}"""
    )


def notebook_problems(page):
    """A notebook page as a reader meets it: no prompt counting from
    where the hidden set-up cells left off (In [10] first), and no
    glued value printed a second time as the cell's result (glue:
    x = 0.0, then 0.0)."""
    return page.evaluate(
        r"""() => {
        const found = [];
        const root = document.querySelector(".md-content article");
        if (!root) return found;
        const prompts = [...root.querySelectorAll(".jp-InputPrompt")]
          .filter(p => p.getClientRects().length)
          .map(p => p.textContent.match(/\[(\d+)\]/))
          .filter(Boolean);
        if (prompts.length && prompts[0][1] !== "1")
          found.push(`the first cell shows In [${prompts[0][1]}]`);
        const norm = s => s.replace(/\bTrue\b/g, "true")
          .replace(/\bFalse\b/g, "false").replace(/\bNone\b/g, "null")
          .replace(/'/g, '"').replace(/\s+/g, "");
        const blocks = [...root.querySelectorAll("pre")]
          .filter(p => p.getClientRects().length);
        blocks.forEach((pre, i) => {
          const m = pre.textContent.trim().match(/^glue: (\w+) = (.+)$/);
          const next = blocks[i + 1];
          if (m && next && !m[2].endsWith(" ...") &&
              norm(next.textContent) === norm(m[2]))
            found.push(`glued value ${m[1]} printed twice: ${m[2]}`);
        });
        return found;
        }"""
    )


def search_snippet_problems(page):
    r"""No raw TeX (\(, \[, $$) in the search results a reader sees:
    Material's list, or Zensical's in its shadow root."""
    return page.evaluate(
        r"""() => {
        const RAW = /\\\(|\\\)|\\\[|\\\]|\$\$|\\[a-zA-Z]+\{/;
        const texts = [];
        const walk = root => {
          for (const el of root.querySelectorAll(
              ".md-search-result__item, ol[role=listbox] li, " +
              "[role=option]"))
            if (el.getClientRects().length) texts.push(el.textContent);
          for (const el of root.querySelectorAll("*"))
            if (el.shadowRoot) walk(el.shadowRoot);
        };
        walk(document);
        return [...new Set(texts)]
          .map(t => t.replace(/\s+/g, " ").trim())
          .filter(t => RAW.test(t))
          .map(t => `raw TeX "${t.match(RAW)[0]}" in a search result: ` +
                    t.slice(0, 80));
        }"""
    )
