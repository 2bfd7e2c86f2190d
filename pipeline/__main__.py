"""python -m pipeline [--force] [--only PAGE] [--out DIR] [--watch]"""

import argparse
import sys
from pathlib import Path

from pipeline.generation import Project, generate
from pipeline.page_linter import before_generation


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m pipeline",
        description="Compute every number, table and figure of the site.",
    )
    parser.add_argument(
        "--force", action="store_true", help="ignore the cache"
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="PAGE",
        help="run only this page's script (repeatable)",
    )
    parser.add_argument(
        "--out", type=Path, help="output folder (default docs/generated)"
    )
    parser.add_argument(
        "--jobs", type=int, help="pages run at once (default: two per core)"
    )
    parser.add_argument(
        "--traceback",
        action="store_true",
        help="a failing page script's whole traceback, not its last line",
    )
    parser.add_argument(
        "--no-trace",
        action="store_true",
        help="do not record the mha_ref functions each page calls (a "
        "few per cent faster; a later edit of code a page never called "
        "then reruns it): for a generation whose cache is thrown away",
    )
    parser.add_argument(
        "--watch",
        action="store_true",
        help="after generating, regenerate what an edit affects, until "
        "stopped (make serve does this beside the server)",
    )
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # into a pipe too
    project = Project(out=args.out)
    mistakes = before_generation(project.root)
    if mistakes and not args.watch:  # a mistake ends the command at once
        for problem in mistakes:
            print(problem, file=sys.stderr)
        print("generation not started: fix the lines above", file=sys.stderr)
        return 1
    if args.watch:
        from pipeline.serve import watch

        return watch(project, jobs=args.jobs, traceback=args.traceback)
    failed = generate(
        project,
        force=args.force,
        only=args.only,
        jobs=args.jobs,
        traceback=args.traceback,
        trace=not args.no_trace,
    )
    if failed:
        print(f"generation failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
