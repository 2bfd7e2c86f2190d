"""From an executed page notebook to the files its page reads.

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

from pipeline.output import atomic_write, to_json

MIME = "application/vnd.mha-ref.glue+json"


def variable(page):
    """The page's template variable: attention-matrix -> attention_matrix."""
    return page.replace("-", "_")


def glued(nb):
    """[(cell index, record)] of every glue output, in notebook order."""
    found = []
    for index, cell in enumerate(nb["cells"]):
        for output in cell.get("outputs", []):
            record = output.get("data", {}).get(MIME)
            if record is not None:
                found.append((index, record))
    return found


def write_outputs(nb, page, out, written):
    """Write what the notebook glued; strip the heavy parts from ``nb``."""
    data, seen = {}, {}

    def claim(kind, name, index):
        if (kind, name) in seen:
            raise ValueError(
                f"scripts/{page}.py: {kind} {name!r} glued twice "
                f"(cells {seen[kind, name]} and {index})"
            )
        seen[kind, name] = index

    def write(relative, content):
        written.append(relative)
        atomic_write(out / relative, content)

    for index, record in glued(nb):
        kind, name = record["kind"], record["name"]
        claim(kind, name, index)
        if kind == "value":
            if name == "figures":
                raise ValueError(f"scripts/{page}.py: 'figures' is taken")
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
    return data


def _lighten(nb):
    """Keep each glue tag's name and kind; drop its payload."""
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            record = output.get("data", {}).get(MIME)
            if record is not None:
                output["data"][MIME] = {
                    "name": record["name"],
                    "kind": record["kind"],
                }


def glued_names(nb):
    """{(kind, name)} of what a saved notebook glued (tests read this)."""
    return {(r["kind"], r["name"]) for _, r in glued(nb)}
