"""The second engine, Zensical, in one place: its config, its one
Markdown extension, and the notebook pages it reads.

    python -m pipeline.zensical [--out zensical.yml]

Zensical reads mkdocs.yml, but this site needs a few things changed
(``derive``, written to zensical.yml):

- ``site_dir: site-zensical``, so the two builds can sit side by side
  (``zensical build`` has no option for it);
- the nav entries of notebooks (``generated/notebooks/<name>.ipynb``,
  rendered by mkdocs-jupyter, which Zensical lacks) point at the
  Markdown page written next to each notebook (write_notebook_pages)
  (``notebook_page``, below), ``exclude_docs`` lets those pages in,
  and the mkdocs-jupyter plugin entry goes;
- ``theme.variant: classic``: Material's look, the one MkDocs builds
  (Zensical's default is its own "modern" variant);
- one Markdown extension, this module: a page's link to a notebook
  (``generated/notebooks/x.ipynb``) goes to its Markdown page, as
  MkDocs links it to the page mkdocs-jupyter renders; links marked
  ``download`` keep the file. Zensical imports it from the repository
  root, so Make runs ``python -m zensical`` there.

The rest (extensions, macros, extra CSS and JavaScript, validation) is
mkdocs.yml's, ``!ENV`` tags kept. The file lands next to mkdocs.yml
(Zensical resolves docs_dir, the macros module and snippets from the
config's folder) and is written only when its bytes change, so
``zensical serve`` does not rebuild for nothing. Make runs this before
every Zensical build or serve.

``notebook_page`` writes an executed notebook as a Markdown page:
Markdown cells as they are, code cells as fenced ``python`` blocks, text
outputs as fenced ``text`` blocks, images inline, and a download link to
the ``.ipynb``; the cells mkdocs.yml hides stay out. MkDocs never reads
it (mkdocs.yml excludes ``generated/**/*.md``). nbconvert's
MarkdownExporter is not used: it indents outputs, writes each figure to
a file of its own, and knows neither the front matter nor the links to
the pages' sources, so its pages would differ from the ones MkDocs
shows (tests/engines compares the two).
"""

import argparse
import base64
import html
import posixpath
import re
import sys
from pathlib import Path

import yaml
from markdown import Extension
from markdown.treeprocessors import Treeprocessor

from pipeline import config
from pipeline.config import EnvTag, Loader
from pipeline.files import atomic_write

SITE_DIR = "site-zensical"
EXTENSION = "pipeline.zensical"  # this module, by its import name
# where the notebooks are, relative to docs/: generated/notebooks/
NOTEBOOKS = (
    Path(config.GENERATED).relative_to(config.DOCS) / config.NOTEBOOKS
).as_posix() + "/"
HEADER = (
    "# GENERATED from mkdocs.yml by `python -m pipeline.zensical`\n"
    "# (make site-zensical runs it): edit mkdocs.yml, not this file.\n"
)


class Dumper(yaml.SafeDumper):
    pass


def _represent_env(dumper, tag):
    if isinstance(tag.value, list):
        return dumper.represent_sequence("!ENV", tag.value, flow_style=True)
    return dumper.represent_scalar("!ENV", tag.value)


def _represent_str(dumper, text):
    style = "|" if "\n" in text else None  # exclude_docs stays a block
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style)


Dumper.add_representer(EnvTag, _represent_env)
Dumper.add_representer(str, _represent_str)


def _notebook_pages(nav):
    """nav with every generated notebook (.ipynb) as its .md page."""
    if isinstance(nav, list):
        return [_notebook_pages(item) for item in nav]
    if isinstance(nav, dict):
        return {k: _notebook_pages(v) for k, v in nav.items()}
    if (
        isinstance(nav, str)
        and nav.startswith(NOTEBOOKS)
        and nav.endswith(".ipynb")
    ):
        return nav.removesuffix(".ipynb") + ".md"
    return nav


def _let_in_notebook_pages(exclude_docs):
    """exclude_docs, with the notebooks' .md pages no longer excluded."""
    lines = (exclude_docs or "").splitlines()
    lines.append(f"!{NOTEBOOKS}*.md")  # gitignore syntax: re-include
    return "\n".join(lines) + "\n"


