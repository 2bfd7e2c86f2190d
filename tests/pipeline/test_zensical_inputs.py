"""What Zensical reads besides docs/: its derived config and the
notebook pages (pipeline/zensical.py)."""

import markdown
import nbformat
import yaml

from pipeline.zensical import Loader, derive, notebook_page

MKDOCS_YML = """\
site_name: x
site_url: !ENV [MHA_REF_SITE_URL, "http://127.0.0.1:8000/"]
nav:
  - Start: index.md
  - Nb: generated/notebooks/experiment.ipynb
exclude_docs: |
  generated/**/*.md
plugins:
  - search
  - mkdocs-jupyter:
      include: ["*.ipynb"]
markdown_extensions:
  - toc
"""


def test_derive_changes_only_what_zensical_needs():
    text = derive(MKDOCS_YML)
    config = yaml.load(text, Loader=Loader)  # a SafeLoader
    assert config["site_dir"] == "site-zensical"
    assert config["nav"] == [
        {"Start": "index.md"},
        {"Nb": "generated/notebooks/experiment.md"},
    ]
    assert config["exclude_docs"].splitlines() == [
        "generated/**/*.md",
        "!generated/notebooks/*.md",
    ]
    assert config["plugins"] == ["search"]
    assert config["markdown_extensions"] == ["toc", "pipeline.zensical"]
    assert config["theme"] == {"variant": "classic"}
    assert "!ENV [MHA_REF_SITE_URL, 'http://127.0.0.1:8000/']" in text


def test_notebook_links_go_to_the_markdown_page():
    html = markdown.markdown(
        "[nb](generated/notebooks/a.ipynb#s) "
        '<a href="x.ipynb">raw</a> [dl](notebooks/a.ipynb){ download }',
        extensions=["attr_list", "pipeline.zensical"],
    )
    assert 'href="generated/notebooks/a.md#s"' in html
    assert 'download href="notebooks/a.ipynb"' in html  # kept: a download


def test_notebook_markdown_shows_cells_outputs_and_source_links():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            "# Title\n\nSee [pitfall 2](../../../pitfalls/#scaling)."
        ),
        nbformat.v4.new_code_cell("print(1 << 2)"),
    ]
    nb.cells[1].outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="4\n")
    ]
    page = notebook_page(nb, "x.ipynb", "generated/notebooks/x/")
    assert page.split("\n\n") == [
        "---\nrender_macros: false\nsearch:\n  exclude: true\n---",
        "# Title",
        "[Download the notebook](x.ipynb){ download }",
        "See [pitfall 2](../../pitfalls.md#scaling).",
        "```python\nprint(1 << 2)\n```",
        "```text\n4\n```\n",
    ]
