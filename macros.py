"""Inline numbers and figures for the pages (the mkdocs-macros module).

Each docs/generated/data/<name>.json becomes a template variable <name>,
four filters format what it holds, and one macro shows a figure:

    << attention_matrix.weighted_sum.output | vec >>  ->  [1.5, 1]
    << experiment.summary.sdpa | sci >>               ->  1.19e-07
    << scaling.sqrt_d_head | num >>                   ->  8
    << experiment.all_passed | yesno >>              ->  yes
    << figure("kv-masks") >>                          ->  light and dark SVGs
    << glossary() >>                                  ->  the glossary's list

The data is read with `json` (PyYAML would read 1e-07 as a string) just
before each page is rendered, so it is the data the generation step wrote
in this build, not what was there when MkDocs read its config.
"""

import json
import math
import numbers
import re
from pathlib import Path
from urllib.parse import urlsplit

import jinja2

# Names mkdocs-macros defines itself (variables, then macros); a data file
# must not hide one of them.
RESERVED = frozenset(
    {
        "config",
        "environment",
        "extra",
        "files",
        "filters",
        "filters_builtin",
        "git",
        "macros",
        "navigation",
        "page",
        "plugin",
        "context",
        "fix_url",
        "macros_info",
        "now",
    }
)


def _finite_or_label(x):
    """Return x as a float, or the label NaN/inf/-inf prints as."""
    _defined(x)
    if isinstance(x, str) and x.strip().lower() in ("nan", "+nan", "-nan"):
        return "NaN"
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"expected a number or 'nan', got {x!r}")
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _defined(x):
    # A filter receives a missing key as Undefined without raising: raise
    # Jinja's own error, which names the missing attribute.
    if isinstance(x, jinja2.Undefined):
        x._fail_with_undefined_error()


def num(x, digits=4):
    """Round to `digits` decimals, without trailing zeros: 1.50 -> 1.5."""
    x = _finite_or_label(x)
    if isinstance(x, str):
        return x
    text = f"{x:.{digits}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def sci(x, digits=2):
    """Scientific notation with `digits` decimals: 1.19e-07; exactly zero
    reads 0 (not 0.00e+00, which looks like a rounded small number)."""
    x = _finite_or_label(x)
    if isinstance(x, str):
        return x
    if x == 0:
        return "0"
    return f"{x:.{digits}e}"


def yesno(x):
    """A yes/no result as a word: True -> yes, False -> no (never the
    Python spelling True/False in prose)."""
    _defined(x)
    if not isinstance(x, bool):
        raise TypeError(f"expected True or False, got {x!r}")
    return "yes" if x else "no"


def vec(xs, digits=4):
    """A (nested) list of numbers as [1.5, 1] or [[1, 0], [0.5, 0.5]]."""
    _defined(xs)
    if isinstance(xs, (list, tuple)):
        return "[" + ", ".join(vec(x, digits) for x in xs) + "]"
    if isinstance(xs, bool):
        return str(xs)
    return num(xs, digits)


def fixed(xs, digits=3):
    """Like ``vec`` (a number or a nested list), with every number to
    exactly `digits` decimals, trailing zeros kept: 0.33 -> 0.330."""
    _defined(xs)
    if isinstance(xs, (list, tuple)):
        return "[" + ", ".join(fixed(x, digits) for x in xs) + "]"
    x = _finite_or_label(xs)
    if isinstance(x, str):
        return x
    text = f"{x:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def figure(data, name, prefix="", lazy=False):
    """Markdown for figure ``name``: its light and dark SVG, with alt.

    ``data`` is {topic: its data}; the topic that drew ``name`` stored
    the alt text under data[topic]["figures"][name]. ``lazy`` adds
    ``loading="lazy"``: the variant of the scheme not shown is
    display:none (Material's CSS), and a lazy image that is not
    displayed is never downloaded, so a reader fetches one of the two.
    """
    attrs = "{ loading=lazy }" if lazy else ""
    for values in data.values():
        found = isinstance(values, dict) and values.get("figures", {})
        if found and name in found:
            alt = found[name]["alt"]
            return "\n".join(
                f"![{alt}]({prefix}generated/figures/{name}-{scheme}.svg"
                f"#only-{scheme}){attrs}"
                for scheme in ("light", "dark")
            )
    raise KeyError(f"no topic drew a figure named {name!r}")


