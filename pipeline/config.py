"""What the pipeline reads from outside itself, each defined once.

The repository's folders are named here; what ``mkdocs.yml`` owns is
read from it (the site URL, the template delimiters, the cell tags a
page hides); what the glue module owns is read from it (the MIME type of
a glued output); the site glue (``macros.py``, beside ``mkdocs.yml``) is
loaded from its file, so ``macros`` and ``pipeline`` import one way:
this package reads the site glue, never the reverse.
"""

import ast
import functools
import importlib.util
import os
import threading
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = "docs"  # the pages, docs/<page>.md (MkDocs' default docs_dir)
SCRIPTS = "scripts"  # the page scripts, scripts/<page>.py, and glue.py
GLUE = f"{SCRIPTS}/glue.py"  # the folder's one file that is no page's
MHA_REF = "mha_ref"  # the references the pages show and run
INIT = f"{MHA_REF}/__init__.py"  # every notebook with mha_ref carries it
GENERATED = f"{DOCS}/generated"  # what generation writes (not committed)
NOTEBOOKS = "notebooks"  # under GENERATED: the executed .ipynb files
CACHE = ".cache"  # generation's records, the formula cache
# glue.py reads rendered figures from (and writes them to) the folder
# this variable names, when generation sets it (scripts/glue.py)
FIGURE_CACHE_ENV = "MHA_REF_FIGURE_CACHE"
FIGURE_CACHE_DAYS = 14  # a figure no run drew for this long goes
MKDOCS_YML = "mkdocs.yml"
SITE_GLUE = "macros.py"  # mkdocs-macros' module: filters, figure()


# ------------------------------------------------------------ mkdocs.yml


class EnvTag:
    """An ``!ENV`` node, kept as written (Zensical's config keeps it)."""

    def __init__(self, value):
        self.value = value

    def resolve(self):
        """What MkDocs makes of it: the first variable set, else the
        last item (the default), as mkdocs' !ENV does."""
        names = self.value if isinstance(self.value, list) else [self.value]
        *variables, default = names if len(names) > 1 else [*names, None]
        for name in variables:
            if os.environ.get(name) is not None:
                return os.environ[name]
        return default


class Loader(yaml.SafeLoader):
    """mkdocs.yml as YAML, its ``!ENV`` tags as EnvTag."""


def _construct_env(loader, node):
    if isinstance(node, yaml.SequenceNode):
        return EnvTag(loader.construct_sequence(node))
    return EnvTag(loader.construct_scalar(node))


Loader.add_constructor("!ENV", _construct_env)


@functools.cache
def _mkdocs_config(path, mtime_ns):
    return yaml.load(path.read_text(encoding="utf-8"), Loader=Loader)


def mkdocs_config(root=ROOT):
    """mkdocs.yml, parsed (read again when it changes)."""
    path = Path(root) / MKDOCS_YML
    return _mkdocs_config(path, path.stat().st_mtime_ns)


def plugin(name, root=ROOT):
    """A plugin's settings in mkdocs.yml ({} if it has none)."""
    for entry in mkdocs_config(root).get("plugins", []):
        if isinstance(entry, dict) and name in entry:
            return entry[name] or {}
        if entry == name:
            return {}
    raise KeyError(f"{MKDOCS_YML} lists no plugin {name!r}")


def extension(name, root=ROOT):
    """A Markdown extension's settings in mkdocs.yml ({} if none)."""
    for entry in mkdocs_config(root).get("markdown_extensions", []):
        if isinstance(entry, dict) and name in entry:
            return entry[name] or {}
        if entry == name:
            return {}
    raise KeyError(f"{MKDOCS_YML} lists no markdown extension {name!r}")


def glossary_file(root=ROOT):
    """The glossary, the file snippets appends to every page."""
    glue = site_glue()
    return Path(root) / glue.glossary_file(
        extension("pymdownx.snippets", root)
    )


def site_url(root=ROOT):
    """The URL the site is built for (``site_url``), ending in /."""
    url = mkdocs_config(root)["site_url"]
    url = url.resolve() if isinstance(url, EnvTag) else url
    return url if url.endswith("/") else url + "/"


def template_delimiters(root=ROOT):
    """Jinja's delimiter options as mkdocs-macros sets them."""
    macros = plugin("macros", root)
    return {
        f"{part}_{end}_string": macros[f"j2_{part}_{end}_string"]
        for part in ("variable", "block", "comment")
        for end in ("start", "end")
    }


def hidden_cell_tags(root=ROOT):
    """Tags of the notebook cells the site hides and the download keeps
    (mkdocs-jupyter's remove_cell_tags); the first is what the composed
    notebook tags its carried files with."""
    tags = plugin("mkdocs-jupyter", root)["remove_tag_config"]
    return tuple(tags["remove_cell_tags"])


# ------------------------------------------------- glue.py and macros.py


_PARSING = threading.Lock()


def parse_python(text, filename="<unknown>"):
    """``ast.parse``, one thread at a time. CPython 3.11 keeps the depth
    of its AST conversion per interpreter, not per thread, so two
    threads parsing at once can fail with "SystemError: AST constructor
    recursion depth mismatch" (python/cpython#106905); generation parses
    in its pages' threads."""
    with _PARSING:
        return ast.parse(text, filename)


@functools.cache
def _constant(path, name, mtime_ns):
    for node in parse_python(path.read_text(encoding="utf-8")).body:
        targets = getattr(node, "targets", [])
        if any(getattr(t, "id", None) == name for t in targets):
            return ast.literal_eval(node.value)
    raise KeyError(f"{path}: no constant {name}")


def glue_mime():
    """The MIME type glue.py tags a glued output with."""
    path = ROOT / GLUE
    return _constant(path, "MIME", path.stat().st_mtime_ns)


@functools.cache
def site_glue():
    """The site glue, ``macros.py``, loaded from its file."""
    path = ROOT / SITE_GLUE
    spec = importlib.util.spec_from_file_location("macros", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