def derive(mkdocs_yml):
    """The Zensical config (YAML text) derived from mkdocs.yml's text."""
    config = yaml.load(mkdocs_yml, Loader=Loader)  # a SafeLoader
    config["site_dir"] = SITE_DIR
    config["nav"] = _notebook_pages(config.get("nav", []))
    config["exclude_docs"] = _let_in_notebook_pages(config.get("exclude_docs"))
    if config.get("not_in_nav"):  # the notebooks' pages, like the .ipynb
        config["not_in_nav"] += f"{NOTEBOOKS}*.md\n"
    config.setdefault("theme", {})["variant"] = "classic"
    config.setdefault("markdown_extensions", []).append(EXTENSION)
    config["plugins"] = [  # Zensical has no notebook plugin: drop it
        p
        for p in config.get("plugins", [])
        if not (p == "mkdocs-jupyter" or "mkdocs-jupyter" in p)
    ]
    body = yaml.dump(
        config, Dumper=Dumper, sort_keys=False, allow_unicode=True, width=79
    )
    return HEADER + body


class _NotebookLinks(Treeprocessor):
    def run(self, root):
        for link in root.iter("a"):
            href = link.get("href", "")
            path, hash_, fragment = href.partition("#")
            if (
                "download" not in link.attrib
                and path.endswith(".ipynb")
                and "notebooks/" in path
                and "://" not in path
            ):
                page = path.removesuffix(".ipynb") + ".md"
                link.set("href", page + hash_ + fragment)


class NotebookLinks(Extension):
    """Links to a generated notebook go to its Markdown page."""

    def extendMarkdown(self, md):  # noqa: N802 (Python-Markdown's name)
        md.treeprocessors.register(_NotebookLinks(md), "notebook-links", 1)


def makeExtension(**kwargs):  # noqa: N802 (Python-Markdown's name)
    return NotebookLinks(**kwargs)


# ------------------------------------------- a notebook as a page

# Zensical would otherwise render the page as a macros template: a
# notebook's Python (``x << 2``) is not one.
# A notebook repeats the page that links it: keep it out of search
# (MkDocs: macros.py leaves notebook pages out of its index).
FRONT_MATTER = "---\nrender_macros: false\nsearch:\n  exclude: true\n---\n"


# [text](target) in a Markdown cell; images too (the ! is outside)
LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def _source_links(markdown, page_url):
    """Rewrite a cell's page-URL links as links to the .md sources.

    A notebook's links are relative to its rendered page
    (``../../../pitfalls/#scaling`` from ``generated/notebooks/x/``),
    since mkdocs-jupyter leaves them alone; an engine reading Markdown
    resolves links from the source file instead, and checks them.
    """

    def source(match):
        target = match[2]
        path, hash_, fragment = target.partition("#")
        if not path or re.match(r"^[a-z][a-z0-9+.-]*:|^/", path):
            return match[0]  # a fragment, a URL or an absolute path
        if not path.endswith("/"):
            return match[0]  # a file (image, download), not a page
        url = posixpath.normpath(posixpath.join(page_url, path))
        doc = "index.md" if url == "." else url + ".md"
        page_dir = posixpath.dirname(page_url.rstrip("/"))
        relative = posixpath.relpath(doc, page_dir)
        return f"{match[1]}{relative}{hash_}{fragment}{match[3]}"

    return LINK.sub(source, markdown)


