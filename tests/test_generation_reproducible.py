"""Two clean generation runs give byte-identical files; notebooks too.

Marked ``build``: these run the generation step (and a Jupyter kernel).
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from scripts import build

pytestmark = pytest.mark.build

# Every task but tiled, whose page shows measured times (and tracemalloc
# peaks that move by a few bytes): the site's numbers must not drift
# between two clean builds on one machine.
REPRODUCIBLE = sorted(task.name for task in build.discover(build.Project())
                      if task.name != "tiled")


def tree(root):
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_build_twice_gives_identical_bytes(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    project = build.Project(out=one, cache=tmp_path / "cache-one")
    assert build.build(project, only=REPRODUCIBLE, say=lambda line: None) == []
    # the second run in a fresh interpreter with another hash seed
    only = [arg for topic in REPRODUCIBLE for arg in ("--only", topic)]
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run(
        [sys.executable, "-m", "scripts.build", "--out", str(two),
         "--cache-dir", str(tmp_path / "cache-two"), *only],
        cwd=build.ROOT, env=env, check=True, capture_output=True,
    )
    first, second = tree(one), tree(two)
    assert set(first) == set(second)
    assert {"data/kv_cache.json", "tables/scaling.md",
            "figures/kv-masks-light.svg", "figures/kv-masks-dark.svg",
            "figures/scaling-sweep-dark.svg", "data/parity.json",
            "notebooks/experiment.ipynb"} <= set(first)
    different = [name for name in first if first[name] != second[name]]
    assert different == []
    assert not [name for name in first if name.endswith(".tmp")]
    scaling = json.loads(first["data/scaling.json"])
    alt = scaling["figures"]["scaling-sweep"]["alt"]
    assert "head size" in alt and str(scaling["sweep"]["n_rows"]) in alt


GOOD = '''\
# %% [markdown]
# # A check, $x^2$

# %%
import random
random.seed(0)
print(sum(random.random() for _ in range(3)))
'''

BAD = '''\
# %%
value = 1

# %%
raise ValueError(f"broken cell {value}")
'''


def test_build_notebook_reproducible_and_failing_cell_fails(tmp_path):
    root = tmp_path / "root"
    (root / "mha_ref").mkdir(parents=True)
    (root / "mha_ref/a.py").write_text("A = 1\n")
    (root / "topics/notebooks").mkdir(parents=True)
    (root / "topics/notebooks/good.py").write_text(textwrap.dedent(GOOD))
    (root / "topics/notebooks/bad.py").write_text(textwrap.dedent(BAD))
    project = build.Project(root=root, package="topics",
                            out=tmp_path / "out", cache=tmp_path / "cache")
    lines = []
    failed = build.build(project, say=lines.append)
    text = "\n".join(lines)
    assert failed == ["notebooks/bad"]
    assert "broken cell 1" in text and "topics/notebooks/bad.py" in text
    assert not (project.out / "notebooks/bad.ipynb").exists()
    path = project.out / "notebooks/good.ipynb"
    first = path.read_bytes()
    nb = json.loads(first)
    assert [c["id"] for c in nb["cells"]] == ["cell-00", "cell-01"]
    assert "version" not in nb["metadata"]["language_info"]
    assert "jupytext" not in nb["metadata"]
    code = nb["cells"][1]
    assert code["metadata"] == {} and code["execution_count"] == 1
    assert "".join(code["outputs"][0]["text"]) == "2.0229478352961956\n"
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    failed = build.build(project, force=True, only=["notebooks/good"],
                         say=lines.append)
    assert failed == []
    assert path.read_bytes() == first
    assert path.stat().st_mtime_ns == 1_000_000_000  # not rewritten
