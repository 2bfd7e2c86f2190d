"""MkDocs hook: a page's Markdown is converted, and its search entries
made, again only when what they are made from changed.

Converting the pages' Markdown was a third of a ``mkdocs build`` (1.6 s
of 4.8 s for 28 pages) and the search index another tenth, though an
edit touches one or two pages. Both are stored per page in
``.cache/pages`` and reused while their key holds.

``Page.render`` (mkdocs/structure/pages.py, MkDocs 1.6) turns a page's
Markdown (after mkdocs-macros) into its HTML, table of contents, title
and the anchors it holds and links to. Its key:

- the Markdown text itself;
- the extensions and their options (mkdocs.yml), the link validation
  settings, the versions of MkDocs, Python-Markdown, pymdown-extensions
  and Pygments;
- what pymdownx.snippets took from each file it included (the section
  of ``mha_ref`` a page shows, a generated table, the glossary),
  recorded while the page converted and taken again from the files
  now; and each path it looked for and did not find;
- the site's files and their URLs (relative links resolve against
  them), the page's own, the folder snippets' paths start from;
- this file.

A conversion during which MkDocs logged anything (a warning, a note)
is not stored, so a cached page never hides one (a strict build fails
on a warning every time).

Material's search index takes each page's sections from its HTML
(``SearchIndex.add_entry_from_context``, material/plugins/search/
plugin.py); its entries are keyed on that HTML, the table of contents,
the page's URL, title and front matter, Material's version and this
file.

Notebook pages are not converted here: mkdocs-jupyter renders them with
its own function (jupyter_cache_hook.py keys its cache); their search
entries are kept like any page's.
"""

import functools
import hashlib
import logging
import os
import pickle
from importlib import metadata
from pathlib import Path

from mkdocs.structure.pages import Page

from pipeline.config import CACHE
from pipeline.files import atomic_write

PACKAGES = ("mkdocs", "markdown", "pymdown-extensions", "pygments")
TARGET = ("path", "start", "end", "section")  # what a snippet line asks
_folder = None  # .cache/pages beside mkdocs.yml (on_config)
_looked_up = None  # while a page converts: what snippets took, or sought
_snippets = {}  # id(config): a snippets preprocessor to take them again
_site_settings = {}  # this build's part of every page's setting
_THIS = Path(__file__).read_text("utf-8")  # in every key


@functools.cache
def _version(name):
    return metadata.version(name)


def _original(cls, name):
    """The library's own method (a serve's next build may import this
    file again: its wrappers are not wrapped twice)."""
    method = getattr(cls, name)
    return getattr(method, "unwrapped", method)


_render = _original(Page, "render")


def _stable(value):
    """A text for ``value`` that is the same in every process."""
    if isinstance(value, dict):
        items = sorted((str(k), _stable(v)) for k, v in value.items())
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_stable(v) for v in value) + "]"
    if callable(value):
        return f"{value.__module__}.{value.__qualname__}"
    return repr(value)


def _digest(*parts):
    digest = hashlib.sha256()
    for part in parts:
        digest.update(str(part).encode("utf-8") + b"\0")
    return digest.hexdigest()


def _stored(page, kind):
    path = _folder / f"{_digest(page.file.src_uri)}.{kind}"
    try:
        return path, pickle.loads(path.read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError):
        return path, None


# ------------------------------------------------------ the conversion


def _recording(select, lookup):
    """pymdownx.snippets' methods, noting what a conversion reads."""

    def selected(self, lines, target):
        lines = select(self, lines, target)
        if _looked_up is not None:
            taken = {k: target[k] for k in TARGET}
            _looked_up.append((target["snippet"], taken, _digest(*lines)))
        return lines

    def looked_up(self, path):
        found = lookup(self, path)
        if _looked_up is not None and not found:
            for base, is_folder in self.get_bases():
                if is_folder:
                    where = os.path.abspath(os.path.join(base, path))
                    _looked_up.append((where, None, None))
        return found

    selected.unwrapped, looked_up.unwrapped = select, lookup
    return selected, looked_up


def _same_snippets(config, looked_up):
    """Does every file give what it gave, and is every missing one still
    missing? Taken again as pymdownx.snippets takes them."""
    import markdown

    key = id(config)
    if key not in _snippets:
        md = markdown.Markdown(
            extensions=config["markdown_extensions"],
            extension_configs=config["mdx_configs"] or {},
        )
        _snippets.clear()
        _snippets[key] = md.preprocessors["snippet"]
    snippets = _snippets[key]
    for path, taken, digest in looked_up:
        if taken is None:
            if os.path.exists(path):
                return False
            continue
        try:
            lines = snippets.read_lines(path)
            lines = snippets.select_snippet_lines(lines, dict(taken))
        except Exception:  # gone, or the section with it: convert again
            return False
        if _digest(*lines) != digest:
            return False
    return True