def _fence(text, lang):
    """``text`` in a fenced block whose fence it cannot close."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}"


def _source(cell):
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _output(output):
    """Markdown for one output of a code cell ('' if nothing shows)."""
    kind = output.get("output_type")
    if kind == "stream":
        return _fence(_source({"source": output.get("text", "")}), "text")
    if kind == "error":
        return _fence("\n".join(output.get("traceback", [])), "text")
    data = output.get("data", {})
    text = {k: _source({"source": v}) for k, v in data.items()}
    if "image/svg+xml" in text:  # an <img>, as nbconvert shows it: the
        # SVG's own text ($10^{-2}$ tick labels, ids) stays out of the page
        svg = base64.b64encode(text["image/svg+xml"].encode()).decode()
        alt = html.escape(text.get("text/plain", "figure"), quote=True)
        return f'<img alt="{alt}" src="data:image/svg+xml;base64,{svg}">'
    if "image/png" in text:
        png = text["image/png"].replace("\n", "")
        base64.b64decode(png, validate=True)  # a broken image fails here
        return f"![output](data:image/png;base64,{png})"
    if "text/html" in text:
        return f'<div class="notebook-output">\n{text["text/html"]}\n</div>'
    if "text/markdown" in text:
        return text["text/markdown"]
    if "text/latex" in text:
        return text["text/latex"]
    if "text/plain" in text:
        return _fence(text["text/plain"], "text")
    return ""


def notebook_page(nb, download, page_url):
    """The Markdown page of notebook ``nb``.

    ``download``: the notebook's file name, next to the page's source;
    ``page_url``: the URL of its page from the site root, as
    ``generated/notebooks/<name>/``, which the cells' links are relative
    to.
    """
    # the cells the site hides (mkdocs.yml's mkdocs-jupyter
    # remove_cell_tags): in the download, not on the page
    hidden, blocks = set(config.hidden_cell_tags()), []
    for cell in nb["cells"]:
        if hidden & set(cell.get("metadata", {}).get("tags", [])):
            continue
        source = _source(cell).strip("\n")
        if cell["cell_type"] == "markdown":
            blocks.append(_source_links(source, page_url))
        elif cell["cell_type"] == "code":
            if source:
                blocks.append(_fence(source, "python"))
            blocks.extend(
                shown
                for shown in map(_output, cell.get("outputs", []))
                if shown
            )
        # raw cells are not shown (nbconvert's HTML skips them too)
    # under the title, where mkdocs-jupyter puts its download button
    if blocks and blocks[0].startswith("# "):
        title, _, rest = blocks[0].partition("\n")
        blocks[:1] = [title, rest.strip("\n")] if rest.strip() else [title]
        at = 1
    else:
        at = 0
    blocks.insert(at, f"[Download the notebook]({download}){{ download }}")
    return FRONT_MATTER + "\n" + "\n\n".join(blocks) + "\n"


def write_notebook_pages(out, cache):
    """The Markdown page of every executed notebook in ``out`` (the
    generated folder), written when its notebook or this file changed
    (a record per page in ``cache``), and none for a notebook that is
    gone. Only Zensical reads them (MkDocs renders the notebooks), so
    ``python -m pipeline.zensical`` (make site-zensical, serve-fast)
    and the serve loop write them, after generation, not ``python -m
    pipeline`` (``make site``: 0.3 s after an edit of ``mha_ref``, which
    changes every notebook). A page's key does not hold this file, so an
    edit here reruns no page script."""
    import hashlib
    import json

    folder, docs = Path(out) / config.NOTEBOOKS, config.ROOT / config.DOCS
    record_path = Path(cache) / "notebook-pages.json"
    try:
        record = json.loads(record_path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        record = {}
    this = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    keys = {}
    for notebook in sorted(folder.glob("*.ipynb")):
        data = notebook.read_bytes()
        key = hashlib.sha256(data + this.encode()).hexdigest()
        page = notebook.with_suffix(".md")
        keys[notebook.stem] = key
        if record.get(notebook.stem) == key and page.is_file():
            continue
        if page.resolve().is_relative_to(docs):  # docs/a/b.md -> a/b/
            url = page.resolve().relative_to(docs).with_suffix("")
        else:  # --out elsewhere: where docs/generated would put it
            generated = Path(config.GENERATED).relative_to(config.DOCS)
            url = generated / config.NOTEBOOKS / notebook.stem
        import nbformat  # only here: 0.15 s to import, for a no-op run

        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        atomic_write(page, notebook_page(nb, notebook.name, f"{url}/"))
    for page in folder.glob("*.md"):
        if page.stem not in keys:
            page.unlink()
    atomic_write(record_path, json.dumps(keys, indent=1, sort_keys=True))


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.zensical",
        description="Write Zensical's config, derived from mkdocs.yml, "
        "and the notebooks' pages.",
    )
    parser.add_argument(
        "--config", type=Path, default=config.ROOT / config.MKDOCS_YML
    )
    parser.add_argument(
        "--out", type=Path, default=config.ROOT / "zensical.yml"
    )
    args = parser.parse_args(argv)
    text = derive(args.config.read_text(encoding="utf-8"))
    if atomic_write(args.out, text):
        print(f"  wrote  {args.out.name} (from {args.config.name})")
    root = args.config.parent
    write_notebook_pages(root / config.GENERATED, root / config.CACHE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
