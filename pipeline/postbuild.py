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

A file the engine wrote as at the last build gets the result of the
last build (``as_before``): only new files are treated.
"""

import argparse
import hashlib
import os
import shutil
import sys
from pathlib import Path

from pipeline import config, memo
from pipeline.glossary_html import plain_headings
from pipeline.notebook_html import notebook_pages, slim_notebook_pages
from pipeline.search_index import INDEXES, plain_math_in_search_index
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


def offer_notebooks(site, repo_url=None, notebooks=NOTEBOOKS, pages=None):
    """Add the notebook line to each page that has a notebook (of those
    in ``pages``, a set of paths; None: all).

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
        if pages is not None and page not in pages:
            continue
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


def as_before(site, typesetter, repo_url, notebooks=NOTEBOOKS):
    """Give each built file whose treatment an earlier build kept its
    result; return the others ({path: what it was made from}), to
    treat, and how many files there were.

    What this step makes of a file is a function of the file as the
    engine wrote it, where it is, and its context: the pipeline's code
    (memo.version), KaTeX, the repository URL and which pages have a
    notebook; a notebook page's also of every notebook's bytes (the
    figures it may show). An engine writes every page again on every
    build; a page whose bytes are the same is given the result kept
    from the last build instead of being treated again (the treatments
    read and write each page several times: 0.4 s a build).
    """
    names = sorted(path.stem for path in Path(notebooks).glob("*.ipynb"))
    context = "\n".join([typesetter.version, repo_url or "", *names])
    kept = hashlib.sha256()
    for name in names:
        kept.update((Path(notebooks) / f"{name}.ipynb").read_bytes())
    with_notebooks = f"{context}\n{kept.hexdigest()}"
    shown = set(notebook_pages(site))
    paths = sorted(Path(site).rglob("*.html"))
    paths += [Path(site) / name for name in INDEXES]
    todo, found = {}, 0
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        found += 1
        where = path.relative_to(site).as_posix()
        made = f"{where}\n{with_notebooks if path in shown else context}"
        made += f"\n{text}"
        done = memo.long_known("postbuild", made)
        if done is None:
            todo[path] = made
        elif done != text:
            path.write_text(done, encoding="utf-8")
    return todo, found


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.postbuild",
        description=__doc__.split("\n")[0],
    )
    parser.add_argument("site", type=Path, help="the built site folder")
    args = parser.parse_args(argv)
    if not args.site.is_dir():
        parser.error(f"{args.site} is not a folder: build the site first")
    typesetter = Typesetter(cache=FORMULA_CACHE)
    repo_url = os.environ.get("MHA_REF_REPO_URL")
    todo, total = as_before(args.site, typesetter, repo_url)
    try:
        count = typeset_site(args.site, typesetter, todo)
    except MathError as exc:
        print(exc, file=sys.stderr)
        return 1
    offered = offer_notebooks(args.site, repo_url, pages=todo)
    slim_notebook_pages(args.site, NOTEBOOKS, todo)
    if {args.site / name for name in INDEXES} & todo.keys():
        plain_math_in_search_index(args.site)
    plain_headings(args.site, todo)
    for path, made in todo.items():
        memo.long_keep("postbuild", made, path.read_text(encoding="utf-8"))
    print(
        f"{len(todo)} of {total} files new since the last build: typeset "
        f"{count} formulas, offered {len(offered)} notebooks ({args.site})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
