"""Turn what a page's executed notebook glued into the page's data.

Each output that ``glue`` (scripts/glue.py) tagged becomes:

- a value: a key of ``data/<variable>.json``, read by the page as
  ``<< variable.name >>`` (the variable is the page name with '-' -> '_');
- a table: ``tables/<name>.md``, included with ``--8<--``;
- a figure: ``figures/<name>-light.svg`` and ``-dark.svg``, its alt text
  in the data under ``figures`` (the ``figure()`` macro reads it);
- an export: ``exports/<name>.json``, fetched by a page's control.

The notebook keeps each output as the reader saw it (the value's line,
the table, the light figure) and a small tag naming it; the heavy part
of the tag (the dark SVG, an export's JSON) is dropped from the saved
notebook, which a rerun recreates.
"""

from pipeline import config
from pipeline.files import to_json


def variable(page):
    """The page's template variable: attention-matrix -> attention_matrix."""
    return page.replace("-", "_")


def glued(nb):
    """[(cell index, record)] of every glue output, in notebook order."""
    mime, found = config.glue_mime(), []
    for index, cell in enumerate(nb["cells"]):
        for output in cell.get("outputs", []):
            record = output.get("data", {}).get(mime)
            if record is not None:
                found.append((index, record))
    return found


def page_files(nb, page, script):
    """{relative path: text} of what the notebook glued (``script``: the
    page script, named in a mistake); strips the payloads from ``nb``."""
    data, seen, written = {}, {}, {}

    def claim(kind, name, index):
        if (kind, name) in seen:
            raise ValueError(
                f"{script}: {kind} {name!r} glued twice "
                f"(cells {seen[kind, name]} and {index})"
            )
        seen[kind, name] = index

    def write(relative, content):
        written[relative] = content

    for index, record in glued(nb):
        kind, name = record["kind"], record["name"]
        claim(kind, name, index)
        if kind == "value":
            if name == "figures":
                raise ValueError(f"{script}: 'figures' is taken")
            data[name] = record["value"]
        elif kind == "table":
            write(f"tables/{name}.md", record["markdown"])
        elif kind == "figure":
            files = {}
            for scheme, svg in record["svg"].items():
                files[scheme] = f"figures/{name}-{scheme}.svg"
                write(files[scheme], svg)
            data.setdefault("figures", {})[name] = {
                "alt": record["alt"],
                **files,
            }
        elif kind == "export":
            write(f"exports/{name}.json", record["json"] + "\n")
        else:
            raise ValueError(f"unknown glue kind {kind!r}")
    if data:
        write(f"data/{variable(page)}.json", to_json(data))
    _lighten(nb)
    return written


def _lighten(nb):
    """Keep each glue tag's name and kind; drop its payload."""
    mime = config.glue_mime()
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            record = output.get("data", {}).get(mime)
            if record is not None:
                output["data"][mime] = {
                    "name": record["name"],
                    "kind": record["kind"],
                }


def glued_names(nb):
    """{(kind, name)} of what a saved notebook glued (tests read this)."""
    return {(r["kind"], r["name"]) for _, r in glued(nb)}
