"""Derive Zensical's config from mkdocs.yml: three changes, nothing else.

    python -m pipeline.zensical [--out zensical.yml]

Zensical reads mkdocs.yml, but this site needs three things changed:

- ``site_dir: site-zensical``, so the two builds can sit side by side
  (``zensical build`` has no option for it);
- the nav entries of notebooks (``generated/notebooks/<name>.ipynb``,
  rendered by mkdocs-jupyter, which Zensical lacks) point at the
  Markdown page the generation step writes next to each notebook
  (pipeline/notebook_page.py), ``exclude_docs`` lets those pages in,
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
"""

import argparse
import sys
from pathlib import Path

import yaml
from markdown import Extension
from markdown.treeprocessors import Treeprocessor

from pipeline.output import atomic_write

ROOT = Path(__file__).resolve().parent.parent
SITE_DIR = "site-zensical"
EXTENSION = "pipeline.zensical"  # this module, by its import name
NOTEBOOKS = "generated/notebooks/"
HEADER = (
    "# GENERATED from mkdocs.yml by `python -m pipeline.zensical`\n"
    "# (make site-zensical runs it): edit mkdocs.yml, not this file.\n"
)


class EnvTag:
    """An ``!ENV`` node, kept as written for the engine to resolve."""

    def __init__(self, value):
        self.value = value


class Loader(yaml.SafeLoader):
    pass


class Dumper(yaml.SafeDumper):
    pass


def _construct_env(loader, node):
    if isinstance(node, yaml.SequenceNode):
        return EnvTag(loader.construct_sequence(node))
    return EnvTag(loader.construct_scalar(node))


def _represent_env(dumper, tag):
    if isinstance(tag.value, list):
        return dumper.represent_sequence("!ENV", tag.value, flow_style=True)
    return dumper.represent_scalar("!ENV", tag.value)


def _represent_str(dumper, text):
    style = "|" if "\n" in text else None  # exclude_docs stays a block
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style)


Loader.add_constructor("!ENV", _construct_env)
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


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.zensical",
        description="Write Zensical's config, derived from mkdocs.yml.",
    )
    parser.add_argument("--config", type=Path, default=ROOT / "mkdocs.yml")
    parser.add_argument("--out", type=Path, default=ROOT / "zensical.yml")
    args = parser.parse_args(argv)
    text = derive(args.config.read_text(encoding="utf-8"))
    if atomic_write(args.out, text):
        print(f"  wrote  {args.out.name} (from {args.config.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