# One line of the glossary: a Markdown abbreviation, *[term]: definition.
ABBREVIATION = re.compile(r"^\*\[(?P<term>[^\]]+)\]:[ \t]*(?P<text>.+)$")


def glossary_file(snippets):
    """The glossary: the file pymdownx.snippets (its settings given)
    appends to every page (mkdocs.yml, ``auto_append``), the one place
    a term is defined; relative to the repository root."""
    files = snippets.get("auto_append") or []
    if len(files) != 1:
        raise ValueError(
            "mkdocs.yml: pymdownx.snippets' auto_append must name the one "
            f"glossary file, not {files!r}"
        )
    return files[0]


def glossary_entries(path):
    """[(term, definition)] of a file of abbreviations, in file order;
    a line that is neither blank nor an abbreviation raises (it would
    show on every page)."""
    entries = []
    text = Path(path).read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), 1):
        match = ABBREVIATION.match(line)
        if match:
            entries.append((match["term"], match["text"].strip()))
        elif line.strip():
            raise ValueError(
                f"{path}:{number}: not an abbreviation (*[term]: "
                f"definition): {line!r}"
            )
    return entries


def glossary_table(entries, teachers=None):
    """The entries as a Markdown list, A to Z, each term in bold and
    anchored (#term-<term>) for a link: a list reads at 390 px, where
    a two-column table would scroll sideways. ``teachers``: {term,
    casefolded: (page, title)}; an entry whose term a page teaches links
    to it, in place of the plain "(Title)" its tooltip ends with."""
    rows = []
    for term, text in sorted(entries, key=lambda e: e[0].casefold()):
        anchor = re.sub(r"[^a-z0-9]+", "-", term.casefold()).strip("-")
        page = (teachers or {}).get(term.casefold())
        if page:
            text = without_pointer(text, page[1])
            stop = "." if text.endswith(".") else ""
            text = f"{text.removesuffix('.')} ([{page[1]}]({page[0]})){stop}"
        rows.append(f'- <span id="term-{anchor}"></span>**{term}**: {text}')
    return "\n".join(rows)


def without_pointer(text, title):
    """``text`` less a closing "(Title)", the tooltip's plain pointer to
    the page ``title`` (d_k for its dₖ, a prefix of it allowed).

    >>> without_pointer("A row of Q (The attention", "The attention")
    'A row of Q (The attention'
    >>> without_pointer("Q (Latent attention).", "Latent attention (MLA)")
    'Q.'
    """

    def plain(words):
        return words.replace("dₖ", "d_k").casefold()

    pointer = re.search(r"\s*\(([^()]*)\)(\.?)$", text)
    if pointer and plain(title).startswith(plain(pointer[1])):
        return text[: pointer.start()] + pointer[2]
    return text


def glossary_teachers(docs, glossary_page="glossary.md"):
    """{tag, casefolded: (page, title)} from the front matter ``tags:``
    of the pages under ``docs`` (the glossary page's own left out)."""
    import yaml

    teachers = {}
    for path in sorted(Path(docs).glob("*.md")):
        text = path.read_text(encoding="utf-8")
        front = re.match(r"---\n(.*?)\n---\n", text, re.S)
        if path.name == glossary_page or not front:
            continue
        title = re.search(r"^# (.+)$", text[front.end() :], re.M)
        for tag in yaml.safe_load(front[1]).get("tags") or []:
            teachers[str(tag).casefold()] = (
                path.name,
                title[1].strip() if title else path.stem,
            )
    return teachers


