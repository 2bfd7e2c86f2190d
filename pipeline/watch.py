"""``python -m pipeline --watch``: keep the generated files up to date.

``make serve`` runs it beside the engine's server. Every second it looks
at the files that decide the pages' keys (mha_ref/, the page scripts,
the pages, the runner); when one changed, it reruns exactly the pages
whose key changed (build.py), which write docs/generated/ only where
bytes differ, and the server reloads on that; then it runs the pages'
checks (check.py), so a misspelt section or placeholder is named with
its file:line here, in one line. A failing page is reported and the
watch goes on; the page keeps its last good outputs and the next edit
retries it.
"""

import contextlib
import time

from pipeline import check
from pipeline.build import build

WATCHED = ("mha_ref/*.py", "scripts/*.py", "docs/*.md", "pipeline/*.py")


def snapshot(project):
    """{path: mtime_ns} of the watched files."""
    stamps = {}
    for pattern in WATCHED:
        for path in project.root.glob(pattern):
            with contextlib.suppress(FileNotFoundError):  # just removed
                stamps[path] = path.stat().st_mtime_ns
    return stamps


def watch(project, jobs=None, interval=1.0, say=print):
    say("watching mha_ref/, scripts/ and docs/ (Ctrl-C stops)")
    before = snapshot(project)
    build(project, jobs=jobs, say=say)
    try:
        while True:
            time.sleep(interval)
            now = snapshot(project)
            if now != before:
                changed = sorted(
                    str(p.relative_to(project.root))
                    for p in set(now) ^ set(before)
                    | {p for p in now if before.get(p) != now[p]}
                )
                say(f"changed: {', '.join(changed)}")
                before = now
                if not build(project, jobs=jobs, say=say):
                    check.main(project.root)
    except KeyboardInterrupt:
        return 0
