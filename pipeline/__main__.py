"""python -m pipeline [--force] [--only PAGE] [--out DIR] [--watch]"""

import argparse
import sys
from pathlib import Path

from pipeline.build import Project, build


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
        "--watch",
        action="store_true",
        help="after building, rebuild what an edit affects, until stopped",
    )
    args = parser.parse_args(argv)
    if args.watch:
        from pipeline.watch import watch

        return watch(Project(out=args.out), jobs=args.jobs)
    failed = build(
        Project(out=args.out),
        force=args.force,
        only=args.only,
        jobs=args.jobs,
    )
    if failed:
        print(f"generation failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
