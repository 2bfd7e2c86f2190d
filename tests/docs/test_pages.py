"""The pages agree with the code and the data; each check catches drift.

The first test runs every check on the repository (after `make
generate`); the others write one drifted page into tmp_path and show the
check reports its file and line.
"""

import shutil
import textwrap

import pytest

from pipeline import page_linter as pages
from pipeline.config import ROOT

DATA = ROOT / "docs/generated/data"
CHECKS = [
    pages.check_code,
    pages.check_includes,
    pages.check_placeholders,
    pages.check_hand_typed,
    pages.check_answers,
    pages.check_math,
]


@pytest.fixture
def repo(tmp_path):
    """Factory: repo(page_text) -> a copy with docs/page.md and the data."""
    if not DATA.is_dir():
        pytest.fail("no docs/generated/data: run `make generate` first")

    def make(page, module=""):
        shutil.copytree(DATA, tmp_path / "docs/generated/data")
        (tmp_path / "docs/page.md").write_text(
            textwrap.dedent(page).lstrip("\n")
        )
        (tmp_path / "mha_ref").mkdir()
        (tmp_path / "mha_ref/demo.py").write_text(textwrap.dedent(module))
        return tmp_path

    return make


def run(check, root):
    return [str(p) for p in check(root)]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_pages_agree(check):
    assert run(check, ROOT) == []


def test_check_code_reports_typed_block(repo):
    root = repo("""
        # Demo

        ```python
        --8<-- "mha_ref/demo.py:add"
        ```

        ```python
        def add(a, b):
            return a + b
        ```
        """)
    assert run(pages.check_code, root) == [
        "docs/page.md:8: code typed on the page: put it in a named section"
        ' of a tested file and include it with --8<-- "mha_ref/<file>.py:'
        '<section>"'
    ]


def test_check_includes_reports_vanished_section(repo):
    module = """
        # --8<-- [start:add]
        def add(a, b):
            return a + b
        # --8<-- [end:add]
        """
    page = """
        # Demo

        ```python
        --8<-- "mha_ref/demo.py:add"
        --8<-- "mha_ref/demo.py:ad"
        ```
        """
    problems = run(pages.check_includes, repo(page, module))
    assert problems == [
        "docs/page.md:5: mha_ref/demo.py has no section 'ad': did you "
        "mean add? (its sections: add)"
    ]


def test_check_placeholders_reports_missing_value(repo):
    root = repo("""
        # Demo

        The output is << attention_matrix.weighted_sum.output | vec >>,
        the gradient << softmax_backward.no_such_key | vec >>.
        """)
    (problem,) = run(pages.check_placeholders, root)
    assert problem.startswith(
        "docs/page.md:4: << softmax_backward.no_such_key >>: "
        "softmax_backward has no 'no_such_key'; (its names: "
    )
    assert "probabilities" in problem  # a name that exists there


def test_check_placeholders_reports_a_method_shown_as_text(repo):
    root = repo("""
        # Demo

        It summed << edges.statistics.fp16_sum.keys >> keys.
        """)
    (problem,) = run(pages.check_placeholders, root)
    assert problem.startswith("docs/page.md:3: MethodShownError")
    assert 'name["key"]' in problem


def test_check_hand_typed_reports_typed_result(repo):
    aligned = pages.load_data(ROOT)["kv_cache"]["aligned"]
    typed = ", ".join(f"{x:g}" for x in aligned)  # "25, 30"
    root = repo(f"""
        # Demo

        The cached queries see means << kv_cache.aligned | vec >>;

        that is, [{typed}].
        """)
    assert run(pages.check_hand_typed, root) == [
        f"docs/page.md:5: '{typed}' types the result kv_cache.aligned by "
        "hand; it goes stale when the code changes: write "
        "<< kv_cache.aligned | vec >> (or num, sci) instead"
    ]


def test_check_answers_reports_a_number_typed_in_an_answer(repo):
    root = repo("""
        # Demo

        ## Exercises

        !!! question "What are the weights of the scores $[1, -1]$?"
            Work them out, then check.

            ??? success "Answer"
                << scaling.scaled_weights | vec >>, from $e^{2}$ and
                $x_1$, as `softmax([1.0, -1.0])` returns ([the
                page](scaling.md#step-2)).

        !!! question "And without the scale?"
            ??? success "Answer"
                About 0.731 for the first key, and

                ```python
                --8<-- "mha_ref/demo.py:softmax"
                ```

                $\\frac{1}{2}$ for the second.

        Outside an answer 0.731 is check_hand_typed's business.
        """)
    assert run(pages.check_answers, root) == [
        "docs/page.md:15: '0.731' typed in an exercise's answer: compute "
        "it in the page script's Exercises cell, glue it (glue.value) and "
        "write << page.name >> instead",
        "docs/page.md:21: '1' typed in an exercise's answer: compute it "
        "in the page script's Exercises cell, glue it (glue.value) and "
        "write << page.name >> instead",
    ]


def test_check_math_reports_formula_that_fails_to_parse(repo):
    root = repo(r"""
        # Demo

        Fine: $\sqrt{d_k}$ and $$A = \operatorname{softmax}(S)$$

        Broken: $\frac{1}{\sqrt{d_k}$.
        """)
    (problem,) = run(pages.check_math, root)
    assert problem.startswith(
        r"docs/page.md:5: KaTeX cannot parse '\\frac{1}{\\sqrt{d_k}'"
    )


def test_check_math_reports_a_backslash_python_ate(repo):
    # not a raw string: "\t" of "\theta" is a TAB, which KaTeX parses
    root = repo("""
        # Demo

        Fine: $m\\theta_i$.

        Eaten: $n\theta_i$.
        """)
    (problem,) = run(pages.check_math, root)
    assert problem == (
        "docs/page.md:5: 'n\\theta_i' holds TAB (the \\t of \\theta, "
        "\\tau): a backslash escape read by Python; double the "
        "backslash, or write the string as r'...'"
    )


def test_check_command_prints_one_line_per_mistake(repo, capsys):
    """What `make site`, `make serve` and `make fast` show: file:line and
    the fix, one line each, no traceback, and a failing exit code."""
    module = """
        # --8<-- [start:cross-attention]
        def cross(q, k):
            return q @ k
        # --8<-- [end:cross-attention]
        """
    root = repo(
        """
        # Demo

        ```python
        --8<-- "mha_ref/demo.py:cross-atention"
        ```

        ```python
        print("typed")
        ```

        The rows: << scaling.first_rows >>.
        """,
        module,
    )
    assert pages.main(root) == 1
    lines = capsys.readouterr().err.strip().split("\n")
    assert [line.split(":")[:2] for line in lines] == [
        ["docs/page.md", "4"],
        ["docs/page.md", "8"],
        ["docs/page.md", "11"],
    ]
    assert "did you mean cross-attention?" in lines[0]
    assert "code typed on the page" in lines[1]
    assert "scaling has no 'first_rows'" in lines[2]
    assert "sqrt_d_head" in lines[2]  # the names that exist there
    assert not any("Traceback" in line for line in lines)
