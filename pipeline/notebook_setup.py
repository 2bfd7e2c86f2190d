# Run this cell first. It makes the folder mha_ref/ (the next cells write
# the files the page's code needs into it) and defines %%section: a cell
# that starts with "%%section FILE NAME" holds one section of FILE, as
# the page shows it. Run unchanged, it does nothing; edited, it writes
# the new section into FILE and reloads that module, so every cell after
# it uses your version.
import importlib
import sys
import textwrap
from pathlib import Path

from IPython.core.magic import register_cell_magic

Path("mha_ref").mkdir(exist_ok=True)
if "" not in sys.path and str(Path.cwd()) not in sys.path:
    sys.path.insert(0, str(Path.cwd()))


@register_cell_magic
def section(line, cell):
    """%%section FILE NAME: put this cell back into FILE, reload it."""
    path, name = line.split()
    lines = Path(path).read_text().splitlines(keepends=True)

    def where(kind):
        mark = f"# --8<-- [{kind}:{name}]"
        return [i for i, s in enumerate(lines) if s.strip() == mark]

    starts, ends = where("start"), where("end")
    if len(starts) != 1 or len(ends) != 1:
        raise ValueError(f"{path} has no single section named {name!r}")
    start, end = starts[0], ends[0]
    body = [s for s in lines[start + 1 : end] if "# --8<-- [" not in s]
    module = path[: -len(".py")].replace("/", ".")
    if textwrap.dedent("".join(body)).strip("\n") == cell.strip("\n"):
        importlib.import_module(module)  # as the page shows it: no change
        return
    indent = min(len(s) - len(s.lstrip()) for s in body if s.strip())
    new = textwrap.indent(cell.strip("\n") + "\n", " " * indent)
    lines[start + 1 : end] = [new]
    Path(path).write_text("".join(lines))
    importlib.invalidate_caches()
    module = importlib.reload(importlib.import_module(module))
    print(f"{path}: section {name!r} replaced, {module.__name__} reloaded")
