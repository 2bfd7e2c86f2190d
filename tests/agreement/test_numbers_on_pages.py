"""Numbers on pages: placeholders resolve, results are never typed, the
built HTML is clean, and each claim shows on the rendered page as the
generated data has it."""

import json
import os

import pytest

from . import drift
from .conftest import describe, reported, reported_alone

# Generated data as the scripts write it (the subset the claims read).
DATA = {
    "weighted_sum": {"values": [[2, 0], [0, 4]], "weights": [0.75, 0.25],
                     "output": [1.5, 1.0]},
    "scaling": {"d_head": 64, "scores": [8.0, -8.0],
                "unscaled_weights": [0.9999998874648379,
                                     1.1253517471925912e-07],
                "scaled_weights": [0.8807970779778823,
                                   0.11920292202211755],
                "shift_input": [1000, 1000], "shift_output": [0.5, 0.5]},
    "softmax_backward": {"score_grad": [0.25, -0.25],
                         "naive_grad": [0.25, 0.0]},
    "pitfalls": {"mask_demo": {"masked_before": [1.0, 0.0],
                               "zeroed_after": [0.5, 0.0]}},
    "kv_cache": {"aligned": [25.0, 30.0], "upper_left": [10.0, 15.0]},
    "multiple_heads": {"d_model": 512, "total_params": 1048576,
                       "rows": [{"n_head": 8, "d_head": 64}]},
    "parity": {"rows": [{"pair": "sdpa", "max_abs_diff": 1.19e-07}]},
}

# What each rendered page says (the text between the tags), as the
# placeholders render it with the vec and num filters.
RENDERED = {
    "index": r"<p>The output is</p><div class=\"arithmatex\">\[ \mathbf o"
             r" = [1.5, 1] \]</div>",
    "scaling": "<p>Scores [8, -8] give [1, 0] unscaled and "
               "[0.8808, 0.1192] scaled; [1000, 1000] gives [0.5, 0.5].</p>",
    "softmax-backward": r"<p>The gradient is <span class=\"arithmatex\">"
                        r"\((0.25,\ -0.25)\)</span>, not (0.25, 0).</p>",
    "pitfalls": "<p>Before: [1, 0]. After: [0.5, 0].</p>",
    "kv-cache": "<p>Aligned [25, 30]; upper left [10, 15].</p>",
    "multiple-heads": "<p>Total: 1,048,576 parameters.</p>",
}


def write_site(base, rendered=RENDERED, data=DATA):
    """A built site and its data, fresh (site newer than sources)."""
    for name, value in data.items():
        path = base / drift.DATA / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    for page, body in rendered.items():
        source = base / "docs" / f"{page}.md"
        source.parent.mkdir(parents=True, exist_ok=True)
        if not source.exists():
            source.write_text(f"# {page}\n")
        built = drift.site_page(base, f"docs/{page}.md")
        built.parent.mkdir(parents=True, exist_ok=True)
        built.write_text(f"<html><body>\n<article>\n{body}\n</article>\n"
                         "</body></html>\n")
    newer = max(p.stat().st_mtime for p in base.rglob("*")) + 10
    for path in (base / "site").rglob("*.html"):
        os.utime(path, (newer, newer))
    return base


# ------------------------------------------------------- the real repo


def real_data(root):
    data = drift.load_data(root)
    if data is None:
        pytest.skip("no docs/generated/data: run `make generate` first")
    return data


def test_pages_placeholders_resolve(root):
    data = real_data(root)
    problems = drift.check_placeholders(root, data)
    assert not problems, describe(problems)


def test_pages_do_not_type_known_results(root):
    problems = drift.check_hand_typed(root)
    assert not problems, describe(problems)


def test_macros_module_defines_the_checked_filters(root):
    from scripts import macros

    for name in drift.CUSTOM_FILTERS:
        assert callable(getattr(macros, name)), name
    assert macros.vec([1.5, 1.0]) == "[1.5, 1]"
    assert drift.RE_VARIABLE.pattern.startswith("<<")


@pytest.mark.build
def test_site_is_fresh(root):
    problems = drift.check_site_fresh(root)
    assert not problems, describe(problems)


@pytest.mark.build
def test_site_html_has_no_template_leftovers(root):
    problems = drift.check_site_fresh(root) or drift.check_site_html(root)
    assert not problems, describe(problems)


@pytest.mark.build
def test_site_code_blocks_come_from_included_sections(root):
    problems = drift.check_site_fresh(root) or drift.check_site_code(root)
    assert not problems, describe(problems)


@pytest.mark.build
def test_site_claims_show_the_generated_values(root):
    real_data(root)
    problems = drift.check_site_fresh(root) or drift.check_claims(root)
    assert not problems, describe(problems)