def load_data(data_dir):
    """Read every <name>.json in data_dir into {name: value}."""
    data_dir = Path(data_dir)
    files = sorted(data_dir.glob("*.json"))
    if not files:
        raise FileNotFoundError(
            f"no generated data in {data_dir}: run `make generate` "
            "(python -m pipeline) before building the site"
        )
    data = {}
    for path in files:
        name = path.stem
        if not name.isidentifier() or name in RESERVED:
            raise ValueError(
                f"{path.name}: '{name}' cannot be a template variable "
                f"(reserved: {', '.join(sorted(RESERVED))})"
            )
        data[name] = json.loads(path.read_text(encoding="utf-8"))
    return data


def data_dir_of(env):
    """docs/generated/data under the configured docs_dir."""
    return Path(env.conf["docs_dir"]) / "generated" / "data"


FILTERS = {
    "num": num,
    "sci": sci,
    "vec": vec,
    "fixed": fixed,
    "yesno": yesno,
}


def define_env(env):
    """Filters, the macro and the data (MkDocs: once; Zensical: per page)."""
    for function in FILTERS.values():
        env.filter(function)

    def page_figure(name):
        depth = page_path(env.page).count("/")  # pages in subfolders
        return figure(env.variables, name, "../" * depth, lazy=True)

    env.macro(page_figure, "figure")

    def glossary():
        root = Path(env.conf.get("config_file_path") or "mkdocs.yml").parent
        snippets = env.conf["mdx_configs"].get("pymdownx.snippets", {})
        entries = glossary_entries(root / glossary_file(snippets))
        return glossary_table(entries, glossary_teachers(env.conf["docs_dir"]))

    env.macro(glossary, "glossary")
    # From the one setting, repo_url (MHA_REF_REPO_URL): the edit links on
    # branch main (MkDocs would guess master) and the notebook pages'
    # "Open in Colab" button (overrides/main.html). None without it.
    repo_url = env.conf.get("repo_url")
    env.conf["edit_uri"] = EDIT_URI if repo_url else None
    env.conf["extra"]["colab_base"] = colab_base(repo_url)
    # Zensical's port of mkdocs-macros calls define_env before every page
    # and never on_pre_page_macros: load the data here too.
    env.variables.update(load_data(data_dir_of(env)))


def page_path(page):
    """The page's source path under docs/, on either engine."""
    file = getattr(page, "file", None)  # MkDocs: page.file.src_uri
    return file.src_uri if file is not None else page.path  # Zensical


def on_pre_page_macros(env):
    """MkDocs, before each page: the data written in this build.

    A notebook's page repeats the page it belongs to, which links it:
    it stays out of the search index (Material's ``search.exclude``),
    so a search lands on the page that teaches. Its front matter cannot
    say so (an .ipynb has none); for Zensical, the Markdown page of a
    notebook carries it (pipeline/notebook_page.py).
    """
    env.variables.update(load_data(data_dir_of(env)))
    if page_path(env.page).endswith(".ipynb"):  # mkdocs-jupyter's pages
        env.page.meta.setdefault("search", {})["exclude"] = True


# Edit links point at the pages on main (MkDocs would guess master).
EDIT_URI = "edit/main/docs/"
COLAB = "https://colab.research.google.com/github/"
# The deploy workflow publishes the executed notebooks to this branch of
# the repository (generated files are never committed on main).
NOTEBOOK_BRANCH = "notebooks"


def colab_base(repo_url, branch=NOTEBOOK_BRANCH):
    """Colab's URL prefix for the notebooks of a GitHub repository.

    >>> colab_base("https://github.com/o/r")
    'https://colab.research.google.com/github/o/r/blob/notebooks/'
    >>> colab_base(None) is None, colab_base("https://gitlab.com/o/r")
    (True, None)
    """
    if not repo_url:
        return None
    parts = urlsplit(repo_url)
    repo = parts.path.strip("/").removesuffix(".git")
    if parts.netloc.lower() != "github.com" or repo.count("/") != 1:
        return None  # Colab opens notebooks from GitHub only
    return f"{COLAB}{repo}/blob/{branch}/"
