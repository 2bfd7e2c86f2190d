"""Formulas typeset at build time (node + the vendored KaTeX).

A trial, not part of the build: copy the built site, typeset every
formula with node, and compare with typesetting in the browser (time to
typeset math, bytes, same rendering). The decision adopts it only if
math is ready sooner on every page and renders the same.
"""

import json
import shutil
from pathlib import Path

from bench.timing import ROOT, run, summary

KATEX_JS = "docs/assets/katex/katex.min.js"

# Replaces each arithmatex element's \( \) or \[ \] with KaTeX's HTML,
# with the options docs/assets/javascripts/katex.js uses in the browser.
PRERENDER_JS = r"""
const fs = require('fs');
const katex = require(process.argv[2]);
const files = process.argv.slice(3);
const start = process.hrtime.bigint();
let formulas = 0, errors = 0;
const unescape = s => s.replace(/&lt;/g, '<').replace(/&gt;/g, '>')
  .replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&amp;/g, '&');
for (const file of files) {
  const text = fs.readFileSync(file, 'utf8');
  const out = text.replace(
    /(<(span|div) class="arithmatex">)([\s\S]*?)(<\/\2>)/g,
    (all, open, tag, body, close) => {
      const m = /^\s*\\\(([\s\S]*)\\\)\s*$|^\s*\\\[([\s\S]*)\\\]\s*$/
        .exec(unescape(body));
      if (m === null) return all;
      formulas += 1;
      const html = katex.renderToString(m[2] !== undefined ? m[2] : m[1], {
        displayMode: m[2] !== undefined, throwOnError: false,
        errorColor: '#cc0000'});
      if (html.includes('katex-error')) errors += 1;
      return open + html + close;
    });
  fs.writeFileSync(file, out);
}
const ms = Number(process.hrtime.bigint() - start) / 1e6;
console.log(JSON.stringify({formulas, errors, render_ms: ms}));
"""


def prerender(site, dest, runs):
    """Copy site to dest with every page's math typeset by node."""
    shutil.copytree(site, dest)
    script = dest.parent / "prerender.js"
    script.write_text(PRERENDER_JS)
    pages = sorted(str(p) for p in dest.rglob("*.html"))
    katex_js = str(ROOT / KATEX_JS)
    timings, stats = [], None
    for i in range(runs):  # every run re-renders the pristine pages
        if i:
            shutil.rmtree(dest)
            shutil.copytree(site, dest)
        seconds, output = run(["node", str(script), katex_js, *pages], dest)
        stats = json.loads(output.strip().splitlines()[-1])
        timings.append((seconds, stats["render_ms"]))
    return {
        "pages": len(pages),
        "formulas": stats["formulas"],
        "errors": stats["errors"],
        "node_total_s": summary([t for t, _ in timings]),
        "render_ms": summary([r for _, r in timings]),
        "site_bytes_before": _folder_bytes(site, "*.html"),
        "site_bytes_after": _folder_bytes(dest, "*.html"),
    }


def _folder_bytes(folder, pattern):
    return sum(p.stat().st_size for p in Path(folder).rglob(pattern))


def katex_decision(build, reading):
    """Adopt build-time KaTeX only if math is ready sooner and the same."""
    client, server = reading["client"], reading["prerendered"]
    pages = []
    for page, c in client.items():
        s = server[page]
        same = c["formulas"] == s["formulas"] and c["shapes"] == s["shapes"]
        differ = sum(
            a != b for a, b in zip(c["shapes"], s["shapes"], strict=False)
        )
        pages.append(
            {
                "page": page,
                "formulas": c["formulas"],
                "client_math_ms": c["math_ms"]["median"],
                "client_typeset_ms": c["typeset_ms"]["median"],
                "prerendered_math_ms": s["math_ms"]["median"],
                "client_parsed_ms": c["dom_interactive_ms"]["median"],
                "prerendered_parsed_ms": s["dom_interactive_ms"]["median"],
                "client_transfer_bytes": c["transfer_bytes"]["median"],
                "prerendered_transfer_bytes": s["transfer_bytes"]["median"],
                "same_rendering": same,
                "formulas_that_differ": differ,
                "katex_errors": [c["katex_errors"], s["katex_errors"]],
            }
        )
    faster = all(p["prerendered_math_ms"] < p["client_math_ms"] for p in pages)
    same = all(p["same_rendering"] for p in pages) and not build["errors"]
    adopt = faster and same
    saved = ", ".join(
        f"{p['client_math_ms'] - p['prerendered_math_ms']:.0f}" for p in pages
    )
    typeset = ", ".join(f"{p['client_typeset_ms']:.0f}" for p in pages)
    names = ", ".join(p["page"] for p in pages)
    parsed = ", ".join(
        f"{p['client_parsed_ms']:.0f} -> {p['prerendered_parsed_ms']:.0f}"
        for p in pages
    )
    reason = (
        f"math ready {'sooner' if faster else 'not sooner'} (saves "
        f"{saved} ms on {names}, where typesetting in the browser takes "
        f"{typeset} ms; the pre-typeset HTML finishes parsing at "
        f"{parsed} ms), rendering {'identical' if same else 'differs'}; "
        f"it would add node to the build and grow the HTML from "
        f"{build['site_bytes_before']:,} to {build['site_bytes_after']:,} "
        "bytes"
    )
    return {
        "adopt": adopt,
        "reason": reason,
        "pages": pages,
        "build_step": dict(build),
    }