def _setting(page, config, files):
    """Everything the conversion depends on but the snippets."""
    return _digest(
        _site_setting(config, files),
        page.file.src_uri,
        page.url,
        page.markdown,
    )


def _site_setting(config, files):
    """The part of _setting every page of a build shares (computed once
    a build: it sorts every file of the site)."""
    build = (id(config), id(files), len(files))
    if build not in _site_settings:
        _site_settings.clear()
        _site_settings[build] = _digest(
            _THIS,
            *(_version(name) for name in PACKAGES),
            _stable(config["markdown_extensions"]),
            _stable(config["mdx_configs"]),
            _stable(config["validation"]),
            config["use_directory_urls"],
            os.getcwd(),  # snippets' base_path is relative to it
            *sorted(f"{f.src_uri} {f.url}" for f in files),
        )
    return _site_settings[build]


class _Said(logging.Handler):
    """Whether MkDocs said anything (INFO and up) while a page converted:
    a cached page would not say it again."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.seen = False

    def emit(self, record):
        self.seen = True


def render(self, config, files):
    """Page.render, from the cache when nothing it reads changed."""
    global _looked_up
    setting = _setting(self, config, files)
    path, stored = _stored(self, "render")
    if (
        stored is not None
        and stored["setting"] == setting
        and _same_snippets(config, stored["looked_up"])
    ):
        for name, value in stored["page"].items():
            setattr(self, name, value)
        links = stored["links_to_anchors"]
        if links is not None:
            self.links_to_anchors = {
                files.get_file_from_path(src): anchors
                for src, anchors in links.items()
            }
        return
    said = _Said()
    logging.getLogger("mkdocs").addHandler(said)
    _looked_up = []
    try:
        _render(self, config, files)
        looked_up = list({_stable(e): e for e in _looked_up}.values())
    finally:
        _looked_up = None
        logging.getLogger("mkdocs").removeHandler(said)
    if said.seen:
        return
    links = getattr(self, "links_to_anchors", None)
    page = {
        "content": self.content,
        "toc": self.toc,
        "_title_from_render": self._title_from_render,
        "present_anchor_ids": self.present_anchor_ids,
    }
    if links is not None:
        links = {f.src_uri: anchors for f, anchors in links.items()}
    atomic_write(
        path,
        pickle.dumps(
            {
                "setting": setting,
                "looked_up": looked_up,
                "page": page,
                "links_to_anchors": links,
            }
        ),
    )


render.unwrapped = _render


# ------------------------------------------------------ the search index


def _toc(items):
    return [(i.id, i.url, i.title, i.level, _toc(i.children)) for i in items]


def _indexing(add_entry):
    """SearchIndex.add_entry_from_context, from the cache when the page's
    HTML, contents, URL, title and front matter are the same."""

    def add_entry_from_context(self, page):
        key = _digest(
            _THIS,
            _version("mkdocs-material"),
            _stable(self.config),
            page.url,
            page.title,
            _stable(page.meta),
            _stable(_toc(page.toc)),
            page.content,
        )
        path, stored = _stored(page, "search")
        if stored is not None and stored["key"] == key:
            self.entries.extend(stored["entries"])
            return
        before = len(self.entries)
        add_entry(self, page)
        entries = self.entries[before:]
        atomic_write(path, pickle.dumps({"key": key, "entries": entries}))

    add_entry_from_context.unwrapped = add_entry
    return add_entry_from_context


def on_config(config):
    global _folder
    from material.plugins.search.plugin import SearchIndex
    from pymdownx.snippets import SnippetPreprocessor

    _folder = Path(config["config_file_path"]).parent / CACHE / "pages"
    (
        SnippetPreprocessor.select_snippet_lines,
        SnippetPreprocessor.get_snippet_path,
    ) = _recording(
        _original(SnippetPreprocessor, "select_snippet_lines"),
        _original(SnippetPreprocessor, "get_snippet_path"),
    )
    Page.render = render
    SearchIndex.add_entry_from_context = _indexing(
        _original(SearchIndex, "add_entry_from_context")
    )
    return config
