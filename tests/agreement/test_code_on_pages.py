"""Code on pages: every block is an include of a named, used section.

The first tests run the checkers on the real repository; the rest build a
small drifted copy in tmp_path and show each checker reports the file and
line of the drift, with a fix in the message.
"""

from . import drift
from .conftest import describe, reported, reported_alone

CODE = '''
"""A tiny module with sections."""


# --8<-- [start:add]
def add(a, b):
    return a + b
# --8<-- [end:add]


class Box:
    # --8<-- [start:box-get]
    def get(self):
        return 1
    # --8<-- [end:box-get]
'''

GOOD_PAGE = '''
# Demo

```python
--8<-- "mha_ref/demo.py:add"
```

=== "NumPy"

    ```python
    --8<-- "mha_ref/demo.py:box-get"
    ```

!!! note
    Text.
'''


# ------------------------------------------------------- the real repo


def test_pages_code_blocks_are_snippet_includes(root):
    problems = drift.check_code_blocks(root)
    assert not problems, describe(problems)


def test_pages_includes_name_existing_sections(root):
    problems = drift.check_includes(root)
    assert not problems, describe(problems)


def test_sections_pair_up_and_are_all_shown(root):
    problems = drift.check_sections(root)
    assert not problems, describe(problems)


# ------------------------------------------------------ drifted copies


def test_code_blocks_good_page_passes(repo):
    base = repo({"mha_ref/demo.py": CODE, "docs/index.md": GOOD_PAGE})
    assert drift.check_code_blocks(base) == []
    assert drift.check_includes(base) == []
    assert drift.check_sections(base) == []


def test_code_blocks_report_a_hand_typed_block(repo):
    base = repo({"docs/scaling.md": """
        # Scaling

        Some text.

        ```python
        import numpy as np
        ```
        """})
    problems = drift.check_code_blocks(base)
    assert reported(problems, "docs/scaling.md", 6, "not included",
                    "named section", "--8<--"), describe(problems)


def test_code_blocks_report_a_typed_line_in_a_tab(repo):
    base = repo({"mha_ref/demo.py": CODE, "docs/index.md": """
        # Tabs

        === "NumPy"

            ```python
            --8<-- "mha_ref/demo.py:add"
            print(add(1, 2))
            ```
        """})
    problems = drift.check_code_blocks(base)
    assert reported(problems, "docs/index.md", 7, "opened at line 5"), \
        describe(problems)


def test_code_blocks_report_an_empty_block_in_an_admonition(repo):
    base = repo({"docs/index.md": """
        # Note

        !!! note
            ```python
            ```
        """})
    problems = drift.check_code_blocks(base)
    assert reported(problems, "docs/index.md", 4, "not included"), \
        describe(problems)


def test_code_blocks_report_line_ranges_and_whole_files(repo):
    base = repo({"mha_ref/demo.py": CODE, "docs/index.md": """
        # Lines

        ```python
        --8<-- "mha_ref/demo.py:4:6"
        ```

        ```python
        --8<-- "mha_ref/demo.py"
        ```
        """})
    problems = drift.check_code_blocks(base)
    assert reported(problems, "docs/index.md", 4, "line range :4:6",
                    "named section"), describe(problems)
    assert reported(problems, "docs/index.md", 8, "a whole file"), \
        describe(problems)


def test_code_blocks_report_hl_lines(repo):
    base = repo({"mha_ref/demo.py": CODE, "docs/index.md": """
        # Highlight

        ```python hl_lines="2"
        --8<-- "mha_ref/demo.py:add"
        ```
        """})
    problems = drift.check_code_blocks(base)
    assert reported(problems, "docs/index.md", 3, "hl_lines"), \
        describe(problems)


def test_code_blocks_allow_shell_only_where_listed(repo):
    shell = """
        # Commands

        ```sh
        make serve
        ```
        """
    base = repo({
        "Makefile": "serve: ## serve\n\techo\n",
        "docs/about.md": shell,
        "docs/scaling.md": shell,
    })
    problems = drift.check_code_blocks(base)
    assert not any(p.path == "docs/about.md" for p in problems)
    assert reported(problems, "docs/scaling.md", 4, "```sh block"), \
        describe(problems)


def test_code_blocks_report_an_unknown_make_target(repo):
    base = repo({
        "Makefile": "serve: ## serve\n\techo\nsite:\n\techo\n",
        "docs/about.md": """
            # Commands

            ```console
            $ make site
            $ make serv   # typo
            ```
            """,
    })
    problems = drift.check_code_blocks(base)
    assert reported_alone(problems, "docs/about.md", 5,
                          "no target 'serv'"), describe(problems)


def test_code_blocks_follow_whole_file_includes(repo):
    base = repo({
        "docs/contributing.md": '--8<-- "CONTRIBUTING.md"\n',
        "CONTRIBUTING.md": """
            # Contributing

            ```sh
            make test
            ```

            ```python
            x = 1
            ```
            """,
    })
    problems = drift.check_code_blocks(base)
    assert reported_alone(problems, "CONTRIBUTING.md", 8, "not included"), \
        describe(problems)