# ------------------------------------------------------ drifted copies


def test_placeholders_good_page_passes(repo):
    base = repo({"docs/index.md": """
        # Numbers

        Output $<< weighted_sum.output | vec >>$, first weight
        << weighted_sum.weights[0] | num(2) >>, rows
        << multiple_heads.rows[0].d_head >>, << num(scaling.d_head) >>.
        <% for row in multiple_heads.rows %><< row.n_head >><% endfor %>
        <% raw %>Literal << not.data >> in a raw block.<% endraw %>
        <# << a comment >> #>
        """})
    problems = drift.check_placeholders(base, DATA)
    assert problems == [], describe(problems)


def test_placeholders_report_unknown_data(repo):
    base = repo({"docs/scaling.md": """
        # Scaling

        The weights are << scalling.scaled_weights | vec >>.
        """})
    problems = drift.check_placeholders(base, DATA)
    assert reported(problems, "docs/scaling.md", 3, "'scalling'",
                    "scripts/scalling.py"), describe(problems)


def test_placeholders_report_a_missing_key_and_index(repo):
    base = repo({"docs/kv-cache.md": """
        # Cache

        Aligned: << kv_cache.alligned | vec >>.

        Row: << multiple_heads.rows[3].n_head >>, << parity.rows[0].diff >>
        """})
    problems = drift.check_placeholders(base, DATA)
    assert reported(problems, "docs/kv-cache.md", 3, "no key 'alligned'",
                    "aligned, upper_left"), describe(problems)
    assert reported(problems, "docs/kv-cache.md", 5, "list of 1"), \
        describe(problems)
    assert reported(problems, "docs/kv-cache.md", 5,
                    "parity.rows[0] has no key 'diff'"), describe(problems)


def test_placeholders_report_unknown_filters_and_syntax(repo):
    base = repo({"docs/index.md": """
        << weighted_sum.output | vector >>
        << weighted_sum.output | vec( >>
        """})
    problems = drift.check_placeholders(base, DATA)
    assert reported(problems, "docs/index.md", 1, "'vector'"), \
        describe(problems)
    assert reported(problems, "docs/index.md", 2, "not an expression"), \
        describe(problems)


def test_placeholders_report_missing_generated_data(repo):
    base = repo({"docs/index.md": "# x\n"})
    problems = drift.check_placeholders(base)
    assert reported(problems, drift.DATA, 0, "make generate")


def test_hand_typed_results_are_reported(repo):
    base = repo({"docs/index.md": """
        # Start

        Values $[2, 0]$ and $[0, 4]$ with weights 0.75 and 0.25 give
        $[1.5,\\ 1]$; scores [8, -8] and [1000, 1000], values
        [10, 20, 30, 40, 50], weights $(0.5, 0.5)$.
        The cache gives [25, 30] where is_causal gives [10.0, 15.0].
        Gradient $(0.25, -0.25)$, not (0.25, 0); 1,048,576 parameters.
        Zeroing gives [0.5, 0]; scaled, 0.8808; errors near 1.19e-07.
        Live: << weighted_sum.output | vec >> and
        << kv_cache.aligned | vec >>.
        """})
    problems = drift.check_hand_typed(base)
    found = sorted((p.line, p.message.split("'")[1]) for p in problems)
    assert found == [
        (4, "1.5,\\ 1"), (6, "10.0, 15.0"), (6, "25, 30"),
        (7, "0.25, -0.25"), (7, "0.25, 0"), (7, "1,048,576"),
        (8, "0.5, 0"), (8, "0.8808"), (8, "1.19e-07"),
    ], describe(problems)
    assert all("<< " in p.message for p in problems)


def test_site_html_reports_template_leftovers(repo):
    base = repo({
        "docs/scaling.md": "# Scaling\n",
        "site/scaling/index.html": """
            <html><body>
            <p>Weights &lt;&lt; scaling.scaled_weights | vec &gt;&gt;</p>
            <p>Code <code>&lt;&lt; x &gt;&gt;</code> is fine.</p>
            <pre><code>--8<-- "mha_ref/x.py:y"</code></pre>
            <div class="arithmatex">\\[ e^{{x}} \\]</div>
            <span class="arithmatex">\\( &lt;&lt; bad &gt;&gt; \\)</span>
            <p>--8&lt;-- "mha_ref/numpy_ref.py:softmax"</p>
            <p>{{ jinja }}</p>
            <p>Notebook math $\\sqrt{d_\\text{model}}$ is TeX.</p>
            </body></html>
            """,
    })
    problems = drift.check_site_html(base)
    lines = sorted({p.line for p in problems})
    assert lines == [2, 6, 7, 8], describe(problems)
    assert reported(problems, "site/scaling/index.html", 2, "'<<'",
                    "docs/scaling.md"), describe(problems)


