"""The step after either engine builds: math, and each page's notebook.

    python -m pipeline.postbuild SITE   # make site runs it on site/

It reads and writes only the built HTML, so MkDocs and Zensical sites
get the same treatment:

- every formula is typeset by the vendored KaTeX (typeset_math.py);
- each notebook page is slimmed to the site's own look: no inlined
  Jupyter CSS, Material code blocks, figures in both schemes
  (notebook_html.py);
- the search index's formulas become plain text, so no result's snippet
  shows raw TeX (search_index.py);
- headings lose the glossary's tooltips, which the text under them
  keeps (glossary_html.py);
- each page whose notebook the generation step wrote
  (``docs/generated/notebooks/<page>.ipynb``) gets, under its title, the
  line that offers it: open it on the site, download the ``.ipynb``, and
  open it in Colab when MHA_REF_REPO_URL names a GitHub repository.
"""

import argparse
import os
import shutil
import sys
from pathlib import Path

from pipeline import config
from pipeline.glossary_html import plain_headings
from pipeline.notebook_html import slim_notebook_pages
from pipeline.search_index import plain_math_in_search_index
from pipeline.typeset_math import (
    FORMULA_CACHE,
    MathError,
    Typesetter,
    typeset_site,
)

NOTEBOOKS = config.ROOT / config.GENERATED / config.NOTEBOOKS


def colab_base(repo_url):
    """Colab's URL prefix for the notebooks of a GitHub repository (the
    site glue, macros.py, defines it for the notebook pages' button)."""
    return config.site_glue().colab_base(repo_url)


def notebook_line(name, repo_url):
    """The HTML offering notebook ``name`` on its page (one level deep).

    >>> print(notebook_line("scaling", None))  # doctest: +ELLIPSIS
    <p class="mha-notebook-line">Run this page's code yourself: <a ...
    """
    folder = f"../generated/notebooks/{name}/"
    links = [
        f'<a href="{folder}">open it as a notebook</a>',
        f'<a href="{folder}{name}.ipynb" download>download the .ipynb</a>',
    ]
    base = colab_base(repo_url)
    if base:
        links.append(f'<a href="{base}{name}.ipynb">open it in Colab</a>')
    listed = ", ".join(links[:-1]) + " or " + links[-1]
    return (
        f'<p class="mha-notebook-line">Run this page\'s code yourself: '
        f"{listed}. It runs with numpy, torch and matplotlib alone.</p>"
    )


def offer_notebooks(site, repo_url=None, notebooks=NOTEBOOKS):
    """Add the notebook line to each page that has a notebook.

    The ``.ipynb`` is placed beside its rendered page on either engine
    (mkdocs-jupyter's include_source puts it there already). Returns the
    page names that got the line.
    """
    site, offered = Path(site), []
    for notebook in sorted(Path(notebooks).glob("*.ipynb")):
        name = notebook.stem
        page = site / name / "index.html"
        rendered = site / "generated/notebooks" / name
        if not page.is_file() or not rendered.is_dir():
            continue
        if not (rendered / notebook.name).is_file():
            shutil.copyfile(notebook, rendered / notebook.name)
        text = page.read_text(encoding="utf-8")
        if 'class="mha-notebook-line"' in text:
            continue  # already offered
        end = text.find("</h1>")
        if end < 0:
            raise ValueError(f"{page}: no title to put the notebook under")
        end += len("</h1>")
        line = notebook_line(name, repo_url)
        page.write_text(text[:end] + line + text[end:], encoding="utf-8")
        offered.append(name)
    return offered


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.postbuild",
        description=__doc__.split("\n")[0],
    )
    parser.add_argument("site", type=Path, help="the built site folder")
    args = parser.parse_args(argv)
    if not args.site.is_dir():
        parser.error(f"{args.site} is not a folder: build the site first")
    try:
        count = typeset_site(args.site, Typesetter(cache=FORMULA_CACHE))
    except MathError as exc:
        print(exc, file=sys.stderr)
        return 1
    offered = offer_notebooks(args.site, os.environ.get("MHA_REF_REPO_URL"))
    slim_notebook_pages(args.site, NOTEBOOKS)
    plain_math_in_search_index(args.site)
    plain_headings(args.site)
    print(
        f"typeset {count} formulas; {len(offered)} pages offer their "
        f"notebook ({args.site})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