def test_includes_report_a_missing_file(repo):
    base = repo({"docs/index.md": """
        # Missing

        ```python
        --8<-- "mha_ref/nope.py:add"
        ```
        """})
    problems = drift.check_includes(base)
    assert reported(problems, "docs/index.md", 4, "no file mha_ref/nope.py"
                    ), describe(problems)


def test_includes_report_a_missing_section(repo):
    base = repo({"mha_ref/demo.py": CODE, "docs/index.md": """
        # Missing

        Text.

        ```python
        --8<-- "mha_ref/demo.py:sub"
        ```
        """})
    problems = drift.check_includes(base)
    assert reported(problems, "docs/index.md", 6, "no section 'sub'",
                    "its sections: add, box-get", "[start:sub]"), \
        describe(problems)


def test_includes_report_an_empty_section(repo):
    base = repo({
        "mha_ref/demo.py": "# --8<-- [start:nothing]\n\n"
                           "# --8<-- [end:nothing]\n",
        "docs/index.md": '```python\n--8<-- "mha_ref/demo.py:nothing"\n'
                         '```\n',
    })
    problems = drift.check_includes(base)
    assert reported(problems, "docs/index.md", 2, "is empty"), \
        describe(problems)


def test_includes_report_a_section_outside_a_fence(repo):
    base = repo({"mha_ref/demo.py": CODE, "docs/index.md": """
        # Bare

        --8<-- "mha_ref/demo.py:add"
        """})
    problems = drift.check_includes(base)
    assert reported(problems, "docs/index.md", 3, "outside a fenced block"
                    ), describe(problems)


def test_includes_allow_generated_tables_and_markdown(repo):
    base = repo({
        "CONTRIBUTING.md": "# Contributing\n",
        "docs/index.md": """
            # Tables

            --8<-- "docs/generated/tables/scaling.md"

            --8<-- "CONTRIBUTING.md"
            """,
    })
    assert drift.check_includes(base) == []


def test_includes_report_a_marker_line_on_a_page(repo):
    base = repo({"CONTRIBUTING.md": """
        # Contributing

        Put `# --8<-- [start:softmax]` above the function.
        Escaped: `# ;--8<-- [start:softmax]`, or `[start:<name>]`.
        """, "docs/contributing.md": '--8<-- "CONTRIBUTING.md"\n'})
    problems = drift.check_includes(base)
    assert reported_alone(problems, "CONTRIBUTING.md", 3,
                          "deletes the whole line"), describe(problems)


def test_sections_report_a_dead_section(repo):
    base = repo({"mha_ref/demo.py": CODE, "docs/index.md": """
        ```python
        --8<-- "mha_ref/demo.py:add"
        ```
        """})
    problems = drift.check_sections(base)
    assert reported_alone(problems, "mha_ref/demo.py", 11,
                          "'box-get' is not shown on any page",
                          '--8<-- "mha_ref/demo.py:box-get"'), \
        describe(problems)


def test_sections_report_dead_sections_in_scripts(repo):
    base = repo({"scripts/topic/run.py": CODE, "docs/index.md": "# x\n"})
    problems = drift.check_sections(base)
    assert reported(problems, "scripts/topic/run.py", 4, "'add'")
    assert reported(problems, "scripts/topic/run.py", 11, "'box-get'")


def test_sections_report_unpaired_markers(repo):
    base = repo({"mha_ref/bad.py": """
        # --8<-- [start:one]
        x = 1
        # --8<-- [end:two]
        # --8<-- [start:three]
        # --8<-- [start:three]
        y = 2
        # --8<-- [end:three]
        # --8<-- [start:three]
        # --8<-- [end:three]
        # --8<-- [start:Bad Name]
        """, "docs/index.md": "# x\n"})
    problems = drift.check_sections(base)
    for line, words in [
        (1, "never closed"), (3, "without a start"),
        (5, "second start"), (8, "defined twice"),
        (10, "invalid name"),
    ]:
        assert reported(problems, "mha_ref/bad.py", line, words), \
            f"line {line}: {words}\n" + describe(problems)


def test_fences_find_nested_and_long_fences():
    lines = [
        "````markdown",
        "```python",
        "x",
        "```",
        "````",
        "    ~~~ {.python title='a'}",
        "    y",
        "    ~~~",
    ]
    found = drift.fences(lines, "p.md")
    assert [(f.line, f.lang, len(f.body)) for f in found] == [
        (1, "markdown", 3), (6, "python", 1)]


def test_split_target_reads_sections_and_ranges():
    assert drift.split_target("a/b.py:attention") == (
        "a/b.py", "attention", None)
    assert drift.split_target("a/b.py:3:9") == ("a/b.py", None, ":3:9")
    assert drift.split_target("CONTRIBUTING.md") == (
        "CONTRIBUTING.md", None, None)