def test_site_fresh_reports_an_old_build(repo):
    base = write_site(repo({"docs/kv-cache.md": "# Cache\n"}))
    assert drift.check_site_fresh(base) == []
    page = base / "docs/kv-cache.md"
    later = (base / "site/kv-cache/index.html").stat().st_mtime + 5
    os.utime(page, (later, later))
    problems = drift.check_site_fresh(base)
    assert reported(problems, "docs/kv-cache.md", 0, "make site"), \
        describe(problems)


def test_claims_good_site_passes(repo):
    base = write_site(repo({}))
    problems = drift.check_claims(base)
    assert problems == [], describe(problems)


def test_claims_report_a_hand_typed_different_number(repo):
    base = repo({"docs/kv-cache.md": """
        # Cache

        Aligned << kv_cache.aligned | vec >>.
        """})
    rendered = dict(RENDERED, **{
        "kv-cache": "<p>Aligned [25, 35]; upper left [10, 15].</p>"})
    write_site(base, rendered)
    problems = drift.check_claims(base)
    assert reported_alone(problems, "docs/kv-cache.md", 3, "[25, 30]",
                          "<< kv_cache.aligned | vec >>"), describe(problems)


def test_claims_report_changed_data(repo):
    data = json.loads(json.dumps(DATA))
    data["weighted_sum"]["output"] = [1.4, 1.0]
    data["scaling"]["scaled_weights"] = [0.99, 0.01]
    rendered = dict(RENDERED, index="<p>[1.4, 1]</p>",
                    scaling=RENDERED["scaling"].replace(
                        "[0.8808, 0.1192]", "[0.99, 0.01]"))
    base = write_site(repo({}), rendered, data)
    problems = drift.check_claims(base)
    assert reported(problems, "docs/generated/data/weighted_sum.json", 0,
                    "[1.4, 1.0]", "[1.5, 1.0]", "scripts/weighted_sum.py"
                    ), describe(problems)
    assert reported(problems, "docs/generated/data/scaling.json", 0,
                    "second still contributes"), describe(problems)
    assert len(problems) == 2, describe(problems)


def test_claims_report_a_missing_key(repo):
    data = json.loads(json.dumps(DATA))
    del data["pitfalls"]["mask_demo"]["zeroed_after"]
    base = write_site(repo({}), RENDERED, data)
    problems = drift.check_claims(base)
    assert reported(problems, "docs/generated/data/pitfalls.json", 0,
                    "no key 'zeroed_after'"), describe(problems)


def test_shown_pattern_accepts_the_page_formats():
    pattern = drift.shown_pattern([0.8807970779778823, 0.11920292202211755])
    for text in ("[0.8808, 0.1192]", "(0.88, 0.12)", "0.881,\\ 0.119"):
        assert pattern.search(text), text
    for text in ("[0.8808, 0.1193]", "[10.8808, 0.1192]"):
        assert not pattern.search(text), text
    assert drift.shown_pattern([0.25, -0.25]).search("(0.25, \u2212 0.25)")
    assert not drift.shown_pattern([0.25, 0.0]).search("(0.25, 0.5)")
    assert drift.shown_pattern(1048576).search("1{,}048{,}576")


def test_site_code_reports_code_no_section_holds(repo):
    base = repo({
        "mha_ref/demo.py": """
            # --8<-- [start:add]
            def add(a, b):
                return a + b
            # --8<-- [end:add]
            """,
        "docs/index.md": """
            # Demo

            ```python
            --8<-- "mha_ref/demo.py:add"
            ```

            Then, indented:

                total = add(1, 2)
            """,
        "site/index.html": """
            <html><body>
            <div class="highlight"><pre><span></span><code><a
            id="l1"></a><span class="k">def</span> <span>add</span>(a, b):
                <span class="k">return</span> a + b
            </code></pre></div>
            <pre><code>total = add(1, 2)
            </code></pre>
            </body></html>
            """,
    })
    problems = drift.check_site_code(base)
    assert reported_alone(problems, "docs/index.md", 9, "site/index.html:6",
                          "'total = add(1, 2)'"), describe(problems)


def test_site_code_allows_listed_shell_blocks(repo):
    base = repo({
        "docs/about.md": """
            # About

            ```sh
            make serve
            ```
            """,
        "site/about/index.html": """
            <html><body><pre><code>make serve
            </code></pre></body></html>
            """,
    })
    assert drift.check_site_code(base) == []
